"""cross_entropy: values, stability at logits of +-1000, the mean over the batch, labels out of range (DataError
at run time), shape/dtype errors (ShapeError at build time), gradient, half precision."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import DataError, ShapeError, ops
from frame_core.testing import check_gradients


def run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def reference(logits: np.ndarray, labels: np.ndarray) -> float:
    z = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    lse = np.logaddexp.reduce(z, axis=1)
    return float(np.mean(lse - z[np.arange(len(z)), labels.reshape(-1)]))


def ce_graph(logits: str, labels: str) -> fc.Graph:
    return fc.trace(lambda x, t: ops.cross_entropy(x, t), logits, labels)


def test_value_is_the_mean_negative_log_likelihood():
    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((5, 3)), np.array([0, 2, 1, 1, 0])
    (y,) = run(ce_graph("f64[5, 3]", "i64[5]"), logits, labels)
    assert y.shape == () and y.dtype == np.float64
    np.testing.assert_allclose(y, reference(logits, labels), rtol=1e-14)


def test_logits_of_plus_minus_1000_are_stable():
    logits = np.array([[1000.0, -1000.0, 0.0], [1000.0, 1000.0, -1000.0], [-1000.0, -1000.0, -1000.0]])
    labels = np.array([0, 1, 2])
    graph = fc.build_backward_graph(ce_graph("f64[3, 3]", "i64[3]"), 0, [0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss, g = run(graph, logits, labels)
    # per row: 0 (certain and right), log 2 (a tie), log 3 (uniform)
    np.testing.assert_allclose(loss, (0.0 + np.log(2.0) + np.log(3.0)) / 3, rtol=1e-15)
    np.testing.assert_allclose(g, np.array([[0.0, 0, 0], [0.5, -0.5, 0], [1 / 3, 1 / 3, -2 / 3]]) / 3, atol=1e-16)
    (wrong,) = run(ce_graph("f64[1, 2]", "i64[1]"), np.array([[1000.0, -1000.0]]), np.array([1]))
    assert wrong == 2000.0  # confidently wrong: the exact, finite loss


def test_leading_axes_are_the_batch_and_the_mean_is_over_every_label():
    rng = np.random.default_rng(1)
    logits, labels = rng.standard_normal((2, 3, 4)), rng.integers(0, 4, (2, 3)).astype(np.int32)
    (y,) = run(ce_graph("f64[2, 3, 4]", "i32[2, 3]"), logits, labels)
    np.testing.assert_allclose(y, reference(logits, labels), rtol=1e-14)


def test_gradient_is_softmax_minus_one_hot_over_n_and_closed():
    rng = np.random.default_rng(2)
    logits, labels = rng.standard_normal((4, 3)), np.array([2, 0, 0, 1])
    _, g = run(fc.build_backward_graph(ce_graph("f64[4, 3]", "i64[4]"), 0, [0]), logits, labels)
    p = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
    np.testing.assert_allclose(g, (p - np.eye(3)[labels]) / 4, rtol=1e-13, atol=1e-16)
    check_gradients(ce_graph("f64[4, 3]", "i64[4]"), [logits, labels], wrt=[0], order=3).assert_ok()


@pytest.mark.parametrize("bad", [3, -1])
def test_a_label_out_of_range_is_a_data_error_naming_it_and_the_valid_range(bad):
    with pytest.raises(DataError) as info:
        run(ce_graph("f32[4, 3]", "i64[4]"), np.zeros((4, 3), np.float32), np.array([0, 1, bad, 2]))
    message = str(info.value)
    assert f"label {bad} at position [2] is out of range: valid label values are 0..2 (3 classes)" in message
    assert "cross_entropy" in message  # the node it came from


def test_a_label_out_of_range_is_also_caught_in_the_training_graph():
    graph = fc.build_backward_graph(ce_graph("f64[2, 3]", "i64[2]"), 0, [0])
    with pytest.raises(DataError, match="label 7 at position"):
        run(graph, np.zeros((2, 3)), np.array([7, 0]))


@pytest.mark.parametrize("types, message", [
    (("f32[4, 3]", "f32[4]"), "labels must be integer class indices (i32 or i64), got f32[4]"),
    (("f32[4, 3]", "i64[3]"), "must agree on the leading shape, got f32[4, 3] and i64[3]; expected labels of shape [4]"),
    (("f32[4, 3]", "i64[4, 1]"), "expected labels of shape [4]"),
    (("f32[]", "i64[]"), "logits need a class axis (rank >= 1, classes last), got f32[]"),
    (("i32[4, 3]", "i64[4]"), "logits must be floating, got i32[4, 3]"),
    (("f32[0, 3]", "i64[0]"), "needs at least one class and one label"),
])
def test_shape_and_dtype_mismatches_are_shape_errors_at_build_time(types, message):
    with pytest.raises(ShapeError, match=r"^cross_entropy: ") as info:
        ce_graph(*types)
    assert message in str(info.value)


@pytest.mark.parametrize("dtype, ulp", [("f16", 2.0 ** -10), ("bf16", 2.0 ** -7)])
def test_half_precision_is_computed_in_float32(dtype, ulp):
    t = fc.TensorType.parse(f"{dtype}[]").dtype.np
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((2048, 8)) * 4).astype(t)
    labels = rng.integers(0, 8, 2048)
    (y,) = run(ce_graph(f"{dtype}[2048, 8]", "i64[2048]"), logits, labels)
    assert y.dtype == t
    np.testing.assert_allclose(float(y), reference(logits, labels), rtol=ulp)
