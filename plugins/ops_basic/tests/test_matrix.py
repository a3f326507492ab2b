"""inv and det: values against numpy, gradients and Hessian-vector products against PyTorch autograd (with the
``compare`` extra), forward mode against the reverse-mode Jacobian, a batch of matrices, half precision, and
the named errors (singular matrices, non-square or integer inputs). Central differences to order 2 run in the
conformance kit on the ops' well-conditioned examples."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

RNG = np.random.default_rng(5)


def _matrices(*shape):
    return RNG.uniform(-1, 1, shape) + 1.5 * np.eye(shape[-1])


def _run(fn, x):
    return fc.compile(fc.trace(fn, f"f64[{', '.join(map(str, x.shape))}]")).run([x])[0]


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 5, 5), (1, 1)])
def test_values_match_numpy(shape):
    x = _matrices(*shape)
    np.testing.assert_allclose(_run(ops.inv, x), np.linalg.inv(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(_run(ops.det, x), np.linalg.det(x), rtol=1e-13)
    assert _run(ops.det, x).shape == shape[:-2]


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_gradient_and_second_order_match_torch(shape):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    x = _matrices(*shape)
    w = RNG.uniform(-1, 1, shape)
    direction = RNG.uniform(-1, 1, shape)

    def loss(v):
        return ops.sum(ops.inv(v) * w) + ops.sum(ops.det(v) * ops.det(v))
    first = fc.build_backward_graph(fc.trace(loss, f"f64{list(shape)}"), 0, [0])
    with_dot, k = fc.extend_graph(first, lambda v, value, g: ops.sum(g * direction))
    outs = fc.compile(fc.build_backward_graph(with_dot, k, [0])).run([x])

    t = torch.tensor(x, requires_grad=True)
    tloss = (torch.linalg.inv(t) * torch.from_numpy(w)).sum() + (torch.linalg.det(t) ** 2).sum()
    (tg,) = torch.autograd.grad(tloss, t, create_graph=True)
    (th,) = torch.autograd.grad((tg * torch.from_numpy(direction)).sum(), t)
    np.testing.assert_allclose(outs[0], tloss.item(), rtol=1e-13)
    np.testing.assert_allclose(outs[1], tg.detach().numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(outs[-1], th.numpy(), rtol=1e-10, atol=1e-11)


def test_forward_mode_equals_the_reverse_mode_jacobian():
    x, dx = _matrices(3, 3), RNG.standard_normal((3, 3))
    for fn in (ops.inv, ops.det):
        g = fc.trace(fn, "f64[3, 3]")
        _, tangent = fc.compile(fc.build_jvp_graph(g, [0])).run([x, dx])
        jac = fc.compile(fc.jacrev(g, 0)).run([x])[-1]
        np.testing.assert_allclose(tangent, np.tensordot(jac, dx, axes=2), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
def test_lower_precisions_compute_wide_and_keep_their_dtype(name):
    x = _matrices(3, 3)
    graph = fc.trace(lambda v: ops.sum(ops.inv(v)) + ops.det(v), f"{name}[3, 3]")
    dtype = fc.as_type(f"{name}[1]").dtype.np
    y = fc.compile(graph).run([x.astype(dtype)])[0]
    assert y.dtype == dtype
    want = np.linalg.inv(x.astype(dtype).astype(np.float64)).sum() + np.linalg.det(x.astype(dtype).astype(np.float64))
    np.testing.assert_allclose(float(y), want, rtol={"f32": 1e-5, "f16": 4e-3, "bf16": 3e-2}[name])


def test_a_singular_matrix_is_a_data_error_naming_it():
    x = np.stack([_matrices(3, 3), np.ones((3, 3))])
    with pytest.raises(fc.DataError, match=r"inv: a singular matrix has no inverse \(matrix \[1\] of the batch\)"):
        _run(ops.inv, x)
    assert _run(ops.det, x)[1] == 0.0  # the value exists
    grad = fc.compile(fc.build_backward_graph(fc.trace(lambda v: ops.sum(ops.det(v)), "f64[2, 3, 3]"), 0, [0]))
    with pytest.raises(fc.DataError, match="singular matrix"):
        grad.run([x])


def test_bad_shapes_and_dtypes_are_named_errors():
    with pytest.raises(fc.ShapeError, match=r"inv: needs square matrices \[..., n, n\], got f32\[3, 4\]"):
        fc.trace(ops.inv, "f32[3, 4]")
    with pytest.raises(fc.ShapeError, match="det: needs square matrices"):
        fc.trace(ops.det, "f32[4]")
    with pytest.raises(fc.ShapeError, match="det: needs a floating input, got i32"):
        fc.trace(ops.det, "i32[2, 2]")
