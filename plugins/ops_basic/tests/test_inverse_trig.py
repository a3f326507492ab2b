"""atan, asin, acos and atan2: values against Python's math module, signed zeros and quadrants against numpy,
half precision, bad input, and values, gradients and Hessian-vector products against PyTorch autograd (with the
``compare`` extra). Central differences to order 2 run for every op in the conformance kit (test_conformance.py),
and forward mode's JvpFn against the derived one there too."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import torch_value_gradient_hvp, value_gradient_hvp


def run(fn, *xs):
    types = [f"{'f64' if x.dtype == np.float64 else 'f32'}[{', '.join(map(str, x.shape))}]" for x in xs]
    return fc.compile(fc.trace(fn, *types)).run(list(xs))[0]


WIDE = np.array([-1e300, -40.0, -3.0, -1.0, -0.25, -1e-8, -0.0, 0.0, 1e-8, 0.25, 1.0, 3.0, 40.0, 1e300])
UNIT = np.array([-1.0, -0.999999, -0.5, -1e-12, -0.0, 0.0, 1e-12, 0.5, 0.999999, 1.0])


@pytest.mark.parametrize("name, fn, ref, x", [
    ("atan", ops.atan, math.atan, WIDE),
    ("asin", ops.asin, math.asin, UNIT),
    ("acos", ops.acos, math.acos, UNIT),
])
def test_values_match_pythons_math_module(name, fn, ref, x):
    y = run(fn, x)
    np.testing.assert_allclose(y, [ref(float(v)) for v in x], rtol=5e-16, atol=0)
    if name != "acos":  # odd functions keep the sign of zero
        assert np.array_equal(np.signbit(y), np.signbit(x)), name


def test_atan2_has_numpys_quadrants_and_signed_zeros():
    zeros_and_ones = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf])
    y, x = (a.ravel() for a in np.meshgrid(zeros_and_ones, zeros_and_ones))
    got = run(ops.atan2, y, x)
    assert np.array_equal(got, np.arctan2(y, x)) and np.array_equal(np.signbit(got), np.signbit(np.arctan2(y, x)))
    assert run(ops.atan2, np.array([-0.0]), np.array([-1.0]))[0] == -math.pi  # below the cut
    assert run(ops.atan2, np.array([0.0]), np.array([-1.0]))[0] == math.pi


def test_atan2_broadcasts_and_matches_math():
    rng = np.random.default_rng(0)
    y, x = rng.uniform(-3, 3, (4, 5)), rng.uniform(-3, 3, (5,))
    np.testing.assert_allclose(run(ops.atan2, y, x), [[math.atan2(a, b) for a, b in zip(row, x)] for row in y],
                               rtol=5e-16)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_asin_and_acos_are_nan_outside_their_domain_and_nan_flows_through():
    outside = np.array([-1.5, 1.0000001, np.inf, np.nan])
    assert np.isnan(run(ops.asin, outside)).all() and np.isnan(run(ops.acos, outside)).all()
    assert np.isnan(run(ops.atan, np.array([np.nan]))).all()
    assert run(ops.atan, np.array([np.inf, -np.inf])).tolist() == [math.pi / 2, -math.pi / 2]


def test_asin_gradient_keeps_its_accuracy_next_to_one():
    # 1/sqrt(1 - x^2) with 1 - x^2 formed as (1 - x)(1 + x): no cancellation of x^2 against 1
    x = np.array([1 - 2.0 ** -40, -(1 - 2.0 ** -40)])
    g = fc.compile(fc.build_backward_graph(fc.trace(lambda v: ops.sum(ops.asin(v)), "f64[2]"), 0, [0])).run([x])[1]
    exact = [1 / math.sqrt((1 - v) * (1 + v)) for v in x]
    np.testing.assert_allclose(g, exact, rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_lower_precisions_stay_in_their_dtype(dtype):
    name = {np.float32: "f32", np.float16: "f16", ml_dtypes.bfloat16: "bf16"}[dtype]
    x = np.linspace(-0.9, 0.9, 19).astype(dtype)
    graph = fc.trace(lambda v: ops.atan2(ops.asin(v), ops.acos(v)) + ops.atan(v), f"{name}[19]")
    y = fc.compile(graph).run([x])[0]
    wide = x.astype(np.float64)
    ref = np.arctan2(np.arcsin(wide), np.arccos(wide)) + np.arctan(wide)
    assert y.dtype == np.dtype(dtype)
    tol = {np.float32: 1e-6, np.float16: 4e-3, ml_dtypes.bfloat16: 3e-2}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)


def test_integer_inputs_are_a_named_error():
    with pytest.raises(fc.ShapeError, match="atan: needs a floating input, got i32"):
        fc.trace(lambda x: ops.atan(x), "i32[3]")
    with pytest.raises(fc.ShapeError, match="atan2: needs floating inputs"):
        fc.trace(lambda y, x: ops.atan2(y, x), "i32[3]", "i32[3]")
    with pytest.raises(fc.ShapeError, match="atan2"):
        fc.trace(lambda y, x: ops.atan2(y, x), "f32[3]", "f32[4]")


# -- against torch -----------------------------------------------------------------------------------------
TORCH = {
    "atan": (ops.atan, "atan", [(-3, 3)]),
    "asin": (ops.asin, "asin", [(-0.95, 0.95)]),
    "acos": (ops.acos, "acos", [(-0.95, 0.95)]),
    "atan2": (ops.atan2, "atan2", [(-2, 2), (-2, 2)]),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_value_gradient_and_second_order_match_torch(name):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    fn, reference, ranges = TORCH[name]
    rng = np.random.default_rng(sorted(TORCH).index(name))
    shapes = [(4, 5), (5,)] if len(ranges) == 2 else [(4, 5)]  # atan2 broadcasts a row of x
    xs = [rng.uniform(lo, hi, s) for (lo, hi), s in zip(ranges, shapes)]
    w = rng.uniform(-1, 1, (4, 5))
    direction = [rng.uniform(-1, 1, x.shape) for x in xs]
    loss, grads, hvps = value_gradient_hvp(fn, xs, w, direction)

    tloss, tgrads, thvps = torch_value_gradient_hvp(getattr(torch, reference), xs, w, direction)
    np.testing.assert_allclose(loss, tloss, rtol=1e-13)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g, tg, rtol=1e-12, atol=1e-14)
    for h, th in zip(hvps, thvps):
        np.testing.assert_allclose(h, th, rtol=1e-11, atol=1e-13)


def test_atan2_gradient_at_the_origin_is_zero_as_torchs():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    point = np.array([0.0, 0.0, -0.0, 3.0]), np.array([0.0, -0.0, 1.0, 4.0])
    graph = fc.build_backward_graph(fc.trace(lambda y, x: ops.sum(ops.atan2(y, x)), "f64[4]", "f64[4]"), 0, [0, 1])
    _, gy, gx = fc.compile(graph).run(list(point))
    ty, tx = (torch.tensor(p, requires_grad=True) for p in point)
    tgy, tgx = torch.autograd.grad(torch.atan2(ty, tx).sum(), [ty, tx])
    np.testing.assert_array_equal(gy, tgy.numpy())
    np.testing.assert_array_equal(gx, tgx.numpy())
    jvp = fc.compile(fc.build_jvp_graph(fc.trace(ops.atan2, "f64[4]", "f64[4]"), [0, 1]))
    np.testing.assert_allclose(jvp.run([*point, np.ones(4), np.ones(4)])[1], gy + gx, rtol=1e-15, atol=0)


def test_forward_mode_matches_the_derivative():
    x = np.linspace(-0.9, 0.9, 7)
    dx = np.linspace(1.0, 2.0, 7)
    for fn, deriv in ((ops.atan, lambda v: 1 / (1 + v * v)), (ops.asin, lambda v: 1 / np.sqrt(1 - v * v)),
                      (ops.acos, lambda v: -1 / np.sqrt(1 - v * v))):
        jvp = fc.build_jvp_graph(fc.trace(fn, "f64[7]"), [0])
        y, ty = fc.compile(jvp).run([x, dx])
        np.testing.assert_allclose(ty, deriv(x) * dx, rtol=1e-15)


@pytest.mark.parametrize("name", ["asin", "acos"])
def test_second_order_is_accurate_near_zero_and_infinite_at_the_ends_as_torch(name):
    """sqrt(1 - x^2) is 1 - x^2 below |x| = 0.5 and at |x| = 1: the product form's derivative lost eps / |x| of
    the second derivative near 0 and gave NaN (inf * 0) at the ends."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    x = np.array([1e-10, -2e-8, 1e-3, 0.3, 0.5, -0.5, 0.7, -0.999, 1.0, -1.0, 0.0])
    fn, tfn = getattr(ops, name), getattr(torch, name)
    first = fc.build_backward_graph(fc.trace(lambda v: ops.sum(fn(v)), f"f64[{len(x)}]"), 0, [0])
    extended, k = fc.extend_graph(first, lambda v, value, g: ops.sum(g))
    with np.errstate(divide="ignore", invalid="ignore"):
        outs = fc.compile(fc.build_backward_graph(extended, k, [0])).run([x])
    t = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(tfn(t).sum(), t, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), t)
    np.testing.assert_allclose(outs[1], tg.detach().numpy(), rtol=1e-12)  # (torch: 1 - x*x at -0.999)
    np.testing.assert_allclose(outs[-1], th.numpy(), rtol=1e-12)  # +-inf at +-1; the product form: 8e-8 at 1e-10
