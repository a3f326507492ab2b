"""Scan-input hoisting (``control_hoist``) and summing gradient accumulations after the loop
(``sink_scan_accumulations``), issue 21.

The forward keeps its bits: the hoisted ``xs @ W`` is one batched matmul that
multiplies each row with the BLAS call the body made, so the states equal a
numpy loop bit for bit. The weight gradients change summation order (one
contraction over steps and rows instead of one accumulation per step); their
difference from the per-step accumulation, and from a float64 reference, is
bounded here at the level of float32 rounding.
"""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops

STEPS, BATCH, INPUT, HIDDEN = 12, 5, 3, 7


def rnn(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN201 - traced tensors
    _, hs = ops.scan(lambda h, x: (lambda n: (n, n))(ops.tanh(x @ wx + h @ wh + b)), h0, xs)
    return ops.sum(hs * r)


def _types(d: str) -> list[str]:
    return [f"{d}[{BATCH}, {HIDDEN}]", f"{d}[{STEPS}, {BATCH}, {INPUT}]", f"{d}[{INPUT}, {HIDDEN}]",
            f"{d}[{HIDDEN}, {HIDDEN}]", f"{d}[{HIDDEN}]", f"{d}[{STEPS}, {BATCH}, {HIDDEN}]"]


def _inputs(dtype: type) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((BATCH, HIDDEN)) * 0.3, rng.standard_normal((STEPS, BATCH, INPUT)),
          rng.standard_normal((INPUT, HIDDEN)) * 0.5, rng.standard_normal((HIDDEN, HIDDEN)) * 0.3,
          rng.standard_normal(HIDDEN) * 0.1, rng.standard_normal((STEPS, BATCH, HIDDEN))]
    return [x.astype(dtype) for x in xs]


def _bptt(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN202 - numpy: the states, then gradients of h0, wx, wh, b
    hs, h = [], h0
    for t in range(len(xs)):
        h = np.tanh(xs[t] @ wx + h @ wh + b)
        hs.append(h)
    gwx, gwh, gb, gh = np.zeros_like(wx), np.zeros_like(wh), np.zeros_like(b), np.zeros_like(h0)
    for t in range(len(xs) - 1, -1, -1):
        ga = (gh + r[t]) * (1 - hs[t] * hs[t])
        prev = hs[t - 1] if t else h0
        gwx, gwh, gb, gh = gwx + xs[t].T @ ga, gwh + prev.T @ ga, gb + ga.sum(0), ga @ wh.T
    return np.stack(hs), [gh, gwx, gwh, gb]


def test_the_row_product_moves_before_the_loop():
    graph = fc.trace(rnn, *_types("f32"))
    scan = next(n for n in graph.nodes if n.op == "scan")
    assert scan.inputs[1].producer.op == "matmul"  # xs @ wx, for every step at once
    assert scan.inputs[1].type.shape == (STEPS, BATCH, HIDDEN)
    body = scan.attrs["body"]
    assert [n.op for n in body.nodes].count("matmul") == 1  # only h @ wh is left in the body
    assert len(body.inputs) == 4  # h, the projected row, wh, b: xs and wx left the node


def test_the_forward_keeps_its_bits():
    xs = _inputs(np.float32)
    hs = fc.compile(fc.trace(lambda *t: ops.scan(lambda h, x: (lambda n: (n, n))(
        ops.tanh(x @ t[2] + h @ t[3] + t[4])), t[0], t[1])[1], *_types("f32")[:5])).run(xs[:5])[0]
    want, _ = _bptt(*xs)
    np.testing.assert_array_equal(hs, want)


def test_a_vector_row_is_not_hoisted():
    # a rank-1 row times a matrix is a vector-matrix product, which BLAS computes apart from a batch of rows
    graph = fc.trace(lambda h0, xs, w: ops.scan(lambda h, x: (h + x @ w, None), h0, xs)[0],
                     "f32[4]", "f32[6, 3]", "f32[3, 4]")
    scan = next(n for n in graph.nodes if n.op == "scan")
    assert any(n.op == "matmul" for n in scan.attrs["body"].nodes)


def test_weight_gradients_are_summed_after_the_loop_within_float32_rounding():
    xs = _inputs(np.float32)
    training = fc.build_backward_graph(fc.trace(rnn, *_types("f32")), 0, [0, 2, 3, 4])
    sunk = fc.compile(training)
    backward = [n for n in sunk.graph.nodes if n.op == "scan"][-1]
    body_ops = {n.op for n in backward.attrs["body"].nodes}
    assert backward.attrs["n_carry"] == 1  # the state cotangent only: the weights' sums left the loop
    assert "matmul_grad_rhs_internal" not in body_ops and "reduce_to_shape_internal" not in body_ops
    got = sunk.run(xs)[1:]
    per_step = fc.compile(training, disable=["sink_scan_accumulations"]).run(xs)[1:]
    _, exact = _bptt(*(x.astype(np.float64) for x in xs))
    np.testing.assert_array_equal(got[0], per_step[0])  # h0's gradient is carried as before: same bits
    for g, p, e in zip(got, per_step, exact):
        scale = np.abs(e).max()
        # float32 rounding of a sum over STEPS * BATCH products: a few units of 2^-24 relative to the largest term
        assert np.abs(g - e).max() <= 1e-5 * scale
        assert np.abs(g - p).max() <= 1e-5 * scale


def test_float64_gradients_match_backpropagation_through_time():
    xs = _inputs(np.float64)
    got = fc.compile(fc.build_backward_graph(fc.trace(rnn, *_types("f64")), 0, [0, 2, 3, 4])).run(xs)[1:]
    _, want = _bptt(*xs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_second_order_through_the_hoisted_scan_matches_central_differences():
    xs = _inputs(np.float64)
    loss = fc.trace(rnn, *_types("f64"))
    first = fc.build_backward_graph(loss, 0, [2])  # [loss, d/dwx]
    weights = np.random.default_rng(5).standard_normal((INPUT, HIDDEN))
    contracted, k = fc.add_scalar_contraction(first, 1, weights=weights)
    got = fc.compile(fc.build_backward_graph(contracted, k, [3])).run(xs)[-1]  # d/dwh of <weights, d/dwx>
    grad = fc.compile(first)
    eps, want = 1e-6, np.zeros_like(xs[3])
    for i in np.ndindex(*xs[3].shape):
        up, down = [x.copy() for x in xs], [x.copy() for x in xs]
        up[3][i] += eps
        down[3][i] -= eps
        want[i] = np.sum(weights * (grad.run(up)[1] - grad.run(down)[1])) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
