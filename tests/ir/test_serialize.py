"""JSON save/load: exact round trips, and malformed documents that each name where they break."""

from __future__ import annotations

import builtins
import copy
import importlib
import json
import pickle

import ml_dtypes
import numpy as np
import pytest

from frame_core import Graph, GraphFormatError, VerifyError
from frame_core.ir.keys import graph_key
from frame_core.ir.serialize import dumps, load_graph, loads, save_graph, to_document
from frame_core.ir.verify import verify

from .fixture_ops import example_body

ALL_KINDS = dict(i=-3, f=float("-inf"), b=False, s='quote " and \\ and ünicode', ints=[1, -2], floats=[0.5, float("nan")],
                 strs=["a", ""], dt="bf16", shp=[0, 2],
                 t=np.array([[np.nan, np.inf], [-np.inf, -0.0]], np.float64))

TENSORS = [
    np.array([1.5, np.nan, np.inf, -np.inf, -0.0], np.float32),
    np.array([1.0, -2.5, np.nan], ml_dtypes.bfloat16),
    np.array([[1, 2], [3, 4]], np.float16),
    np.array([True, False]),
    np.array([-(2**62), 2**62], np.int64),
    np.array(7, np.int32),
    np.zeros((0, 3), np.float32),
    np.arange(6, dtype=">f8").reshape(2, 3),  # big-endian input is written little-endian
]


def rich_graph() -> Graph:
    """Every attribute kind, tensors of every dtype, value names, nested sub-graphs, repeated outputs."""
    g = Graph("rich")
    x = g.add_input("f32[3]", "x")
    y = g.add_input("f32[3]")
    s = g.apply("add2", x, y)
    g.apply("attrs_all", s, **ALL_KINDS)
    for t in TENSORS:
        g.constant(t)
    mid = Graph("mid")
    m = mid.add_input("f32[3]", "m")
    mid.mark_output(mid.apply("call", m, body=example_body()))
    c = g.apply("call", s, body=mid)
    g.mark_output(c)
    g.mark_output(c)
    g.mark_output(x)
    return g


def test_round_trip_is_stable_and_keeps_the_key():
    g = rich_graph()
    text = dumps(g)
    back = loads(text)
    assert dumps(back) == text
    assert graph_key(back) == graph_key(g)
    assert str(back) == str(g)
    verify(back)


def test_round_trip_keeps_values_types_names_and_outputs():
    g = rich_graph()
    back = loads(dumps(g))
    assert back.name == "rich"
    assert [(v.name, v.type) for v in back.inputs] == [("x", g.inputs[0].type), (None, g.inputs[1].type)]
    assert [n.op for n in back.nodes] == [n.op for n in g.nodes]
    assert back.outputs[0] is back.outputs[1] and back.outputs[2] is back.inputs[0]
    for a, b in zip(g.nodes, back.nodes):
        assert [v.type for v in a.outputs] == [v.type for v in b.outputs]
        assert [g.inputs.index(v) if v in g.inputs else None for v in a.inputs] == \
               [back.inputs.index(v) if v in back.inputs else None for v in b.inputs]


def test_round_trip_keeps_every_attribute_kind_exactly():
    back = loads(dumps(rich_graph()))
    attrs = back.nodes[1].attrs
    assert attrs["i"] == -3 and type(attrs["i"]) is int
    assert attrs["f"] == float("-inf") and attrs["b"] is False and attrs["s"] == ALL_KINDS["s"]
    assert attrs["ints"] == (1, -2) and attrs["strs"] == ("a", "") and attrs["shp"] == (0, 2)
    assert attrs["floats"][0] == 0.5 and np.isnan(attrs["floats"][1])
    assert attrs["dt"].short == "bf16" and attrs["opt"] == 7
    np.testing.assert_array_equal(attrs["t"], ALL_KINDS["t"])
    assert np.signbit(attrs["t"][1, 1])


@pytest.mark.parametrize("index", range(len(TENSORS)), ids=[str(t.dtype) for t in TENSORS])
def test_round_trip_keeps_tensor_bits_dtype_and_shape(index):
    back = loads(dumps(rich_graph()))
    original = TENSORS[index]
    loaded = back.nodes[2 + index].attrs["value"]
    assert loaded.shape == original.shape
    assert loaded.dtype == original.dtype.newbyteorder("=")
    assert loaded.tobytes() == np.ascontiguousarray(original, original.dtype.newbyteorder("=")).tobytes()


def test_nested_sub_graphs_load_as_graphs():
    back = loads(dumps(rich_graph()))
    mid = back.nodes[-1].attrs["body"]
    inner = mid.nodes[0].attrs["body"]
    assert isinstance(mid, Graph) and isinstance(inner, Graph)
    assert [n.op for n in inner.nodes] == ["neg1"] and mid.inputs[0].name == "m"


def test_save_and_load_a_file(tmp_path):
    path = tmp_path / "g.json"
    save_graph(rich_graph(), path)
    assert graph_key(load_graph(path)) == graph_key(rich_graph())
    assert json.loads(path.read_text())["version"] == 2


def test_a_file_error_names_the_file_and_the_place(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "frame-graph", "version": 7, "graph": {}}')
    with pytest.raises(GraphFormatError) as info:
        load_graph(path)
    assert info.value.path == f"{path}: $.version"
    with pytest.raises(GraphFormatError, match="cannot read"):
        load_graph(tmp_path / "missing.json")
    (tmp_path / "latin1.json").write_bytes(b'{"name": "\xff"}')
    with pytest.raises(GraphFormatError, match="UTF-8"):
        load_graph(tmp_path / "latin1.json")


# -- malformed documents ------------------------------------------------------------------------------------
def base_document() -> dict:
    """inputs x (id 0), y (1); add2 -> 2; scale -> 3; constant f32[2] -> 4; call{body} -> 5; outputs [3, 5]."""
    g = Graph("doc")
    x = g.add_input("f32[3]", "x")
    y = g.add_input("f32[3]", "y")
    t = g.apply("scale", g.apply("add2", x, y), factor=3.0)
    g.constant(np.array([1.5, 2.0], np.float32))
    g.mark_output(t)
    g.mark_output(g.apply("call", t, body=example_body()))
    return to_document(g)


def _set(path: list, value):
    def edit(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return doc
    return edit


_DELETE = object()
N = ["graph", "nodes"]
TENSOR = N + [2, "attrs", "value", "value"]

# (case id, edit of the base document, expected .path, fragment of the message)
MALFORMED = [
    ("top-level-array", lambda d: [d], "$", "expected a JSON object"),
    ("wrong-format", _set(["format"], "onnx"), "$.format", "not a frame graph document"),
    ("missing-format", _set(["format"], _DELETE), "$.format", "expected 'frame-graph'"),
    ("unknown-version", _set(["version"], 3), "$.version", "reads versions 1, 2"),
    ("version-not-int", _set(["version"], "1"), "$.version", "expected an integer"),
    ("version-bool", _set(["version"], True), "$.version", "expected an integer"),
    ("missing-graph", _set(["graph"], _DELETE), "$.graph", "expected a graph object"),
    ("missing-nodes", _set(["graph", "nodes"], _DELETE), "$.graph", "missing field 'nodes'"),
    ("missing-name", _set(["graph", "name"], _DELETE), "$.graph", "missing field 'name'"),
    ("missing-op", _set(N + [0, "op"], _DELETE), "$.graph.nodes[0]", "missing field 'op'"),
    ("missing-output-id", _set(N + [0, "outputs", 0, "id"], _DELETE), "$.graph.nodes[0].outputs[0]", "missing field 'id'"),
    ("missing-value-type", _set(["graph", "inputs", 1, "type"], _DELETE), "$.graph.inputs[1]", "missing field 'type'"),
    ("inputs-not-array", _set(["graph", "inputs"], {}), "$.graph.inputs", "expected array"),
    ("op-not-string", _set(N + [1, "op"], 3), "$.graph.nodes[1].op", "expected str"),
    ("node-not-object", _set(N + [1], "scale"), "$.graph.nodes[1]", "expected a node object"),
    ("input-ref-not-int", _set(N + [0, "inputs", 1], "1"), "$.graph.nodes[0].inputs[1]", "expected a value id"),
    ("id-is-bool", _set(["graph", "inputs", 0, "id"], True), "$.graph.inputs[0].id", "expected int"),
    ("name-not-string", _set(["graph", "inputs", 0, "name"], 5), "$.graph.inputs[0].name", "expected a string"),
    ("bad-type-string", _set(["graph", "inputs", 0, "type"], "f32[3"), "$.graph.inputs[0].type", "cannot read the type"),
    ("bad-dtype-in-type", _set(["graph", "inputs", 0, "type"], "c64[3]"), "$.graph.inputs[0].type", "unsupported dtype"),
    ("undefined-value", _set(N + [0, "inputs", 1], 99), "$.graph.nodes[0].inputs[1]", "value id 99"),
    ("duplicate-id", _set(N + [0, "outputs", 0, "id"], 1), "$.graph.nodes[0].outputs[0].id", "defined twice"),
    ("undefined-output", _set(["graph", "outputs", 1], 42), "$.graph.outputs[1]", "defined value, got 42"),
    ("attrs-not-object", _set(N + [1, "attrs"], []), "$.graph.nodes[1].attrs", "expected an object"),
    ("attr-not-object", _set(N + [1, "attrs", "factor"], 3.0), "$.graph.nodes[1].attrs.factor", "attribute object"),
    ("attr-missing-value", _set(N + [1, "attrs", "factor", "value"], _DELETE), "$.graph.nodes[1].attrs.factor",
     "missing field 'value'"),
    ("unknown-attr-kind", _set(N + [1, "attrs", "factor", "kind"], "complex"), "$.graph.nodes[1].attrs.factor.kind",
     "unknown attribute kind 'complex'"),
    ("float-attr-not-number", _set(N + [1, "attrs", "factor", "value"], "3"), "$.graph.nodes[1].attrs.factor.value",
     "expected a number"),
    ("bad-base64", _set(TENSOR + ["data"], "not base64!"), "$.graph.nodes[2].attrs.value.value.data", "base64"),
    ("wrong-byte-count", _set(TENSOR + ["data"], "AADAPw=="), "$.graph.nodes[2].attrs.value.value.data",
     "holds 4 bytes but f32[2] needs 8"),
    ("tensor-dtype-object", _set(TENSOR + ["dtype"], "object"), "$.graph.nodes[2].attrs.value.value.dtype",
     "unsupported dtype"),
    ("tensor-negative-dim", _set(TENSOR + ["shape"], [-2]), "$.graph.nodes[2].attrs.value.value.shape[0]",
     "non-negative integer"),
    ("tensor-missing-data", _set(TENSOR + ["data"], _DELETE), "$.graph.nodes[2].attrs.value.value", "missing field 'data'"),
    ("broken-sub-graph", _set(N + [3, "attrs", "body", "value", "nodes", 0, "op"], None),
     "$.graph.nodes[3].attrs.body.value.nodes[0].op", "expected str"),
    ("sub-graph-reads-outer-value", _set(N + [3, "attrs", "body", "value", "nodes", 0, "inputs", 0], 4),
     "$.graph.nodes[3].attrs.body.value.nodes[0].inputs[0]", "value id 4"),
]


@pytest.mark.parametrize("case, edit, path, fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_document_raises_graph_format_error_with_its_path(case, edit, path, fragment):
    text = json.dumps(edit(copy.deepcopy(base_document())))
    with pytest.raises(GraphFormatError) as info:
        loads(text)
    assert info.value.path == path
    assert fragment in info.value.detail
    assert str(info.value).startswith(path + ": ")


def test_the_base_document_itself_is_valid():
    verify(loads(json.dumps(base_document())))


@pytest.mark.parametrize("text, path_start", [
    ("{", "line 1 column 2"),
    ("", "line 1 column 1"),
    ('{"format": "frame-graph",\n "version": 1,\n "graph": nul}', "line 3"),
    ("[" * 100_000 + "]" * 100_000, "$"),
    (b'{"format": "\xff"}', "$"),
])
def test_text_that_is_not_json_says_where(text, path_start):
    with pytest.raises(GraphFormatError) as info:
        loads(text)
    assert info.value.path.startswith(path_start)


def test_forward_reference_loads_and_fails_verify_with_v2():
    doc = base_document()
    nodes = doc["graph"]["nodes"]
    nodes[0], nodes[1] = nodes[1], nodes[0]  # scale now reads add2's output before add2 comes
    g = loads(json.dumps(doc))
    with pytest.raises(VerifyError) as info:
        verify(g)
    assert [p.rule for p in info.value.problems] == ["V2"]
    assert "node 0 (scale)" in str(info.value) and "topological order" in str(info.value)


def test_a_cycle_loads_and_fails_verify_with_v2_naming_the_cycle():
    doc = base_document()
    doc["graph"]["nodes"][0]["inputs"] = [0, 3]  # add2 reads scale's output; scale reads add2's
    g = loads(json.dumps(doc))
    with pytest.raises(VerifyError) as info:
        verify(g)
    assert "V2" in str(info.value) and "node 0 (add2)" in str(info.value) and "cycle" in str(info.value)


# -- loading never executes code ------------------------------------------------------------------------------
@pytest.fixture
def no_code_execution(monkeypatch):
    """Make every way of running or unpickling code fail loudly while the test loads documents."""
    def refuse(*args, **kwargs):
        raise AssertionError("loading a graph tried to execute code or unpickle data")

    for module, name in [(builtins, "eval"), (builtins, "exec"), (pickle, "loads"), (pickle, "load"),
                         (np, "load"), (importlib, "import_module")]:
        monkeypatch.setattr(module, name, refuse)


def test_pickle_looking_payloads_are_plain_data(no_code_execution, tmp_path):
    marker = tmp_path / "pwned"
    doc = base_document()
    doc["graph"]["nodes"][1]["attrs"]["__reduce__"] = {"kind": "str", "value": f"os.system('touch {marker}')"}
    payload = pickle.dumps(["payload"])  # the bytes are read as numbers, never unpickled
    padded = payload + b"\0" * (-len(payload) % 8)
    doc["graph"]["nodes"][2]["attrs"]["value"]["value"] = {
        "dtype": "f64", "shape": [len(padded) // 8], "data": __import__("base64").b64encode(padded).decode()}
    g = loads(json.dumps(doc))
    assert g.nodes[1].attrs["__reduce__"] == f"os.system('touch {marker}')"
    assert g.nodes[2].attrs["value"].dtype == np.float64
    assert not marker.exists()
    with pytest.raises(VerifyError, match="unknown attribute '__reduce__'"):
        verify(g)


@pytest.mark.parametrize("attr", [
    {"kind": "pickle", "value": "gASVCAAAAAAAAACMBHRlc3SULg=="},
    {"kind": "object", "value": {"__class__": "os.system", "args": ["true"]}},
    {"kind": "tensor", "value": {"dtype": "O", "shape": [1], "data": "AAAAAAAAAAA="}},
])
def test_code_carrying_attribute_kinds_are_refused(no_code_execution, attr):
    doc = base_document()
    doc["graph"]["nodes"][1]["attrs"]["factor"] = attr
    with pytest.raises(GraphFormatError):
        loads(json.dumps(doc))
