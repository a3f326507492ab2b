"""cast between every pair of dtypes (truncation, range errors, rounding, gradients) and one_hot."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import frame_core as fc
from frame_core import DataError, ShapeError, ops

DTYPES = ["f16", "bf16", "f32", "f64", "i32", "i64", "bool"]


def np_dtype(short: str) -> np.dtype:
    return fc.TensorType.parse(f"{short}[]").dtype.np


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def cast(x: np.ndarray, to: str, type_: str) -> np.ndarray:
    (y,) = run(fc.trace(lambda v: ops.cast(v, to=to), type_), x)
    return y


@pytest.mark.parametrize("src, dst", list(itertools.product(DTYPES, DTYPES)))
def test_every_pair_of_dtypes_casts_like_numpy_on_representable_values(src, dst):
    x = np.array([0, 1, 3, 0, 1, 2]).astype(np_dtype(src))  # small whole numbers: exact in every dtype
    y = cast(x, dst, f"{src}[6]")
    assert y.dtype == np_dtype(dst) and y.shape == (6,)
    np.testing.assert_array_equal(y, x.astype(np_dtype(dst)))
    assert not np.shares_memory(x, y)


def test_float_to_integer_truncates_toward_zero():
    x = np.array([2.7, -2.7, 0.5, -0.5, 1e9, -1e9])
    np.testing.assert_array_equal(cast(x, "i32", "f64[6]"), [2, -2, 0, 0, 1_000_000_000, -1_000_000_000])


@pytest.mark.parametrize("value, dst", [(np.nan, "i32"), (np.inf, "i64"), (-np.inf, "i32"), (2.0 ** 31, "i32"),
                                        (-2.0 ** 31 - 1.0, "i32"), (2.0 ** 63, "i64")])
def test_a_float_an_integer_type_cannot_hold_is_a_data_error_naming_it(value, dst):
    x = np.array([1.0, value, 3.0])
    with pytest.raises(DataError) as info:
        cast(x, dst, "f64[3]")
    message = str(info.value)
    assert f"the value {x[1]!s} at" in message and "at index [1]" in message and f"does not fit in {dst}" in message
    assert "truncation toward zero" in message and "(%" in message  # names the node: "node 0 (%0 = cast(...))"


def test_the_extremes_of_an_integer_type_fit():
    x = np.array([2.0 ** 31 - 0.5, -2.0 ** 31 - 0.5, -2.0 ** 63])
    np.testing.assert_array_equal(cast(x[:2], "i32", "f64[2]"), [2 ** 31 - 1, -2 ** 31])
    assert cast(x[2:], "i64", "f64[1]")[0] == -2 ** 63


def test_narrowing_an_integer_out_of_range_is_a_data_error_not_a_wraparound():
    with pytest.raises(DataError, match=r"the value 4294967296 at index \[0\] does not fit in i32 "
                                        r"\(valid -2147483648..2147483647\)"):
        cast(np.array([2 ** 32, 1]), "i32", "i64[2]")


def test_floats_narrow_by_rounding_to_nearest_and_overflow_to_infinity():
    with np.errstate(over="raise"):  # the overflow is the rule, not an accident: no warning
        y = cast(np.array([1e5, -1e5, 1.0 + 2.0 ** -11, np.nan]), "f16", "f64[4]")
    assert y[0] == np.inf and y[1] == -np.inf and y[2] == 1.0 and np.isnan(y[3])  # 1 + 2^-11: a tie, to even


def test_anything_to_bool_is_nonzero_and_nan_is_true():
    np.testing.assert_array_equal(cast(np.array([0.0, -0.0, 0.25, np.nan]), "bool", "f64[4]"), [False, False, True, True])
    np.testing.assert_array_equal(cast(np.array([0, -3]), "bool", "i64[2]"), [False, True])


@pytest.mark.parametrize("src, dst", [("f32", "f64"), ("f64", "f32"), ("f32", "f16"), ("bf16", "f32"), ("f64", "f64")])
def test_the_gradient_between_floats_is_gy_cast_back(src, dst):
    w = np.array([0.5, -1.25, 3.0])
    graph = fc.trace(lambda v: ops.sum(ops.cast(v, to=dst) * w.astype(np_dtype(dst))), f"{src}[3]")
    _, gx = run(fc.build_backward_graph(graph, 0, [0]), np.ones(3, np_dtype(src)))
    assert gx.dtype == np_dtype(src)
    np.testing.assert_array_equal(gx, w.astype(np_dtype(dst)).astype(np_dtype(src)))


def test_a_round_trip_through_an_integer_has_no_gradient():
    graph = fc.trace(lambda v: ops.sum(ops.cast(ops.cast(v, to="i64"), to="f64") * 2.0 + v), "f64[3]")
    _, gx = run(fc.build_backward_graph(graph, 0, [0]), np.array([0.5, 1.5, -2.5]))
    np.testing.assert_array_equal(gx, [1.0, 1.0, 1.0])  # only the direct term: the integer path carries none


def test_astype_on_a_traced_tensor_is_a_cast():
    graph = fc.trace(lambda v: v.astype("f16"), "f64[2]")
    assert [n.op for n in graph.nodes] == ["cast"] and graph.outputs[0].type == fc.TensorType.parse("f16[2]")


def test_cast_refuses_an_unknown_dtype():
    with pytest.raises(fc.AttributeSpecError, match="cast: attribute 'to' must be a dtype"):
        fc.trace(lambda v: ops.cast(v, to="f8"), "f32[2]")


# -- one_hot -------------------------------------------------------------------------------------------------
def test_one_hot_adds_a_class_axis():
    (y,) = run(fc.trace(lambda i: ops.one_hot(i, depth=4), "i32[2, 3]"), np.array([[0, 3, 1], [2, 2, 0]], np.int32))
    assert y.dtype == np.float32 and y.shape == (2, 3, 4)
    np.testing.assert_array_equal(y, np.eye(4, dtype=np.float32)[[[0, 3, 1], [2, 2, 0]]])


@pytest.mark.parametrize("bad", [4, -1])
def test_one_hot_refuses_an_index_out_of_range_at_run_time(bad):
    with pytest.raises(DataError, match=rf"index {bad} at position \[2\] is out of range: valid index values are "
                                        r"0..3 \(4 classes\)"):
        run(fc.trace(lambda i: ops.one_hot(i, depth=4, dtype="f64"), "i64[3]"), np.array([0, 1, bad]))


@pytest.mark.parametrize("type_, depth, message", [("f32[3]", 3, "indices must be integers, got f32[3]"),
                                                   ("i64[3]", 0, "depth (the number of classes) must be at least 1")])
def test_one_hot_build_time_errors(type_, depth, message):
    with pytest.raises(ShapeError) as info:
        fc.trace(lambda i: ops.one_hot(i, depth=depth), type_)
    assert message in str(info.value)
