"""``frame graph show|dot|grad`` on saved JSON graphs, and their handling of bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

import frame_core
from frame_core import ops


@pytest.fixture
def saved(tmp_path):
    """A saved graph: loss = sum(tanh(x @ w))."""
    graph = frame_core.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f64[2, 3]", "f64[3, 4]")
    path = tmp_path / "model.json"
    frame_core.save_graph(graph, path)
    return path


def test_show_prints_the_graph(invoke, saved):
    result = invoke("graph", "show", str(saved))
    assert result.exit_code == 0
    assert result.stdout == frame_core.format_graph(frame_core.load_graph(saved)) + "\n"


def test_dot_prints_graphviz(invoke, saved):
    result = invoke("graph", "dot", str(saved))
    assert result.exit_code == 0
    assert result.stdout.startswith("digraph") and "tanh" in result.stdout and result.stdout.rstrip().endswith("}")


def test_grad_saves_a_backward_graph_that_computes_the_gradient(invoke, saved, tmp_path):
    out = tmp_path / "grad.json"
    result = invoke("graph", "grad", str(saved), "--loss", "0", "--wrt", "0,1", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert "wrote" in result.stderr and result.stdout == ""
    grad = frame_core.load_graph(out)
    assert len(grad.outputs) == 3
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    loss, gx, gw = frame_core.compile(grad).run([x, w])
    # independent reference: d sum(tanh(x w)) = (1 - tanh^2) through the matmul
    s = 1.0 - np.tanh(x @ w) ** 2
    np.testing.assert_allclose(loss, np.tanh(x @ w).sum(), rtol=1e-12)
    np.testing.assert_allclose(gx, s @ w.T, rtol=1e-10)
    np.testing.assert_allclose(gw, x.T @ s, rtol=1e-10)


def test_grad_defaults_to_every_floating_input_and_stdout(invoke, saved):
    result = invoke("graph", "grad", str(saved))
    assert result.exit_code == 0
    grad = frame_core.loads(result.stdout)
    assert len(grad.outputs) == 3


def test_grad_takes_a_repeated_wrt_as_the_list_of_its_values(invoke, saved):
    repeated = invoke("graph", "grad", str(saved), "--wrt", "1", "--wrt", "0")  # typer alone kept only the last
    listed = invoke("graph", "grad", str(saved), "--wrt", "1,0")
    assert repeated.exit_code == 0 and listed.exit_code == 0, repeated.stderr
    assert len(frame_core.loads(repeated.stdout).outputs) == 3 and repeated.stdout == listed.stdout
    twice = invoke("graph", "grad", str(saved), "--wrt", "0", "--wrt", "0")
    assert twice.exit_code == 2 and "listed twice" in twice.stderr


@pytest.mark.parametrize("wrt, message", [("0,x", "comma-separated input indices"), ("7", "out of range"),
                                          ("0,0", "listed twice"), (",", "at least one index")])
def test_grad_bad_wrt(invoke, saved, wrt, message):
    result = invoke("graph", "grad", str(saved), "--wrt", wrt)
    assert result.exit_code == 2 and message in result.stderr and result.stdout == ""


def test_grad_non_scalar_loss(invoke, tmp_path):
    path = tmp_path / "vector.json"
    frame_core.save_graph(frame_core.trace(lambda x: ops.tanh(x), "f32[3]"), path)
    result = invoke("graph", "grad", str(path), "--wrt", "0")
    assert result.exit_code == 2 and "scalar" in result.stderr


def test_grad_unwritable_output(invoke, saved, tmp_path):
    result = invoke("graph", "grad", str(saved), "-o", str(tmp_path / "no" / "such" / "dir.json"))
    assert result.exit_code == 2 and "cannot write" in result.stderr


@pytest.mark.parametrize("command", ["show", "dot", "grad"])
def test_missing_file(invoke, tmp_path, command):
    result = invoke("graph", command, str(tmp_path / "absent.json"))
    assert result.exit_code == 2
    assert "cannot load graph" in result.stderr and "absent.json" in result.stderr
    assert "No such file" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("content, where", [
    ("{not json", "not valid JSON"),
    ('{"format": "frame-graph", "version": 99, "graph": {}}', "$.version"),
    ('{"format": "something-else"}', "$.format"),
    ('{"format": "frame-graph", "version": 1, "graph": {"name": "g", "inputs": [], "nodes": [], "outputs": [5]}}',
     "$.graph.outputs[0]"),
])
def test_malformed_file(invoke, tmp_path, content, where):
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = invoke("graph", "show", str(path))
    assert result.exit_code == 2
    assert where in result.stderr and str(path) in result.stderr


def test_binary_file(invoke, tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\xff\xfe\x00\x81" * 10)
    result = invoke("graph", "dot", str(path))
    assert result.exit_code == 2 and "UTF-8" in result.stderr


def test_graph_with_an_unknown_op_fails_verify_unless_told_not_to(invoke, saved, tmp_path):
    doc = json.loads(saved.read_text())
    doc["graph"]["nodes"][1]["op"] = "tanhh"
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(doc))
    result = invoke("graph", "show", str(path))
    assert result.exit_code == 2
    assert "not a valid graph" in result.stderr and "V3" in result.stderr and "tanhh" in result.stderr
    result = invoke("graph", "show", "--no-verify", str(path))
    assert result.exit_code == 0 and "tanhh(" in result.stdout
    assert invoke("graph", "grad", str(path)).exit_code == 2


# -- never lose a file (issue 8 §3) ----------------------------------------------------------------------
def test_grad_refuses_to_overwrite_an_existing_file_without_force(invoke, saved, tmp_path):
    out = tmp_path / "precious.json"
    out.write_text("my notes")
    result = invoke("graph", "grad", str(saved), "-o", str(out))
    assert result.exit_code == 2 and "already exists; pass --force" in result.stderr
    assert out.read_text() == "my notes"
    forced = invoke("graph", "grad", str(saved), "-o", str(out), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert len(frame_core.load_graph(out).outputs) == 3


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink"])
def test_grad_never_overwrites_its_input_even_with_force(invoke, saved, tmp_path, spelling):
    before = saved.read_bytes()
    if spelling == "same":
        out = str(saved)
    elif spelling == "dotted":
        out = str(saved.parent / "." / saved.name)
    else:
        link = tmp_path / "link.json"
        link.symlink_to(saved)
        out = str(link)
    result = invoke("graph", "grad", str(saved), "-o", out, "--force")
    assert result.exit_code == 2 and "is the input graph itself" in result.stderr
    assert saved.read_bytes() == before


def test_grad_refuses_a_folder_as_output(invoke, saved, tmp_path):
    result = invoke("graph", "grad", str(saved), "-o", str(tmp_path))
    assert result.exit_code == 2 and "is a folder" in result.stderr


def test_show_and_dot_print_names_with_lone_surrogates_escaped(tmp_path):
    from .conftest import run_frame

    doc = {"format": "frame-graph", "version": 1, "graph": {
        "name": "g\ud800", "inputs": [{"id": 0, "type": "f32[3]", "name": "x\udcff"}],
        "nodes": [{"op": "relu\ud800", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]"}]}], "outputs": [1]}}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))  # ASCII JSON with \\ud800 escapes: valid JSON, invalid UTF-8 once decoded
    for command in ("show", "dot"):
        done = run_frame("graph", command, str(path), "--no-verify")
        assert done.returncode == 0, done.stderr
        assert "\\ud800" in done.stdout and "Traceback" not in done.stderr
    checked = run_frame("graph", "show", str(path))
    assert checked.returncode == 2 and "unknown op 'relu\\ud800'" in checked.stderr
    assert "internal error" not in checked.stderr


@pytest.mark.parametrize("command", [("ops", "list"), ("audit", "gradients")])
def test_two_different_packs_are_a_usage_error_not_the_last_one(invoke, command):
    result = invoke(*command, "--pack", "ops_fft", "--pack", "ops_basic")
    assert result.exit_code == 2 and "--pack takes one pack, got 'ops_fft', 'ops_basic'" in result.stderr
    assert result.stdout == ""
    same = invoke(*command, "--pack", "ops_fft", "-p", "ops_fft")
    assert same.exit_code == 0 and same.stdout == invoke(*command, "--pack", "ops_fft").stdout
