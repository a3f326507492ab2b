"""Every field a saved graph document holds is described in the JSON format section of ``docs/ir.md``, so a
person editing a file by hand (or writing one from another tool) can learn the format there."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import frame_core as fc
from frame_core.ir.graph import Graph

from ..json_keys import json_keys

DOC = (Path(__file__).resolve().parents[2] / "docs" / "ir.md").read_text()
SECTION = DOC[DOC.index("## JSON format"):DOC.index("## Graphviz DOT")]


def test_every_field_of_a_saved_document_is_documented():
    body = Graph("body")
    b = body.add_input("f32[3]", name="b")
    body.mark_output(b)
    g = Graph("g")
    x = g.add_input("f32[3]", name="x")
    k = g.add_node("constant", [], {"value": np.ones(3, np.float32)}, ["f32[3]"]).outputs[0]
    y = g.add_node("call", [x, k], {"body": body, "n": 2, "none": None}, ["f32[3]"]).outputs[0]
    g.mark_output(y)
    g.name_output(0, "y")
    keys = json_keys(json.loads(fc.dumps(g)))
    assert {"output_names", "attrs", "kind", "data"} <= keys
    missing = sorted(k for k in keys - {"n", "none", "body", "value"} if f"`{k}`" not in SECTION)
    assert not missing, f"fields not described in docs/ir.md's JSON format section: {missing}"
