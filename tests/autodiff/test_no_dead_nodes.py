"""build_backward_graph returns no dead nodes (issue 17): the reverse walk made the gradient of every input on
the chain, so asking for x's alone left w's gradient in the graph, in ``frame graph show`` and in pictures."""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops

from ._dead_nodes import dead as _dead


def test_a_gradient_not_asked_for_is_not_in_the_graph():
    forward = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f64[3, 4]", "f64[4, 2]")
    only_x = fc.build_backward_graph(forward, 0, [0])
    assert _dead(only_x, len(forward.nodes)) == []
    assert "matmul_grad_rhs_like_internal" not in {n.op for n in only_x.nodes}  # w's gradient
    both = fc.build_backward_graph(forward, 0, [0, 1])
    assert {"matmul_grad_lhs_like_internal", "matmul_grad_rhs_like_internal"} <= {n.op for n in both.nodes}
    # the same gradient either way
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    np.testing.assert_array_equal(fc.compile(only_x, opt_level=0).run([x, w])[1],
                                  fc.compile(both, opt_level=0).run([x, w])[1])


def test_second_order_and_the_users_own_nodes():
    # the forward's own unused node is the user's: kept as written; only what the transform added is pruned
    def f(x, w):
        ops.exp(w)  # unused by any output
        return ops.sum(ops.sin(x) * w)

    forward = fc.trace(f, "f64[5]", "f64[5]")
    first = fc.build_backward_graph(forward, 0, [0])
    assert _dead(first, len(forward.nodes)) == []
    assert [n.op for n in first.nodes[:len(forward.nodes)]] == [n.op for n in forward.nodes]
    contracted, index = fc.add_scalar_contraction(first, 1)
    second = fc.build_backward_graph(contracted, index, [0])
    assert _dead(second, len(contracted.nodes)) == []
