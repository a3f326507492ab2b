"""frame graphs exported to ONNX and run on ONNX Runtime: the examples' MLP (and its training graph), an RNN
via scan, the PINO example's FNO layer, a loop with a data-dependent exit, a branch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.ir.types import as_type
import frame_onnx
from frame_onnx.errors import UnmappedOpError

ort = pytest.importorskip("onnxruntime")


def mlp_loss(x, t, w1, b1, w2, b2, w3, b3):  # examples/train_mlp.py
    h = ops.relu(x @ w1 + b1)
    h = ops.relu(h @ w2 + b2)
    return ops.mse_loss(h @ w3 + b3, t)


MLP_TYPES = ["f32[32, 8]", "f32[32, 1]", "f32[8, 16]", "f32[16]", "f32[16, 16]", "f32[16]", "f32[16, 1]", "f32[1]"]


def rnn_loss(xs, targets, h0, wx, wh, b, wo, bo):  # examples/train_rnn.py
    def step(h, x):
        h = ops.tanh(x @ wx + h @ wh + b)
        return h, h @ wo + bo
    _, ys = ops.scan(step, h0, xs)
    return ops.mse_loss(ys, targets)


RNN_TYPES = ["f32[6, 4, 2]", "f32[6, 4, 1]", "f32[4, 8]", "f32[2, 8]", "f32[8, 8]", "f32[8]", "f32[8, 1]", "f32[1]"]


def fno_layer(h, spectral_w, point_w, point_b):  # examples/train_pino.py's Fourier layer
    from frame_ops_fft import spectral_conv1d

    return ops.tanh(spectral_conv1d(h, spectral_w) + point_w @ h + point_b)


FNO_TYPES = ["f32[2, 4, 32]", "f32[6, 4, 4, 2]", "f32[4, 4]", "f32[4, 1]"]


def until_large(x, w):
    """Doubles-ish a state until its sum passes 10: the trip count depends on the data."""
    def body(i, s):
        new = s * w + 1.0
        return ops.less(ops.sum(new), 10.0), new, ops.sum(new)
    return ops.loop(body, 8, True, x, trip_count=True)


def _args(types, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(as_type(t).shape).astype(np.float32) for t in types]


def _on_ort(graph, args):
    model = frame_onnx.to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString())
    return session.run(None, {i.name: a for i, a in zip(model.graph.input, args)}), model


@pytest.mark.parametrize("fn, types, wrt", [
    (mlp_loss, MLP_TYPES, None), (mlp_loss, MLP_TYPES, range(2, 8)),
    (rnn_loss, RNN_TYPES, None), (rnn_loss, RNN_TYPES, range(2, 8)),
    (fno_layer, FNO_TYPES, None)], ids=["mlp", "mlp-training", "rnn-scan", "rnn-scan-training", "fno-layer"])
def test_frame_graph_on_onnxruntime_equals_frame(fn, types, wrt):
    graph = fc.trace(fn, *types)
    if wrt is not None:
        graph = fc.build_backward_graph(graph, 0, list(wrt))
    args = _args(types)
    got, model = _on_ort(graph, args)
    want = fc.compile(graph).run(args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert [i.name for i in model.graph.input][:2] == [v.name for v in graph.inputs][:2]


def test_mlp_training_graph_on_onnxruntime_gives_the_gradients_of_torch_named_outputs():
    graph = fc.build_backward_graph(fc.trace(mlp_loss, *MLP_TYPES), 0, list(range(2, 8)))
    got, model = _on_ort(graph, _args(MLP_TYPES))
    names = [o.name for o in model.graph.output]
    assert names[1] == graph.output_names[1] and names[1].startswith("grad(")


def test_loop_with_a_data_dependent_exit():
    graph = fc.trace(until_large, "f32[3]", "f32[3]")
    for x in ([0.5, 0.2, 0.1], [3.0, 3.0, 3.0], [-1.0, 0.0, 0.0]):
        args = [np.asarray(x, np.float32), np.full(3, 1.5, np.float32)]
        got, _ = _on_ort(graph, args)
        want = fc.compile(graph).run(args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        steps = int(want[-1])
        assert got[1].shape == (8,) and np.all(got[1][steps:] == 0)  # frame's zero rows after T
    trips = {int(fc.compile(graph).run([np.asarray(x, np.float32), np.full(3, 1.5, np.float32)])[-1])
             for x in ([0.5, 0.2, 0.1], [3.0, 3.0, 3.0])}
    assert len(trips) == 2 and max(trips) < 8  # the exit really depends on the data


def test_branch_becomes_if():
    graph = fc.trace(lambda x, flag: ops.if_else(flag, lambda v: v * v, lambda v: ops.sqrt(v), x), "f32[3]", "bool[]")
    x = np.array([1.0, 4.0, 9.0], np.float32)
    for flag in (True, False):
        got, model = _on_ort(graph, [x, np.array(flag)])
        np.testing.assert_allclose(got[0], x * x if flag else np.sqrt(x), rtol=1e-6)
    assert any(n.op_type == "If" for n in model.graph.node)


def test_reverse_loop_and_scanned_inputs_of_a_loop_gradient():
    """The gradient of a loop is a reverse loop that reads stacked rows: its export pads and reverses them."""
    def f(x, w):
        return ops.sum(ops.loop(lambda i, s: (True, ops.tanh(s * w)), 4, True, x))
    graph = fc.build_backward_graph(fc.trace(f, "f32[3]", "f32[3]"), 0, [0, 1])
    assert any(n.op == "loop" and n.attrs["reverse"] for n in graph.nodes)
    args = _args(["f32[3]", "f32[3]"], seed=3)
    got, _ = _on_ort(graph, args)
    for g, w in zip(got, fc.compile(graph).run(args)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_exported_model_imports_back():
    graph = fc.trace(mlp_loss, *MLP_TYPES)
    args = _args(MLP_TYPES)
    names = ["w1", "b1", "w2", "b2", "w3", "b3"]
    back = frame_onnx.load(frame_onnx.to_onnx(graph, params=dict(zip(names, args[2:]))))
    assert back.input_names == ["x", "t"] and back.param_names == sorted(names)
    np.testing.assert_array_equal(back.params["w2"], args[4])
    np.testing.assert_allclose(back.run(args[:2])[0], fc.compile(graph).run(args)[0], rtol=1e-6)


def test_ops_without_a_mapping_are_all_listed():
    def f(x):
        return x * ops.linspace(start=0.0, stop=1.0, num=3, dtype="f32") + ops.ones(shape=[3], dtype="f32")
    graph = fc.trace(f, "f32[3]")
    with pytest.raises(UnmappedOpError) as info:
        frame_onnx.to_onnx(graph)
    assert set(info.value.ops) == {"linspace", "ones"}
    assert "ones (at node" in str(info.value) and "frame_onnx_export_rules" in str(info.value)


def test_a_pack_maps_its_op_through_the_hook():
    pytest.importorskip("frame_ops_nn")

    class Plugin:  # ones has no built-in rule; a hook's rule also replaces a built-in one (adaptive_avg_pool2d)
        @frame_onnx.hookimpl
        def frame_onnx_export_rules(self):
            def ones(ex, node):
                return [ex.const(np.ones(node.outputs[0].shape), node.outputs[0].dtype)]

            def adaptive_avg_pool2d(ex, node):  # to 1 x 1 it is a GlobalAveragePool
                return [ex.emit("GlobalAveragePool", [ex.input(node, 0)])]
            return {"ones": ones, "adaptive_avg_pool2d": adaptive_avg_pool2d}
    graph = fc.trace(lambda x: ops.adaptive_avg_pool2d(x, output_size=[1]) + ops.ones(shape=[1, 1], dtype="f32"),
                     "f32[2, 3, 4, 5]")
    plugin = Plugin()
    frame_onnx.register(plugin)
    try:
        x = _args(["f32[2, 3, 4, 5]"])[0]
        got, _ = _on_ort(graph, [x])
        np.testing.assert_allclose(got[0], fc.compile(graph).run([x])[0], rtol=1e-6)
        assert "GlobalAveragePool" in {n.op_type for n in frame_onnx.to_onnx(graph).graph.node}
    finally:
        frame_onnx.unregister(plugin)
    with pytest.raises(UnmappedOpError, match="ones"):
        frame_onnx.to_onnx(graph)


def test_save_writes_a_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    frame_onnx.save(fc.trace(mlp_loss, *MLP_TYPES), path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 18


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_transforms_and_complex_ops_become_dft(norm):
    def f(x, z, w):
        spectrum = ops.rfft(x, axis=1, norm=norm)                                  # [2, 5, 3, 2]
        back = ops.irfft(spectrum, n=9, axis=1, norm=norm)                          # odd n: the mirror differs
        full = ops.ifft(ops.complex_mul(ops.fft(z, axis=0, norm=norm), ops.conj(w)), axis=0, norm=norm)
        return back, full, ops.complex_matmul(z, w)
    graph = fc.trace(f, "f32[2, 8, 3]", "f32[4, 4, 2]", "f32[4, 4, 2]")
    args = _args(["f32[2, 8, 3]", "f32[4, 4, 2]", "f32[4, 4, 2]"], seed=5)
    got, model = _on_ort(graph, args)
    assert any(n.op_type == "DFT" for n in model.graph.node)
    for g, w in zip(got, fc.compile(graph).run(args)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_stack_exports_and_runs_on_onnxruntime():
    """Its rule had been registered on a helper by a misplaced decorator: every stack failed to export."""
    ort = pytest.importorskip("onnxruntime")
    graph = fc.trace(lambda x, y: ops.stack(x, ops.tanh(y), axis=1), "f32[3, 4]", "f32[3, 4]")
    x, y = np.ones((3, 4), np.float32), np.full((3, 4), 0.5, np.float32)
    got = ort.InferenceSession(frame_onnx.to_onnx(graph).SerializeToString()).run(None, {"x": x, "y": y})[0]
    np.testing.assert_allclose(got, fc.compile(graph).run([x, y])[0], rtol=1e-6)


@pytest.mark.parametrize("fn", [lambda x: ops.elu(x, alpha=0.7), lambda x: ops.leaky_relu(x, slope=0.2),
                                lambda x: ops.softplus(x * 30), ops.gelu_tanh,
                                lambda x: x * 2 + ops.ones_like(x) + ops.zeros_like(x)],
                         ids=["elu", "leaky_relu", "softplus", "gelu_tanh", "ones_zeros_like"])
def test_activations_and_their_gradients_to_second_order_run_on_onnxruntime(fn):
    ort = pytest.importorskip("onnxruntime")
    first = fc.build_backward_graph(fc.trace(lambda x: ops.sum(fn(x)), "f32[3, 4]"), 0, [0])
    extended, loss = fc.extend_graph(first, lambda *v: ops.sum(ops.square(v[-1])))
    second = fc.build_backward_graph(extended, loss, [0])
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    expected = fc.compile(second).run([x])
    got = ort.InferenceSession(frame_onnx.to_onnx(second).SerializeToString()).run(None, {"x": x})
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn, shape", [
    (lambda t: ops.embedding(t, np.array([[1, 2], [0, 1]]), padding_idx=1), (3, 4)),
    (lambda t: ops.gather(t, np.array([[2, 0], [1, 1]]), axis=-1), (2, 3, 4)),
    (lambda t: ops.gather(t, np.array([1, 1, 0]), axis=1), (2, 3, 4))],
    ids=["embedding", "gather_last_axis", "gather_middle_axis"])
def test_lookups_and_their_gradients_run_on_onnxruntime(fn, shape):
    """The table's gradient is a scatter_add along the gathered axis (it had a rule for axis 0 only)."""
    ort = pytest.importorskip("onnxruntime")
    forward = fc.trace(lambda t: ops.sum(ops.square(fn(t))), f"f32[{', '.join(map(str, shape))}]")
    training = fc.build_backward_graph(forward, 0, [0])
    t = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    expected = fc.compile(training).run([t])
    got = ort.InferenceSession(frame_onnx.to_onnx(training).SerializeToString()).run(None, {"t": t})
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [17, 18, 21])
def test_reductions_over_axes_export_at_every_opset(opset):
    """ReduceMax/Min/Mean/LogSumExp take their axes as an input from opset 18 only; at 17 as an attribute (the
    export at opset 17 failed the checker)."""
    ort = pytest.importorskip("onnxruntime")
    fn = lambda x: ops.max(x, axes=[1]) + ops.min(x, axes=[1]) + ops.mean(x, axes=[1]) + ops.logsumexp(x, axes=[1])  # noqa: E731
    forward = fc.trace(fn, "f32[3, 4]")
    extended, loss = fc.extend_graph(forward, lambda x, y: ops.sum(ops.square(y)))
    training = fc.build_backward_graph(extended, loss, [0])
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    got = ort.InferenceSession(frame_onnx.to_onnx(training, opset=opset).SerializeToString()).run(None, {"x": x})
    for g, e in zip(got, fc.compile(training).run([x])):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
