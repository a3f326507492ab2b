"""max/min reductions (values, NaN, the tie rule of the gradient) and argmax/argmin (first occurrence, int64)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops
from frame_core.testing import check_gradients

X = np.array([[3.0, -1.0, 2.0, 0.5], [1.0, 4.0, -2.0, 4.0], [0.0, 0.0, 0.0, 0.0]])


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


@pytest.mark.parametrize("op, ref", [("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("axes, keepdims", [(None, False), ([1], False), ([0], True), ([0, 1], True), ([-1], True)])
def test_values_match_numpy(op, ref, axes, keepdims):
    (y,) = run(fc.trace(lambda x: getattr(ops, op)(x, axes=axes, keepdims=keepdims), "f64[3, 4]"), X)
    want = ref(X, axis=None if axes is None else tuple(axes), keepdims=keepdims)
    assert y.shape == np.shape(want) and y.dtype == np.float64
    np.testing.assert_array_equal(y, want)


def test_max_propagates_nan():
    (y,) = run(fc.trace(lambda x: ops.max(x, axes=[1]), "f64[2, 3]"), np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]]))
    assert np.isnan(y[0]) and y[1] == 3.0


def test_ties_share_the_gradient_evenly():
    graph = fc.trace(lambda x: ops.sum(ops.max(x, axes=[1]) * np.array([1.0, 10.0, 100.0])), "f64[3, 4]")
    _, gx = run(fc.build_backward_graph(graph, 0, [0]), X)
    np.testing.assert_array_equal(gx, [[1.0, 0, 0, 0], [0, 5.0, 0, 5.0], [25.0, 25.0, 25.0, 25.0]])


def test_min_over_all_axes_with_a_tie():
    graph = fc.trace(lambda x: ops.min(x) * 6.0, "f64[2, 3]")
    x = np.array([[1.0, -2.0, 0.0], [-2.0, 5.0, -2.0]])
    _, gx = run(fc.build_backward_graph(graph, 0, [0]), x)
    np.testing.assert_array_equal(gx, [[0.0, 2.0, 0.0], [2.0, 0.0, 2.0]])


def test_max_is_closed_to_third_order_away_from_ties():
    graph = fc.trace(lambda x: ops.sum(ops.max(x * x * x, axes=[0], keepdims=True) * x), "f64[3, 2]")
    check_gradients(graph, [np.array([[0.3, -1.2], [0.9, 0.4], [-0.7, 1.1]])], order=3).assert_ok()


def test_integer_max_keeps_its_dtype_and_bool_is_refused():
    (y,) = run(fc.trace(lambda x: ops.max(x, axes=[0]), "i32[3]"), np.array([-5, 7, 2], np.int32))
    assert y.dtype == np.int32 and y.shape == () and int(y) == 7
    with pytest.raises(ShapeError, match="max: needs numeric"):
        fc.trace(lambda x: ops.max(x), "bool[3]")


def test_an_empty_axis_has_no_maximum():
    with pytest.raises(ShapeError, match=r"max: cannot take the max over axis 1 of f32\[2, 0\]: it has size 0"):
        fc.trace(lambda x: ops.max(x, axes=[1]), "f32[2, 0]")
    (y,) = run(fc.trace(lambda x: ops.max(x, axes=[1]), "f32[0, 3]"), np.zeros((0, 3), np.float32))
    assert y.shape == (0,)


def test_tensor_methods_max_and_min():
    graph = fc.trace(lambda x: [x.max(axes=[0]), x.min()], "f64[3, 4]")
    top, bottom = run(graph, X)
    np.testing.assert_array_equal(top, X.max(axis=0))
    assert bottom == X.min()


# -- argmax / argmin -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, ref", [("argmax", np.argmax), ("argmin", np.argmin)])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (None, True), (0, False), (1, True), (-1, False)])
def test_arg_values_match_numpy_first_occurrence_on_ties(op, ref, axis, keepdims):
    (y,) = run(fc.trace(lambda x: getattr(ops, op)(x, axis=axis, keepdims=keepdims), "f64[3, 4]"), X)
    want = ref(X, axis=axis, keepdims=keepdims)
    assert y.dtype == np.int64 and y.shape == np.shape(want)
    np.testing.assert_array_equal(y, want)


def test_argmax_picks_the_first_of_tied_maxima_and_a_nan():
    graph = fc.trace(lambda x: ops.argmax(x, axis=1), "f32[2, 4]")
    (y,) = run(graph, np.array([[1.0, 5.0, 5.0, 0.0], [1.0, np.nan, 9.0, np.nan]], np.float32))
    assert y.tolist() == [1, 1]


def test_argmax_of_bools_is_the_first_true():
    (y,) = run(fc.trace(lambda x: ops.argmax(x, axis=0), "bool[4]"), np.array([False, True, False, True]))
    assert int(y) == 1


def test_argmax_axis_out_of_range_is_a_shape_error():
    with pytest.raises(ShapeError, match=r"argmax: axis 2 is out of range for rank 2 \(valid: -2..1\)"):
        fc.trace(lambda x: ops.argmax(x, axis=2), "f32[3, 4]")


def test_argmax_has_no_gradient_and_needs_none():
    graph = fc.trace(lambda x: ops.sum(x * ops.cast(ops.argmax(x, axis=1, keepdims=True), to="f64")), "f64[3, 4]")
    _, gx = run(fc.build_backward_graph(graph, 0, [0]), X)
    np.testing.assert_array_equal(gx, np.broadcast_to(np.argmax(X, axis=1, keepdims=True).astype(float), X.shape))
