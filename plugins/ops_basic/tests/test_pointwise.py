"""maximum/minimum ties, abs and sign at the kink, clip at its bounds, pow's domain: values and gradients.

Each documented rule (docs/ops-basic.md) is checked at the very point where it applies; away from those
points the conformance kit checks the gradients against central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops
from frame_core.testing import check_gradients


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def grads(fn, *arrays, types=None):
    """Forward value and gradients of sum(fn(*xs)) for every (float64) input."""
    types = types or [f"f64[{', '.join(map(str, np.shape(a)))}]" for a in arrays]
    graph = fc.trace(lambda *xs: ops.sum(fn(*xs)), *types)
    out = run(fc.build_backward_graph(graph, 0, list(range(len(arrays)))), *arrays)
    return out[0], out[1:]


# -- maximum / minimum ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, pick", [("maximum", np.maximum), ("minimum", np.minimum)])
def test_a_tie_splits_the_gradient_evenly(op, pick):
    a = np.array([1.0, 2.0, 3.0, -0.5])
    b = np.array([1.0, 0.0, 5.0, -0.5])  # ties at 0 and 3
    value, (ga, gb) = grads(lambda x, y: getattr(ops, op)(x, y), a, b)
    assert value == pick(a, b).sum()
    a_wins = (a > b) if op == "maximum" else (a < b)
    expected_a = np.where(a == b, 0.5, a_wins.astype(float))
    np.testing.assert_array_equal(ga, expected_a)
    np.testing.assert_array_equal(gb, 1.0 - expected_a)


def test_a_broadcast_tie_collects_half_of_each_tied_element():
    a = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 0.0]])
    b = np.array(2.0)  # ties a at three places
    _, (ga, gb) = grads(ops.maximum, a, b)
    np.testing.assert_array_equal(ga, [[0.0, 0.5, 1.0], [0.5, 0.5, 0.0]])
    assert gb == 3 * 0.5 + 2 * 1.0  # three ties, two elements where b wins


def test_maximum_of_an_input_with_itself_passes_the_whole_gradient():
    _, (gx,) = grads(lambda x: ops.maximum(x, x) * 3.0, np.array([1.0, -2.0]))
    np.testing.assert_array_equal(gx, [3.0, 3.0])  # 3/2 through each side, summed


def test_maximum_propagates_nan_and_its_gradient_goes_to_b():
    a, b = np.array([np.nan, 1.0]), np.array([0.0, np.nan])
    (y,) = run(fc.trace(ops.maximum, "f64[2]", "f64[2]"), a, b)
    assert np.isnan(y).all()
    _, (ga, gb) = grads(ops.maximum, a, b)
    np.testing.assert_array_equal(ga, [0.0, 0.0])
    np.testing.assert_array_equal(gb, [1.0, 1.0])


def test_maximum_on_integers_keeps_the_dtype():
    (y,) = run(fc.trace(ops.maximum, "i32[3]", "i32[]"), np.array([-4, 0, 9], np.int32), np.int32(1))
    assert y.dtype == np.int32 and y.tolist() == [1, 1, 9]


# -- abs / sign -------------------------------------------------------------------------------------------
def test_abs_has_gradient_zero_at_the_kink_and_sign_elsewhere():
    x = np.array([-2.0, -0.0, 0.0, 1e-300, 3.0])
    value, (gx,) = grads(abs, x)
    assert value == np.abs(x).sum()
    np.testing.assert_array_equal(gx, [-1.0, 0.0, 0.0, 1.0, 1.0])


def test_abs_second_derivative_is_zero_and_closed():
    check_gradients(fc.trace(lambda x: ops.sum(abs(x) * x), "f64[4]"), [np.array([-1.5, -0.2, 0.3, 2.0])],
                    order=3).assert_ok()


def test_sign_values_and_zero_gradient():
    x = np.array([-3.0, -0.0, 0.0, 2.0, np.nan])
    (y,) = run(fc.trace(ops.sign, "f64[5]"), x)
    np.testing.assert_array_equal(y, [-1.0, 0.0, 0.0, 1.0, np.nan])
    _, (gx,) = grads(ops.sign, x[:4])
    np.testing.assert_array_equal(gx, np.zeros(4))


def test_abs_of_integers():
    (y,) = run(fc.trace(abs, "i64[3]"), np.array([-3, 0, 4]))
    assert y.dtype == np.int64 and y.tolist() == [3, 0, 4]


# -- clip -------------------------------------------------------------------------------------------------
def test_clip_passes_the_gradient_at_its_bounds_and_stops_it_outside():
    x = np.array([-2.0, -1.0, -0.5, 0.0, 1.0, 1.5])
    value, (gx,) = grads(lambda v: ops.clip(v, min=-1.0, max=1.0), x)
    assert value == np.clip(x, -1.0, 1.0).sum()
    np.testing.assert_array_equal(gx, [0.0, 1.0, 1.0, 1.0, 1.0, 0.0])


@pytest.mark.parametrize("bounds, expected", [({"min": 0.0}, [0.0, 0.0, 0.5, 3.0]), ({"max": 0.0}, [-1.0, 0.0, 0.0, 0.0]),
                                              ({}, [-1.0, 0.0, 0.5, 3.0])])
def test_clip_with_one_bound_or_none(bounds, expected):
    x = np.array([-1.0, 0.0, 0.5, 3.0])
    (y,) = run(fc.trace(lambda v: ops.clip(v, **bounds), "f64[4]"), x)
    np.testing.assert_array_equal(y, expected)


def test_clip_bounds_are_rounded_to_the_dtype_so_the_gradient_agrees_with_the_forward():
    x = np.array([0.1, 0.2, 0.3], np.float16)  # 0.1 is not a float16; the bound rounds to x[0]
    graph = fc.trace(lambda v: [ops.sum(ops.clip(v, min=0.1) * 1.0), ops.clip(v, min=0.1)], "f16[3]")
    _, y, gx = run(fc.build_backward_graph(graph, 0, [0]), x)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(gx, [1.0, 1.0, 1.0])  # x[0] sits on the (rounded) bound: included


def test_clip_on_integers():
    (y,) = run(fc.trace(lambda v: ops.clip(v, min=-2, max=3), "i32[5]"), np.array([-9, -2, 0, 3, 9], np.int32))
    assert y.dtype == np.int32 and y.tolist() == [-2, -2, 0, 3, 3]


@pytest.mark.parametrize("type_, attrs, message", [
    ("f32[3]", {"min": 1.0, "max": 0.0}, "min=1.0 is greater than max=0.0"),
    ("f32[3]", {"min": float("nan")}, "min is NaN"),
    ("i32[3]", {"max": 2.5}, "max=2.5 is not a whole number in the range of i32"),
    ("bool[3]", {"max": 1.0}, "needs numeric (integer or float) inputs"),
])
def test_clip_refuses_bad_bounds_at_build_time(type_, attrs, message):
    with pytest.raises(ShapeError, match=r"^clip: ") as info:
        fc.trace(lambda v: ops.clip(v, **attrs), type_)
    assert message in str(info.value)


# -- pow --------------------------------------------------------------------------------------------------
def test_pow_values_and_gradients_for_a_positive_base():
    a, b = np.array([0.5, 1.0, 2.0, 3.0]), np.array([2.0, -1.0, 0.5, 3.0])
    value, (ga, gb) = grads(ops.pow, a, b)
    np.testing.assert_allclose(value, (a ** b).sum(), rtol=1e-15)
    np.testing.assert_allclose(ga, b * a ** (b - 1), rtol=1e-14)
    np.testing.assert_allclose(gb, a ** b * np.log(a), rtol=1e-14, atol=1e-15)


def test_pow_at_a_zero_base_and_a_zero_exponent():
    a, b = np.array([0.0, 0.0, 0.0, 2.0]), np.array([0.0, 1.0, 2.5, 0.0])
    with np.errstate(all="raise"):  # 0 ** 0 computes no 0 ** -1 to mask afterwards
        value, (ga, gb) = grads(ops.pow, a, b)
    assert value == 1.0 + 0.0 + 0.0 + 1.0
    np.testing.assert_array_equal(ga, [0.0, 1.0, 0.0, 0.0])  # 0 where b == 0 (0 ** 0 too); b a^(b-1) elsewhere
    np.testing.assert_array_equal(gb, [0.0, 0.0, 0.0, np.log(2.0)])  # 0 where a == 0


def test_pow_of_a_negative_base_with_an_integral_exponent():
    a, b = np.array([-2.0, -0.5, 3.0]), np.array([3.0, 2.0, 2.0])
    value, (ga, gb) = grads(ops.pow, a, b)
    assert value == -8.0 + 0.25 + 9.0
    np.testing.assert_array_equal(ga, [12.0, -1.0, 6.0])
    assert np.isnan(gb[:2]).all() and gb[2] == 9.0 * np.log(3.0)  # not differentiable in b for a < 0


def test_pow_with_a_constant_exponent_on_negative_values_warns_about_nothing():
    graph = fc.trace(lambda x: ops.sum(x ** 3 + x ** -2), "f64[4]")
    x = np.array([-2.0, -0.5, 0.5, 2.0])
    with np.errstate(all="raise"):  # no log of a negative number, no 0 * inf, anywhere in the gradient
        _, gx = run(fc.build_backward_graph(graph, 0, [0]), x)
    np.testing.assert_allclose(gx, 3 * x ** 2 - 2 * x ** -3, rtol=1e-15)


def test_pow_is_closed_to_third_order():
    graph = fc.trace(lambda a, b: ops.sum(ops.pow(a, b) * a), "f64[4]", "f64[4]")
    rng = np.random.default_rng(3)
    check_gradients(graph, [rng.uniform(0.5, 2.0, 4), rng.uniform(-1.5, 1.5, 4)], order=3).assert_ok()


def test_pow_refuses_integers():
    with pytest.raises(ShapeError, match=r"pow: needs floating inputs, got i32\[3\], i32\[3\]"):
        fc.trace(ops.pow, "i32[3]", "i32[3]")


# -- floor / ceil / round ---------------------------------------------------------------------------------
_EDGES = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, -1.2, 1.7, 3.0, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("op", ["floor", "ceil", "round"])
@pytest.mark.parametrize("dtype", ["f64", "f32", "f16"])
def test_rounding_equals_torch_halves_to_even_signed_zeros_and_nan_included(op, dtype):
    torch = pytest.importorskip("torch")
    x = _EDGES.astype(fc.as_dtype(dtype).np)
    (y,) = run(fc.trace(getattr(ops, op), f"{dtype}[{x.size}]"), x)
    expected = getattr(torch, op)(torch.from_numpy(x)).numpy()
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(expected))  # round(-0.5) is -0.0, as torch


@pytest.mark.parametrize("op", ["floor", "ceil", "round"])
def test_rounding_gradient_is_zero_at_the_jumps_too_as_torch(op):
    torch = pytest.importorskip("torch")
    x = np.array([-1.5, -1.0, 0.0, 0.5, 0.7, 2.5])  # jumps of round (halves) and of floor/ceil (integers)
    value, (gx,) = grads(lambda v: getattr(ops, op)(v) * v, x)
    xt = torch.tensor(x, requires_grad=True)
    out = (getattr(torch, op)(xt) * xt).sum()
    out.backward()
    assert value == out.item()
    np.testing.assert_array_equal(gx, xt.grad.numpy())  # d(op(x) x)/dx = op(x): op's own part is 0
    graph = fc.trace(lambda v: ops.sum(getattr(ops, op)(v) * v), "f64[3]")
    check_gradients(graph, [np.array([0.2, 1.3, -2.6])], order=2).assert_ok()  # away from the jumps, to order 2


def test_rounding_refuses_integers_by_name():
    with pytest.raises(ShapeError, match="needs a floating input, got i32"):
        fc.trace(ops.round, "i32[3]")
