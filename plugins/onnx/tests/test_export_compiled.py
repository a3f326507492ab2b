"""conv1d_mul_internal, the op the compile pass merge_conv1d_multiply makes of ``conv1d(x, w) * g``, exports through
its DecomposeFn as ONNX ``Conv`` then ``Mul``, in a traced graph and in a compiled one; a compiled graph exports
the same function as the graph it was compiled from (docs/onnx.md, "Compiled graphs")."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("frame_ops_sequence")

ATTRS = [{"padding": "same"}, {"padding": [3, 1], "dilation": 2, "groups": 2}, {"padding": 1, "stride": 2}]
TOLERANCE = 2e-5  # float32 (ONNX Runtime's CPU provider has no float64 Conv), relative to the largest value


def _arrays(attrs: dict, length: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((2, 4, length)), rng.standard_normal((6, 4 // attrs.get("groups", 1), 3))
    y = fc.compile(fc.trace(lambda a, b: ops.conv1d(a, b, **attrs), *(fc.TensorType("f64", v.shape) for v in (x, w))),
                   cache=False).run([x, w])[0]
    g = rng.standard_normal(y.shape)
    return [a.astype(np.float32) for a in (x, w, g)]


def _on_onnxruntime(graph: fc.Graph, arrays: list[np.ndarray]) -> tuple[object, list[np.ndarray]]:
    model = frame_onnx.to_onnx(graph)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, session.run(None, {i.name: a for i, a in zip(model.graph.input, arrays)})


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=TOLERANCE, atol=TOLERANCE * np.abs(w).max())


@pytest.mark.parametrize("attrs", ATTRS)
def test_the_merged_product_exports_as_conv_then_mul_with_its_gradients(attrs):
    arrays = _arrays(attrs, 40)
    types = [fc.TensorType("f32", a.shape) for a in arrays]
    graph = fc.trace(lambda a, b, c: ops.conv1d_mul_internal(a, b, c, **attrs), *types)
    model, got = _on_onnxruntime(graph, arrays)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Mul", "Identity"]
    _close(got, fc.compile(graph, cache=False).run(arrays))
    loss = fc.trace(lambda a, b, c: ops.sum(ops.square(ops.conv1d_mul_internal(a, b, c, **attrs))), *types)
    training = fc.build_backward_graph(loss, 0, [0, 1, 2])  # its GradientFn: conv1d's gradient ops and mul
    _close(_on_onnxruntime(training, arrays)[1], fc.compile(training, cache=False).run(arrays))


@pytest.mark.parametrize("attrs", ATTRS[:2])
def test_a_compiled_training_graph_exports_the_function_of_the_traced_one(attrs):
    """Compiling merges the conv1d with its product (and its two gradients into conv1d_grads_internal); both merges
    export through their DecomposeFns, so the compiled graph's model computes what the traced graph's does."""
    arrays = _arrays(attrs, 600)  # rows of 600 outputs: long enough for the merge
    loss = fc.trace(lambda a, b, c: ops.sum(ops.conv1d(a, b, **attrs) * c),
                    *(fc.TensorType("f32", a.shape) for a in arrays))
    traced = fc.build_backward_graph(loss, 0, [0, 1])
    executable = fc.compile(traced, cache=False)
    compiled = executable.graph
    assert "conv1d_mul_internal" in {n.op.rpartition("::")[2] for n in compiled.nodes}
    want = executable.run(arrays)
    traced_model, from_traced = _on_onnxruntime(traced, arrays)
    compiled_model, from_compiled = _on_onnxruntime(compiled, arrays)
    _close(from_traced, want)
    _close(from_compiled, want)
    _close(from_compiled, from_traced)
    assert [i.name for i in compiled_model.graph.input] == [i.name for i in traced_model.graph.input] == ["a", "b",
                                                                                                        "c"]


def test_an_executable_is_refused_saying_to_export_the_graph_it_was_compiled_from():
    graph = fc.trace(lambda x: ops.tanh(x), "f32[3]")
    with pytest.raises(frame_onnx.OnnxError, match="export the graph you gave fc.compile"):
        frame_onnx.to_onnx(fc.compile(graph))
