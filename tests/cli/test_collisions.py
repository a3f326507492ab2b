"""Op-name collisions between packs in the CLI (SPEC §4, §8): a warning in every format, an error under --strict.

The fake pack ``aaa_relu`` (distribution ``frame-fake-aaa-relu``, which sorts before frame-ops-basic)
registers an op called ``relu`` that doubles its input; frame-ops-basic keeps the short name.
"""

from __future__ import annotations

import json

import pytest

COLLIDING_PACK = '''
import numpy as np
from frame_core import Example, OpSchema, hookimpl, ops

FRAME_PLUGIN_API = "1.0"

RELU = OpSchema(
    "relu", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={"cpu": lambda ctx: lambda x: np.multiply(x, x.dtype.type(2))},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.relu(gy)),  # its own relu: 2 gy
    examples=[Example(["f64[3]"])], doc="2 x (a fake pack's op that collides with frame-ops-basic's relu)",
)


@hookimpl
def frame_register_ops():
    return [RELU]
'''


@pytest.fixture
def colliding(site):
    site.add("aaa_relu", COLLIDING_PACK, dist="frame-fake-aaa-relu")
    return site


def test_plugins_list_text_warns_naming_both_distributions_and_the_qualified_names(invoke, colliding):
    result = invoke("plugins", "list")
    assert result.exit_code == 0
    warning = next(line for line in result.stdout.splitlines() if line.startswith("warning: op name collision"))
    assert "frame-ops-basic" in warning and "frame-fake-aaa-relu 0.1" in warning
    assert "ops_basic::relu" in warning and "aaa_relu::relu" in warning
    row = next(line for line in result.stdout.splitlines() if line.startswith("aaa_relu "))
    assert "loaded" in row and "ops_basic" in next(line for line in result.stdout.splitlines()
                                                   if line.startswith("ops_basic "))


def test_plugins_list_json_carries_the_collision_in_both_packs(invoke, colliding):
    result = invoke("plugins", "list", "--format", "json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    for pack in ("aaa_relu", "ops_basic"):
        (c,) = rows[pack]["collisions"]
        assert c["name"] == "relu" and c["owner"] == "ops_basic::relu" and not c["ambiguous"]
        assert sorted(c["qualnames"]) == ["aaa_relu::relu", "ops_basic::relu"]
    assert rows["aaa_relu"]["status"] == "loaded" and rows["aaa_relu"]["namespace"] == "aaa_relu"
    assert "warning: op name collision" in result.stderr


@pytest.mark.parametrize("command", [("plugins", "list"), ("audit", "gradients")])
def test_strict_turns_the_collision_into_a_failure(invoke, colliding, command):
    result = invoke("--strict", *command)
    assert result.exit_code == 1
    assert "collision" in result.stdout + result.stderr


def test_audit_text_warns_and_still_passes(invoke, colliding):
    result = invoke("audit", "gradients")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "warning: op name collision: 'relu'" in result.stderr
    assert "aaa_relu::relu" in result.stdout  # its op is audited under its qualified name


def test_audit_json_lists_the_collision_under_warnings(invoke, colliding):
    result = invoke("audit", "gradients", "--format", "json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert any("op name collision" in w and "aaa_relu::relu" in w for w in report["warnings"])
    row = next(op for op in report["ops"] if op["qualname"] == "aaa_relu::relu")
    assert row["name"] == "aaa_relu::relu" and row["closure_order"] == "closed"


def test_audit_github_prints_a_warning_annotation(invoke, colliding):
    result = invoke("audit", "gradients", "--format", "github")
    assert result.exit_code == 0
    (line,) = [line for line in result.stdout.splitlines() if "collision" in line]
    assert line.startswith("::warning title=frame audit gradients (warning)::op name collision")
    strict = invoke("audit", "gradients", "--format", "github", "--strict")
    assert strict.exit_code == 1
    assert any(line.startswith("::error title=frame audit gradients (collision)::op name collision")
               for line in strict.stdout.splitlines())


def test_ops_list_and_show_name_the_colliding_op_by_its_qualified_name(invoke, colliding):
    rows = json.loads(invoke("ops", "list", "--format", "json").stdout)
    names = {r["name"]: r for r in rows}
    assert names["relu"]["qualname"] == "ops_basic::relu" and names["aaa_relu::relu"]["pack"] == "aaa_relu"
    shown = invoke("ops", "show", "aaa_relu::relu")
    assert shown.exit_code == 0 and shown.stdout.startswith("aaa_relu::relu  (pack aaa_relu, frame-fake-aaa-relu")
    assert "2 x (a fake pack's op" in shown.stdout and "= aaa_relu::relu(%gy)" in shown.stdout
    plain = invoke("ops", "show", "relu")
    assert plain.stdout.startswith("relu  (pack ops_basic") and "qualified:   ops_basic::relu" in plain.stdout


def test_graph_commands_read_version_1_and_2_and_write_qualified_names(invoke, colliding, tmp_path):
    v1 = {"format": "frame-graph", "version": 1, "graph": {
        "name": "old", "inputs": [{"id": 0, "type": "f64[3]", "name": "x"}],
        "nodes": [{"op": "relu", "inputs": [0], "outputs": [{"id": 1, "type": "f64[3]"}]},
                  {"op": "sum", "inputs": [1], "outputs": [{"id": 2, "type": "f64[]"}],
                   "attrs": {"axes": {"kind": "none", "value": None}, "keepdims": {"kind": "bool", "value": False}}}],
        "outputs": [2]}}
    v2 = json.loads(json.dumps(v1).replace('"relu"', '"aaa_relu::relu"').replace('"sum"', '"ops_basic::sum"'))
    v2["version"] = 2
    for doc, op in ((v1, "= relu(%x)"), (v2, "= aaa_relu::relu(%x)")):
        path = tmp_path / f"v{doc['version']}.json"
        path.write_text(json.dumps(doc))
        shown = invoke("graph", "show", str(path))
        assert shown.exit_code == 0, shown.stderr
        assert op in shown.stdout
        assert invoke("graph", "dot", str(path)).exit_code == 0
        grad = invoke("graph", "grad", str(path))
        assert grad.exit_code == 0, grad.stderr
        written = [n["op"] for n in json.loads(grad.stdout)["graph"]["nodes"]]
        assert all("::" in op for op in written)
        assert ("aaa_relu::relu" in written) == (doc is v2) and ("ops_basic::relu" in written) == (doc is v1)
