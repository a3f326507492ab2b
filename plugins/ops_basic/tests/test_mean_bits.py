"""``mean`` divides by the count in the array's own float dtype (a float32 count for float32), not by numpy's
intp in float64: the same bits as ``np.mean`` whenever the count is exact in the dtype (double rounding is
innocuous for division, 53 >= 2 * 24 + 2). Checked over many sums and counts, subnormal, huge and special
values included; counts above 2**24 keep numpy's division."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    scale = rng.choice([1e-42, 1e-38, 1e-20, 1.0, 1e20, 1e37], shape)
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axes", [((2, 1), None), ((3, 7), None), ((256, 64), (0,)), ((5, 6, 7), (0, 2)),
                                         ((11, 13), (1,)), ((1000,), None)])
def test_mean_is_bitwise_numpys(shape, axes, dtype):
    t = f"{'f32' if dtype == np.float32 else 'f64'}{list(shape)}"
    exe = fc.compile(fc.trace(lambda x: ops.mean(x, axes=axes), t), cache=False)
    for seed in range(20):
        x = values(shape, dtype, seed)
        with np.errstate(all="ignore"):
            want = np.mean(x, axis=axes)
            got = exe.run([x])[0]
        np.testing.assert_array_equal(np.asarray(got).reshape(-1).view(np.uint8), np.asarray(want, dtype).reshape(-1).view(np.uint8))


def test_special_values_divide_as_numpy_does():
    exe = fc.compile(fc.trace(lambda x: ops.mean(x, axes=[1]), "f32[6, 3]"), cache=False)
    x = np.array([[np.inf, 1, 2], [np.nan, 0, 0], [-0.0, -0.0, -0.0], [3e38, 3e38, 3e38], [1e-45, 0, 0],
                  [-np.inf, np.inf, 0]], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(exe.run([x])[0].view(np.uint32), np.mean(x, axis=1).view(np.uint32))
