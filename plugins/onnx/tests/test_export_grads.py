"""Training graphs of CNNs (``build_backward_graph``) exported to ONNX and run on ONNX Runtime: the gradients of
convolutions (strided, dilated, padded, grouped), max and average pools (1-D and 2-D) and strided slices equal
frame's to 1e-5."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.ir.types import as_type
import frame_onnx

ort = pytest.importorskip("onnxruntime")


def _args(types, seed=0):
    rng = np.random.default_rng(seed)  # weights of an initialised network's size: float32 sums stay well-scaled
    return [(0.5 * rng.standard_normal(as_type(t).shape)).astype(np.float32) for t in types]


def _same_on_onnxruntime(fn, types, wrt, args=None):
    graph = fc.build_backward_graph(fc.trace(fn, *types), 0, list(wrt))
    args = _args(types) if args is None else args
    model = frame_onnx.to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    got = ort.InferenceSession(model.SerializeToString()).run(None, {i.name: a for i, a in zip(model.graph.input, args)})
    want = fc.compile(graph).run(args)
    assert len(got) == len(want) == 1 + len(wrt)
    for g, w, name in zip(got, want, graph.output_names):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)
    return graph


def cnn1d(x, w1, b1, w2, w3, wf):
    h = ops.relu(ops.conv1d(x, w1, padding=1) + ops.reshape(b1, shape=[4, 1]))
    h = ops.max_pool1d(h, kernel_size=2)
    h = ops.conv1d(h, w2, stride=2, padding="same")
    h = ops.avg_pool1d(ops.tanh(h), kernel_size=3, stride=2, padding=[1, 1], count_include_pad=False)
    h = ops.conv1d(h, w3, dilation=2, padding="causal", groups=2)
    return ops.sum(ops.square(ops.reshape(h, shape=[3, -1]) @ wf))


CNN1D_TYPES = ["f32[3, 2, 16]", "f32[4, 2, 3]", "f32[4]", "f32[6, 4, 3]", "f32[4, 3, 2]", "f32[8, 2]"]


def test_a_1d_cnn_training_graph_gives_frames_gradients_on_onnxruntime():
    graph = _same_on_onnxruntime(cnn1d, CNN1D_TYPES, range(6))
    used = {n.op for n in graph.nodes}
    # the gradients that read x's and w's shapes export through their DecomposeFns to the attribute forms
    assert {"conv1d_grad_input_like_internal", "conv1d_grad_weight_like_internal", "max_pool1d_grad_internal",
            "avg_pool1d_grad_like_internal"} <= used


def test_the_digits_cnn_training_graph_gives_frames_gradients_on_onnxruntime():
    pytest.importorskip("frame_ops_nn")
    digits = _example("train_digits_cnn")
    from frame_ops_nn import layers as nn

    params = digits.init(np.random.default_rng(0))
    graph, names = nn.trace_with_params(lambda p, x, y: ops.cross_entropy(digits.logits(p, x), y), params,
                                        fc.TensorType("f32", (4, 1, 8, 8)), fc.TensorType("i64", (4,)))
    training = fc.build_backward_graph(graph, 0, names)
    # conv2d's gradients read x's and w's shapes (any batch); exported through their DecomposeFns, they are
    # conv_transpose2d and conv2d_grad_weight_internal, whose rules this exercises
    assert {"conv2d_grad_input_like_internal", "conv2d_grad_weight_like_internal",
            "max_pool2d_grad_internal"} <= {n.op for n in training.nodes}
    rng = np.random.default_rng(1)
    x, y = rng.random((4, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 4)
    from frame_core.params import flatten

    leaves = dict(zip(*flatten(params)[:2]))
    args = [*(leaves[n] for n in names), x, y]  # trace_with_params: the parameters first, then the data
    model = frame_onnx.to_onnx(training)
    onnx.checker.check_model(model, full_check=True)
    got = ort.InferenceSession(model.SerializeToString()).run(None, {i.name: a for i, a in zip(model.graph.input, args)})
    want = fc.compile(training).run(args)
    for g, w, name in zip(got, want, training.output_names):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


def test_2d_convolutions_strided_dilated_grouped_and_padded_pools_on_onnxruntime():
    pytest.importorskip("frame_ops_nn")

    def f(x, w1, w2):
        h = ops.conv2d(x, w1, stride=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2])
        h = ops.conv2d(ops.tanh(h), w2, groups=2, padding="same")
        a = ops.avg_pool2d(h, kernel_size=3, stride=2, padding=1, count_include_pad=False)
        m = ops.max_pool2d(h, kernel_size=2, stride=[2, 1], padding=[1, 0, 0, 1])
        return ops.sum(ops.square(a)) + ops.sum(m * m * m)
    _same_on_onnxruntime(f, ["f32[2, 2, 9, 8]", "f32[4, 2, 3, 2]", "f32[4, 2, 3, 3]"], range(3))


@pytest.mark.parametrize("starts, stops, steps", [
    ([1, 0], [7, 5], [2, 3]), ([6, 4], [0, -7], [-2, -1]), ([7, 1], [-9, 6], [-3, 2]), ([0, 5], [8, 6], [1, 1])])
def test_strided_slice_gradients_on_onnxruntime(starts, stops, steps):
    def f(x):
        return ops.sum(ops.square(ops.slice(x, starts=starts, stops=stops, steps=steps, axes=[0, 1])) * 1.5)
    graph = _same_on_onnxruntime(f, ["f32[8, 6]"], [0])
    (gx,) = fc.compile(graph).run(_args(["f32[8, 6]"]))[1:]
    assert (gx == 0).any() and (gx != 0).any()  # zeros off the slice, the gradient on it


def test_normalisation_layers_and_their_gradients_on_onnxruntime():
    """batch_norm in training mode (with its running averages), in inference mode, and layer_norm, with the
    activations of a transformer block (gelu, erf, silu, log1p, expm1, logaddexp, rounding)."""
    pytest.importorskip("frame_ops_nn")

    def f(x, w, b, rm, rv, lw, lb):
        y, new_rm, new_rv = ops.batch_norm(x, w, b, rm, rv, training=True, momentum=0.2)
        z = ops.batch_norm(ops.tanh(y), w, b, new_rm, ops.exp(new_rv), training=False)[0]
        h = ops.layer_norm(ops.reshape(z, shape=[4, 3, 10]), lw, lb, eps=1e-3)
        h = ops.gelu(h) + ops.gelu(h, approximate="tanh") + ops.silu(h) + ops.erfc(h) * ops.floor(h)
        h = h + ops.log1p(ops.square(h)) + ops.expm1(h * 0.1) + ops.logaddexp(h, h * h) * ops.round(h * 3.0)
        return ops.sum(ops.square(h)) + ops.sum(new_rm * new_rv)
    types = ["f32[4, 3, 2, 5]", "f32[3]", "f32[3]", "f32[3]", "f32[3]", "f32[3, 10]", "f32[3, 10]"]
    args = _args(types, seed=2)
    args[4] = np.abs(args[4]) + 0.5  # a running variance
    graph = _same_on_onnxruntime(f, types, range(7), args)
    assert {"batch_norm_grad_internal", "layer_norm_grad_internal"} <= {n.op for n in graph.nodes}


def _example(name):
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("train", [False, True], ids=["dropout-off", "dropout-on"])
def test_the_char_lm_transformer_training_graph_gives_frames_gradients_on_onnxruntime(train):
    """examples/train_char_lm.py's causal transformer (gelu, softmax, masks), with its dropouts off (as at
    evaluation) and on: the exported Philox draws frame's masks from the step's key, a graph input."""
    from frame_ops_basic.random import fold_in, key

    lm = _example("train_char_lm")
    shapes = lm.shapes(12)
    shapes["position"] = (6, lm.WIDTH)  # a context of 6

    def loss(tokens, targets, step_key, *weights):
        return lm.model_loss(tokens, targets, step_key, *weights, train=train)[0]
    types = ["i64[2, 6]", "i64[2, 6]", "i64[2]", *(f"f32[{', '.join(map(str, s))}]" for s in shapes.values())]
    rng = np.random.default_rng(4)
    args = [rng.integers(0, 12, (2, 6)), rng.integers(0, 12, (2, 6)), fold_in(key(0), 3),
            *(0.3 * rng.standard_normal(s).astype(np.float32) for s in shapes.values())]
    graph = _same_on_onnxruntime(loss, types, range(3, len(types)), args)
    assert ("dropout" in {n.op for n in graph.nodes}) == train


@pytest.mark.parametrize("types, attrs", [
    (["f32[2, 4, 5]", "f32[2, 4, 5]", "f32[4, 3]", "f32[2, 3, 5]", "f32[2, 3, 5]", "f32[4]", "f32[2, 4, 5]", "f32[4]"],
     {"delta_softplus": True}),
    (["f32[2, 4, 4]", "f32[2, 4, 4]", "f32[4, 2]", "f32[2, 2, 2, 4]", "f32[4, 2]", "f32[2, 4, 4]"],
     {"optional_inputs": ["z"]}),
    (["f32[1, 4, 3]", "f32[1, 4, 3]", "f32[4, 2]", "f32[1, 2, 2, 3]", "f32[1, 4, 2, 3]", "f32[4]"], {})],
    ids=["all-inputs", "grouped-B-constant-C", "grouped-apart"])
def test_selective_scan_and_its_gradients_on_onnxruntime(types, attrs):
    """frame-ops-sequence's selective scan (its forms of B and C) and its gradient (reverse linear scans)."""
    def f(*xs):
        return ops.sum(ops.square(ops.selective_scan(*xs, **attrs)))
    args = _args(types, seed=6)
    args[1] = np.abs(args[1])  # delta: a step size
    _same_on_onnxruntime(f, types, range(len(types)), args)


def test_linear_scans_along_any_axis_and_direction_on_onnxruntime():
    def f(a, b):
        return ops.sum(ops.square(ops.linear_scan(a, b, axis=1, reverse=True))) + ops.sum(ops.linear_scan(a, b, axis=-1))
    _same_on_onnxruntime(f, ["f32[2, 6, 3]", "f32[2, 6, 3]"], [0, 1])


def test_the_sequence_example_training_graph_gives_frames_gradients_on_onnxruntime():
    """examples/train_sequence.py: a causal conv1d and a selective scan, trained on a delayed copy."""
    seq = _example("train_sequence")
    from frame_core.params import flatten, unflatten

    names, leaves, tree = flatten(seq.init(np.random.default_rng(0)))

    def loss(tokens, labels, *weights):
        return seq.model_loss(unflatten(tree, weights), tokens, labels)
    types = [f"i64[2, {seq.LENGTH}]", f"i64[2, {seq.LENGTH - 2}]",
             *(f"f32[{', '.join(map(str, np.shape(v)))}]" for v in leaves)]
    rng = np.random.default_rng(1)
    vocab = np.shape(leaves[names.index("embedding")])[0]
    tokens = rng.integers(0, vocab, (2, seq.LENGTH))
    args = [tokens, tokens[:, :seq.LENGTH - 2], *leaves]
    _same_on_onnxruntime(loss, types, range(2, len(types)), args)
