"""Export of the creation ops and of the max pools' select op (second-order pool gradients): each exported model
passes onnx.checker with full shape inference (``to_onnx`` checks) and gives frame's own bits on ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
rng = np.random.default_rng(5)


def _on_ort(graph, args=()):
    model = frame_onnx.to_onnx(graph)
    feeds = {v.name: a for v, a in zip(model.graph.input, args)}
    return model, ort.InferenceSession(model.SerializeToString()).run(None, feeds)


def _bitwise(graph, args=()):
    model, got = _on_ort(graph, args)
    want = fc.compile(graph).run(list(args))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return model


CREATION = {
    "zeros": lambda dt: ops.zeros([2, 3], dtype=dt),
    "ones": lambda dt: ops.ones([4], dtype=dt),
    "full": lambda dt: ops.full([3, 1], 2.5 if dt[0] == "f" else -7, dtype=dt),
    "full scalar": lambda dt: ops.full([], 3, dtype=dt),
    "eye": lambda dt: ops.eye(4, 6, k=-1, dtype=dt),
    "eye above": lambda dt: ops.eye(3, k=2, dtype=dt),
    "arange": lambda dt: (ops.arange(1.0, 2.3, 0.1, dtype=dt) if dt[0] == "f" else ops.arange(40, -3, -3, dtype=dt)),
    "arange of one": lambda dt: ops.arange(5, 6, dtype=dt),
    "arange of none": lambda dt: ops.arange(5, 2, dtype=dt),
    "linspace": lambda dt: ops.linspace(-1.3, 2.7, 17, dtype=dt),
    "linspace open": lambda dt: ops.linspace(-1.3, 2.7, 17, endpoint=False, dtype=dt),
    "linspace down": lambda dt: ops.linspace(9.5, -3.25, 6, dtype=dt),
    "linspace of one": lambda dt: ops.linspace(0.5, 2.0, 1, dtype=dt),
}


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "i32", "i64"])
def test_creation_ops_give_frames_bits_on_onnxruntime(dtype):
    graph = fc.trace(lambda: [make(dtype) for make in CREATION.values()])
    assert {n.op for n in graph.nodes} == {"zeros", "ones", "full", "eye", "arange", "linspace"}
    _bitwise(graph)


def test_arange_and_linspace_repeat_numpys_float64_arithmetic():
    """Steps that are not exact in binary (numpy's arange fills start + i * ((start + step) - start), not
    start + i * step), and a linspace whose step underflows to 0 (numpy divides first, then scales)."""
    def make():
        return [ops.arange(0.3, 7.1, 0.7, dtype="f64"), ops.arange(-2.0, 2.0, 1 / 3, dtype="f32"),
                ops.linspace(0.0, 5e-324, 4, dtype="f64"), ops.linspace(1e-3, 7.0, 1001, dtype="f64"),
                ops.linspace(-2.0, 7.0, 10, dtype="i64")]
    model = _bitwise(fc.trace(make))
    assert {"Range", "Mul", "Add"} <= {n.op_type for n in model.graph.node}


def test_like_ops_and_fills_store_no_values():
    """A fill of a million elements is a scalar and a shape in the file, not 4 MB of initializers."""
    graph = fc.trace(lambda x: [ops.zeros_like(x) + x, ops.ones_like(x, dtype="i64"), ops.full([1000, 1000], 1.5,
                                                                                              dtype="f32")],
                     "f32[1000, 1000]")
    x = rng.standard_normal((1000, 1000)).astype(np.float32)
    model = _bitwise(graph, [x])
    assert model.ByteSize() < 4096


@pytest.mark.parametrize("pool, shape, attrs", [
    ("max_pool1d", "f32[2, 3, 9]", {"kernel_size": 3, "stride": 2, "padding": "same"}),
    ("max_pool1d", "f64[2, 7]", {"kernel_size": 2}),
    ("max_pool2d", "f32[2, 2, 6, 5]", {"kernel_size": 3, "stride": [2, 1], "padding": 1}),
    ("max_pool2d", "f64[3, 7, 5]", {"kernel_size": 2}),
])
def test_second_order_max_pool_gradients_run_on_onnxruntime(pool, shape, attrs):
    """The gradient of the gradient reads the output gradient at each window's first maximum
    (``max_pool*_select_internal``); x holds ties, so a different tie rule would show. frame pools inputs of
    any rank ([2, 7] for 1-D, [3, 7, 5] for 2-D): those become [N, 1, ...] for ONNX's pools."""
    if pool == "max_pool2d":
        pytest.importorskip("frame_ops_nn")
    graph = fc.trace(lambda x: getattr(ops, pool)(x, **attrs), shape)
    first, loss = fc.extend_graph(graph, lambda x, y: ops.sum(ops.square(y) * y))
    grad = fc.build_backward_graph(first, loss, [0])
    second, loss2 = fc.extend_graph(grad, lambda *xs: ops.sum(ops.square(xs[-1])))
    graph2 = fc.build_backward_graph(second, loss2, [0])
    select = f"{pool}_select_internal"
    assert select in {n.op for n in graph2.nodes}
    x_type = graph.inputs[0].type
    x = rng.integers(-3, 4, x_type.shape).astype(x_type.dtype.np)  # many ties
    model, got = _on_ort(graph2, [x])
    for g, w in zip(got, fc.compile(graph2).run([x]), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert "GatherElements" in {n.op_type for n in model.graph.node}
