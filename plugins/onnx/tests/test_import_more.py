"""Import of rounding, the activations and normalisations torch.onnx emits besides the basic ones, two-way and
variable-length recurrences, and Loops whose trip count depends on the data: each against ONNX Runtime (and
torch where it exports the construct)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
rng = np.random.default_rng(1)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _w(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "case", [_vi(n, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype))
                                              for n, a in inputs], outputs,
                              initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, dict(inputs)


def _node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def _same_as_onnxruntime(model, feeds, rtol=1e-5, atol=1e-5):
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    imported = frame_onnx.load(model)
    got = imported.run([feeds[n] for n in imported.input_names])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return imported, got


# -- rounding ------------------------------------------------------------------------------------------------
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.7, 0.2, 1.49999, -3.0, 7.0], np.float32)


@pytest.mark.parametrize("op", ["Floor", "Ceil", "Round"])
def test_rounding_equals_onnxruntime_exactly_halves_to_even(op):
    model, feeds = _model([_node(op, ["x"])], [("x", HALVES)], [_vi("y", [12])])
    _, (got,) = _same_as_onnxruntime(model, feeds, rtol=0, atol=0)
    if op == "Round":  # half to even, not half away from zero
        assert got[:7].tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 4.0]


def test_rounding_has_zero_gradient_through_an_imported_model():
    model, feeds = _model([_node("Round", ["x"], ["r"]), _node("Mul", ["r", "x"], ["y"])],
                          [("x", HALVES)], [_vi("y", [12])])
    imported = frame_onnx.load(model)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(xs[-1]))
    (_, gx) = fc.compile(fc.build_backward_graph(graph, loss, [0])).run([feeds["x"]])[-2:]
    np.testing.assert_array_equal(gx, np.rint(HALVES))  # d(round(x) x)/dx = round(x): round's own part is 0


# -- activations, Mod, NaN tests, normalisations, padding ---------------------------------------------------------
def test_mod_both_conventions_equal_onnxruntime():
    a = np.array([5.5, -5.5, 5.5, -5.5, 3.0, -0.25], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 1.5, 4.0], np.float32)
    model, feeds = _model([_node("Mod", ["a", "b"], ["m"], fmod=1), _node("Mod", ["a", "b"], ["p"]),
                           _node("Concat", ["m", "p"], ["y"], axis=0)],
                          [("a", a), ("b", b)], [_vi("y", [12])])
    with pytest.raises(Exception):  # onnxruntime implements float Mod only with fmod=1: compare with numpy too
        ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = frame_onnx.load(model).run([a, b])[0]
    np.testing.assert_allclose(got, np.concatenate([np.fmod(a, b), np.mod(a, b)]), rtol=1e-6)
    fmod_only, feeds = _model([_node("Mod", ["a", "b"], ["y"], fmod=1)], [("a", a), ("b", b)], [_vi("y", [6])])
    _same_as_onnxruntime(fmod_only, feeds)


def test_nan_and_inf_tests_equal_onnxruntime():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], np.float32)
    model, feeds = _model([_node("IsNaN", ["x"], ["n"]), _node("IsInf", ["x"], ["i"]),
                           _node("IsInf", ["x"], ["p"], detect_negative=0), _node("IsInf", ["x"], ["q"], detect_positive=0),
                           _node("IsInf", ["x"], ["z"], detect_negative=0, detect_positive=0)],
                          [("x", x)], [_vi(n, [6], TensorProto.BOOL) for n in "nipqz"], opset=20)
    _same_as_onnxruntime(model, feeds, rtol=0, atol=0)


def test_prelu_mish_instance_norm_and_a_filled_pad_equal_onnxruntime():
    x = _w(2, 3, 4, 5) * 4
    model, feeds = _model([_node("PRelu", ["x", "slope"], ["a"]), _node("Mish", ["a"], ["b"]),
                           _node("InstanceNormalization", ["b", "s", "bias"], ["c"], epsilon=1e-4),
                           _node("Pad", ["c", "pads", "fill"], ["y"])],
                          [("x", x)], [_vi("y", [2, 3, 6, 8])],
                          [("slope", _w(3, 1, 1)), ("s", _w(3)), ("bias", _w(3)),
                           ("pads", np.array([0, 0, 1, 2, 0, 0, 1, 1], np.int64)), ("fill", np.float32(-1.5))])
    imported, (y,) = _same_as_onnxruntime(model, feeds)
    assert (y[:, :, 0] == -1.5).all() and (y[..., :2] == -1.5).all()


def test_prelu_mish_and_instance_norm_from_torch_equal_torch_and_their_gradients():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.PReLU(3), torch.nn.Mish(),
                              torch.nn.InstanceNorm2d(3, affine=True), torch.nn.Hardswish()).eval()
    with torch.no_grad():  # a non-trivial affine part
        net[3].weight.uniform_(0.5, 1.5)
        net[3].bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 2, 5, 5)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"], opset_version=18)
    imported = frame_onnx.load(buffer.getvalue())
    got = imported.run([x.numpy()])[0]
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, ort.InferenceSession(buffer.getvalue()).run(None, {"x": x.numpy()})[0],
                               rtol=1e-5, atol=1e-5)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(ops.square(xs[-1])))
    n = len(imported.param_names)
    outs = fc.compile(fc.build_backward_graph(graph, loss, list(range(1, 1 + n)))).run(imported.arguments([x.numpy()]))
    net.zero_grad()
    (net(x) ** 2).sum().backward()
    # torch.onnx renames PReLU's slope (onnx::PRelu_<k>, reshaped to [3, 1, 1]): match parameters by value
    theirs = [p for p in net.parameters()]
    for name, g in zip(imported.param_names, outs[-n:]):
        ours = imported.flat_params()[imported.param_names.index(name)].reshape(-1)
        (match,) = [p for p in theirs if p.numel() == ours.size and np.array_equal(p.detach().numpy().reshape(-1), ours)]
        np.testing.assert_allclose(g.reshape(-1), match.grad.numpy().reshape(-1), rtol=1e-4, atol=1e-5, err_msg=name)


# -- recurrences: both directions, sequence lengths -------------------------------------------------------------
_GATES = {"RNN": (1, 1), "GRU": (3, 1), "LSTM": (4, 2)}


def _recurrence(op, direction, lens=None, lens_as_input=False, states=True, layout=0):
    t, b, i, h = 5, 3, 2, 4
    d = 2 if direction == "bidirectional" else 1
    gates, n_states = _GATES[op]
    x = _w(t, b, i) if layout == 0 else _w(b, t, i)
    inits = [("w", _w(d, gates * h, i)), ("r", _w(d, gates * h, h)), ("b", _w(d, 2 * gates * h))]
    inputs = [("x", x)]
    names = ["x", "w", "r", "b", ""]
    if lens is not None:
        names[4] = "lens"
        (inputs if lens_as_input else inits).append(("lens", np.asarray(lens, np.int32)))
    if states:
        names += ["h0", "c0"][:n_states]
        inits += [("h0", _w(d, b, h) if layout == 0 else _w(b, d, h)), ("c0", _w(d, b, h) if layout == 0 else _w(b, d, h))][:n_states]
    outs = ["y", "yh", "yc"][:1 + n_states]
    y_shape = [t, d, b, h] if layout == 0 else [b, t, d, h]
    s_shape = [d, b, h] if layout == 0 else [b, d, h]
    return _model([_node(op, names, outs, hidden_size=h, direction=direction, layout=layout)], inputs,
                  [_vi("y", y_shape)] + [_vi(n, s_shape) for n in outs[1:]], inits)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_bidirectional_recurrences_equal_onnxruntime(op):
    _same_as_onnxruntime(*_recurrence(op, "bidirectional"))
    _same_as_onnxruntime(*_recurrence(op, "bidirectional", states=False))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lengths_equal_onnxruntime(op, direction):
    """Steps past a sequence's end keep its state and output zeros; the reverse direction starts at the end."""
    _, (y, *_) = _same_as_onnxruntime(*_recurrence(op, direction, lens=[5, 2, 0]))
    assert (y[2:, :, 1] == 0).all() and (y[:, :, 2] == 0).all()


def test_sequence_lengths_given_as_data_equal_onnxruntime():
    _same_as_onnxruntime(*_recurrence("LSTM", "bidirectional", lens=[3, 5, 1], lens_as_input=True))


def test_sequence_lengths_in_the_batch_first_layout_equal_onnxruntime_in_the_time_first_one():
    """ONNX Runtime refuses layout=1: the same model in layout 0 is the reference, its inputs and outputs
    transposed."""
    model, feeds = _recurrence("LSTM", "bidirectional", lens=[4, 1, 5])
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    node = model.graph.node[0]
    next(a for a in node.attribute if a.name == "layout").i = 1
    for init in model.graph.initializer:
        if init.name in ("h0", "c0"):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).transpose(1, 0, 2), init.name))
    for vi, shape in zip([*model.graph.input, *model.graph.output], [[3, 5, 2], [3, 5, 2, 4], [3, 2, 4], [3, 2, 4]]):
        vi.CopyFrom(_vi(vi.name, shape))
    y, yh, yc = frame_onnx.load(model).run([feeds["x"].transpose(1, 0, 2)])
    for got, want, perm in ((y, expected[0], (1, 2, 0, 3)), (yh, expected[1], (1, 0, 2)), (yc, expected[2], (1, 0, 2))):
        np.testing.assert_allclose(got.transpose(perm), want, rtol=1e-5, atol=1e-5)


def test_sequence_lengths_out_of_range_are_refused_by_name():
    model, _ = _recurrence("GRU", "forward", lens=[6, 2, 1])
    with pytest.raises(frame_onnx.UnsupportedModelError, match=r"sequence_lens \[6, 2, 1\] outside \[0, 5\]"):
        frame_onnx.load(model)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_bidirectional_torch_layers_equal_torch_and_their_gradients(kind):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cls = getattr(torch.nn, kind)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.fc = cls(3, 4, batch_first=True, bidirectional=True, num_layers=2), torch.nn.Linear(8, 2)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y[:, -1])
    net = Net().eval()
    x = torch.randn(2, 6, 3)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}})
    data = buffer.getvalue()
    imported = frame_onnx.load(data, dims={"batch": 2})
    got = imported.run([x.numpy()])[0]
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, ort.InferenceSession(data).run(None, {"x": x.numpy()})[0], rtol=1e-5, atol=1e-5)
    # gradients of a loss w.r.t. the input, against torch (parameter names differ: torch.onnx renames the
    # recurrent weights it repacks)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(ops.square(xs[-1])))
    gx = fc.compile(fc.build_backward_graph(graph, loss, [0])).run(imported.arguments([x.numpy()]))[-1]
    xt = x.clone().requires_grad_(True)
    (net(xt) ** 2).sum().backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


# -- Loop with a trip count computed from the data ------------------------------------------------------------
def _counting_body():
    nodes = [_node("Add", ["s_in", "one"], ["s_out"]), _node("Identity", ["cond_in"], ["cond_out"]),
             _node("Mul", ["s_out", "s_out"], ["y_out"])]
    return helper.make_graph(nodes, "body", [_vi("i", [], I64), _vi("cond_in", [], TensorProto.BOOL), _vi("s_in", [2])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("s_out", [2]), _vi("y_out", [2])],
                             [numpy_helper.from_array(np.float32(1.5), "one")])


@pytest.mark.parametrize("count", [0, 3, 7, 12])
@pytest.mark.parametrize("bound", ["Min", "Clip"])
def test_a_data_dependent_trip_count_with_a_provable_bound_equals_onnxruntime(count, bound):
    cap = _node("Min", ["count", "seven"], ["m"]) if bound == "Min" else _node("Clip", ["count", "", "seven"], ["m"])
    model, feeds = _model([cap, _node("Loop", ["m", "", "s0"], ["s", "ys"], body=_counting_body())],
                          [("count", np.array(count, np.int64)), ("s0", _w(2))], [_vi("s", [2]), _vi("ys", [None, 2])],
                          [("seven", np.array(7, np.int64))])
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    imported = frame_onnx.load(model)
    s, ys = imported.run([feeds[n] for n in imported.input_names])
    steps = min(count, 7)
    np.testing.assert_allclose(s, expected[0], rtol=1e-6)
    # frame stacks the bound's 7 rows, the rows of steps not run are zero (as for a data-dependent exit)
    assert ys.shape == (7, 2) and expected[1].shape == (steps, 2) and not ys[steps:].any()
    np.testing.assert_allclose(ys[:steps], expected[1], rtol=1e-6)


def test_a_data_dependent_trip_count_without_a_bound_is_refused_with_what_to_do():
    model, _ = _model([_node("Loop", ["count", "", "s0"], ["s"], body=_counting_body(), name="counted")],
                      [("count", np.array(3, np.int64)), ("s0", _w(2))], [_vi("s", [2])])
    model.graph.node[0].attribute[0].g.output.pop()  # no per-step output
    with pytest.raises(frame_onnx.UnsupportedModelError) as info:
        frame_onnx.load(model)
    text = str(info.value)
    assert "Loop" in text and "no provable bound" in text and "Min(count, N)" in text


# -- 3-D convolutions and pools: im2col (slices, a stack, one matmul) and window slices ---------------------------
def test_3d_convolutions_and_pools_equal_onnxruntime():
    nodes = [_node("Conv", ["x", "w", "b"], ["c"], strides=[1, 2, 1], dilations=[2, 1, 1], pads=[1, 0, 1, 0, 1, 1]),
             _node("Relu", ["c"], ["r"]), _node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2, 2], strides=[1, 1, 2]),
             _node("AveragePool", ["r"], ["a"], kernel_shape=[3, 2, 2], pads=[1, 1, 0, 1, 0, 1], count_include_pad=0),
             _node("GlobalAveragePool", ["a"], ["ga"]), _node("GlobalMaxPool", ["m"], ["gm"]), _node("Add", ["ga", "gm"], ["y"])]
    model, feeds = _model(nodes, [("x", _w(2, 2, 6, 7, 5))], [_vi("y", [2, 3, 1, 1, 1])],
                          [("w", _w(3, 2, 3, 2, 3)), ("b", _w(3))])
    _same_as_onnxruntime(model, feeds)


def test_a_3d_cnn_from_torch_equals_torch_and_its_gradients():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool3d(2),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 8, 2)).eval()
    x = torch.randn(2, 1, 4, 4, 4)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17)
    imported = frame_onnx.load(buffer.getvalue())
    np.testing.assert_allclose(imported.run([x.numpy()])[0], net(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(ops.square(xs[-1])))
    n = len(imported.param_names)
    outs = fc.compile(fc.build_backward_graph(graph, loss, list(range(1, 1 + n)))).run(imported.arguments([x.numpy()]))
    (net(x) ** 2).sum().backward()
    theirs = dict(net.named_parameters())
    for name, g in zip(imported.param_names, outs[-n:]):
        np.testing.assert_allclose(g, theirs[name].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_grouped_3d_convolution_is_listed_as_unsupported():
    model, _ = _model([_node("Conv", ["x", "w"], ["c"], name="conv3d", group=2), _node("Relu", ["c"], ["y"])],
                      [("x", _w(1, 2, 4, 4, 4))], [_vi("y", [1, 4, 2, 2, 2])], [("w", _w(4, 1, 3, 3, 3))])
    with pytest.raises(frame_onnx.UnsupportedModelError) as info:
        frame_onnx.load(model)
    assert "Conv (ai.onnx, opset 18) at node 'conv3d'" in str(info.value) and "grouped 3-D convolution" in str(info.value)


# -- reflect/edge pads, nearest resizing --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_reflect_and_edge_pads_equal_onnxruntime(mode):
    model, feeds = _model([_node("Pad", ["x", "pads"], mode=mode)], [("x", _w(2, 3, 4, 5))], [_vi("y", [2, 3, 7, 9])],
                          [("pads", np.array([0, 0, 3, 0, 0, 0, 0, 4], np.int64))])
    _same_as_onnxruntime(model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize("transform, rounding, scales, sizes", [
    ("asymmetric", "floor", [1, 1, 2, 3], None), ("half_pixel", "round_prefer_floor", [1, 1, 1.5, 0.6], None),
    ("pytorch_half_pixel", "round_prefer_ceil", None, [2, 3, 7, 2]), ("align_corners", "ceil", None, [2, 3, 9, 4]),
    ("tf_half_pixel_for_nn", "round_prefer_floor", [1, 1, 2.5, 1], None)])
def test_nearest_resizing_equals_onnxruntime(transform, rounding, scales, sizes):
    inputs = ["x", "", "scales" if scales else "", "sizes" if sizes else ""]
    # scales as a Constant node, as exporters write them (a floating initializer would be a parameter)
    given = _node("Constant", [], ["scales"], value=numpy_helper.from_array(np.array(scales, np.float32))) if scales \
        else _node("Constant", [], ["sizes"], value=numpy_helper.from_array(np.array(sizes, np.int64)))
    out = sizes or [int(np.floor(n * s)) for n, s in zip([2, 3, 4, 5], scales)]
    model, feeds = _model([given, _node("Resize", inputs, mode="nearest", coordinate_transformation_mode=transform,
                                        nearest_mode=rounding)], [("x", _w(2, 3, 4, 5))], [_vi("y", out)])
    _same_as_onnxruntime(model, feeds, rtol=0, atol=0)


def test_torch_upsampling_and_reflect_padding_equal_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
                              torch.nn.Upsample(scale_factor=2, mode="nearest"), torch.nn.ReLU()).eval()
    x = torch.randn(2, 2, 4, 5)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}})
    imported = frame_onnx.load(buffer.getvalue(), dims={"batch": 2})
    got = imported.run([x.numpy()])[0]
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, ort.InferenceSession(buffer.getvalue()).run(None, {"x": x.numpy()})[0],
                               rtol=1e-5, atol=1e-5)
    assert imported.any_batch  # the gathers and slices hold no batch size


def test_2d_layers_without_frame_ops_nn_use_the_same_im2col_and_equal_onnxruntime(monkeypatch):
    from frame_onnx import rules_nn

    monkeypatch.setattr(rules_nn, "_have", lambda op: False)  # as if frame-ops-nn were not installed
    nodes = [_node("Conv", ["x", "w"], ["c"], strides=[2, 1], dilations=[1, 2], pads=[1, 0, 1, 2]),
             _node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2]),
             _node("AveragePool", ["c"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             _node("GlobalMaxPool", ["m"], ["gm"]), _node("GlobalAveragePool", ["a"], ["ga"]),
             _node("Add", ["gm", "ga"], ["y"])]
    model, feeds = _model(nodes, [("x", _w(2, 3, 7, 7))], [_vi("y", [2, 4, 1, 1])], [("w", _w(4, 3, 3, 2))])
    imported, _ = _same_as_onnxruntime(model, feeds)
    assert "conv2d" not in {n.op for n in imported.graph.nodes}


def test_more_activations_and_normalisations_equal_onnxruntime():
    x = _w(2, 3, 4, 5) * 4
    nodes = [_node("Celu", ["x"], ["a"], alpha=0.7), _node("ThresholdedRelu", ["x"], ["b"], alpha=0.3),
             _node("Shrink", ["x"], ["c"], lambd=0.6, bias=0.2), _node("MeanVarianceNormalization", ["x"], ["d"]),
             _node("Abs", ["x"], ["ax"]), _node("ReduceLogSum", ["ax", "axes"], ["e"], keepdims=1),
             _node("Sum", ["a", "b", "c", "d", "e"], ["y"])]
    model, feeds = _model(nodes, [("x", x)], [_vi("y", [2, 3, 4, 5])], [("axes", np.array([1, 3], np.int64))])
    _same_as_onnxruntime(model, feeds)
