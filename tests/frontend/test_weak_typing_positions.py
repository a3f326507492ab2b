"""Weak typing next to inputs that stand apart from the dtype rule, and comparisons with numbers (found in QA).

``ops.where(y > 0.0, 1.0, 0.0)`` is the mask of every piecewise gradient, yet in a float32 graph it was a float64
tensor (its condition is a real tensor, so the Python numbers were not treated as weak) and ``y * mask`` was
refused; ``where(c, 1.0, 0)`` was refused outright. With only weak data, an index next to them was made a float
(``gather(weak_table, 0)``). And ``x == 0`` on a traced tensor was Python's identity test: always ``False``, so
``ops.where(x == 0, a, b)`` silently always chose ``b``.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import IRError, TensorType, ops

FLOATS = ["f16", "bf16", "f32", "f64"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("one, zero", [(1.0, 0.0), (1.0, 0), (1, 0.0)])
def test_a_where_of_python_numbers_is_weak_and_follows_the_tensor_it_meets(dtype, one, zero):
    graph = fc.trace(lambda y: y * ops.where(y > 0.0, one, zero), f"{dtype}[4]")
    assert graph.outputs[0].type == TensorType.parse(f"{dtype}[4]")
    assert {v.type.dtype.short for n in graph.nodes for v in n.outputs} == {dtype, "bool"}  # no f64 leftovers
    y = np.array([-2.0, -0.5, 0.5, 2.0]).astype(graph.inputs[0].type.dtype.np)
    got = fc.compile(graph).run([y])[0].astype(np.float64)
    np.testing.assert_array_equal(got, np.maximum(y.astype(np.float64), 0))


def test_a_where_of_an_int_and_a_float_alone_is_a_float64_like_numpy():
    graph = fc.trace(lambda c: ops.where(c, 1, 2.5), "bool[3]")
    assert graph.outputs[0].type == TensorType.parse("f64[3]")
    got = fc.compile(graph).run([np.array([True, False, True])])[0]
    np.testing.assert_array_equal(got, np.where([True, False, True], 1, 2.5))


def test_the_condition_of_a_weak_where_is_reused_not_traced_again():
    graph = fc.trace(lambda y: y + ops.where(y > 0.5, 2.0, 1.0), "f32[3]")
    assert sum(n.op == "greater" for n in graph.nodes) == 1 and sum(n.op == "where" for n in graph.nodes) == 1


def test_a_condition_or_an_index_next_to_weak_data_keeps_its_own_dtype():
    """Every data input weak: the input apart from the dtype rule neither sets nor takes the data's dtype."""
    ints = fc.trace(lambda: ops.where(ops.greater(1.0, 0.5), 2, 1))  # numpy: np.where(1.0 > 0.5, 2, 1) is int64
    assert ints.outputs[0].type == TensorType.parse("i64[]")
    assert fc.compile(ints).run([])[0] == 2
    with pytest.raises(fc.ShapeError, match="table must have rank >= 1"):  # not: "indices must be integers, got f64"
        fc.trace(lambda: ops.gather(ops.add(1.0, 2.0), 0))


@pytest.mark.parametrize("other", [0, 0.5, True, np.float32(1.0), np.zeros(3, np.float32)])
@pytest.mark.parametrize("symbol", ["==", "!="])
def test_comparing_a_tensor_with_a_number_or_an_array_by_eq_is_refused(other, symbol):
    import operator

    compare = operator.eq if symbol == "==" else operator.ne

    def fn(x):
        with pytest.raises(IRError, match=f"ops.{'equal' if symbol == '==' else 'not_equal'}"):
            compare(x, other)
        with pytest.raises(IRError):
            compare(other, x)
        return x
    fc.trace(fn, "f32[3]")


def test_tensors_still_compare_by_identity_for_dicts_and_lists():
    def fn(x, y):
        assert x == x and x != y and not (x == y) and x in [y, x] and {x: 1, y: 2}[y] == 2
        assert (x == "x") is False and (x != None) is True  # noqa: E711 - the identity answer for other objects
        return x
    fc.trace(fn, "f32[3]", "f32[3]")


def test_a_matmul_of_vectors_names_the_operands_as_given():
    with pytest.raises(fc.ShapeError, match=r"share a dtype, got f32\[3\] and f64\[3\]"):
        fc.trace(lambda a, b: a @ b, "f32[3]", "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"inner dimensions differ: f32\[2, 3\] @ f32\[4\] \(3 vs 4\)"):
        fc.trace(lambda a, b: a @ b, "f32[2, 3]", "f32[4]")
