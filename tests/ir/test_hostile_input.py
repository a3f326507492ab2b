"""Hostile or corrupt input is a named error that says what is wrong, never a raw ValueError or
UnicodeEncodeError (issue 8 §4): numbers of thousands of digits, absurd shapes, numpy dtype specs where a dtype
is expected, lone surrogates in names."""

from __future__ import annotations

import json

import numpy as np
import pytest

import frame_core as fc
from frame_core.errors import AttributeSpecError, GraphFormatError, IRError
from frame_core.ir.dtypes import as_dtype
from frame_core.ops_registry.schema import normalize_attr

HUGE = "9" * 5000


def document(*, inputs=None, nodes=(), outputs=(0,), version=2, name="g") -> str:
    inputs = [{"id": 0, "type": "f32[3]", "name": "x"}] if inputs is None else inputs
    return json.dumps({"format": "frame-graph", "version": version,
                       "graph": {"name": name, "inputs": inputs, "nodes": list(nodes), "outputs": list(outputs)}})


@pytest.mark.parametrize("where, text", [
    ("a value id", document().replace('"id": 0', f'"id": {HUGE}')),
    ("the version", document().replace('"version": 2', f'"version": {HUGE}')),
    ("an int attribute", document(nodes=[{"op": "k", "inputs": [], "outputs": [{"id": 1, "type": "f32[]"}],
                                          "attrs": {"a": {"kind": "int", "value": 0}}}])
     .replace('"value": 0', f'"value": {HUGE}')),
])
def test_a_number_of_thousands_of_digits_in_json_is_a_format_error(where, text):
    with pytest.raises(GraphFormatError, match="a number too long to read"):
        fc.loads(text)


@pytest.mark.parametrize("text, words", [
    (f"f32[{HUGE}]", "more digits than any shape"),
    ("f32[10000000000000000000000000000000]", "more digits than any shape"),
    ("f32[9223372036854775807, 4]", "more bytes than any machine addresses"),
    ("f64[4611686018427387904, 4]", "more bytes than any machine addresses"),
])
def test_an_absurd_shape_in_a_type_string_is_an_ir_error(text, words):
    with pytest.raises(IRError, match=words):
        fc.TensorType.parse(text)
    with pytest.raises(GraphFormatError, match=words):
        fc.loads(document(inputs=[{"id": 0, "type": text}]))


def test_an_absurd_tensor_shape_in_json_is_a_format_error():
    tensor = {"kind": "tensor", "value": {"dtype": "f32", "shape": [10**18, 10**18], "data": ""}}
    text = document(inputs=[], outputs=[0], nodes=[{"op": "constant", "inputs": [], "attrs": {"value": tensor},
                                                    "outputs": [{"id": 0, "type": "f32[]"}]}])
    with pytest.raises(GraphFormatError, match="more bytes than any machine addresses"):
        fc.loads(text)


SPECS = [("f4", "i4"), [("a", "f4")], ("f4", -1), ("f4", (2,)), {"names": ["a"], "formats": ["f4"]},
         {"names": ["a"]}, "i4,i4", np.dtype([("a", "f4")]), "U3", "O", "complex64", 5, None, np.float32(1.0)]


@pytest.mark.parametrize("spec", SPECS, ids=[repr(s)[:30] for s in SPECS])
def test_numpy_dtype_specs_are_refused_by_name(spec):
    with pytest.raises(IRError, match="unsupported dtype"):
        as_dtype(spec)
    with pytest.raises(AttributeSpecError, match="must be a dtype such as 'f32'"):
        normalize_attr("dtype", spec, "attribute 'dtype'")


@pytest.mark.parametrize("spec, dtype", [("f32", "f32"), ("float64", "f64"), (np.float16, "f16"),
                                         (np.dtype(">f4"), "f32"), (float, "f64"), (bool, "bool")])
def test_real_dtypes_are_still_accepted(spec, dtype):
    assert as_dtype(spec).short == dtype


def test_a_big_endian_constant_becomes_native_and_runs():
    big = np.arange(3, dtype=">f4")
    from frame_core.frontend.trace import apply

    graph = fc.trace(lambda x: apply("accumulate_internal", x, fc.constant(big)), "f32[3]")
    (constant,) = [n for n in graph.nodes if n.op == "constant"]
    assert constant.attrs["value"].dtype == np.dtype("float32")
    np.testing.assert_array_equal(fc.compile(graph).run([np.ones(3, np.float32)])[0], [1, 2, 3])


@pytest.mark.parametrize("value", [2**70, -(2**64), 10**5000, [1, 2**63]], ids=["2^70", "-2^64", "5000-digits", "list"])
def test_an_int_attribute_must_fit_64_bits(value):
    with pytest.raises(AttributeSpecError, match="64-bit") as info:
        normalize_attr("ints" if isinstance(value, list) else "int", value, "attribute 'axis'")
    assert len(str(info.value)) < 300  # a 5000-digit value is described, not printed


SURROGATE_DOC = json.dumps({"format": "frame-graph", "version": 1, "graph": {
    "name": "g\ud800", "inputs": [{"id": 0, "type": "f32[3]", "name": "x\udcff"}],
    "nodes": [{"op": "relu\ud800", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]", "name": "y\ud800"}],
               "attrs": {"note": {"kind": "str", "value": "v\udfff"}}}], "outputs": [1]}})


def test_lone_surrogates_in_names_print_escaped():
    graph = fc.loads(SURROGATE_DOC)
    for text in (fc.format_graph(graph), fc.to_dot(graph), str(graph)):
        text.encode("utf-8")  # no UnicodeEncodeError
        assert "\\ud800" in text
    assert fc.loads(fc.dumps(graph)).name == "g\ud800"  # the JSON round trip keeps the exact name


# -- the cost of reporting stays proportional to what is reported ------------------------------------------
def _unknown_ops_document(n: int, distinct: bool) -> str:
    nodes = [{"op": f"no_such_op_{i}" if distinct else "no_such_op", "inputs": [0],
              "outputs": [{"id": i + 1, "type": "f32[3]"}]} for i in range(n)]
    return document(nodes=nodes, outputs=[n])


@pytest.mark.parametrize("distinct", [True, False], ids=["distinct-names", "one-name"])
def test_checking_many_unknown_ops_suggests_names_for_a_few_only(monkeypatch, distinct):
    import frame_core.errors as errors
    from frame_core.ir import verify

    calls = []
    real = errors.suggest
    monkeypatch.setattr(errors, "suggest", lambda *a, **k: calls.append(1) or real(*a, **k))
    graph = fc.loads(_unknown_ops_document(2000, distinct))
    problems = fc.check_graph(graph)
    assert len(problems) == 2000 and all(p.rule == "V3" for p in problems)
    assert len(calls) <= verify.SUGGESTED_NAMES  # not one difflib search per node
    assert "unknown op 'no_such_op" in str(problems[-1])


def test_reading_a_valid_document_formats_no_message(monkeypatch):
    from frame_core.ir import serialize

    shown = []
    monkeypatch.setattr(serialize, "_short", lambda *a, **k: shown.append(a) or "")
    text = _unknown_ops_document(500, True)  # unknown ops are verify's business: the document itself is sound
    assert len(fc.loads(text).nodes) == 500
    assert shown == []


def test_a_bad_node_deep_in_a_document_is_reported_with_its_path():
    nodes = [{"op": "k", "inputs": [0], "outputs": [{"id": i + 1, "type": "f32[3]"}]} for i in range(300)]
    nodes[217]["outputs"][0]["type"] = "f32[oops]"
    nodes[250]["inputs"] = [9999]
    with pytest.raises(GraphFormatError) as info:
        fc.loads(document(nodes=nodes, outputs=[300]))
    assert info.value.path == "$.graph.nodes[217].outputs[0].type"
    nodes[217]["outputs"][0]["type"] = "f32[3]"
    with pytest.raises(GraphFormatError) as info:
        fc.loads(document(nodes=nodes, outputs=[300]))
    assert info.value.path == "$.graph.nodes[250].inputs[0]" and "9999" in info.value.detail


@pytest.mark.parametrize("names, path", [(["a", "b"], "$.graph.output_names"), ([3], "$.graph.output_names[0]"),
                                         ("a", "$.graph.output_names")])
def test_malformed_output_names_are_a_format_error(names, path):
    doc = json.loads(document())
    doc["graph"]["output_names"] = names
    with pytest.raises(GraphFormatError) as info:
        fc.loads(json.dumps(doc))
    assert info.value.path == path



_GRAPH = '{"name": "g", "inputs": [{"id": 0, "type": "f32[3]"}], "nodes": [{"op": "neg1", "inputs": [0], ' \
         '"outputs": [{"id": 1, "type": "f32[3]"}]}], "outputs": [1]}'
_DOC = '{"format": "frame-graph", "version": 1, "graph": ' + _GRAPH + '}'
DUPLICATED = [  # (document text with one key written twice, the path the refusal names)
    (_DOC.replace('"version": 1', '"version": 1, "version": 1'), "$.version"),
    (_DOC.replace('"op": "neg1"', '"op": "neg1", "op": "add2"'), "$.graph.nodes[0].op"),
    (_DOC.replace('{"id": 1, "type": "f32[3]"}', '{"id": 1, "type": "f32[3]", "id": 2}'),
     "$.graph.nodes[0].outputs[0].id"),
]


@pytest.mark.parametrize("text, path", DUPLICATED)
def test_a_key_written_twice_is_refused_naming_where(text, path):
    """Found in QA: `"op": "relu", "op": "neg"` loaded as neg (last wins, as Python's json does)."""
    fc.loads(_DOC)  # once is fine
    with pytest.raises(GraphFormatError) as info:
        fc.loads(text)
    assert info.value.path == path
    assert "written twice" in str(info.value)
