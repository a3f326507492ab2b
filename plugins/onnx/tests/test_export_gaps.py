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


def _draws(dtype, shape):
    def draw(x, key):
        keys = ops.random_split(key, num=3)
        first = ops.reshape(ops.slice(keys, starts=[0], stops=[1], axes=[0]), shape=[2])
        step = ops.random_fold_in(key, np.int64(-3))
        return [ops.random_uniform(first, shape=shape, dtype=dtype, low=-2.0, high=3.0),
                ops.random_normal(step, shape=shape, dtype=dtype, mean=1.0, std=2.0),
                ops.bernoulli(key, shape=shape, p=0.3, dtype="bool"), ops.dropout(x, key, rate=0.4), keys, step]
    return fc.trace(draw, f"{dtype}[{', '.join(map(str, shape))}]", "i64[2]")


@pytest.mark.parametrize("dtype, shape", [("f32", [3, 5]), ("f64", [7]), ("f16", [2, 1])])
def test_random_ops_draw_frames_bits_on_onnxruntime(dtype, shape):
    """Philox-4x64-10 in ONNX's uint64 ops: uniform, bernoulli, dropout, split and fold_in give the same bits as
    frame; normal goes through float64 Log/Cos/Sin, whose last bits differ between maths libraries."""
    from frame_ops_basic.random import key

    graph = _draws(dtype, shape)
    x = rng.standard_normal(shape).astype(graph.inputs[0].dtype.np)
    x.reshape(-1)[0] = np.nan  # a dropped NaN stays NaN (NaN * 0), as in frame
    model = frame_onnx.to_onnx(graph)
    args = [x, key(2026)]
    got = ort.InferenceSession(model.SerializeToString()).run(None, {v.name: a for v, a in zip(model.graph.input, args)})
    want = fc.compile(graph).run(args)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape
        if k == 1 and dtype == "f64":  # normal: the maths libraries' last bits of log, cos and sin
            np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-14)
        elif k == 1:  # those rounded once to the dtype: at most one unit in its last place apart
            np.testing.assert_array_max_ulp(g, w, maxulp=1)
        else:
            assert g.tobytes() == w.tobytes(), k
    assert not {n.op_type for n in model.graph.node} & {"RandomUniform", "RandomNormal", "Bernoulli", "Dropout"}


def test_random_ops_need_opset_18_and_say_so():
    graph = fc.trace(lambda key: ops.random_uniform(key, shape=[2], dtype="f32"), "i64[2]")
    with pytest.raises(frame_onnx.OnnxError, match="BitwiseXor.*opset 18 or newer"):
        frame_onnx.to_onnx(graph, opset=17)


def test_a_training_graph_with_dropout_gives_frames_gradients_on_onnxruntime():
    """dropout's gradient is dropout(gy, key): the same key regenerates the same mask on ONNX Runtime."""
    from frame_ops_basic.random import fold_in, key

    def net(x, k, w1, w2):
        return ops.dropout(ops.tanh(x @ w1), k, rate=0.3) @ w2
    graph = fc.trace(net, "f32[8, 4]", "i64[2]", "f32[4, 16]", "f32[16, 2]")
    extended, loss = fc.extend_graph(graph, lambda *xs: ops.mean(ops.square(xs[-1])))
    training = fc.build_backward_graph(extended, loss, [2, 3])
    args = [rng.standard_normal(s).astype(np.float32) for s in [(8, 4), (4, 16), (16, 2)]]
    for step in range(2):
        _on_onnxruntime_equals_frame(training, [args[0], fold_in(key(0), step), *args[1:]])


def test_ops_without_a_mapping_are_listed_at_once_with_why_for_those_left_out_on_purpose(monkeypatch):
    from frame_onnx.rules_export import RULES

    for op in ("zeros", "eye"):  # every frame op has a rule: take two away, as a pack's new op would lack one
        monkeypatch.delitem(RULES, op)
    exe = fc.compile(fc.trace(lambda x: ops.tanh(ops.exp(x) * 2.0 + 1.0), "f32[4]"))
    fused = exe.graph  # the compiled graph: one fusion node
    graph = fc.trace(lambda x: x + ops.zeros(shape=[4], dtype="f32") + ops.eye(n=4, dtype="f32")[0], "f32[4]")
    assert "fused_elementwise_internal" in {n.op for n in fused.nodes}
    with pytest.raises(frame_onnx.UnmappedOpError) as info:
        frame_onnx.to_onnx(fused)
    assert info.value.reasons == {"fused_elementwise_internal": "a compiled graph's fusion: export the graph before "
                                                                "compiling it"}
    with pytest.raises(frame_onnx.UnmappedOpError) as info:
        frame_onnx.to_onnx(graph)
    assert set(info.value.ops) == {"zeros", "eye"} and not info.value.reasons


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


def test_a_compiled_training_graph_with_paired_norms_is_refused_saying_why():
    """Compiling pairs a norm with its gradient (layer_norm_train_internal & co.): export before compiling."""
    pytest.importorskip("frame_ops_nn")
    graph = fc.trace(lambda x, w, b: ops.layer_norm(x, w, b), "f32[4, 6]", "f32[6]", "f32[6]")
    compiled = fc.compile(_training(graph, [0, 1, 2])).graph
    with pytest.raises(frame_onnx.UnmappedOpError) as info:
        frame_onnx.to_onnx(compiled)
    paired = {"layer_norm_train_internal", "layer_norm_grad_saved_internal"}
    # with frame-native installed, compiling turns the pair into its compiled twins (native_*): the same reason
    assert paired <= set(info.value.reasons) or {f"native_{op}" for op in paired} <= set(info.value.reasons)
    assert set(info.value.reasons) == set(info.value.ops)
    assert "export the graph before compiling it" in str(info.value)
