"""The transforms and complex ops against numpy.fft, the dtype scipy actually computes in, the workers
setting, and the named errors for bad input."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.fft

import frame_core as fc
from frame_core import ShapeError, ops
from frame_ops_fft import config

NORMS = ["backward", "ortho", "forward"]


def pack(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1)


def unpack(p: np.ndarray) -> np.ndarray:
    return p[..., 0] + 1j * p[..., 1]


def run(fn, *arrays, opt_level=2):
    types = [fc.TensorType(a.dtype, a.shape) for a in arrays]
    return fc.compile(fc.trace(fn, *types), opt_level=opt_level).run(list(arrays))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [1, 2, 7, 8])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_rfft_and_irfft_equal_numpy_for_every_norm_axis_and_parity(norm, n, axis):
    rng = np.random.default_rng(n)
    shape = [3, 4]
    shape[axis] = n
    x = rng.standard_normal(shape)
    (z,) = run(lambda a: ops.rfft(a, axis=axis, norm=norm), x)
    np.testing.assert_allclose(unpack(z), np.fft.rfft(x, axis=axis, norm=norm), rtol=1e-13, atol=1e-13)
    spectrum = pack(np.fft.rfft(x, axis=axis))
    spectrum[..., 1] += rng.standard_normal(spectrum.shape[:-1])  # also non-Hermitian junk at DC/Nyquist
    (y,) = run(lambda s: ops.irfft(s, n=n, axis=axis, norm=norm), spectrum)
    np.testing.assert_allclose(y, np.fft.irfft(unpack(spectrum), n=n, axis=axis, norm=norm), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [5, 8])
def test_fft_and_ifft_equal_numpy(norm, n):
    rng = np.random.default_rng(n)
    z = rng.standard_normal((3, n, 2))
    for axis in (0, 1, -1):
        (f, i) = run(lambda a: [ops.fft(a, axis=axis, norm=norm), ops.ifft(a, axis=axis, norm=norm)], z)
        np.testing.assert_allclose(unpack(f), np.fft.fft(unpack(z), axis=axis, norm=norm), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(unpack(i), np.fft.ifft(unpack(z), axis=axis, norm=norm), rtol=1e-12, atol=1e-13)


def test_irfft_ignores_the_imaginary_parts_of_dc_and_nyquist():
    rng = np.random.default_rng(0)
    for n in (6, 7):
        z = rng.standard_normal((2, n // 2 + 1, 2))
        junk = z.copy()
        junk[:, 0, 1] = 5.0
        if n % 2 == 0:
            junk[:, -1, 1] = -3.0
        exe = fc.compile(fc.trace(lambda s: ops.irfft(s, n=n), f"f64[2, {n // 2 + 1}, 2]"))
        np.testing.assert_array_equal(exe.run([z])[0], exe.run([junk])[0])


def test_complex_ops_equal_numpy_complex_arithmetic():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4, 2)), rng.standard_normal((4, 2))
    m1, m2 = rng.standard_normal((5, 2, 3, 2)), rng.standard_normal((3, 4, 2))
    prod, con, mat = run(lambda p, q, r, s: [ops.complex_mul(p, q), ops.conj(p), ops.complex_matmul(r, s)], a, b, m1, m2)
    np.testing.assert_allclose(unpack(prod), unpack(a) * unpack(b), rtol=1e-14)
    np.testing.assert_array_equal(unpack(con), np.conj(unpack(a)))
    np.testing.assert_allclose(unpack(mat), unpack(m1) @ unpack(m2), rtol=1e-13, atol=1e-14)


def test_complex_matmul_on_transposed_views_equals_the_contiguous_product():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 3, 6, 2)).astype(np.float32), rng.standard_normal((6, 3, 5, 2)).astype(np.float32)
    (y,) = run(lambda a, b: ops.complex_matmul(ops.transpose(a, perm=[2, 0, 1, 3]), b), x, w)
    want = np.transpose(unpack(x), (2, 0, 1)) @ unpack(w)
    np.testing.assert_allclose(unpack(y), want, rtol=2e-5, atol=2e-5)


# -- the dtype computed, per backend -----------------------------------------------------------------
def _library(name: str):
    """``(rfft, irfft)`` of FFT backend ``name`` called directly, float32 in float32 (ducc0: skipped when absent)."""
    if name == "scipy":
        return scipy.fft.rfft, lambda z, n, norm="backward": scipy.fft.irfft(z, n=n, norm=norm)
    ducc0 = pytest.importorskip("ducc0")
    inorm = {"backward": 0, "ortho": 1, "forward": 2}
    return (lambda x, norm="backward": ducc0.fft.r2c(x, axes=(x.ndim - 1,), inorm=inorm[norm]),
            lambda z, n, norm="backward": ducc0.fft.c2r(z, axes=(z.ndim - 1,), lastsize=n, forward=False,
                                                         inorm=2 - inorm[norm]))


@pytest.fixture(params=config.BACKENDS)
def backend(request, monkeypatch):
    """Each FFT library in turn, set as ``config.BACKEND``."""
    monkeypatch.setattr(config, "BACKEND", request.param)
    return request.param


def test_float32_is_computed_in_float32_not_widened(backend):
    """numpy.fft's default-norm rfft widens float32 to float64; neither backend must, and the kernels give its bits."""
    rfft, irfft = _library(backend)
    x = np.random.default_rng(3).standard_normal((16, 256)).astype(np.float32)
    (z,) = run(lambda a: ops.rfft(a), x)
    native = rfft(x)
    widened = np.fft.rfft(x.astype(np.float64)).astype(np.complex64)
    assert native.dtype == np.complex64 and z.dtype == np.float32
    np.testing.assert_array_equal(unpack(z).astype(np.complex64), native)
    assert np.mean(native == widened) < 0.5  # a float64 computation rounded down would agree everywhere
    np.testing.assert_allclose(unpack(z), widened, rtol=1e-5, atol=1e-4)
    (y,) = run(lambda s: ops.irfft(s, n=256), z)
    assert y.dtype == np.float32 and np.array_equal(y, irfft(native, 256))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_is_computed_in_float32_and_rounded_once(dtype, backend):
    rfft, _ = _library(backend)
    x = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
    graph = fc.trace(lambda a: ops.rfft(a, norm="ortho"), f"{dtype}[3, 16]")
    half = graph.input_types[0].dtype.np
    (z,) = fc.compile(graph).run([x.astype(half)])
    want = pack(rfft(x.astype(half).astype(np.float32), norm="ortho")).astype(half)
    assert z.dtype == half
    np.testing.assert_array_equal(z.astype(np.float32), want.astype(np.float32))


# -- workers -----------------------------------------------------------------------------------------
def test_workers_default_to_the_usable_cores_and_a_change_reaches_compiled_kernels(monkeypatch):
    monkeypatch.setattr(config, "WORKERS", -1)
    importlib.reload(config)  # the module-level default, whatever ran before
    monkeypatch.setattr(config, "BACKEND", "scipy")
    assert config.WORKERS == config.usable_cores() >= 1
    seen = []
    real = scipy.fft.rfft
    monkeypatch.setattr(scipy.fft, "rfft", lambda *a, **k: seen.append(k["workers"]) or real(*a, **k))
    big = 1 << 16
    exe = fc.compile(fc.trace(lambda a: ops.rfft(a), f"f32[2, {big // 2}]"), cache=False)
    small = fc.compile(fc.trace(lambda a: ops.rfft(a), "f32[2, 8]"), cache=False)
    monkeypatch.setattr(config, "WORKERS", 3)
    exe.run([np.zeros((2, big // 2), np.float32)])
    small.run([np.zeros((2, 8), np.float32)])
    assert seen == [3, 1]  # read at run time; small transforms stay on one thread


# -- bad input ---------------------------------------------------------------------------------------
BAD = [
    ("rfft of integers", lambda x, z: ops.rfft(ops.stop_gradient(x)), "i32[4, 8]", "expected a floating tensor"),
    ("rfft axis", lambda x, z: ops.rfft(x, axis=2), None, "out of range"),
    ("rfft norm", lambda x, z: ops.rfft(x, norm="unitary"), None, "got 'unitary', expected one of"),
    ("irfft not packed", lambda x, z: ops.irfft(x, n=8), None, "packed complex"),
    ("irfft n", lambda x, z: ops.irfft(z, n=12), None, "got n=12 for 5 bins.*expected n = 8 or 9"),
    ("irfft axis", lambda x, z: ops.irfft(z, n=8, axis=-3), None, "out of range"),
    ("irfft norm", lambda x, z: ops.irfft(z, n=8, norm="Ortho"), None, "unknown norm"),
    ("fft not packed", lambda x, z: ops.fft(x), None, "packed complex"),
    ("ifft axis", lambda x, z: ops.ifft(z, axis=2), None, "out of range"),
    ("complex_mul not packed", lambda x, z: ops.complex_mul(z, x), None, "packed complex"),
    ("complex_mul broadcast", lambda x, z: ops.complex_mul(z, ops.slice(z, starts=[0], stops=[3], axes=[1])),
     None, "do not broadcast"),
    ("conj not packed", lambda x, z: ops.conj(x), None, "packed complex"),
    ("complex_matmul inner", lambda x, z: ops.complex_matmul(z, z), None, "inner dimensions"),
    ("complex_matmul rank", lambda x, z: ops.complex_matmul(ops.slice(z, starts=[0], stops=[1]),
                                                            ops.reshape(z, shape=[20, 2])), None, "matrices"),
]


@pytest.mark.parametrize("what, fn, x_type, words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_named_error_at_graph_build_time(what, fn, x_type, words):
    with pytest.raises(ShapeError, match=words) as info:
        fc.trace(fn, x_type or "f32[4, 8]", "f32[4, 5, 2]")
    message = str(info.value)
    assert message.split(":")[0] in {"rfft", "irfft", "fft", "ifft", "complex_mul", "conj", "complex_matmul"}
    assert "got" in message and ("expected" in message or "must" in message)


def test_irfft_refuses_mixed_dtype_operands_of_complex_mul():
    with pytest.raises(ShapeError, match="share a dtype"):
        fc.trace(lambda a, b: ops.complex_mul(a, b), "f32[3, 2]", "f64[3, 2]")
