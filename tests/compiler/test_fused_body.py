"""Hand-built ``fused_elementwise_internal`` bodies are validated (issue 8 §2), not trusted.

The fused kernel assumes what the fuse stage guarantees: every member an elementwise op that writes into
``out``, one value type, outputs made by members. A body built by hand that breaks one of these would run
into garbage; now it is a ``VerifyError`` (shape inference refuses the node) at verify or compile time.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core.errors import VerifyError


def _node(body_fn, inputs=("f32[4]", "f32[4]")):
    body = fc.Graph("body")
    xs = [body.add_input(t) for t in inputs]
    for value in body_fn(body, xs):
        body.mark_output(value)
    g = fc.Graph()
    args = [g.add_input(t) for t in inputs]
    node = g.add_node("fused_elementwise_internal", args, {"body": body}, [v.type for v in body.outputs] or ["f32[4]"])
    for v in node.outputs:
        g.mark_output(v)
    return g


BAD_BODIES = [
    ("not-elementwise", lambda b, xs: [b.apply("matmul", b.apply("reshape", xs[0], shape=(2, 2)),
                                                b.apply("reshape", xs[1], shape=(2, 2)))],
     "not an elementwise op that accepts `out`"),
    ("output-is-an-input", lambda b, xs: [xs[0]], "has no nodes"),
    ("an-input-as-a-second-output", lambda b, xs: [b.apply("add", xs[0], xs[1]), xs[1]], "returns its input"),
    ("no-outputs", lambda b, xs: [], "has no outputs"),
    ("fails-verify", lambda b, xs: [b.add_node("add", xs, {}, ["f64[4]"]).outputs[0]], "fails verify"),
    ("two-types", lambda b, xs: [b.apply("add", xs[0], xs[0]), b.apply("add", xs[1], xs[1])],
     "of the chain's one type f32[4]", ("f32[4]", "f64[4]")),
]


@pytest.mark.parametrize("case, build, words, types", [c if len(c) == 4 else (*c, ("f32[4]", "f32[4]"))
                                                      for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES])
def test_a_bad_hand_built_body_is_refused(case, build, words, types):
    graph = _node(build, types)
    problems = fc.check_graph(graph)
    assert any(words in str(p) for p in problems), problems
    with pytest.raises(VerifyError, match="body"):
        fc.compile(graph, cache=False)


def test_a_sound_hand_built_body_runs():
    graph = _node(lambda b, xs: [b.apply("mul", b.apply("add", xs[0], xs[1]), xs[0])])
    a, c = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(fc.compile(graph, cache=False).run([a, c])[0], (a + c) * a)


@pytest.mark.parametrize("repeat", [0, -1, 2.5, True, "3", None])
def test_profile_refuses_a_repeat_that_is_not_a_positive_int(repeat):
    exe = fc.compile(fc.trace(lambda x: x * 2.0, "f32[3]"), cache=False)
    with pytest.raises(fc.InputError, match="repeat, the number of timed runs, as an int of 1 or more"):
        exe.profile([np.ones(3, np.float32)], repeat=repeat)
    assert exe.profile([np.ones(3, np.float32)], repeat=1).repeat == 1
