"""Atan, Asin and Acos import as frame's atan/asin/acos; frame's atan/asin/acos export as those ONNX ops and
atan2 (which ONNX lacks) as atan(y / x) with its quadrant turned: values against ONNX Runtime and numpy, numpy's
quadrants for signed zeros and infinities in atan2, training graphs to second order on ONNX Runtime. Det in and
out (frame's det), and inv refused on export with its reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")

NUMPY = {"Atan": np.arctan, "Asin": np.arcsin, "Acos": np.arccos}


def _model(op, elem):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", elem, ["n"])],
                              [helper.make_tensor_value_info("y", elem, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model.SerializeToString()


@pytest.mark.parametrize("op", list(NUMPY))
def test_imported_values_match_onnxruntime_and_numpy(op):
    x = np.concatenate([np.linspace(-1, 1, 201), [-0.0, 1e-30]] + ([np.linspace(-50, 50, 51)] if op == "Atan" else []))
    for elem, dtype in ((TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)):
        data, v = _model(op, elem), x.astype(dtype)
        got = frame_onnx.load(data, dims={"n": len(v)}).run([v])[0]
        np.testing.assert_array_equal(got, NUMPY[op](v))  # frame's kernels are numpy's
        if dtype is np.float32:
            np.testing.assert_allclose(got, ort.InferenceSession(data).run(None, {"x": v})[0], rtol=2e-7, atol=1e-7)


def _on_ort(graph, args):
    model = frame_onnx.to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString()).run(None, {i.name: a for i, a in zip(model.graph.input, args)})


def test_atan2_exports_with_numpys_quadrants_signed_zeros_and_infinities():
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -1e-3, np.inf, -np.inf], np.float32)
    y, x = (a.ravel() for a in np.meshgrid(special, special))
    graph = fc.trace(ops.atan2, f"f32[{len(y)}]", f"f32[{len(x)}]")
    (got,) = _on_ort(graph, [y, x])
    expected = np.arctan2(y, x)
    np.testing.assert_allclose(got, expected, rtol=3e-7, atol=0)  # pi and -pi on either side of the cut
    nonzero = expected != 0  # (ONNX Runtime's Where returns a selected -0 as +0)
    assert np.array_equal(np.signbit(got[nonzero]), np.signbit(expected[nonzero]))


@pytest.mark.parametrize("fn, low, high", [
    (ops.atan, -4, 4), (ops.asin, -0.9, 0.9), (ops.acos, -0.9, 0.9),
    (lambda v: ops.atan2(v, v[::-1] * 0.5 + 1.0), -2, 2)],
    ids=["atan", "asin", "acos", "atan2"])
def test_training_graphs_to_second_order_run_on_onnxruntime(fn, low, high):
    first = fc.build_backward_graph(fc.trace(lambda v: ops.sum(fn(v)), "f32[12]"), 0, [0])
    extended, loss = fc.extend_graph(first, lambda *v: ops.sum(ops.square(v[-1])))
    second = fc.build_backward_graph(extended, loss, [0])
    x = np.random.default_rng(7).uniform(low, high, 12).astype(np.float32)
    for got, expected in zip(_on_ort(second, [x]), fc.compile(second).run([x])):
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


def test_broadcast_atan2_exports():
    rng = np.random.default_rng(1)
    y, x = rng.uniform(-2, 2, (3, 4)).astype(np.float32), rng.uniform(-2, 2, (4,)).astype(np.float32)
    (got,) = _on_ort(fc.trace(ops.atan2, "f32[3, 4]", "f32[4]"), [y, x])
    np.testing.assert_allclose(got, np.arctan2(y, x), rtol=3e-7, atol=1e-7)


# -- Det (frame-ops-basic's det; its gradient inverts, which ONNX cannot) ------------------------------------------
def test_det_imports_and_exports_and_inv_is_refused_with_the_reason():
    x = (np.random.default_rng(4).uniform(-1, 1, (2, 3, 3)) + 1.5 * np.eye(3)).astype(np.float32)
    node = helper.make_node("Det", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    imported = frame_onnx.load(model.SerializeToString())
    np.testing.assert_allclose(imported.run([x])[0], np.linalg.det(x), rtol=1e-6)
    np.testing.assert_allclose(imported.run([x])[0], ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0],
                               rtol=1e-5)
    (exported,) = _on_ort(fc.trace(ops.det, "f32[2, 3, 3]"), [x])
    np.testing.assert_allclose(exported, np.linalg.det(x), rtol=1e-5)
    training = fc.build_backward_graph(fc.trace(lambda v: ops.sum(ops.det(v)), "f32[2, 3, 3]"), 0, [0])
    with pytest.raises(frame_onnx.UnmappedOpError) as info:
        frame_onnx.to_onnx(training)
    assert set(info.value.ops) == {"inv"} and "ONNX has no matrix inverse" in info.value.reasons["inv"]
