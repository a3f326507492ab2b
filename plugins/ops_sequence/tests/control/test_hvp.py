"""Hessian-vector products through loop, scan, if_else and a loop inside an if inside a scan (issue 10).

Each is ``build_backward_graph`` applied twice (ARCH-067): the gradient of
``sum_k <g_k, v_k>``. References: central differences of the first-order
gradient along ``v`` (float64), and torch's double backward on the same
function written with Python control flow.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from .helpers import hvp_graph, torch_hvp


def f_loop(x, w):  # noqa: ANN001, ANN201 - traced tensors
    def body(i, s):  # noqa: ANN001, ANN202
        new = ops.tanh(s * w + 0.3)
        return ops.less(ops.sum(new), 2.5), new
    return ops.sum(ops.loop(body, 6, True, x) ** 2)


def t_loop(x, w):  # noqa: ANN001, ANN201 - torch tensors
    import torch

    s = x
    for _ in range(6):
        s = torch.tanh(s * w + 0.3)
        if not s.sum() < 2.5:
            break
    return (s ** 2).sum()


def f_scan(x, w):  # noqa: ANN001, ANN201
    h, ys = ops.scan(lambda h, row: (ops.sin(h * w + row), h * row), ops.sum(x, axes=0) * 0.1, x)
    return ops.sum(h * h) + ops.sum(ys)


def t_scan(x, w):  # noqa: ANN001, ANN201
    h = x.sum(0) * 0.1
    total = 0
    for row in x:
        total = total + (h * row).sum()
        h = (h * w + row).sin()
    return (h * h).sum() + total


def f_if(x, w):  # noqa: ANN001, ANN201
    y = ops.if_else(ops.less(ops.sum(x), 1.0), lambda a, b: ops.exp(a * b), lambda a, b: ops.sin(a) * b * b, x, w)
    return ops.sum(y * x)


def t_if(x, w):  # noqa: ANN001, ANN201
    y = (x * w).exp() if x.sum() < 1.0 else x.sin() * w * w
    return (y * x).sum()


def f_nested(x, w):  # noqa: ANN001, ANN201
    """A loop inside an if inside a scan: the branch taken and the loop length depend on the data."""
    def step(h, row):  # noqa: ANN001, ANN202
        def deep(a):  # noqa: ANN001, ANN202
            inner = ops.loop(lambda i, s: (ops.less(ops.sum(s * s), 0.8), ops.tanh(s * w + row)), 3, True, a)
            return inner * 1.5
        new = ops.if_else(ops.less(ops.sum(row), 0.0), deep, lambda a: ops.sin(a * w) + row, h)
        return new, ops.sum(new * row)
    h, ys = ops.scan(step, ops.sum(x, axes=0) * 0.2, x)
    return ops.sum(h * h) + ops.sum(ys * ys)


def t_nested(x, w):  # noqa: ANN001, ANN201
    h = x.sum(0) * 0.2
    total = 0
    for row in x:
        if row.sum() < 0.0:
            s = h
            for _ in range(3):
                s = (s * w + row).tanh()
                if not (s * s).sum() < 0.8:
                    break
            h = s * 1.5
        else:
            h = (h * w).sin() + row
        total = total + (h * row).sum() ** 2
    return (h * h).sum() + total


CASES = {"loop": (f_loop, t_loop, "f64[4]", "f64[4]"), "scan": (f_scan, t_scan, "f64[5, 3]", "f64[3]"),
         "if_else": (f_if, t_if, "f64[3]", "f64[3]"), "loop_in_if_in_scan": (f_nested, t_nested, "f64[6, 3]", "f64[3]")}


def _inputs(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(len(name))
    _, _, tx, tw = CASES[name]
    x_shape = tuple(int(d) for d in tx[4:-1].split(","))
    w_shape = tuple(int(d) for d in tw[4:-1].split(","))
    x = rng.uniform(-0.6, 0.6, x_shape)
    if name == "loop_in_if_in_scan":
        x[::2] = np.abs(x[::2]) * -1.0  # both branches are taken along the sequence
    if name == "if_else":
        x = rng.uniform(0.05, 0.2, x_shape)  # the then branch, away from the switch
    return [x, rng.uniform(0.5, 1.2, w_shape)]


@pytest.mark.parametrize("name", list(CASES))
def test_hessian_vector_products_against_differences_and_torch(name):
    fn, tfn, tx, tw = CASES[name]
    inputs = _inputs(name)
    rng = np.random.default_rng(99)
    vs = [rng.standard_normal(x.shape) for x in inputs]
    exe = fc.compile(hvp_graph(fn, [tx, tw], [0, 1], vs))
    outs = exe.run(inputs)
    loss, grads, hv = outs[0], outs[1:3], outs[4:6]
    first = fc.compile(fc.build_backward_graph(fc.trace(fn, tx, tw), 0, [0, 1]))

    def gradient_at(t: float) -> list[np.ndarray]:
        return first.run([x + t * v for x, v in zip(inputs, vs)])[1:]
    h = 1e-5
    numeric = [(a - b) / (2 * h) for a, b in zip(gradient_at(h), gradient_at(-h))]
    for k in range(2):
        np.testing.assert_allclose(hv[k], numeric[k], rtol=1e-6, atol=1e-7, err_msg=f"Hv[{k}] vs differences")
    pytest.importorskip("torch")
    t_loss, t_grads, t_hv = torch_hvp(tfn, inputs, [0, 1], vs)
    assert float(loss) == pytest.approx(t_loss, rel=1e-12)
    for k in range(2):
        np.testing.assert_allclose(grads[k], t_grads[k], rtol=1e-10, atol=1e-12, err_msg=f"gradient {k} vs torch")
        np.testing.assert_allclose(hv[k], t_hv[k], rtol=1e-10, atol=1e-12, err_msg=f"Hv[{k}] vs torch")


def test_the_nested_case_takes_both_branches_and_varies_the_inner_trip_count():
    """Guards the test above against a case that silently exercises only one path."""
    x, w = _inputs("loop_in_if_in_scan")
    taken, trips = set(), set()
    h = x.sum(0) * 0.2
    for row in x:
        taken.add(bool(row.sum() < 0.0))
        if row.sum() < 0.0:
            s, n = h, 0
            for _ in range(3):
                s, n = np.tanh(s * w + row), n + 1
                if not (s * s).sum() < 0.8:
                    break
            trips.add(n)
            h = s * 1.5
        else:
            h = np.sin(h * w) + row
    assert taken == {True, False}
    assert len(trips) >= 2

