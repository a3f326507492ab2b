"""``outer_products_as_products``: a matmul with a contraction length of 1 becomes ``a * b + 0.0``, bit for bit.

numpy's matmul (BLAS, or its own loop for small or strided operands) sums the single product into a zero: the
result is the rounded product, with ``-0.0`` turned into ``+0.0``. The rewrite must give exactly those bits,
NaN, infinities and signed zeros included, in float32 and float64, and under broadcast batch axes.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1.0, -1.0]


def operands(a_shape, b_shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(a_shape) * rng.choice([1e-30, 1.0, 1e30], a_shape)).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    a.flat[: min(a.size, len(SPECIAL))] = SPECIAL[: a.size]
    b.flat[: min(b.size, len(SPECIAL))] = SPECIAL[::-1][: b.size]
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape", [((256, 1), (1, 64)), ((1, 1), (1, 64)), ((7, 1), (1, 1)),
                                              ((3, 5, 1), (1, 4)), ((2, 1, 6, 1), (3, 1, 5))])
def test_the_rewritten_product_is_numpys_matmul_bit_for_bit(a_shape, b_shape, dtype):
    t = "f32" if dtype == np.float32 else "f64"
    graph = fc.trace(lambda a, b: a @ b, f"{t}{list(a_shape)}", f"{t}{list(b_shape)}")
    exe = fc.compile(graph, cache=False)
    assert "matmul" not in [i.op for i in exe.instructions]
    assert ("outer_products_as_products", "rewrote 1 matmuls") in exe.log
    for seed in range(3):
        a, b = operands(a_shape, b_shape, dtype, seed)
        with np.errstate(all="ignore"):
            want = np.matmul(a, b)
            got = exe.run([a, b])[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # -0.0 vs +0.0 and NaN bits too


def test_a_negative_zero_product_becomes_positive_zero_as_in_matmul():
    exe = fc.compile(fc.trace(lambda a, b: a @ b, "f32[2, 1]", "f32[1, 2]"), cache=False)
    got = exe.run([np.array([[-1.0], [1.0]], np.float32), np.array([[0.0, -0.0]], np.float32)])[0]
    assert not np.signbit(got).any()


def test_a_product_with_a_row_of_ones_is_the_other_operand_plus_zero():
    # forward mode's seed: ones[1, 1] @ w; simplify_algebra then drops the product with ones
    graph = fc.Graph("seed")
    w = graph.add_input("f32[1, 8]")
    graph.mark_output(graph.apply("matmul", graph.constant(np.ones((1, 1), np.float32)), w))
    exe = fc.compile(graph, cache=False)
    assert [i.op for i in exe.instructions] == ["add"]
    w_ = np.array([[-0.0, 0.0, 1.5, -2.0, np.inf, np.nan, 1e-45, -3.0]], np.float32)
    np.testing.assert_array_equal(exe.run([w_])[0].view(np.uint32), np.matmul(np.ones((1, 1), np.float32), w_).view(np.uint32))


@pytest.mark.parametrize("types", [("f32[4, 2]", "f32[2, 3]"), ("f32[4]", "f32[4, 3]"), ("f16[4, 1]", "f16[1, 3]"),
                                   ("i32[4, 1]", "i32[1, 3]")])
def test_other_products_are_left_alone(types):
    exe = fc.compile(fc.trace(lambda a, b: a @ b, *types), cache=False)
    assert [i.op for i in exe.instructions] == ["matmul"]


def test_the_rewrite_is_the_pass_that_runs_at_opt_level_1_and_can_be_disabled():
    graph = fc.trace(lambda a, b: ops.tanh(a @ b), "f32[8, 1]", "f32[1, 4]")
    assert "matmul" in [i.op for i in fc.compile(graph, disable=["outer_products_as_products"], cache=False).instructions]
    assert "matmul" not in [i.op for i in fc.compile(graph, opt_level=1, cache=False).instructions]
    assert "matmul" in [i.op for i in fc.compile(graph, opt_level=0, cache=False).instructions]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n", [(1, 64), (5, 3)])
def test_the_gradient_of_an_outer_product_for_its_right_operand_is_rewritten_too(m, n, dtype):
    t = "f32" if dtype == np.float32 else "f64"
    graph = fc.Graph("grad_rhs")
    a, gy = graph.add_input(f"{t}[1, {m}]"), graph.add_input(f"{t}[1, {n}]")
    graph.mark_output(graph.apply("matmul_grad_rhs_internal", a, gy, shape=[m, n]))
    exe = fc.compile(graph, cache=False)
    assert "matmul_grad_rhs_internal" not in [i.op for i in exe.instructions]
    for seed in range(3):
        a_, g_ = operands((1, m), (1, n), dtype, seed)
        with np.errstate(all="ignore"):
            want = np.matmul(a_.T, g_)
            got = exe.run([a_, g_])[0]
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n", [(256, 64), (5, 1), (1, 3)])
def test_the_gradient_of_a_product_with_one_column_for_its_left_operand_is_rewritten_too(m, n, dtype):
    """``gy[m, 1] @ b[n, 1]^T``: the left gradient of ``x[m, n] @ b[n, 1]`` (a last layer to one output)."""
    t = "f32" if dtype == np.float32 else "f64"
    graph = fc.Graph("grad_lhs")
    gy, b = graph.add_input(f"{t}[{m}, 1]"), graph.add_input(f"{t}[{n}, 1]")
    graph.mark_output(graph.apply("matmul_grad_lhs_internal", gy, b, shape=[m, n]))
    exe = fc.compile(graph, cache=False)
    assert "matmul_grad_lhs_internal" not in [i.op for i in exe.instructions]
    for seed in range(3):
        g_, b_ = operands((m, 1), (n, 1), dtype, seed)
        with np.errstate(all="ignore"):
            want = np.matmul(g_, b_.T)
            got = exe.run([g_, b_])[0]
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
