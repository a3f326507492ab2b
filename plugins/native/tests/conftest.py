"""Each test gets its own kernel cache and a fresh compiler state, and groups tier up at their first call."""

from __future__ import annotations

import numpy as np
import pytest

from frame_native import jit


@pytest.fixture(autouse=True)
def fresh_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("FRAME_NATIVE_AFTER", "1")
    monkeypatch.delenv("FRAME_NATIVE", raising=False)
    jit.reset()
    yield
    jit.reset()


@pytest.fixture
def same_bits():
    """``same_bits(got, want, nan_payloads=True)``: see ``assert_same_bits``."""
    return assert_same_bits


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def assert_same_bits(got: np.ndarray, want: np.ndarray, *, nan_payloads: bool = True) -> None:
    """Bit for bit. With ``nan_payloads=False`` a NaN matches any NaN: when two NaNs meet in one operation,
    which one's sign and payload survive is left open by IEEE 754, LLVM and numpy alike."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if nan_payloads:
        np.testing.assert_array_equal(bits(got), bits(want))
        return
    both = np.isnan(got) & np.isnan(want)
    np.testing.assert_array_equal(np.where(both, 0, bits(got)), np.where(both, 0, bits(want)))
