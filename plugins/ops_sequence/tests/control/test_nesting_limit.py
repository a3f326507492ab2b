"""Bodies nested to frame's limit run (found in QA: 165-196 levels loaded, then failed at run time with a 21 kB
message wrapping RecursionError 170 times); one level more is refused up front, by verify and by loading."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import frame_core as fc
from frame_core import GraphFormatError, VerifyError, ops
from frame_core.ir.graph import MAX_NESTING


def nested_branches(levels: int) -> fc.Graph:
    def level(d, x):
        if d == 0:
            return ops.tanh(x)
        return ops.if_else(ops.greater(ops.sum(x), 0.0), lambda y: level(d - 1, y), lambda y: ops.neg(y), x)
    return fc.trace(lambda x: ops.sum(level(levels, x)), "f32[3]")


def test_branches_nested_to_the_limit_compile_run_and_differentiate():
    graph = nested_branches(MAX_NESTING)
    x = np.array([0.5, 1.0, 2.0], np.float32)
    (y,) = fc.compile(graph, cache=False).run([x])
    assert np.allclose(y, np.tanh(x).sum())
    training = fc.build_backward_graph(graph, 0, [0])
    _, g = fc.compile(training, cache=False).run([x])
    assert np.allclose(g, 1 - np.tanh(x) ** 2, rtol=1e-5)


def test_one_level_more_is_refused_before_anything_runs():
    graph = nested_branches(MAX_NESTING + 1)
    with pytest.raises(VerifyError, match=f"at most {MAX_NESTING} deep"):
        fc.verify(graph)
    with pytest.raises(fc.FrameError, match=f"at most {MAX_NESTING} deep"):
        fc.compile(graph, cache=False)
    doc = json.loads(fc.dumps(nested_branches(MAX_NESTING)))
    deepest = doc["graph"]
    while True:  # follow then_branch to the innermost branch, then give it one more level
        holders = [n for n in deepest["nodes"] if "then_branch" in n.get("attrs", {})]
        if not holders:
            break
        deepest = holders[0]["attrs"]["then_branch"]["value"]
    deepest["nodes"].append({"op": "ops_sequence::if_else", "inputs": [], "outputs": [],
                             "attrs": {"then_branch": {"kind": "graph", "value": copy.deepcopy(deepest)}}})
    with pytest.raises(GraphFormatError, match=f"at most {MAX_NESTING} deep"):
        fc.loads(json.dumps(doc))
