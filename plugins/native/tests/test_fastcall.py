"""frame-native: compiled kernels are called as builtins through a compiled trampoline (fastcall.py).

The trampoline takes a reference to the result it returns; a count that drifted would free (or leak) the
result objects, so the tests count references around many calls of both outcomes.
"""

from __future__ import annotations

import sys
import types

import numpy as np

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import fastcall, jit

NATIVE = "native_fused_internal"


def native_function(exe):
    """The compiled function behind the executable's one tiered group, once it has swapped in."""
    (kernel,) = [ins.kernel for ins in exe.instructions if ins.op == NATIVE]
    assert frame_native.wait(60) and kernel.native.state == "native", (kernel.native, jit.status())
    return kernel, kernel.native.slot[0].__globals__["_fn"]


def compiled_group():
    exe = fc.compile(fc.trace(lambda x, y: ops.relu(x * y + 1.0) - y, "f32[64]", "f32[64]"), cache=False)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    first = exe.run([x, y])[0].copy()
    return exe, x, y, first


def test_this_interpreter_calls_kernels_through_a_builtin(same_bits):
    assert fastcall.fast_calls_problem() is None  # CPython with the GIL, 64-bit: the case the pack relies on
    exe, x, y, first = compiled_group()
    _, fn = native_function(exe)
    assert isinstance(fn, types.BuiltinFunctionType)
    same_bits(exe.run([x, y])[0], first)


def test_the_results_reference_counts_stay_balanced_over_many_calls_of_both_outcomes(same_bits):
    exe, x, y, first = compiled_group()
    kernel, fn = native_function(exe)
    out = np.empty(64, np.float32)
    strided = np.empty(128, np.float32)[::2]
    ok, refused = sys.getrefcount(fastcall.OK), sys.getrefcount(fastcall.REFUSED)
    for _ in range(5000):
        assert fn(np.ndarray, np.dtype(np.float32), x, y, out) == 0
        assert fn(np.ndarray, np.dtype(np.float32), strided, y, out)  # not C-contiguous: refused
    assert (sys.getrefcount(fastcall.OK), sys.getrefcount(fastcall.REFUSED)) == (ok, refused)
    same_bits(out, first)


def test_a_call_with_the_wrong_number_of_arguments_is_refused_without_reading_them():
    exe, x, y, _ = compiled_group()
    _, fn = native_function(exe)
    assert fn(np.ndarray, np.dtype(np.float32), x, y) == 1
    assert fn() == 1
    assert fn(np.ndarray, np.dtype(np.float32), x, y, np.empty(64, np.float32), x) == 1


def test_a_refused_call_still_runs_numpy_through_the_tiered_kernel(same_bits):
    exe, x, y, _ = compiled_group()
    kernel, _ = native_function(exe)
    strided = np.repeat(x, 2)[::2]
    same_bits(kernel(strided, y), kernel.numpy(x, y))
    assert kernel.native.fallbacks == 1


def test_without_fast_calls_kernels_keep_their_ctypes_function(monkeypatch, same_bits):
    monkeypatch.setattr(jit, "_trampolines", {})
    monkeypatch.setattr(fastcall, "fast_calls_problem", lambda: "a test says no")
    monkeypatch.setattr(jit, "_loaded", {})
    exe, x, y, first = compiled_group()
    _, fn = native_function(exe)
    assert not isinstance(fn, types.BuiltinFunctionType)
    same_bits(exe.run([x, y])[0], first)
    assert any("through ctypes: a test says no" in n for n in jit.status()["notes"])
