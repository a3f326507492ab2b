"""The cheaper small-tensor kernels give numpy's results bit for bit, and matmul takes vectors as numpy does.

* a matmul whose contraction length is 1 runs as a broadcast multiply plus +0.0 (numpy's matmul sums the
  single product into a zero: -0.0 comes out +0.0), forward and in both gradient ops;
* ``mean`` is ``add.reduce`` then a division by the count as ``np.mean`` divides; ``sum`` and
  ``reduce_to_shape_internal`` reduce straight into the output;
* relu is ``maximum`` with a 0-d zero, called directly by fused code.

Bitwise: arrays are compared as unsigned integers of their width, so -0.0 differs from +0.0 and NaNs must
carry the same bits.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import check_gradients


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def assert_bitwise(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(bits(got), bits(want))


def awkward(shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> np.ndarray:
    """Random values with signed zeros, infinities and a NaN sprinkled in."""
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -0.0], dtype)
    flat[: min(flat.size, 6)] = specials[: min(flat.size, 6)]
    rng.shuffle(flat)
    return a


def kernel(op: str, types: list[str], **attrs):
    schema = fc.registry().get(op)
    ctx = schema.context([fc.TensorType.parse(t) for t in types], attrs)
    return schema.kernels["cpu"](ctx)


OUTER = [((256, 1), (1, 64)), ((3, 1), (1, 5)), ((2, 3, 1), (1, 4)), ((3, 1), (2, 1, 5)), ((1,), (1, 5)),
         ((3, 1), (1,)), ((1,), (1,)), ((2, 4, 1), (2, 1, 3))]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape", OUTER, ids=[f"{a}@{b}" for a, b in OUTER])
def test_matmul_with_contraction_one_is_bitwise_numpys_matmul(a_shape, b_shape, dtype):
    rng = np.random.default_rng(0)
    a, b = awkward(a_shape, dtype, rng), awkward(b_shape, dtype, rng)
    want = np.asarray(np.matmul(a, b))
    short = "f32" if dtype is np.float32 else "f64"
    types = [f"{short}[{', '.join(map(str, a_shape))}]", f"{short}[{', '.join(map(str, b_shape))}]"]
    exe = fc.compile(fc.trace(lambda x, y: x @ y, *types), cache=False)
    assert_bitwise(exe.run([a, b])[0], want)
    k = kernel("matmul", types)
    assert_bitwise(k(a, b), want)
    out = np.full(want.shape, 7, dtype)
    assert k(a, b, out) is out
    assert_bitwise(out, want)


def general_grad(x: np.ndarray, y: np.ndarray, shape: tuple[int, ...], lhs: bool) -> np.ndarray:
    """The gradient ops as plain numpy matmuls: lhs gy @ b^T, rhs a^T @ gy, summed down to ``shape``; a stack
    against a matrix as one 2-D product of the stacked rows (linalg's module doc)."""
    if lhs and x.ndim >= 3 and y.ndim == 2 and shape == x.shape[:-1] + y.shape[:1]:
        return np.matmul(x.reshape(-1, x.shape[-1]), y.T).reshape(shape)
    if not lhs and x.ndim >= 3 and x.shape[:-2] == y.shape[:-2] and len(shape) == 2:
        return np.matmul(x.reshape(-1, x.shape[-1]).T, y.reshape(-1, y.shape[-1]))
    product = np.matmul(x, np.swapaxes(y, -1, -2)) if lhs else np.matmul(np.swapaxes(x, -1, -2), y)
    lead = product.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and product.shape[lead + i] != 1)
    return np.sum(product, axis=axes, keepdims=True).reshape(shape) if axes else product


# (gy, b, a's shape) for lhs; contraction length 1 = gy's last axis (then two general products)
LHS = [((256, 1), (64, 1), (256, 64)), ((2, 3, 1), (4, 1), (2, 3, 4)), ((2, 3, 1), (4, 1), (3, 4)),
       ((2, 3, 1), (2, 4, 1), (1, 3, 4)), ((256, 64), (64, 64), (256, 64)), ((2, 3, 5), (4, 5), (3, 4))]
# (a, gy, b's shape) for rhs; contraction length 1 = a's rows (then two general products)
RHS = [((1, 64), (1, 5), (64, 5)), ((2, 1, 4), (2, 1, 5), (4, 5)), ((2, 1, 4), (2, 1, 5), (2, 4, 5)),
       ((256, 64), (256, 64), (64, 64)), ((2, 3, 4), (2, 3, 5), (4, 5))]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("side, x_shape, y_shape, shape", [("lhs", *c) for c in LHS] + [("rhs", *c) for c in RHS])
def test_matmul_gradient_kernels_are_bitwise_the_plain_numpy_products(side, x_shape, y_shape, shape, dtype):
    rng = np.random.default_rng(1)
    x, y = awkward(x_shape, dtype, rng), awkward(y_shape, dtype, rng)
    short = "f32" if dtype is np.float32 else "f64"
    types = [f"{short}[{', '.join(map(str, s))}]" for s in (x_shape, y_shape)]
    k = kernel(f"matmul_grad_{side}_internal", types, shape=list(shape))
    want = general_grad(x, y, shape, side == "lhs")
    assert_bitwise(k(x, y), want)
    out = np.empty(shape, dtype)
    assert k(x, y, out) is out
    assert_bitwise(out, want)


VECTOR_CASES = [("f64[4]", "f64[4, 3]"), ("f64[2, 3, 4]", "f64[4]"), ("f64[4]", "f64[4]"), ("f64[4]", "f64[2, 4, 3]"),
                ("f64[3, 4]", "f64[4]"), ("f64[1]", "f64[1, 3]"), ("f64[3, 1]", "f64[1]")]


@pytest.mark.parametrize("a_type, b_type", VECTOR_CASES)
def test_matmul_with_vectors_has_numpys_shape_and_values(a_type, b_type):
    rng = np.random.default_rng(2)
    at, bt = fc.TensorType.parse(a_type), fc.TensorType.parse(b_type)
    a, b = rng.standard_normal(at.shape), rng.standard_normal(bt.shape)
    graph = fc.trace(lambda x, y: x @ y, a_type, b_type)
    want = np.asarray(np.matmul(a, b))
    assert graph.outputs[0].type.shape == want.shape
    got = fc.compile(graph, cache=False).run([a, b])[0]
    assert isinstance(got, np.ndarray) and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("a_type, b_type", VECTOR_CASES)
def test_matmul_with_vectors_has_gradients_to_second_order(a_type, b_type):
    rng = np.random.default_rng(3)
    at, bt = fc.TensorType.parse(a_type), fc.TensorType.parse(b_type)
    graph = fc.trace(lambda x, y: ops.sum(ops.tanh(x @ y)), a_type, b_type)
    check_gradients(graph, [rng.standard_normal(at.shape), rng.standard_normal(bt.shape)], order=2).assert_ok()


def test_matmul_with_vectors_matches_torch_gradients():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    for a_type, b_type in VECTOR_CASES:
        at, bt = fc.TensorType.parse(a_type), fc.TensorType.parse(b_type)
        a, b = rng.standard_normal(at.shape), rng.standard_normal(bt.shape)
        graph = fc.build_backward_graph(fc.trace(lambda x, y: ops.sum(ops.sin(x @ y)), a_type, b_type), 0, [0, 1])
        _, ga, gb = fc.compile(graph, cache=False).run([a, b])
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        torch.sin(ta @ tb).sum().backward()
        np.testing.assert_allclose(ga, ta.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_matmul_of_a_scalar_operand_is_refused_with_advice():
    with pytest.raises(fc.ShapeError, match="rank >= 1.*use mul"):
        fc.trace(lambda x, y: x @ y, "f32[]", "f32[3]")


REDUCTIONS = [("f32[256, 64]", None, False), ("f32[256, 64]", [0], False), ("f32[256, 64]", [1], True),
              ("f64[3, 1000, 7]", [0, 2], False), ("f32[2, 1]", None, True), ("f32[100003]", None, False),
              ("f16[64, 33]", [0], False), ("f16[4096]", None, False)]


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("type_, axes, keepdims", REDUCTIONS)
def test_sum_and_mean_are_bitwise_numpys(op, type_, axes, keepdims):
    t = fc.TensorType.parse(type_)
    x = np.random.default_rng(5).standard_normal(t.shape).astype(t.dtype.np) * 3
    k = kernel(op, [type_], axes=axes, keepdims=keepdims)
    axis = None if axes is None else tuple(axes)
    if t.dtype.itemsize == 2:  # half precision accumulates in float32, rounded once
        want = getattr(np, op)(x, axis=axis, dtype=np.float32, keepdims=keepdims).astype(t.dtype.np)
    else:
        want = np.asarray(getattr(np, op)(x, axis=axis, dtype=t.dtype.np, keepdims=keepdims))
    got = k(x)
    assert isinstance(got, np.ndarray)
    assert_bitwise(got, want)
    out = np.empty(want.shape, t.dtype.np)
    assert k(x, out) is out
    assert_bitwise(out, want)


@pytest.mark.parametrize("type_, shape", [("f32[256, 64]", [64]), ("f32[256, 64]", [256, 1]), ("f64[4, 3, 5]", [1, 5]),
                                           ("f32[7, 9]", [])])
def test_reduce_to_shape_is_bitwise_np_sum(type_, shape):
    t = fc.TensorType.parse(type_)
    x = np.random.default_rng(6).standard_normal(t.shape).astype(t.dtype.np)
    lead = t.rank - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and t.shape[lead + i] != 1)
    want = np.sum(x, axis=axes, dtype=t.dtype.np, keepdims=True).reshape(shape)
    assert_bitwise(kernel("reduce_to_shape_internal", [type_], shape=shape)(x), want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 in the chain
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_and_its_gradient_are_bitwise_numpy_in_and_out_of_fused_code(dtype, monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE", "0")  # frame's own fused code, even where frame-native is installed
    rng = np.random.default_rng(7)
    x = awkward((5, 8), dtype, rng)
    y = awkward((5, 8), dtype, rng)
    short = "f32" if dtype is np.float32 else "f64"
    zero = dtype(0)
    graph = fc.trace(lambda a, b: [ops.relu(ops.relu(a) * b), ops.relu(b)], f"{short}[5, 8]", f"{short}[5, 8]")
    fused = fc.compile(graph, cache=False)
    assert [i.op for i in fused.instructions].count("fused_elementwise_internal") == 1
    with np.errstate(invalid="ignore"):
        first = np.maximum(np.maximum(x, zero) * y, zero)
        second = np.maximum(y, zero)
    for exe in (fused, fc.compile(graph, opt_level=0, cache=False)):
        got = exe.run([x, y])
        assert_bitwise(got[0], first)
        assert_bitwise(got[1], second)
    grad = kernel("relu_grad_internal", [f"{short}[5, 8]", f"{short}[5, 8]"])
    with np.errstate(invalid="ignore"):
        assert_bitwise(grad(x, y), y * (x > 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(256, 1), (3,), (7, 3), ()])
def test_mse_loss_grad_multiplies_by_the_scale_in_gys_dtype_as_the_weak_scalar_product_does(shape, dtype):
    """``(pred - target) * (gy * (2 / N))``, the scale multiplied into gy in gy's dtype (NEP 50): 2/3 and 2/21
    are not exact in either dtype, so a scale rounded differently would show."""
    t = f"{'f32' if dtype == np.float32 else 'f64'}{list(shape)}"
    g = fc.Graph("mse_grad")
    p, q, gy = g.add_input(t), g.add_input(t), g.add_input(t.split("[")[0] + "[]")
    g.mark_output(g.apply("mse_loss_grad_internal", p, q, gy))
    exe = fc.compile(g, cache=False)
    rng = np.random.default_rng(7)
    n = max(int(np.prod(shape)), 1)
    for seed_gy in (1.0, 0.37, -3e-39 if dtype == np.float32 else 1e-310, np.inf):
        a, b = awkward(shape, dtype, rng), rng.standard_normal(shape).astype(dtype)
        gy_ = np.asarray(seed_gy, dtype)
        with np.errstate(all="ignore"):
            want = (a - b) * (gy_ * (2.0 / n)).astype(dtype)
            assert_bitwise(exe.run([a, b, gy_])[0], want)
