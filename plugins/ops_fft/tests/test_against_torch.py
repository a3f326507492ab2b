"""Every op of the pack against torch.fft / torch complex autograd: values, gradients, and second-order
(Hessian-vector) products, for every norm, odd and even n, and more than one axis.

torch's complex gradient seen through ``view_as_real`` is the packed gradient (dL/dRe, dL/dIm), with no
conjugation. PyTorch is the optional ``frame-core[compare]`` extra; without it this module skips.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")

C = torch.view_as_complex
R = torch.view_as_real


def cases():
    """name -> (input shapes, frame fn, torch fn); packed inputs are torch real tensors [..., 2]."""
    out = {}
    for norm in ("backward", "ortho", "forward"):
        for n in (7, 8):
            for axis in (-1, 0):
                real = (n, 3) if axis == 0 else (3, n)
                half = (n // 2 + 1, 3, 2) if axis == 0 else (3, n // 2 + 1, 2)
                full = (n, 3, 2) if axis == 0 else (3, n, 2)
                tag = f"{norm}-n{n}-axis{axis}"
                out[f"rfft-{tag}"] = ([real], lambda x, a=axis, m=norm: ops.rfft(x, axis=a, norm=m),
                                      lambda x, a=axis, m=norm: R(torch.fft.rfft(x, dim=a, norm=m)))
                out[f"irfft-{tag}"] = ([half], lambda z, a=axis, m=norm, k=n: ops.irfft(z, n=k, axis=a, norm=m),
                                       lambda z, a=axis, m=norm, k=n: torch.fft.irfft(C(z), n=k, dim=a, norm=m))
                out[f"fft-{tag}"] = ([full], lambda z, a=axis, m=norm: ops.fft(z, axis=a, norm=m),
                                     lambda z, a=axis, m=norm: R(torch.fft.fft(C(z), dim=a, norm=m)))
                out[f"ifft-{tag}"] = ([full], lambda z, a=axis, m=norm: ops.ifft(z, axis=a, norm=m),
                                      lambda z, a=axis, m=norm: R(torch.fft.ifft(C(z), dim=a, norm=m)))
    out["complex_mul"] = ([(2, 3, 4, 2), (4, 2)], ops.complex_mul, lambda a, b: R(C(a) * C(b)))
    out["complex_mul-real multiplier"] = ([(2, 5, 2), (5, 1)], ops.complex_mul, lambda a, r: R(C(a) * r[..., 0]))
    out["complex_mul-real first"] = ([(3, 1, 1), (3, 4, 2)], ops.complex_mul, lambda r, b: R(r[..., 0] * C(b)))
    out["complex_mul-both real"] = ([(2, 3, 1), (3, 1)], ops.complex_mul, lambda a, b: a * b)
    out["conj"] = ([(3, 4, 2)], ops.conj, lambda z: R(torch.conj(C(z)).resolve_conj()))
    out["complex_matmul"] = ([(2, 3, 4, 2), (4, 5, 2)], ops.complex_matmul, lambda a, b: R(C(a) @ C(b)))
    out["complex_matmul-batched"] = ([(5, 1, 2, 3, 2), (4, 3, 2, 2)], ops.complex_matmul,
                                     lambda a, b: R(C(a) @ C(b)))
    out["round trip"] = ([(4, 9)], lambda x: ops.irfft(ops.complex_mul(ops.rfft(x, norm="ortho"), ops.conj(
        ops.rfft(x, norm="forward"))), n=9), lambda x: torch.fft.irfft(
        torch.fft.rfft(x, norm="ortho") * torch.conj(torch.fft.rfft(x, norm="forward")), n=9))
    return out


CASES = cases()


@pytest.mark.parametrize("name", CASES)
def test_values_gradients_and_hessian_vector_products_match_torch(name):
    shapes, frame_fn, torch_fn = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xs = [rng.standard_normal(s) for s in shapes]
    directions = [rng.standard_normal(s) for s in shapes]
    out_shape = tuple(torch_fn(*[torch.from_numpy(x) for x in xs]).shape)
    w = rng.standard_normal(out_shape)
    types = [f"f64{list(s)}" for s in shapes]
    k = len(shapes)

    # L = sum(w * y^2 + sin(y)): nonlinear, so second order runs through the gradients of the gradients
    forward = fc.trace(lambda *x: [ops.sum(ops.square(frame_fn(*x)) * w + ops.sin(frame_fn(*x))), frame_fn(*x)],
                       *types)
    first = fc.build_backward_graph(forward, 0, list(range(k)))
    dotted, j = fc.extend_graph(first, lambda *v: sum_of([ops.sum(g * d) for g, d in zip(v[-k:], directions)]))
    second = fc.build_backward_graph(dotted, j, list(range(k)))
    fc.verify(second)
    runs = [fc.compile(second, opt_level=level).run(xs) for level in (0, 1, 2)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    loss, y, *rest = runs[0]
    grads, hvps = rest[:k], rest[-k:]

    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    t_y = torch_fn(*ts)
    t_loss = (t_y ** 2 * torch.from_numpy(w) + torch.sin(t_y)).sum()
    t_grads = torch.autograd.grad(t_loss, ts, create_graph=True)
    t_hvps = torch.autograd.grad(sum((g * torch.from_numpy(d)).sum() for g, d in zip(t_grads, directions)), ts)
    np.testing.assert_allclose(y, t_y.detach().numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(loss, t_loss.item(), rtol=1e-11)
    for got, want in zip([*grads, *hvps], [*t_grads, *t_hvps]):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-10)


def sum_of(terms):
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


@pytest.mark.parametrize("n", [6, 7])
def test_the_gradient_of_im_dc_and_im_nyquist_is_exactly_zero(n):
    m = n // 2 + 1
    rng = np.random.default_rng(n)
    z, w = rng.standard_normal((4, m, 2)), rng.standard_normal((4, n))
    forward = fc.trace(lambda s: ops.sum(ops.square(ops.irfft(s, n=n)) * w), f"f64[4, {m}, 2]")
    training = fc.build_backward_graph(forward, 0, [0])
    contracted, k = fc.extend_graph(training, lambda *v: ops.sum(ops.sin(v[-1])))
    second = fc.build_backward_graph(contracted, k, [0])
    _, g, _, gg = fc.compile(second).run([z])
    edges = [0, m - 1] if n % 2 == 0 else [0]
    assert np.all(g[:, edges, 1] == 0.0) and np.all(gg[:, edges, 1] == 0.0)  # exactly, not approximately
    assert np.all(g[:, 1:m - (n % 2 == 0), :] != 0.0)

    tz = torch.tensor(z, requires_grad=True)
    (t_g,) = torch.autograd.grad((torch.fft.irfft(C(tz), n=n) ** 2 * torch.from_numpy(w)).sum(), tz)
    np.testing.assert_allclose(g, t_g.numpy(), rtol=1e-12, atol=1e-12)
