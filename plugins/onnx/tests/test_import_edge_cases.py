"""Edge cases of the import rules found by attacking them with hand-built models: each against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT
rng = np.random.default_rng(7)


def _w(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _untyped(name):  # an output whose type the exported model's shape inference fills in
    return onnx.ValueInfoProto(name=name)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in inputs],
        [helper.make_tensor_value_info(n, elem, shape) if shape is not None else _untyped(n) for n, elem, shape in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    inferred = {v.name: v.type for v in onnx.shape_inference.infer_shapes(model).graph.output}
    for out in model.graph.output:
        if not out.HasField("type"):
            out.type.CopyFrom(inferred[out.name])
    return model, dict(inputs)


def _same_as_onnxruntime(model, feeds):
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    imported = frame_onnx.load(model)
    got = imported.run([feeds[n] for n in imported.input_names])
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    return imported


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather_with_negative_indices_given_as_data_counts_from_the_end(dtype):
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    model, feeds = _model([node], [("x", _w(4, 5)), ("i", np.array([[-1, 0], [3, -5]], dtype))], [("y", F, [4, 2, 2])])
    _same_as_onnxruntime(model, feeds)


@pytest.mark.parametrize("repeats", [[0, 1], [2, 0]])
def test_tile_with_zero_repeats_gives_an_empty_axis(repeats):
    node = helper.make_node("Tile", ["x", "r"], ["y"])
    model, feeds = _model([node], [("x", _w(2, 3))], [("y", F, [2 * repeats[0], 3 * repeats[1]])], [("r", np.array(repeats, np.int64))])
    _same_as_onnxruntime(model, feeds)


def test_float_initializers_read_only_as_resize_scales_or_range_bounds_are_constants_not_parameters():
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest"),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["r", "w"], ["z"])]
    inits = [("scales", np.array([1, 1, 2, 1.5], np.float32)), ("start", np.array(1.0, np.float32)),
             ("limit", np.array(5.0, np.float32)), ("delta", np.array(1.5, np.float32)), ("w", _w(3))]
    model, feeds = _model(nodes, [("x", _w(1, 2, 3, 4))], [("y", F, [1, 2, 6, 6]), ("z", F, [3])], inits)
    imported = _same_as_onnxruntime(model, feeds)
    assert imported.param_names == ["w"]  # the weight read by Add stays a parameter


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
                                   {"pads": [0, 0, 1, 1]}, {"dilations": [2, 2], "pads": [1, 1, 1, 1]}, {"group": 2},
                                   ])
def test_conv_transpose_2d_equals_onnxruntime(attrs):
    pytest.importorskip("frame_ops_nn")
    groups = attrs.get("group", 1)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    model, feeds = _model([node], [("x", _w(2, 4, 4, 5))], [("y", F, None)],
                          [("w", _w(4, 6 // groups, 3, 3)), ("b", _w(6))])
    _same_as_onnxruntime(model, feeds)


def test_conv_transpose_1d_equals_onnxruntime_and_3d_is_listed_as_unsupported():
    pytest.importorskip("frame_ops_nn")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2], pads=[1, 0])
    model, feeds = _model([node], [("x", _w(2, 4, 5))], [("y", F, None)], [("w", _w(4, 3, 3))])
    _same_as_onnxruntime(model, feeds)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"])
    model, _ = _model([node], [("x", _w(1, 2, 3, 3, 3))], [("y", F, None)], [("w", _w(2, 3, 2, 2, 2))])
    with pytest.raises(frame_onnx.UnsupportedModelError, match="3-D transposed convolution"):
        frame_onnx.load(model)


@pytest.mark.parametrize("attrs", [
    {"dilations": [3, 2], "output_padding": [2, 1]},
    {"strides": [2, 1], "dilations": [3, 3], "output_padding": [2, 2], "group": 2, "pads": [1, 0, 1, 2]},
    {"strides": [1, 2], "dilations": [4, 1], "output_padding": [3, 1], "pads": [0, 2, 1, 0]}])
def test_conv_transpose_with_output_padding_past_the_stride_equals_torch(attrs):
    """output_padding at or above the stride, below the dilation: torch allows it (ONNX Runtime refuses it),
    and frame imports it as torch computes it."""
    pytest.importorskip("frame_ops_nn")
    torch = pytest.importorskip("torch")
    groups = attrs.get("group", 1)
    x, w = _w(2, 4, 3, 4), _w(4, 6 // groups, 2, 3)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    model, _ = _model([node], [("x", x)], [("y", F, None)], [("w", w)])
    pads = attrs.get("pads", [0] * 4)
    full = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x), torch.from_numpy(w), stride=attrs.get("strides", 1), dilation=attrs["dilations"],
        groups=groups, output_padding=attrs["output_padding"])  # torch's pads are symmetric: crop by hand
    h, w_ = full.shape[2:]
    want = full[:, :, pads[0]:h - pads[2], pads[1]:w_ - pads[3]].numpy()
    got = frame_onnx.load(model).run([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [{"stride": [2]}, {"stride": 2, "padding": 1, "output_padding": 1},
                                   {"stride": [2, 1], "padding": [1, 0]}, {"padding": [1, 0, 2, 1]},
                                   {"dilation": [2, 3], "output_padding": [1, 2], "padding": [0, 1, 1, 0]}])
def test_a_written_conv_transpose2d_exports_runs_on_onnxruntime_and_imports_back(attrs):
    pytest.importorskip("frame_ops_nn")
    import frame_core as fc
    from frame_core import ops

    graph = fc.trace(lambda x, w: ops.conv_transpose2d(x, w, **attrs), "f32[1, 2, 4, 4]", "f32[2, 3, 3, 3]")
    x, w = _w(1, 2, 4, 4), _w(2, 3, 3, 3)
    expected = fc.compile(graph).run([x, w])[0]
    proto = frame_onnx.to_onnx(graph)
    got = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x, "w": w})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    back = frame_onnx.load(proto).run([x, w])[0]
    np.testing.assert_allclose(back, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis, index_shape", [(1, (2, 5, 4)), (-1, (2, 3, 6)), (0, (1, 2, 3))])
def test_gather_elements_with_indices_as_data_equals_onnxruntime(axis, index_shape):
    size = (2, 3, 4)[axis]
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    index = rng.integers(-size, size, index_shape).astype(np.int64)
    model, feeds = _model([node], [("x", _w(2, 3, 4)), ("i", index)], [("y", F, None)])
    _same_as_onnxruntime(model, feeds)


def test_an_exported_cross_entropy_imports_back_with_the_same_value_and_gradient():
    import frame_core as fc
    from frame_core import ops

    labels = np.array([0, 2, 1])
    graph = fc.trace(lambda x: ops.cross_entropy(x, labels), "f32[3, 4]")
    x = _w(3, 4)
    back = frame_onnx.load(frame_onnx.to_onnx(graph))  # cross_entropy exports as a GatherElements
    grads = []
    for g in (graph, back.graph):
        step = fc.compile(fc.build_backward_graph(g, 0, [0]))
        grads.append(step.run([x]))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-6)
    np.testing.assert_allclose(grads[1][-1], grads[0][-1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("op, attrs, shape", [("DepthToSpace", {"blocksize": 2, "mode": "DCR"}, (2, 8, 3, 4)),
                                              ("DepthToSpace", {"blocksize": 3, "mode": "CRD"}, (1, 18, 2, 3)),
                                              ("SpaceToDepth", {"blocksize": 2}, (2, 3, 4, 6))])
def test_depth_to_space_and_back_equal_onnxruntime(op, attrs, shape):
    """torch's PixelShuffle exports as DepthToSpace."""
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    model, feeds = _model([node], [("x", _w(*shape))], [("y", F, None)])
    imported = _same_as_onnxruntime(model, feeds)
    assert imported.graph.nodes and all(n.op in ("reshape", "transpose") for n in imported.graph.nodes)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_with_negative_and_out_of_range_indices_equals_onnxruntime(axis):
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=axis)
    index = np.array([[0, 2], [-1, 7]], np.int64)  # -1 is the last class; 7 is outside: a row of values[0]
    model, feeds = _model([node], [("i", index)], [("y", F, None)],
                          [("depth", np.array([4], np.int64)), ("values", np.array([-2.0, 3.0], np.float32))])
    _same_as_onnxruntime(model, feeds)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_row_scatter_nd_with_indices_as_data_equals_onnxruntime(reduction):
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    index = np.array([[2], [-4]], np.int64) if reduction == "none" else np.array([[[1], [3]], [[1], [-4]]], np.int64)
    updates = _w(2, 3) if reduction == "none" else _w(2, 2, 3)
    model, feeds = _model([node], [("x", _w(4, 3)), ("i", index), ("u", updates)], [("y", F, None)])
    _same_as_onnxruntime(model, feeds)


def test_an_exported_scatter_add_along_axis_1_imports_back():
    import frame_core as fc
    from frame_core import ops

    graph = fc.trace(lambda u: ops.scatter_add(u, np.array([[2, 0], [2, 2]]), axis=1, size=4), "f32[3, 2, 2, 5]")
    u = _w(3, 2, 2, 5)
    back = frame_onnx.load(frame_onnx.to_onnx(graph))
    np.testing.assert_allclose(back.run([u])[0], fc.compile(graph).run([u])[0], rtol=1e-6)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[0, 0, -1, 0, 0, 2], [0, -1, 2, 0, -1, -2], [-1, 0, 0, 0, 1, 0]])
def test_negative_pads_crop_as_onnxruntime_does(mode, pads):
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
    model, feeds = _model([node], [("x", _w(2, 3, 5))], [("y", F, None)], [("p", np.array(pads, np.int64))])
    _same_as_onnxruntime(model, feeds)


def test_a_conv_transpose2d_training_graph_with_output_padding_past_the_stride_runs_on_onnxruntime():
    """output_padding [2, 1] with stride 1 and dilation [3, 2] (torch's rule, which ONNX Runtime's ConvTranspose
    refuses): the forward's export folds it into the pads and a Pad, and its gradients (a cropped conv2d, the
    weight gradient of a padded x) export as they are."""
    pytest.importorskip("frame_ops_nn")
    import frame_core as fc
    from frame_core import ops

    attrs = {"dilation": [3, 2], "output_padding": [2, 1], "padding": [1, 0, 0, 1]}
    graph = fc.trace(lambda x, w: ops.conv_transpose2d(x, w, **attrs), "f32[2, 2, 3, 4]", "f32[2, 3, 2, 2]")
    seed = _w(*graph.outputs[0].type.shape)
    graph, loss = fc.extend_graph(graph, lambda *v: ops.sum(v[-1] * seed))
    training = fc.build_backward_graph(graph, loss, [0, 1])
    x, w = _w(2, 2, 3, 4), _w(2, 3, 2, 2)
    want = fc.compile(training).run([x, w])
    session = ort.InferenceSession(frame_onnx.to_onnx(training).SerializeToString())
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), [x, w])})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
