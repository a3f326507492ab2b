"""An attribute's ``kind`` and ``value`` in a JSON graph must agree: a hand edit that puts a value beside
``"kind": "none"`` (the form ``save_graph`` writes for an unset optional attribute, e.g. slice's ``steps``)
must not be dropped without a word (issue 8 §2, §4)."""

from __future__ import annotations

import json

import pytest

import frame_core as fc
from frame_core.errors import GraphFormatError


def _document(steps: dict) -> str:
    return json.dumps({"format": "frame-graph", "version": 2, "graph": {
        "name": "g", "inputs": [{"id": 0, "type": "f32[6]", "name": "x"}],
        "nodes": [{"op": "ops_basic::slice", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]"}],
                   "attrs": {"starts": {"kind": "ints", "value": [0]}, "stops": {"kind": "ints", "value": [3]},
                             "steps": steps}}],
        "outputs": [1]}})


@pytest.mark.parametrize("value", [[2], 0, "x", False, {}])
def test_a_value_beside_kind_none_is_a_format_error_with_its_path(value):
    with pytest.raises(GraphFormatError, match=r"\$\.graph\.nodes\[0\]\.attrs\.steps\.value: .*kind none"):
        fc.loads(_document({"kind": "none", "value": value}))


def test_kind_none_with_null_still_loads():
    graph = fc.loads(_document({"kind": "none", "value": None}))
    assert graph.nodes[0].attrs["steps"] is None


@pytest.mark.parametrize("how", ["file", "str", "bytes"])
def test_a_document_with_a_utf8_byte_order_mark_loads(tmp_path, how):
    # Windows editors save UTF-8 with a BOM; json.loads took it in bytes but refused it in str and files
    text = "\ufeff" + _document({"kind": "none", "value": None})
    if how == "file":
        path = tmp_path / "g.json"
        path.write_bytes(text.encode("utf-8"))
        graph = fc.load_graph(path)
    else:
        graph = fc.loads(text if how == "str" else text.encode("utf-8"))
    assert graph.nodes[0].op.endswith("slice") and graph.nodes[0].attrs["steps"] is None


def test_a_schema_kind_with_alternatives_says_to_write_the_kind_of_the_value():
    # `frame ops show conv1d` prints "padding: str|ints"; a document names the kind of the value it holds
    text = _document({"kind": "none", "value": None}).replace('"steps": {"kind": "none", "value": null}',
                                                              '"steps": {"kind": "str|ints", "value": "same"}')
    with pytest.raises(GraphFormatError, match=r"steps\.kind: unknown attribute kind 'str\|ints'.*any of str, ints: "
                                               r"write the kind of the value given"):
        fc.loads(text)


def _edited(edit) -> str:
    doc = json.loads(_document({"kind": "none", "value": None}))
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("edit, path, hint", [
    (lambda d: d["graph"]["nodes"][0].__setitem__("atrs", d["graph"]["nodes"][0].pop("attrs")),
     r"\$\.graph\.nodes\[0\]\.atrs", "did you mean 'attrs'"),
    (lambda d: d["graph"]["nodes"][0]["outputs"][0].__setitem__("nmae", "y"),
     r"\$\.graph\.nodes\[0\]\.outputs\[0\]\.nmae", "did you mean 'name'"),
    (lambda d: d["graph"]["inputs"][0].__setitem__("shape", [6]), r"\$\.graph\.inputs\[0\]\.shape", "a value has"),
    (lambda d: d["graph"].__setitem__("output_name", ["y"]), r"\$\.graph\.output_name", "did you mean 'output_names'"),
    (lambda d: d["graph"]["nodes"][0]["attrs"]["starts"].__setitem__("values", [1]),
     r"\$\.graph\.nodes\[0\]\.attrs\.starts\.values", "did you mean 'value'"),
    (lambda d: d.__setitem__("graphs", {}), r"\$\.graphs", "did you mean 'graph'"),
])
def test_an_unknown_field_is_a_format_error_not_ignored(edit, path, hint):
    # a misspelt "attrs" loaded a node with its default attributes: a silent change of meaning
    with pytest.raises(GraphFormatError, match=rf"{path}: unknown field .*{hint}"):
        fc.loads(_edited(edit))
