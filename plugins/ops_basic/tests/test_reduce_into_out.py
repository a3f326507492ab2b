"""``reduce_to_shape_internal`` sums straight into its planned ``out`` array.

Every broadcast gradient runs through this kernel each training step, so it
must not allocate an output-sized temporary and copy it over. Allocations
are measured with ``tracemalloc`` (numpy reports its data buffers there);
results of 16 KiB and more tell a temporary from bookkeeping.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import frame_core as fc


def build(input_type: str, shape: list[int]):
    schema = fc.registry().get("reduce_to_shape_internal")
    return schema.kernels["cpu"](schema.context([fc.TensorType.parse(input_type)], {"shape": shape}))


def peak_allocation(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# (input type, target shape): leading axes added, a stretched axis, both, everything
CASES = [("f32[64, 4096]", [4096]), ("f32[4096, 64]", [4096, 1]), ("f64[4, 16, 4096]", [1, 4096]), ("f32[64, 1024]", [])]


@pytest.mark.parametrize("input_type, shape", CASES, ids=[f"{c[0]}->{c[1]}" for c in CASES])
def test_the_sum_is_written_into_out(input_type, shape):
    t = fc.TensorType.parse(input_type)
    x = np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype.np)
    want = build(input_type, shape)(x)  # out=None: a fresh array
    kernel = build(input_type, shape)
    out = np.full(shape, np.nan, t.dtype.np)
    assert kernel(x, out) is out  # warm up, then measure
    out[...] = np.nan
    peak = peak_allocation(lambda: kernel(x, out))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert out.shape == tuple(shape) and want.shape == tuple(shape)
    # half the result's size, plus room for Python objects and numpy's iterator bookkeeping
    assert peak < out.nbytes // 2 + 4096, f"allocated {peak} bytes for a {out.nbytes}-byte result"
