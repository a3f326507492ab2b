"""Edge cases of the import rules found by attacking them with hand-built models: each against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT
rng = np.random.default_rng(7)


def _w(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in inputs],
        [helper.make_tensor_value_info(n, elem, shape) for n, elem, shape in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
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
