"""Regressions found by hostile QA of the FFT pack: each test failed before its fix."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import FrameError, ShapeError, ops
from frame_core.testing import check_gradients


def pack(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1)


def unpack(p: np.ndarray) -> np.ndarray:
    return p[..., 0] + 1j * p[..., 1]


def at_every_level(graph, arrays):
    results = [fc.compile(graph, opt_level=level, cache=False).run(arrays) for level in (0, 1, 2)]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    return results[0]


# -- a complex scalar, f[2], is packed complex for complex_mul and conj ---------------------------------------
@pytest.mark.parametrize("a_type, b_type", [("f64[2]", "f64[2]"), ("f64[1]", "f64[2]"), ("f64[2]", "f64[3, 2]"),
                                            ("f64[3, 1]", "f64[2]")])
def test_complex_mul_by_a_complex_scalar_runs_and_differentiates(a_type, b_type):
    rng = np.random.default_rng(0)
    graph = fc.trace(lambda a, b: ops.complex_mul(a, ops.conj(b)), a_type, b_type)
    a, b = (rng.standard_normal(fc.TensorType.parse(t).shape) for t in (a_type, b_type))
    (got,) = at_every_level(graph, [a, b])
    as_complex = [x[..., 0] if x.shape[-1] == 1 else unpack(x) for x in (a, b)]
    np.testing.assert_allclose(got, pack(as_complex[0] * np.conj(as_complex[1])), rtol=1e-14)
    check_gradients(graph, [a, b], order=2).assert_ok()
