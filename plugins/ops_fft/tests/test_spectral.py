"""The library functions: spectral derivatives against analytic modes (ARCH-069), the 2-D Laplacian,
rfftn/irfftn against numpy, and the FNO spectral convolutions against a numpy reference and finite
differences. Every derived graph passes verify and runs the same at every opt level."""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops
from frame_ops_fft import irfftn, rfftn, spectral_conv1d, spectral_conv2d, spectral_derivative, wavenumbers


def at_every_level(graph, inputs):
    """Outputs of ``graph`` (verified) at opt levels 0, 1, 2, which must agree to round-off."""
    fc.verify(graph)
    runs = [fc.compile(graph, opt_level=level).run(inputs) for level in (0, 1, 2)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    return runs[0]


# -- spectral derivatives of analytic modes ------------------------------------------------------------
MODES = [1, 2, 5, 9]


def analytic(order: int, x: np.ndarray, j: float, amplitude: float, phase: float) -> np.ndarray:
    """d^order/dx^order of amplitude * sin(j x + phase)."""
    return amplitude * j ** order * np.sin(j * x + phase + order * math.pi / 2)


@pytest.mark.parametrize("n", [32, 33])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_spectral_derivatives_of_analytic_modes_are_exact_to_round_off(n, order):
    length = 2 * math.pi
    x = np.arange(n) * length / n
    rng = np.random.default_rng(order)
    amplitudes, phases = rng.uniform(0.5, 1.5, len(MODES)), rng.uniform(0, 2 * math.pi, len(MODES))
    u = sum(a * np.sin(j * x + p) for j, a, p in zip(MODES, amplitudes, phases))
    want = sum(analytic(order, x, j, a, p) for j, a, p in zip(MODES, amplitudes, phases))
    (got,) = at_every_level(fc.trace(lambda v: spectral_derivative(v, order), f"f64[{n}]"), [u])
    scale = max(MODES) ** order
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * scale * math.sqrt(n))


def test_spectral_derivative_honours_the_period_and_the_axis():
    length, n = 3.0, 24
    x = np.arange(n) * length / n
    j = 2 * math.pi / length * 3  # the third mode of a period of 3
    u = np.stack([np.cos(j * x), np.sin(2 * j * x)], axis=1)  # [n, 2], transformed along axis 0
    (first, second) = at_every_level(fc.trace(
        lambda v: [spectral_derivative(v, 1, length=length, axis=0), spectral_derivative(v, 2, length, 0)],
        f"f64[{n}, 2]"), [u])
    np.testing.assert_allclose(first, np.stack([-j * np.sin(j * x), 2 * j * np.cos(2 * j * x)], 1), atol=1e-12)
    np.testing.assert_allclose(second, -np.stack([j**2 * np.cos(j * x), 4 * j**2 * np.sin(2 * j * x)], 1), atol=1e-11)


def test_odd_derivatives_drop_the_nyquist_cosine_which_vanishes_on_the_grid():
    n = 16
    x = np.arange(n) * 2 * math.pi / n
    u = np.cos(n // 2 * x)  # its derivative -8 sin(8 x) is 0 at every grid point
    (d1, d2) = at_every_level(fc.trace(lambda v: [spectral_derivative(v, 1), spectral_derivative(v, 2)], f"f64[{n}]"),
                              [u])
    np.testing.assert_allclose(d1, 0.0, atol=1e-13)
    np.testing.assert_allclose(d2, -64.0 * u, atol=1e-12)


def test_spectral_derivative_in_float32_stays_float32_and_close():
    n = 64
    x = (np.arange(n) * 2 * math.pi / n).astype(np.float32)
    (d2,) = fc.compile(fc.trace(lambda v: spectral_derivative(v, 2), f"f32[{n}]")).run([np.sin(3 * x)])
    assert d2.dtype == np.float32
    # float32 rounding noise in u, spread over all bins, is amplified by up to k^2 = 32^2
    np.testing.assert_allclose(d2, -9 * np.sin(3 * x.astype(np.float64)), atol=1e-3)


def test_spectral_derivative_refuses_bad_arguments():
    with pytest.raises(ShapeError, match="non-negative int"):
        fc.trace(lambda v: spectral_derivative(v, -1), "f64[8]")
    with pytest.raises(ShapeError, match="out of range"):
        fc.trace(lambda v: spectral_derivative(v, 1, axis=1), "f64[8]")
    with pytest.raises(ShapeError, match="positive length"):
        wavenumbers(8, length=0.0)


def test_gradients_of_a_spectral_derivative_loss_match_finite_differences_to_second_order():
    n = 12
    rng = np.random.default_rng(0)
    u, w = rng.standard_normal(n), rng.standard_normal(n)
    forward = fc.trace(lambda v: ops.sum(ops.square(spectral_derivative(v, 1) + v * v) * w), f"f64[{n}]")
    first = fc.build_backward_graph(forward, 0, [0])
    d = rng.standard_normal(n)
    dotted, k = fc.extend_graph(first, lambda *v: ops.sum(v[-1] * d))
    _, g, _, hvp = at_every_level(fc.build_backward_graph(dotted, k, [0]), [u])
    loss, grad = fc.compile(forward), fc.compile(first)
    h = 1e-6
    e = rng.standard_normal(n)
    fd = (loss.run([u + h * e])[0] - loss.run([u - h * e])[0]) / (2 * h)
    np.testing.assert_allclose(np.dot(g, e), fd, rtol=1e-6)
    fd2 = (np.dot(grad.run([u + h * e])[1], d) - np.dot(grad.run([u - h * e])[1], d)) / (2 * h)
    np.testing.assert_allclose(np.dot(hvp, e), fd2, rtol=1e-6)


# -- two dimensions -----------------------------------------------------------------------------------
def test_2d_laplacian_through_rfftn_and_irfftn_equals_the_analytic_laplacian():
    h, w = 16, 15
    lx, ly = 2 * math.pi, 4.0
    x = np.arange(h)[:, None] * lx / h
    y = np.arange(w)[None, :] * ly / w
    a, b = 2 * math.pi / lx * 3, 2 * math.pi / ly * 2
    u = np.sin(a * x) * np.cos(b * y) + 0.5 * np.cos(2 * a * x + b * y)
    want = -(a**2 + b**2) * np.sin(a * x) * np.cos(b * y) - 0.5 * (4 * a**2 + b**2) * np.cos(2 * a * x + b * y)
    kx = 2 * math.pi / lx * np.fft.fftfreq(h, 1.0 / h)  # full fft along x: negative frequencies too
    ky = wavenumbers(w, ly)                              # half spectrum along y
    minus_k2 = (-(kx[:, None] ** 2 + ky[None, :] ** 2))[..., None]  # [h, w//2 + 1, 1]: broadcasts over (re, im)

    graph = fc.trace(lambda v: irfftn(rfftn(v, axes=(0, 1)) * minus_k2, s=(h, w), axes=(0, 1)), f"f64[{h}, {w}]")
    (lap,) = at_every_level(graph, [u])
    np.testing.assert_allclose(lap, want, rtol=0, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_rfftn_and_irfftn_equal_numpy(norm):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 6, 7))
    axes = (1, -1, 2)
    (z, back) = at_every_level(fc.trace(lambda v: [rfftn(v, axes=axes, norm=norm),
                                                   irfftn(rfftn(v, axes=axes, norm=norm), s=(5, 7, 6), axes=axes,
                                                          norm=norm)], "f64[2, 5, 6, 7]"), [x])
    want = np.fft.rfftn(x, axes=axes, norm=norm)
    np.testing.assert_allclose(z[..., 0] + 1j * z[..., 1], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)


def test_irfftn_refuses_sizes_that_do_not_match():
    with pytest.raises(ShapeError, match="s asks for 6"):
        fc.trace(lambda z: irfftn(z, s=(6, 8)), "f64[5, 5, 2]")
    with pytest.raises(ShapeError, match="one size per axis"):
        fc.trace(lambda z: irfftn(z, s=(8,)), "f64[5, 5, 2]")


# -- FNO spectral convolutions --------------------------------------------------------------------------
def reference_conv1d(x, w):
    modes = w.shape[0]
    spectrum = np.fft.rfft(x)
    out = np.zeros(x.shape[:1] + (w.shape[2], spectrum.shape[-1]), complex)
    out[..., :modes] = np.einsum("bim,mio->bom", spectrum[..., :modes], w[..., 0] + 1j * w[..., 1])
    return np.fft.irfft(out, n=x.shape[-1])


def reference_conv2d(x, w_low, w_high):
    mh, mw = w_low.shape[:2]
    spectrum = np.fft.rfft2(x)
    out = np.zeros(x.shape[:1] + (w_low.shape[3],) + spectrum.shape[2:], complex)
    mix = "bixy,xyio->boxy"
    out[:, :, :mh, :mw] = np.einsum(mix, spectrum[:, :, :mh, :mw], w_low[..., 0] + 1j * w_low[..., 1])
    out[:, :, -mh:, :mw] = np.einsum(mix, spectrum[:, :, -mh:, :mw], w_high[..., 0] + 1j * w_high[..., 1])
    return np.fft.irfft2(out, s=x.shape[2:])


def test_spectral_conv1d_equals_the_reference_layer_and_its_gradients_are_right():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((3, 4, 17)), rng.standard_normal((6, 4, 5, 2))
    target = rng.standard_normal((3, 5, 17))
    forward = fc.trace(lambda a, b: [ops.mean(ops.square(ops.tanh(spectral_conv1d(a, b)) - target)),
                                     spectral_conv1d(a, b)], "f64[3, 4, 17]", "f64[6, 4, 5, 2]")
    training = fc.build_backward_graph(forward, 0, [0, 1])
    loss, y, gx, gw = at_every_level(training, [x, w])
    np.testing.assert_allclose(y, reference_conv1d(x, w), rtol=1e-12, atol=1e-12)
    exe, h = fc.compile(forward), 1e-6
    for _ in range(2):
        dx, dw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
        fd = (exe.run([x + h * dx, w + h * dw])[0] - exe.run([x - h * dx, w - h * dw])[0]) / (2 * h)
        np.testing.assert_allclose(np.sum(gx * dx) + np.sum(gw * dw), fd, rtol=1e-6)
    assert np.all(gw[:, :, :, 1][0] == 0.0)  # Im of the DC weight never reaches the real output


def test_spectral_conv2d_equals_the_reference_layer_and_its_gradients_are_right():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 10, 9))
    w_low, w_high = rng.standard_normal((3, 4, 3, 2, 2)), rng.standard_normal((3, 4, 3, 2, 2))
    types = ["f64[2, 3, 10, 9]", "f64[3, 4, 3, 2, 2]", "f64[3, 4, 3, 2, 2]"]
    forward = fc.trace(lambda a, b, c: [ops.sum(ops.sin(spectral_conv2d(a, b, c))), spectral_conv2d(a, b, c)], *types)
    training = fc.build_backward_graph(forward, 0, [0, 1, 2])
    loss, y, *grads = at_every_level(training, [x, w_low, w_high])
    np.testing.assert_allclose(y, reference_conv2d(x, w_low, w_high), rtol=1e-12, atol=1e-12)
    exe, h = fc.compile(forward), 1e-6
    inputs = [x, w_low, w_high]
    ds = [rng.standard_normal(a.shape) for a in inputs]
    plus = exe.run([a + h * d for a, d in zip(inputs, ds)])[0]
    minus = exe.run([a - h * d for a, d in zip(inputs, ds)])[0]
    np.testing.assert_allclose(sum(np.sum(g * d) for g, d in zip(grads, ds)), (plus - minus) / (2 * h), rtol=1e-6)


def test_spectral_convolutions_refuse_mismatched_weights():
    with pytest.raises(ShapeError, match="weights must be packed complex"):
        fc.trace(lambda a, b: spectral_conv1d(a, b), "f64[2, 4, 16]", "f64[5, 3, 4, 2]")
    with pytest.raises(ShapeError, match="only 9 bins"):
        fc.trace(lambda a, b: spectral_conv1d(a, b), "f64[2, 4, 16]", "f64[10, 4, 4, 2]")
    with pytest.raises(ShapeError, match="2 \\* modes_h <= H"):
        fc.trace(lambda a, b, c: spectral_conv2d(a, b, c), "f64[1, 2, 6, 8]", "f64[4, 2, 2, 2, 2]",
                 "f64[4, 2, 2, 2, 2]")
