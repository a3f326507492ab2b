"""run() takes other libraries' arrays (issue 17): an object with ``__dlpack__`` (torch, JAX) or ``__array__``,
read without a copy where the library allows, with the same dtype and shape checks as an ndarray."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import InputError, ops


class DLPackOnly:
    """An array of another library that speaks only DLPack (numpy's own arrays export it)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class ArrayOnly:
    """An array-like with only numpy's ``__array__`` protocol."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


@pytest.fixture(scope="module")
def exe():
    return fc.compile(fc.trace(lambda x, w: ops.tanh(x @ w), "f32[2, 3]", "f32[3]"))


@pytest.mark.parametrize("wrap", [DLPackOnly, ArrayOnly])
def test_array_likes_run_as_their_data_without_a_copy(exe, wrap):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    w = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_array_equal(exe.run([wrap(x), wrap(w)])[0], exe.run([x, w])[0])
    assert np.shares_memory(exe._coerce(0, wrap(x)), x)  # zero-copy: the kernels read the library's memory


@pytest.mark.parametrize("wrap", [DLPackOnly, ArrayOnly])
def test_array_likes_get_the_ndarray_checks(exe, wrap):
    w = np.ones(3, np.float32)
    with pytest.raises(InputError, match=r"input 0 \('x'\) must have dtype float32 \(f32\[2, 3\]\), got float64\[2, 3\].*"
                                         r"it is a .*" + wrap.__name__ + ", read as a numpy array"):
        exe.run([wrap(np.zeros((2, 3))), w])
    with pytest.raises(InputError, match=r"must have shape \[2, 3\]"):
        exe.run([wrap(np.zeros((3, 2), np.float32)), w])


def test_what_is_no_array_is_still_refused(exe):
    with pytest.raises(InputError, match=r"must be a numpy array of type f32\[2, 3\], got object \(arrays of other libraries"):
        exe.run([object(), np.ones(3, np.float32)])


def test_torch_tensors_run():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    exe = fc.compile(fc.trace(lambda x: ops.exp(x) * 2.0, "f64[4]"))
    t = torch.linspace(-1, 1, 4, dtype=torch.float64)
    np.testing.assert_allclose(exe.run([t])[0], np.exp(t.numpy()) * 2.0, rtol=1e-15)
    with pytest.raises(InputError, match="must have dtype float64.*torch.Tensor"):
        exe.run([t.float()])
    with pytest.raises(InputError, match=r"detach\(\)"):  # a tensor that requires grad cannot be exported
        exe.run([t.clone().requires_grad_(True)])
