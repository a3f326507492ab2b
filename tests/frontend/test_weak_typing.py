"""Python numbers are weakly typed (issue 8 §5), as in numpy 2 and JAX: they take the dtype of what they meet.

``x + ops.add(0.5, 0.25)`` used to fail in a float64 graph (the Python numbers became float32 constants), and a
bare Python float output became float32. Now a value computed only from Python numbers is traced again in the
dtype of the tensor it meets; one that meets none keeps Python's precision (float64, int64, bool).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import IRError, TensorType, ops

FLOATS = ["f16", "bf16", "f32", "f64"]


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_value_made_of_python_numbers_takes_the_dtype_of_the_tensor_it_meets(dtype):
    graph = fc.trace(lambda x: x + ops.add(0.5, 0.25), f"{dtype}[3]")
    assert graph.outputs[0].type == TensorType.parse(f"{dtype}[3]")
    assert [n.op for n in graph.nodes] == ["constant", "constant", "add", "add"]  # no leftovers of the first trace
    assert all(v.type.dtype.short == dtype for n in graph.nodes for v in n.outputs)
    x = np.arange(3).astype(graph.inputs[0].type.dtype.np)
    np.testing.assert_array_equal(fc.compile(graph).run([x])[0].astype(np.float64), np.arange(3) + 0.75)


def test_longer_weak_expressions_and_ints_follow_too():
    graph = fc.trace(lambda x: x * ops.exp(ops.add(1, 0.5)) + ops.mul(2, 3), "f32[2]")
    assert {v.type.dtype.short for n in graph.nodes for v in n.outputs} == {"f32"}
    got = fc.compile(graph).run([np.ones(2, np.float32)])[0]
    np.testing.assert_allclose(got, np.exp(1.5) + 6, rtol=1e-6)
    ints = fc.trace(lambda i: i + ops.mul(2, 3), "i32[2]")
    assert ints.outputs[0].type == TensorType.parse("i32[2]")


def test_a_shared_weak_part_is_traced_again_once():
    def fn(x):
        c = ops.add(0.5, 0.25)
        return x * (c * c)
    graph = fc.trace(fn, "f32[3]")
    assert [n.op for n in graph.nodes].count("add") == 1


def test_weak_floats_meeting_an_int_tensor_are_refused_by_name():
    with pytest.raises(IRError, match="made of Python floats but the other operand is int32"):
        fc.trace(lambda i: i + ops.add(0.5, 0.25), "i32[3]")


def test_bare_python_numbers_keep_python_precision():
    graph = fc.trace(lambda x: [x, 1.5, 2, True, ops.add(0.5, 0.25), ops.add(1, 2)], "f32[2]")
    assert [str(v.type) for v in graph.outputs[1:]] == ["f64[]", "i64[]", "bool[]", "f64[]", "i64[]"]
    outs = fc.compile(graph).run([np.zeros(2, np.float32)])
    assert outs[1] == 1.5 and outs[4] == 0.75 and outs[5] == 3


def test_numpy_scalars_keep_their_own_dtype_and_lead_python_numbers():
    graph = fc.trace(lambda x: x + ops.mul(np.float32(2.0), 0.5), "f32[2]")
    assert {v.type.dtype.short for n in graph.nodes for v in n.outputs} == {"f32"}


def test_a_gradient_fn_may_use_weak_values_at_any_dtype():
    from frame_core.ops_registry.schema import Example, OpSchema

    schema = OpSchema("weak_twice", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                      kernels={"cpu": lambda ctx: lambda x: np.multiply(x, x.dtype.type(2))},
                      gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.add(1.0, 1.0)),
                      examples=[Example(["f16[3]"])])
    for dtype in ("f16", "f32", "f64"):
        micro = schema.gradient(schema.context([f"{dtype}[3]"]))
        assert micro.outputs[0].type == TensorType.parse(f"{dtype}[3]")


def test_extend_graph_applies_the_same_rule():
    graph = fc.trace(lambda x: ops.sum(x), "f64[3]")
    extended, position = fc.extend_graph(graph, lambda x, s: s * ops.add(0.5, 0.5))
    assert extended.outputs[position].type == TensorType.parse("f64[]")
