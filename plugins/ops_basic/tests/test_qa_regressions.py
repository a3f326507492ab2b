"""Regressions found by hostile QA of the shape ops and the everyday ops: each test failed before its fix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import frame_core as fc
from frame_core import IRError, ops


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


# -- Python scalars in where: they take the dtype of a branch, never of the boolean condition ----------------
@pytest.mark.parametrize("fn, want", [
    (lambda x: ops.where(x > 0.0, x, 0.0), lambda x: np.where(x > 0, x, 0.0)),         # the relu idiom
    (lambda x: ops.where(x > 0.0, 1.0, x), lambda x: np.where(x > 0, 1.0, x)),
    (lambda x: ops.where(x < 0.5, -1, x), lambda x: np.where(x < 0.5, -1.0, x)),       # an int meets a float branch
], ids=["x-or-0.0", "1.0-or-x", "-1-or-x"])
def test_a_scalar_branch_of_where_takes_the_other_branch_dtype(fn, want):
    x = np.array([-1.5, 0.0, 0.25, 2.0])
    (got,) = run(fc.trace(fn, "f64[4]"), x)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want(x))


def test_where_with_two_scalar_branches_keeps_their_python_types_not_the_condition_bool():
    x = np.array([-1.0, 2.0], np.float32)
    ints, floats = run(fc.trace(lambda v: [ops.where(v > 0.0, 1, 0), ops.where(v > 0.0, 1.0, 0.5)], "f32[2]"), x)
    assert ints.dtype == np.int64 and floats.dtype == np.float64  # Python numbers keep Python precision (weak typing)
    np.testing.assert_array_equal(ints, [0, 1])
    np.testing.assert_array_equal(floats, [0.5, 1.0])


def test_a_scalar_condition_of_where_stays_boolean():
    (got,) = run(fc.trace(lambda a, b: ops.where(True, a, b), "f32[2]", "f32[2]"), np.ones(2, np.float32),
                 np.zeros(2, np.float32))
    np.testing.assert_array_equal(got, [1.0, 1.0])


def test_a_float_scalar_against_an_integer_branch_names_the_branch_not_the_condition():
    with pytest.raises(IRError, match=r"Python float 0\.5 but the other operand is i32\[4\]"):
        fc.trace(lambda t: ops.where(t > 0, t, 0.5), "i32[4]")


def test_a_scalar_label_of_cross_entropy_stays_an_integer():
    logits = np.array([0.0, 0.0, 5.0, 0.0], np.float32)
    (got,) = run(fc.trace(lambda v: ops.cross_entropy(v, 2), "f32[4]"), logits)
    np.testing.assert_allclose(got, np.log(np.exp(logits).sum()) - 5.0, rtol=1e-6)


# -- an axis of a rank-0 tensor: the message says it has none, not "valid: 0..-1" ------------------------------
@pytest.mark.parametrize("fn", [lambda x: ops.softmax(x), lambda x: ops.argmax(x, axis=0), lambda x: ops.squeeze(x, axes=[0]),
                                lambda x: ops.sum(x, axes=[0]), lambda x: ops.max(x, axes=[-1]),
                                lambda x: ops.slice(x, starts=[0], stops=[1], axes=[0])],
                         ids=["softmax", "argmax", "squeeze", "sum", "max", "slice"])
def test_an_axis_of_a_rank_0_tensor_is_refused_with_a_message_that_says_it_has_no_axes(fn):
    with pytest.raises(fc.ShapeError) as info:
        fc.trace(fn, "f32[]")
    message = str(info.value)
    assert "a rank-0 tensor has no axes" in message and "0..-1" not in message


# -- a DataError names the offending value as a number, not as numpy's repr ("np.float32(3e+10)") --------------
@pytest.mark.parametrize("src, value, shown", [("f32", 3e10, "3e+10"), ("f64", -1e19, "-1e+19"), ("f16", np.inf, "inf"),
                                               ("i64", 2**40, "1099511627776")])
def test_a_cast_that_does_not_fit_names_the_value_plainly(src, value, shown):
    dtype = fc.TensorType.parse(f"{src}[]").dtype.np
    graph = fc.trace(lambda v: ops.cast(v, to="i32"), f"{src}[2]")
    with pytest.raises(fc.DataError) as info:
        run(graph, np.array([1, value]).astype(dtype))
    message = str(info.value)
    assert f"the value {shown} at index [1]" in message and "np." not in message


# -- messages say what was given, what was expected, and what to do -------------------------------------------
@pytest.mark.parametrize("fn, types, phrases", [
    (lambda a, b: ops.pow(a, b), ["i32[3]", "i32[3]"], ["pow: needs floating inputs, got i32[3], i32[3]", "cast"]),
    (lambda a: a ** 3, ["i32[3]"], ["pow: needs floating inputs", "cast"]),                 # not "the Python float 3.0"
    (lambda a, t: ops.cross_entropy(a, t), ["i32[2, 3]", "i64[2]"], ["logits must be floating, got i32[2, 3]", "cast"]),
    (lambda a, b: ops.concat(a, b), ["f32[2]", "f32[2, 1]"], ["same rank, got f32[2] and f32[2, 1]", "expand_dims"]),
    (lambda a: ops.slice(a, starts=[0], stops=[1]), ["f32[]"], ["1 entry per list but the input has no axes"]),
    (lambda a: ops.slice(a, starts=[0, 0], stops=[1, 1]), ["f32[3]"], ["2 entries per list but the input has only 1 axis;"]),
    (lambda a: ops.pad(a, before=[1], after=[1], axes=[]), ["f32[3]"], ["`axes` names 0 axes but the per-axis lists have 1 entry"]),
    (lambda a: ops.clip(a, min=0.5), ["i32[3]"], ["min=0.5 is not a whole number", "cast x to a float dtype"]),
])
def test_build_time_messages_name_what_was_given_and_what_to_do(fn, types, phrases):
    with pytest.raises(fc.FrameError) as info:
        fc.trace(fn, *types)
    for phrase in phrases:
        assert phrase in str(info.value)


# -- clip's bounds beyond a half-precision range round to +-inf quietly, as documented ------------------------------
def test_clip_bounds_beyond_the_dtype_range_round_to_infinity_without_a_warning():
    x = np.array([1.0, -1e4, 6e4], np.float16)
    forward = fc.trace(lambda v: [ops.sum(ops.clip(v, min=-1e6, max=1e5)), ops.clip(v, min=-1e6, max=1e5)], "f16[3]")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, clipped, grad = run(fc.build_backward_graph(forward, 0, [0]), x)
    np.testing.assert_array_equal(clipped, x)  # no bound is reached: both are infinite in float16
    np.testing.assert_array_equal(grad, np.ones(3, np.float16))


def test_a_numpy_float64_scalar_with_no_tensor_to_follow_stays_float64():
    graph = fc.trace(lambda c: [ops.broadcast_to(np.float64(0.1), shape=[2]), ops.where(c, np.float64(1.0), np.float64(0.0))],
                     "bool[2]")
    wide, picked = run(graph, np.array([True, False]))
    assert wide.dtype == np.float64 and wide[0] == 0.1 and picked.dtype == np.float64


# -- maximum/minimum are not commutative on signed zeros, so opt level 2 must not merge max(x, y) and max(y, x) ---
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_every_opt_level_agrees_on_extrema_of_signed_zeros(op):
    x, y = np.array([-0.0, 0.0]), np.array([0.0, -0.0])
    graph = fc.trace(lambda a, b: [getattr(ops, op)(a, b), 1.0 / getattr(ops, op)(b, a)], "f64[2]", "f64[2]")
    with np.errstate(divide="ignore"):
        want = [getattr(np, op)(x, y), 1.0 / getattr(np, op)(y, x)]  # numpy returns b on a tie: +-inf here
    for level in (0, 1, 2):
        with np.errstate(divide="ignore"):
            got = fc.compile(graph, opt_level=level, cache=False).run([x, y])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


# -- casts to bfloat16 round once, by frame's own rule (not the installed ml_dtypes' or torch's) -------------------
def _bfloat16_reference(values) -> np.ndarray:
    """Nearest bfloat16 (ties to even, beyond the largest finite one: inf) by exact rational comparison."""
    from fractions import Fraction

    patterns = np.arange(0x0000, 0x7F81, dtype=np.uint16)  # +0 .. +inf
    magnitudes = patterns.view(fc.bfloat16.np).astype(np.float64)
    largest = Fraction(float(magnitudes[-2]))
    half_ulp_top = (Fraction(float(magnitudes[-2])) - Fraction(float(magnitudes[-3]))) / 2
    out = []
    for v in values:
        v = float(v) if isinstance(v, (float, np.floating)) else v
        exact = Fraction(int(v)) if isinstance(v, (int, np.integer)) else Fraction(float(v))
        mag = abs(exact)
        if mag >= largest + half_ulp_top:
            pick = 0x7F80
        else:
            i = int(np.searchsorted(magnitudes, float(mag)))  # a float64 near mag: check both neighbours exactly
            best = None
            for j in range(max(i - 2, 0), min(i + 2, len(magnitudes) - 1)):
                d = abs(Fraction(float(magnitudes[j])) - mag)
                if best is None or d < best[0] or (d == best[0] and j % 2 == 0):
                    best = (d, j)
            pick = best[1]
        negative = exact < 0 or (isinstance(v, float) and np.signbit(v))  # -0.0 keeps its sign
        bits = np.uint16(pick | (0x8000 if negative else 0))
        out.append(bits)
    return np.array(out, np.uint16).view(fc.bfloat16.np)


def test_casts_to_bfloat16_round_once_to_nearest_even():
    rng = np.random.default_rng(7)
    wide = np.concatenate([
        [1 + 2.0 ** -8 + 2.0 ** -40, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -9, -(1 + 2.0 ** -8 + 2.0 ** -40),
         3.3895313892515355e38, 3.3961775292304957e38, 3.4e38, 1e39, 2.0 ** -133, 2.0 ** -134, 2.0 ** -134 * 1.0000001,
         0.0, -0.0],
        rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200)])
    ints = np.array([2 ** 24 + 2 ** 16 + 1, 7, 2 ** 62 + 2 ** 54 + 1, -(2 ** 62 + 2 ** 54 + 1), 2 ** 63 - 1, -2 ** 63,
                     2 ** 53 + 1, 2 ** 8 + 1, 2 ** 9 + 2, *rng.integers(-2 ** 63, 2 ** 63 - 1, 100)], np.int64)
    narrow = rng.standard_normal(300).astype(np.float32) * np.float32(1e3)
    got_wide, got_ints, got_narrow = run(
        fc.trace(lambda a, b, c: [ops.cast(a, to="bf16"), ops.cast(b, to="bf16"), ops.cast(c, to="bf16")],
                 f"f64[{wide.size}]", f"i64[{ints.size}]", f"f32[{narrow.size}]"), wide, ints, narrow)
    for got, source in ((got_wide, wide), (got_ints, ints.tolist()), (got_narrow, narrow)):
        np.testing.assert_array_equal(got.view(np.uint16), _bfloat16_reference(source).view(np.uint16))
    assert float(got_wide[0]) == 1 + 2.0 ** -7  # rounding through float32 first would give 1.0: the docs name it
    (nan,) = run(fc.trace(lambda a: ops.cast(a, to="bf16"), "f64[3]"), np.array([np.nan, np.inf, -np.inf]))
    assert np.isnan(nan[0].astype(np.float32)) and nan[1] == np.inf and nan[2] == -np.inf
    for source in ("f64", "f32", "i64"):  # rank 0 keeps its rank
        (scalar,) = run(fc.trace(lambda a: ops.cast(a, to="bf16"), f"{source}[]"), np.array(3, fc.TensorType.parse(f"{source}[]").dtype.np))
        assert scalar.shape == () and scalar == 3


# -- the documented limits for infinite logits (docs/ops-basic.md, "Softmax and losses") -------------------------
def test_infinite_logits_give_the_documented_limits():
    inf = np.inf
    x = np.array([[inf, 0.0, 1.0], [-inf, 0.0, 0.0], [-inf, -inf, -inf]])
    with np.errstate(invalid="ignore", divide="ignore"):
        sm, lsm, lse, ce = run(fc.trace(lambda v: [ops.softmax(v), ops.log_softmax(v), ops.logsumexp(v, axes=[1]),
                                                   ops.cross_entropy(ops.slice(v, starts=[0], stops=[2]),
                                                                     np.array([1, 1]))], "f64[3, 3]"), x)
    np.testing.assert_array_equal(sm[0], [np.nan, 0.0, 0.0])
    np.testing.assert_array_equal(lsm[0], [np.nan, -inf, -inf])
    np.testing.assert_array_equal(sm[1], [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(lsm[1], [-inf, -np.log(2), -np.log(2)])
    assert np.isnan(sm[2]).all() and np.isnan(lsm[2]).all()
    np.testing.assert_array_equal(lse, [inf, np.log(2), -inf])
    assert ce == inf  # the mean of +inf (row 0, label logit finite) and log 2 (row 1)
