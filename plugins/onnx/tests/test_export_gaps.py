"""Export of group_norm and adaptive_avg_pool2d (forward and training graphs), the refusal of random ops, and
length-0 scans: each exported model runs on ONNX Runtime and equals frame's own results."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("frame_ops_nn")
rng = np.random.default_rng(3)


def _on_onnxruntime_equals_frame(graph, args, rtol=1e-5, atol=1e-5):
    model = frame_onnx.to_onnx(graph)  # checked with full shape inference
    got = ort.InferenceSession(model.SerializeToString()).run(None, {v.name: a for v, a in zip(model.graph.input, args)})
    want = fc.compile(graph).run(args)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return model


def _training(graph, wrt):
    """The gradient of sum(y^2 x) (of sum(y^2) when y and x differ in shape)."""
    def loss_of(*xs):
        y, x = xs[-1], xs[0]
        return ops.sum(ops.square(y) * x) if y.shape == x.shape else ops.sum(ops.square(y))
    extended, loss = fc.extend_graph(graph, loss_of)
    return fc.build_backward_graph(extended, loss, wrt)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm_and_its_gradient_run_on_onnxruntime(groups):
    graph = fc.trace(lambda x, w, b: ops.group_norm(x, w, b, num_groups=groups, eps=1e-4), "f32[2, 4, 3, 5]", "f32[4]",
                     "f32[4]")
    args = [rng.standard_normal(s).astype(np.float32) for s in [(2, 4, 3, 5), (4,), (4,)]]
    _on_onnxruntime_equals_frame(graph, args)
    training = _training(graph, [0, 1, 2])
    assert "group_norm_grad_internal" in {n.op for n in training.nodes}
    _on_onnxruntime_equals_frame(training, args)


@pytest.mark.parametrize("size", [[1, 1], [2, 3], [5, 4], [7, 5]])
def test_adaptive_average_pool_and_its_gradient_run_on_onnxruntime(size):
    """Global (1x1), bins that overlap (2x3 of 5x4), the identity, and a larger output (each input position in
    several bins)."""
    graph = fc.trace(lambda x: ops.adaptive_avg_pool2d(x, output_size=size), "f32[2, 3, 5, 4]")
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    _on_onnxruntime_equals_frame(graph, [x])
    training = _training(graph, [0])
    assert "adaptive_avg_pool2d_grad_internal" in {n.op for n in training.nodes}
    _on_onnxruntime_equals_frame(training, [x])


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul")  # frame's kernel, before its fallback
def test_the_adaptive_pool_gradient_keeps_an_infinite_cotangent_in_its_own_bins():
    """As frame's kernel: an inf in gy reaches the positions of its bin only (a 0 * inf would spread NaN)."""
    graph = fc.trace(lambda gy: ops.adaptive_avg_pool2d_grad_internal(gy, size=[5, 4]), "f32[1, 1, 2, 3]")
    gy = np.array([[[[np.inf, 1, 2], [3, 4, 5]]]], np.float32)
    model = frame_onnx.to_onnx(graph)
    got = ort.InferenceSession(model.SerializeToString()).run(None, {model.graph.input[0].name: gy})[0]
    np.testing.assert_allclose(got, fc.compile(graph).run([gy])[0], rtol=1e-6)  # inf where inf, equal elsewhere
    assert np.isinf(got[0, 0, 0, 0]) and not np.isnan(got).any()


def test_random_ops_are_refused_by_name_with_why_and_every_unmapped_op_at_once():
    def draw(x, key):
        noise = ops.random_uniform(key, shape=[3], dtype="f32") + ops.random_normal(key, shape=[3], dtype="f32")
        mask = ops.bernoulli(key, shape=[3], p=0.5, dtype="f32")
        return ops.dropout(x, key, rate=0.5) + noise * mask + ops.zeros(shape=[3], dtype="f32")
    graph = fc.trace(draw, "f32[3]", "i64[2]")
    with pytest.raises(frame_onnx.UnmappedOpError) as info:
        frame_onnx.to_onnx(graph)
    err = info.value
    assert set(err.ops) == {"random_uniform", "random_normal", "bernoulli", "dropout", "zeros"}
    assert set(err.reasons) == {"random_uniform", "random_normal", "bernoulli", "dropout"}
    text = str(err)
    assert "bernoulli, dropout, random_normal, random_uniform: frame draws its numbers from Philox-4x64-10" in text
    assert "feed them to the graph as inputs" in text and text.count("Philox") == 1


def _recurrence(h0, xs, w):
    def body(h, x):
        h = ops.tanh(h @ w + x)
        return h, h * 2.0
    return ops.scan(body, h0, xs)


@pytest.mark.parametrize("steps", [0, 3])
def test_a_length_0_scan_and_its_training_graph_run_on_onnxruntime(steps):
    """ONNX Runtime's Scan refuses to slice a scanned input of 0 rows at run time; the export writes what a
    length-0 scan computes, the carry as given and empty rows."""
    graph = fc.trace(_recurrence, "f32[2, 3]", f"f32[{steps}, 2, 3]", "f32[3, 3]")
    args = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in [(2, 3), (steps, 2, 3), (3, 3)]]
    model = _on_onnxruntime_equals_frame(graph, args)
    assert ("Scan" in {n.op_type for n in model.graph.node}) == bool(steps)
    extended, loss = fc.extend_graph(graph, lambda *xs: ops.sum(ops.square(xs[-2])) + ops.sum(xs[-1]))
    _on_onnxruntime_equals_frame(fc.build_backward_graph(extended, loss, [0, 1, 2]), args)


def test_a_length_0_linear_scan_runs_on_onnxruntime():
    graph = fc.trace(lambda a, b: ops.linear_scan(a, b, axis=1), "f32[2, 0, 3]", "f32[2, 0, 3]")
    empty = np.zeros((2, 0, 3), np.float32)
    _on_onnxruntime_equals_frame(graph, [empty, empty])
