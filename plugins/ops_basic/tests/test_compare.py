"""Comparisons and where: values against numpy (NaN, broadcasting, every dtype), build-time errors, where's gradient."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops

COMPARISONS = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
               "greater": np.greater, "greater_equal": np.greater_equal}


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


@pytest.mark.parametrize("op", sorted(COMPARISONS))
@pytest.mark.parametrize("dtype", ["f64", "f16", "bf16", "i32", "bool"])
def test_comparisons_match_numpy_with_broadcasting(op, dtype):
    t = fc.TensorType.parse(f"{dtype}[]").dtype.np
    a = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [1, 1, 0, 0]]).astype(t)
    b = np.array([1, 1, 0, 3]).astype(t)
    (got,) = run(fc.trace(lambda x, y: getattr(ops, op)(x, y), f"{dtype}[3, 4]", f"{dtype}[4]"), a, b)
    assert got.dtype == np.bool_ and got.shape == (3, 4)
    np.testing.assert_array_equal(got, COMPARISONS[op](a, b))


def test_nan_compares_unequal_to_everything_itself_included():
    a = np.array([np.nan, np.nan, 1.0])
    b = np.array([np.nan, 1.0, np.nan])
    graph = fc.trace(lambda x, y: [getattr(ops, op)(x, y) for op in sorted(COMPARISONS)], "f64[3]", "f64[3]")
    results = dict(zip(sorted(COMPARISONS), run(graph, a, b)))
    assert results.pop("not_equal").all()
    assert not any(r.any() for r in results.values())


def test_a_rank_0_comparison_returns_a_0_d_array():
    (got,) = run(fc.trace(lambda x: x < 1.0, "f32[]"), np.float32(0.5))
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.bool_ and bool(got)


@pytest.mark.parametrize("types, message", [
    (("f32[3]", "f64[3]"), "inputs must share a dtype, got f32[3] and f64[3]"),
    (("f32[3]", "f32[4]"), "cannot broadcast shapes [3] and [4]"),
])
def test_comparison_shape_errors_name_what_was_given(types, message):
    with pytest.raises(ShapeError, match=r"^less: ") as info:
        fc.trace(lambda x, y: ops.less(x, y), *types)
    assert message in str(info.value)


# -- where --------------------------------------------------------------------------------------------------
def test_where_picks_and_broadcasts_all_three():
    cond = np.array([[True], [False], [True]])
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.float32(-1.0)
    (got,) = run(fc.trace(lambda c, x, y: ops.where(c, x, y), "bool[3, 1]", "f32[4]", "f32[]"), cond, a, b)
    assert got.dtype == np.float32 and got.shape == (3, 4)
    np.testing.assert_array_equal(got, np.where(cond, a, b))


def test_where_on_integers_and_bools():
    cond = np.array([True, False, True])
    (got,) = run(fc.trace(lambda c, x, y: ops.where(c, x, y), "bool[3]", "i64[3]", "i64[]"), cond,
                 np.array([5, 6, 7]), np.int64(0))
    np.testing.assert_array_equal(got, [5, 0, 7])
    assert got.dtype == np.int64


def test_where_gradient_routes_gy_by_the_condition_and_sums_broadcast_axes():
    cond = np.array([[True, False, True, False], [False, False, True, True], [True, True, True, False]])
    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array(7.0)
    w = np.arange(12.0).reshape(3, 4)
    graph = fc.trace(lambda c, x, y: ops.sum(ops.where(c, x, y) * w), "bool[3, 4]", "f64[4]", "f64[]")
    _, ga, gb = run(fc.build_backward_graph(graph, 0, [1, 2]), cond, a, b)
    np.testing.assert_array_equal(ga, (w * cond).sum(axis=0))
    np.testing.assert_array_equal(gb, (w * ~cond).sum())


def test_where_refuses_a_condition_that_is_not_boolean():
    with pytest.raises(ShapeError, match=r"where: cond must be boolean, got f32\[3\]; compare first"):
        fc.trace(lambda c, x: ops.where(c, x, x), "f32[3]", "f32[3]")


def test_where_refuses_branches_of_two_dtypes():
    with pytest.raises(ShapeError, match=r"where: a and b must share a dtype, got f32\[3\] and f64\[3\]"):
        fc.trace(lambda c, x, y: ops.where(c, x, y), "bool[3]", "f32[3]", "f64[3]")


def test_where_cannot_be_differentiated_with_respect_to_its_condition():
    graph = fc.trace(lambda c, x: ops.sum(ops.where(c, x, x * 2.0)), "bool[3]", "f64[3]")
    with pytest.raises(fc.GradientError, match="only floating inputs carry gradients"):
        fc.build_backward_graph(graph, 0, [0])


def test_every_opt_level_agrees_on_a_graph_of_masks_casts_and_selections():
    # fusion groups elementwise chains of one type: bool masks, their casts and float selections meet here
    def f(x, y):
        mask = ops.greater(x, y)
        both = ops.equal(ops.less_equal(x, 0.5), mask)
        picked = ops.where(both, ops.maximum(x, y) * 2.0, ops.clip(abs(x - y), min=0.1, max=0.6) ** 3)
        counted = ops.cast(ops.cast(picked > 0.2, to="i32") + ops.cast(mask, to="i32"), to="f32")
        return ops.sum(ops.softmax(picked + counted, axis=1) * x) + ops.max(picked)
    forward = fc.trace(f, "f32[4, 5]", "f32[4, 5]")
    training = fc.build_backward_graph(forward, 0, [0, 1])
    rng = np.random.default_rng(5)
    args = [rng.uniform(-1, 1, (4, 5)).astype(np.float32) for _ in range(2)]
    results = [fc.compile(training, opt_level=level, cache=False).run(args) for level in (0, 1, 2)]
    assert any(n.op == "fused_elementwise_internal" for n in fc.compile(training, opt_level=2, cache=False).graph.nodes)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
