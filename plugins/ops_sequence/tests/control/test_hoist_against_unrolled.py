"""Hoisted scans (``control_hoist``) and summed accumulations (``sink_scan_accumulations``) against the same
function unrolled in Python, in float64 to 1e-10: value, gradient and Hessian-vector product at every
opt level, for the shapes of body the hoisting must get right or leave alone (a weight used twice, a weight
that is a carry or a row, ``W @ row``, a transposed weight, 3-D rows, the product as a carry or a stacked
output, a chain of products, reverse scans of length 0 and 1, scans nested in scan, loop and if_else,
checkpointed scans). The unrolled graph holds no scan, so neither transformation touches it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

B, K, N = 3, 2, 3


def unrolled(body, init, xs, reverse=False):  # noqa: ANN001, ANN201 - ops.scan's meaning, step by step
    length = xs[0].shape[0] if isinstance(xs, tuple) else xs.shape[0]
    carry, ys = init, [None] * length
    for t in (range(length - 1, -1, -1) if reverse else range(length)):
        carry, ys[t] = body(carry, tuple(x[t] for x in xs) if isinstance(xs, tuple) else xs[t])
    if not length or ys[0] is None:
        return carry, None
    if isinstance(ys[0], tuple):
        return carry, tuple(ops.stack(*[y[k] for y in ys], axis=0) for k in range(len(ys[0])))
    return carry, ops.stack(*ys, axis=0)


def _sq(y):  # noqa: ANN001, ANN202
    return 0.0 if y is None else ops.sum(y * y)


def twice(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - one weight read by three products
    c, ys = scan(lambda h, x: (ops.tanh(x @ w + (x * 2.0) @ w + h @ u + x @ w), h), h0, xs)
    return _sq(c) + _sq(ys)


def weight_carried(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - a carried weight is not invariant
    c, ys = scan(lambda c, x: ((ops.tanh(x @ c[1] + c[0] @ u), c[1] * 0.9 + 0.01), x @ c[1]), (h0, w), xs)
    return _sq(c[0]) + ops.sum(c[1]) + _sq(ys)


def weight_scanned(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - a weight per step is a row
    c, ys = scan(lambda h, x: (ops.tanh(x[0] @ x[1] + h @ u), h @ x[1]), h0, (xs, ops.stack(w, u, w, u, axis=0)))
    return _sq(c) + _sq(ys)


def row_on_the_right(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - W @ row is not hoisted
    c, ys = scan(lambda h, x: (ops.tanh(w @ ops.transpose(x) + ops.transpose(h @ u)), h), h0, xs)
    return _sq(c) + _sq(ys)


def transposed(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - a transposed captured weight
    wt = ops.transpose(u)
    c, ys = scan(lambda h, x: (ops.tanh(x @ wt + h @ ops.transpose(u)), x @ w), h0, xs)
    return _sq(c) + _sq(ys)


def product_as_outputs(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - the hoisted row is the carry and a y
    c, ys = scan(lambda h, x: (lambda p: (p, (p, p * h)))(x @ w), h0, xs)
    return _sq(c) + _sq(ys[0]) + ops.sum(ys[1]) + ops.sum(u)


def chain(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - (x @ w) @ u moves out too
    c, ys = scan(lambda h, x: (lambda p: (ops.tanh(p @ u + h), ops.sin(p)))(x @ w), h0, xs)
    return _sq(c) + _sq(ys)


def nested(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - the inner product moves out of the outer body too
    def outer(h, x):  # noqa: ANN001, ANN202
        c, ys = scan(lambda g, r: (ops.tanh(r @ w + g @ u), r @ w), h, x)
        return c, ops.sum(ys, axes=0)
    c, ys = scan(outer, h0, xs)
    return _sq(c) + _sq(ys)


def in_loop_and_branch(scan, h0, xs, w, u):  # noqa: ANN001, ANN201 - captured xs and weights
    def inner(h):  # noqa: ANN001, ANN202
        return scan(lambda g, r: (ops.tanh(r @ w + g @ u), g), h, xs)[0]
    if scan is ops.scan:
        s = ops.loop(lambda i, s: (True, inner(s)), 2, True, h0)
        s = ops.if_else(ops.less(ops.sum(h0), 100.0), inner, lambda h: h * 2.0, s)
    else:
        s = inner(inner(inner(h0)))
    return _sq(s)


def checkpointed(scan, h0, xs, w, u):  # noqa: ANN001, ANN201
    more = {"checkpoint_every": 2} if scan is ops.scan else {}
    c, ys = scan(lambda h, x: (ops.tanh(x @ w + h @ u), x @ w), h0, xs, **more)
    return _sq(c) + _sq(ys)


def reverse(scan, h0, xs, w, u):  # noqa: ANN001, ANN201
    c, ys = scan(lambda h, x: (ops.tanh(x @ w + h @ u), h), h0, xs, reverse=True)
    return _sq(c) + _sq(ys)


FNS = [twice, weight_carried, weight_scanned, row_on_the_right, transposed, product_as_outputs, chain, nested,
       in_loop_and_branch, checkpointed]


def _case(fn, length=4):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(sum(map(ord, fn.__name__)) + length)
    k = N if fn in (twice, weight_scanned, row_on_the_right, transposed) else K
    rows = (length, 2, B, k) if fn is nested else (length, B, k)
    shapes = [(B, N), rows, (N, N) if fn is weight_scanned or k == N else (K, N), (N, N)]
    if fn is row_on_the_right:
        shapes[0] = (N, B)
    return [f"f64{list(s)}".replace(" ", "") for s in shapes], [rng.standard_normal(s) * 0.5 for s in shapes]


def _graphs(fn, types):  # noqa: ANN001, ANN202
    return (fc.trace(lambda *t: fn(ops.scan, *t), *types), fc.trace(lambda *t: fn(unrolled, *t), *types))


def _same(got, want, tol=1e-10):  # noqa: ANN001, ANN202
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max(initial=0.0)))


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("fn", FNS, ids=[f.__name__ for f in FNS])
def test_value_and_gradients_equal_the_unrolled_scan(fn, level):
    types, xs = _case(fn)
    scan, ref = (fc.build_backward_graph(g, 0, [0, 1, 2, 3]) for g in _graphs(fn, types))
    _same(fc.compile(scan, opt_level=level).run(xs), fc.compile(ref).run(xs))


@pytest.mark.parametrize("fn", [twice, product_as_outputs, chain, nested, in_loop_and_branch],
                         ids=["twice", "product_as_outputs", "chain", "nested", "in_loop_and_branch"])
def test_second_order_and_forward_mode_equal_the_unrolled_scan(fn):
    types, xs = _case(fn)
    scan, ref = _graphs(fn, types)
    v = np.random.default_rng(1).standard_normal(xs[2].shape)
    for level in (1, 2):
        _same(fc.compile(fc.hvp(scan, 2), opt_level=level).run([*xs, v]), fc.compile(fc.hvp(ref, 2)).run([*xs, v]))
    tangents = [np.random.default_rng(2).standard_normal(x.shape) for x in xs]
    _same(fc.compile(fc.build_jvp_graph(scan)).run([*xs, *tangents]),
          fc.compile(fc.build_jvp_graph(ref)).run([*xs, *tangents]))


@pytest.mark.parametrize("length", [0, 1])
@pytest.mark.parametrize("fn", [reverse, chain], ids=["reverse", "chain"])
def test_length_zero_and_one(fn, length):
    types, xs = _case(fn, length)
    scan, ref = (fc.build_backward_graph(g, 0, [0, 1, 2, 3]) for g in _graphs(fn, types))
    for level in (0, 2):
        _same(fc.compile(scan, opt_level=level).run(xs), fc.compile(ref).run(xs))


def test_a_saved_hoisted_training_graph_runs_the_same():
    types, xs = _case(nested)
    training = fc.build_backward_graph(_graphs(nested, types)[0], 0, [0, 1, 2, 3])
    with tempfile.TemporaryDirectory() as tmp:
        fc.save_graph(training, Path(tmp) / "g.json")
        loaded = fc.load_graph(Path(tmp) / "g.json")
    want = fc.compile(training).run(xs)
    for got, w in zip(fc.compile(loaded).run(xs), want):
        assert got.tobytes() == w.tobytes()
    assert "matmul" in fc.to_dot(loaded)
