"""The FFT backends (config.BACKEND): how the default is chosen, the errors for a bad setting, each backend's
bits stable from call to call and across thread counts, and ducc0 within the documented tolerance of scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_ops_fft import _backends, config

NORMS = ["backward", "ortho", "forward"]


def transforms(x: np.ndarray, z: np.ndarray, n: int, norm: str) -> list:
    """rfft of real x, irfft of packed z to n points, fft and ifft of z, along the last axis: one graph."""
    return fc.compile(fc.trace(lambda a, b: [ops.rfft(a, norm=norm), ops.irfft(b, n=n, norm=norm),
                                             ops.fft(b, norm=norm), ops.ifft(b, norm=norm)],
                               fc.TensorType(x.dtype, x.shape), fc.TensorType(z.dtype, z.shape)), cache=False)


def inputs(dtype: type, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((16, n)).astype(dtype), rng.standard_normal((16, n // 2 + 1, 2)).astype(dtype))


def test_the_default_is_ducc0_when_installed_else_scipy(monkeypatch):
    monkeypatch.setattr(config, "BACKEND", None)
    monkeypatch.setattr(config, "_ducc0_installed", False)
    assert config.backend_name() == "scipy"
    monkeypatch.setattr(config, "_ducc0_installed", True)
    assert config.backend_name() == "ducc0"
    monkeypatch.setattr(config, "BACKEND", "scipy")
    assert config.backend_name() == "scipy"


@pytest.mark.parametrize("setting, message", [
    ("mkl", r"BACKEND must be one of 'scipy', 'ducc0' or None .* got 'mkl'"),
    ("ducc0", r"BACKEND is 'ducc0', but ducc0 is not installed; install it with pip install 'frame-ops-fft\[fast\]'"),
])
def test_a_bad_backend_setting_names_the_setting_and_the_fix(setting, message, monkeypatch):
    monkeypatch.setattr(config, "_ducc0_installed", False)
    monkeypatch.setattr(config, "BACKEND", setting)
    exe = fc.compile(fc.trace(lambda x: ops.rfft(x), "f32[2, 8]"), cache=False)
    with pytest.raises(fc.KernelError, match=message):
        exe.run([np.ones((2, 8), np.float32)])


def test_a_change_of_backend_reaches_compiled_kernels(monkeypatch):
    pytest.importorskip("ducc0")
    calls = []
    for name in config.BACKENDS:
        made = _backends.get(name)
        monkeypatch.setitem(_backends._made, name, made._replace(
            rfft=lambda *a, _f=made.rfft, _n=name: calls.append(_n) or _f(*a)))
    exe = fc.compile(fc.trace(lambda x: ops.rfft(x), "f32[2, 8]"), cache=False)
    for name in ("scipy", "ducc0", "scipy"):
        monkeypatch.setattr(config, "BACKEND", name)
        exe.run([np.ones((2, 8), np.float32)])
    assert calls == ["scipy", "ducc0", "scipy"]


@pytest.mark.parametrize("backend", config.BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_backend_gives_the_same_bits_on_every_call_and_thread_count(backend, dtype, monkeypatch):
    if backend == "ducc0":
        pytest.importorskip("ducc0")
    monkeypatch.setattr(config, "BACKEND", backend)
    monkeypatch.setattr(config, "PARALLEL_MIN_ELEMENTS", 0)  # every transform may use threads
    x, z = inputs(dtype, 256)
    exe = transforms(x, z, 256, "ortho")
    monkeypatch.setattr(config, "WORKERS", 1)
    first = exe.run([x, z])
    for workers in (1, 2, 3):
        monkeypatch.setattr(config, "WORKERS", workers)
        for a, b in zip(first, exe.run([x, z])):
            assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 255, 256, 1000, 4096])
@pytest.mark.parametrize("norm", NORMS)
def test_ducc0_agrees_with_scipy_within_the_documented_tolerance(dtype, n, norm, monkeypatch):
    """docs/fft.md: |ducc0 - scipy| <= 2 eps log2(max(n, 2)) max|result| (measured up to 3.6 eps at n = 4096)."""
    pytest.importorskip("ducc0")
    x, z = inputs(dtype, n, seed=n)
    exe = transforms(x, z, n, norm)
    results = {}
    for name in config.BACKENDS:
        monkeypatch.setattr(config, "BACKEND", name)
        results[name] = exe.run([x, z])
    bound = 2 * np.finfo(dtype).eps * math.log2(max(n, 2))
    for s, d in zip(results["scipy"], results["ducc0"]):
        assert s.dtype == d.dtype == dtype
        assert np.abs(s - d).max() <= bound * np.abs(s).max()


def test_ducc0_reads_only_the_real_part_of_the_dc_and_nyquist_bins_as_numpy(monkeypatch):
    pytest.importorskip("ducc0")
    monkeypatch.setattr(config, "BACKEND", "ducc0")
    rng = np.random.default_rng(1)
    for n in (8, 7):
        z = rng.standard_normal((3, n // 2 + 1, 2))
        (y,) = fc.compile(fc.trace(lambda s: ops.irfft(s, n=n), "f64" + str(list(z.shape))), cache=False).run([z])
        np.testing.assert_allclose(y, np.fft.irfft(z[..., 0] + 1j * z[..., 1], n=n), rtol=1e-12, atol=1e-13)


def test_an_empty_batch_runs_on_ducc0_too(monkeypatch):
    pytest.importorskip("ducc0")
    monkeypatch.setattr(config, "BACKEND", "ducc0")
    x, z = np.zeros((0, 8), np.float32), np.zeros((0, 5, 2), np.float32)
    shapes = [r.shape for r in transforms(x, z, 8, "backward").run([x, z])]
    assert shapes == [(0, 5, 2), (0, 8), (0, 5, 2), (0, 5, 2)]
