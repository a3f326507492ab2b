"""logsumexp, softmax and log_softmax: stability at logits of +-1000, infinities, axes, half precision in float32."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops

LN2 = np.log(2.0)
#: Overflow, 0/0 and log(0) taken as errors: a stable kernel needs none of them (exp underflowing to 0 is fine).
STRICT = {"over": "raise", "invalid": "raise", "divide": "raise"}


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def reference_lse(x: np.ndarray, axis) -> np.ndarray:
    """An independent reference: numpy's pairwise logaddexp reduction."""
    return np.logaddexp.reduce(x, axis=axis)


@pytest.mark.parametrize("x, want", [
    ([1000.0, 1000.0], 1000.0 + LN2),
    ([-1000.0, -1000.0], -1000.0 + LN2),
    ([1000.0, -1000.0], 1000.0),
    ([-np.inf, -np.inf], -np.inf),
    ([np.inf, 0.0], np.inf),
    ([-np.inf, 0.0], 0.0),
])
def test_logsumexp_is_stable_and_handles_infinities(x, want):
    with np.errstate(**STRICT):
        (y,) = run(fc.trace(lambda v: ops.logsumexp(v), "f64[2]"), np.array(x))
    assert y.shape == () and y == want


@pytest.mark.parametrize("axes, keepdims", [(None, False), ([1], True), ([0, 2], False), ([-1], False)])
def test_logsumexp_matches_a_reference_over_axes(axes, keepdims):
    x = np.random.default_rng(0).uniform(-800.0, 800.0, (2, 3, 4))
    (y,) = run(fc.trace(lambda v: ops.logsumexp(v, axes=axes, keepdims=keepdims), "f64[2, 3, 4]"), x)
    want = reference_lse(x, None if axes is None else tuple(axes)) if axes != [0, 2] else \
        reference_lse(reference_lse(x, 2), 0)
    want = want.reshape(y.shape)
    np.testing.assert_allclose(y, want, rtol=1e-14)


def test_logsumexp_gradient_is_the_softmax_even_for_huge_logits():
    graph = fc.trace(lambda v: ops.logsumexp(v), "f64[3]")
    with np.errstate(**STRICT):
        _, gx = run(fc.build_backward_graph(graph, 0, [0]), np.array([1000.0, 1000.0, -1000.0]))
    np.testing.assert_allclose(gx, [0.5, 0.5, 0.0], atol=1e-300)


def test_softmax_and_log_softmax_of_huge_logits():
    x = np.array([[1000.0, 999.0, -1000.0], [-1000.0, -1000.0, -1000.0]])
    with np.errstate(**STRICT):
        p, logp = run(fc.trace(lambda v: [ops.softmax(v), ops.log_softmax(v)], "f64[2, 3]"), x)
    e = 1.0 / (1.0 + np.exp(-1.0))
    np.testing.assert_allclose(p, [[e, 1 - e, 0.0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-15)
    np.testing.assert_allclose(logp, [[np.log(e), np.log(1 - e), -2000.0 + np.log(e)], [-np.log(3)] * 3], rtol=1e-14)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_the_axis_attribute_picks_the_normalised_axis(op):
    x = np.random.default_rng(1).standard_normal((3, 4))
    (y,) = run(fc.trace(lambda v: getattr(ops, op)(v, axis=0), "f64[3, 4]"), x)
    want = x - reference_lse(x, 0)[None, :]
    np.testing.assert_allclose(y, want if op == "log_softmax" else np.exp(want), rtol=1e-13)


def test_softmax_gradient_at_huge_logits_is_finite_and_matches_the_formula():
    x = np.array([1000.0, 999.0, 0.0, -1000.0])
    w = np.array([1.0, -2.0, 3.0, 0.5])
    graph = fc.trace(lambda v: ops.sum(ops.softmax(v) * w), "f64[4]")
    with np.errstate(**STRICT):
        _, gx = run(fc.build_backward_graph(graph, 0, [0]), x)
    p = np.exp(x - reference_lse(x, 0))
    np.testing.assert_allclose(gx, p * (w - np.dot(w, p)), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("dtype, ulp", [("f16", 2.0 ** -10), ("bf16", 2.0 ** -7)])
def test_half_precision_is_computed_in_float32(dtype, ulp):
    # 4096 equal logits: a half-precision running sum of exp(0) = 1 would stall (bf16 at 256), and
    # exp(x - max) in half precision would lose the small terms; float32 gives log(4096) exactly rounded
    t = fc.TensorType.parse(f"{dtype}[4096]").dtype.np
    x = np.zeros(4096, t)
    lse, p = run(fc.trace(lambda v: [ops.logsumexp(v), ops.softmax(v)], f"{dtype}[4096]"), x)
    assert lse.dtype == t and p.dtype == t
    np.testing.assert_allclose(float(lse), np.log(4096.0), rtol=ulp)
    np.testing.assert_allclose(p.astype(np.float64), 1 / 4096, rtol=ulp)


def test_integer_input_and_an_empty_axis_are_refused():
    with pytest.raises(ShapeError, match=r"softmax: needs a floating input, got i32\[3\]"):
        fc.trace(lambda v: ops.softmax(v), "i32[3]")
    with pytest.raises(ShapeError, match=r"logsumexp: cannot take the logsumexp over axis 0 of f32\[0, 2\]"):
        fc.trace(lambda v: ops.logsumexp(v, axes=[0]), "f32[0, 2]")
    with pytest.raises(ShapeError, match=r"log_softmax: axis 1 is out of range for rank 1"):
        fc.trace(lambda v: ops.log_softmax(v, axis=1), "f32[3]")
