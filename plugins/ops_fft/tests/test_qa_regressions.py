"""Regressions found by hostile QA of the FFT pack: each test failed before its fix."""

from __future__ import annotations

import re

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


# -- build-time errors that were run-time scipy errors or misleading messages ----------------------------------
@pytest.mark.parametrize("op, attrs", [("fft", {}), ("ifft", {}), ("irfft", {"n": 1})])
@pytest.mark.parametrize("z_type, axis, named", [("f32[0, 2]", -1, 0), ("f64[3, 0, 2]", 1, 1)])
def test_a_transform_of_an_empty_axis_is_refused_when_the_graph_is_built(op, attrs, z_type, axis, named):
    with pytest.raises(ShapeError, match=rf"^{op}: got an empty axis {named} in {re.escape(z_type)}; "
                                         "expected at least one point to transform"):
        fc.trace(lambda z: getattr(ops, op)(z, axis=axis, **attrs), z_type)


@pytest.mark.parametrize("fn, z_type", [(lambda z: ops.fft(z), "f64[0, 3, 2]"), (lambda z: ops.ifft(z, axis=0), "f64[2, 0, 2]"),
                                        (lambda z: ops.irfft(z, n=4), "f64[0, 3, 2]")])
def test_an_empty_batch_axis_is_fine_for_every_transform(fn, z_type):
    graph = fc.trace(fn, z_type)
    (y,) = at_every_level(graph, [np.zeros(fc.TensorType.parse(z_type).shape)])
    assert y.shape == graph.outputs[0].type.shape and 0 in y.shape


def test_irfft_names_only_lengths_that_are_valid():
    with pytest.raises(ShapeError) as info:
        fc.trace(lambda z: ops.irfft(z, n=0), "f32[1, 2]")
    message = str(info.value)
    assert "got n=0 for 1 bin " in message and "expected n = 1 " in message and "n = 0" not in message
