"""``frame onnx import|export|audit``: outputs, formats and exit codes (0 clean, 1 findings, 2 usage)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import frame_core as fc
from frame_core.cli.main import app


def _write(path, nodes, inits=(), out_shape=(None, 2)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=list(inits)),
                              opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return str(path)


@pytest.fixture
def good(tmp_path):
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "fc.weight")
    return _write(tmp_path / "good.onnx", [helper.make_node("MatMul", ["x", "fc.weight"], ["h"], name="mm"),
                                           helper.make_node("Tanh", ["h"], ["y"], name="act")], [w])


@pytest.fixture
def bad(tmp_path):
    return _write(tmp_path / "bad.onnx", [helper.make_node("Bernoulli", ["x"], ["a"], name="coin"),
                                          helper.make_node("Tanh", ["a"], ["y"], name="act")], out_shape=(None, 3))


def _run(*args):
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_audit_clean_model(good):
    code, out, err = _run("onnx", "audit", good, "--order", "3")
    assert code == 0, err
    assert "'mm'" in out and "closed" in out and "audit: clean" in out


def test_audit_findings_in_every_format(bad):
    code, out, _ = _run("onnx", "audit", bad, "-f", "json")
    report = json.loads(out)
    assert code == 1 and not report["ok"] and report["counts"]["unsupported"] == 1
    assert report["findings"][0]["kind"] == "unsupported" and report["findings"][0]["op_type"] == "Bernoulli"
    assert [n["status"] for n in report["nodes"]] == ["unsupported", "skipped"]
    code, out, err = _run("onnx", "audit", bad, "-f", "github")
    assert code == 1 and out.startswith("::error title=frame onnx audit (unsupported Bernoulli)::") and "1 finding" in err
    code, out, _ = _run("onnx", "audit", bad)
    assert code == 1 and "findings (1):" in out and "Bernoulli" in out


def test_audit_order_finding(good, monkeypatch):
    real = fc.graph_order  # the public name the audit calls
    monkeypatch.setattr(fc, "graph_order", lambda g, reg: (1, ("node 0 (tanh)",))
                        if any(n.op == "tanh" for n in g.nodes) else real(g, reg))
    code, out, _ = _run("onnx", "audit", good, "--order", "2", "-f", "json")
    findings = json.loads(out)["findings"]
    assert code == 1 and [f["kind"] for f in findings] == ["order"] and "'act'" in findings[0]["message"]
    assert _run("onnx", "audit", good, "--order", "1")[0] == 0


def test_import_then_export(good, tmp_path):
    graph_file, params_file, onnx_file = tmp_path / "g.json", tmp_path / "p.npz", tmp_path / "back.onnx"
    code, _, err = _run("onnx", "import", good, "-o", str(graph_file), "--params", str(params_file), "--dim", "batch=4")
    assert code == 0, err
    graph = fc.load_graph(graph_file)
    assert [v.name for v in graph.inputs] == ["x", "fc.weight"] and graph.inputs[0].shape == (4, 3)
    assert np.load(params_file)["fc.weight"].shape == (3, 2)
    code, _, err = _run("onnx", "export", str(graph_file), "-o", str(onnx_file))
    assert code == 0, err
    ort = pytest.importorskip("onnxruntime")
    x = np.ones((4, 3), np.float32)
    (y,) = ort.InferenceSession(str(onnx_file)).run(None, {"x": x, "fc.weight": np.ones((3, 2), np.float32)})
    np.testing.assert_allclose(y, np.tanh(np.full((4, 2), 3.0)), rtol=1e-6)
    assert _run("onnx", "export", str(graph_file), "-o", str(onnx_file))[0] == 2  # exists: --force needed


def test_usage_errors(tmp_path, bad):
    code, _, err = _run("onnx", "audit", str(tmp_path / "missing.onnx"))
    assert code == 2 and "no ONNX file" in err
    code, _, err = _run("onnx", "import", bad)
    assert code == 2 and "Bernoulli" in err and "Traceback" not in err
    code, _, err = _run("onnx", "import", bad, "--dim", "batch")
    assert code == 2 and "NAME=SIZE" in err


def test_without_frame_onnx_says_what_to_install(good, monkeypatch):
    monkeypatch.setitem(sys.modules, "frame_onnx", None)
    code, _, err = _run("onnx", "audit", good)
    assert code == 2 and "pip install frame-onnx" in err
