"""Tracing front end: operator overloading, Python scalars, the ops namespace, GradientFns via ctx.grad_graph."""

from __future__ import annotations

import types

import numpy as np
import pytest

import frame_core as fc
from frame_core import IRError, RegistrationError, TensorType, UnknownOpError, ops
from frame_core.frontend.trace import Tensor, apply, constant, current_graph, trace
from frame_core.ir.verify import verify
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import registry, use_registry
from frame_core.ops_registry.schema import Example, OpSchema

from ..fakes import FakeEntryPoint

RNG = np.random.default_rng(7)


def run(graph, *arrays):
    verify(graph)
    return fc.compile(graph, opt_level=0, cache=False).run(list(arrays))


def ops_and_constants(graph) -> tuple[list[str], list[np.ndarray]]:
    return [n.op for n in graph.nodes], [n.attrs["value"] for n in graph.nodes if n.op == "constant"]


# (name, fn, input types, numpy reference, expected ops)
OVERLOADS = [
    ("affine", lambda x, w, b: x @ w + b, ["f32[4, 3]", "f32[3, 2]", "f32[2]"], lambda x, w, b: x @ w + b,
     ["matmul", "add"]),
    ("neg", lambda x: -x, ["f32[3]"], lambda x: -x, ["neg"]),
    ("pos", lambda x: +x, ["f32[3]"], lambda x: +x, []),
    ("mul-scalar", lambda x: x * 2.0, ["f32[3]"], lambda x: x * np.float32(2.0), ["constant", "mul"]),
    ("rmul-scalar", lambda x: 2 * x, ["f64[3]"], lambda x: 2 * x, ["constant", "mul"]),
    ("rsub-scalar", lambda x: 2.0 - x, ["f32[3]"], lambda x: np.float32(2.0) - x, ["constant", "sub"]),
    ("sub", lambda x, y: x - y, ["f32[3]", "f32[3]"], lambda x, y: x - y, ["sub"]),
    ("div-int", lambda x: x / 3, ["f32[3]"], lambda x: x / np.float32(3), ["constant", "div"]),
    ("rdiv", lambda x: 1.0 / x, ["f64[3]"], lambda x: 1.0 / x, ["constant", "div"]),
    ("pow2", lambda x: x ** 2, ["f32[3]"], lambda x: x * x, ["square"]),
    ("pow-half", lambda x: x ** 0.5, ["f32[3]"], lambda x: np.sqrt(x), ["sqrt"]),
    ("pow1", lambda x: x ** 1, ["f32[3]"], lambda x: x, []),
    ("pow3", lambda x: x ** 3, ["f64[3]"], lambda x: x ** 3, ["constant", "pow"]),
    ("pow-negative", lambda x: x ** -1.5, ["f32[3]"], lambda x: x ** np.float32(-1.5), ["constant", "pow"]),
    ("pow-numpy-int", lambda x: x ** np.int64(4), ["f32[3]"], lambda x: x ** np.float32(4), ["constant", "pow"]),
    ("pow-zero", lambda x: x ** 0, ["f64[3]"], lambda x: np.ones_like(x), ["constant", "pow"]),
    ("pow-tensor", lambda x, y: x ** y, ["f64[3]", "f64[3]"], lambda x, y: x ** y, ["pow"]),
    ("rpow", lambda x: 2.0 ** x, ["f32[3]"], lambda x: np.float32(2.0) ** x, ["constant", "pow"]),
    ("abs", lambda x: abs(x - 1.0), ["f32[3]"], lambda x: np.abs(x - np.float32(1.0)), ["constant", "sub", "abs"]),
    ("lt", lambda x, y: x < y, ["f32[3]", "f32[3]"], lambda x, y: x < y, ["less"]),
    ("le-scalar", lambda x: x <= 1.0, ["f64[3]"], lambda x: x <= 1.0, ["constant", "less_equal"]),
    ("gt", lambda x, y: x > y, ["i64[3]", "i64[3]"], lambda x, y: x > y, ["greater"]),
    ("ge-reflected", lambda x: 1.0 >= x, ["f32[3]"], lambda x: np.float32(1.0) >= x, ["constant", "less_equal"]),
    ("astype", lambda x: x.astype("i32"), ["f32[3]"], lambda x: x.astype(np.int32), ["cast"]),
    ("max-method", lambda x: x.max(axes=[1]), ["f32[2, 3]"], lambda x: x.max(axis=1), ["max"]),
    ("min-method", lambda x: x.min(keepdims=True), ["f32[2, 3]"], lambda x: x.min(keepdims=True), ["min"]),
    ("int-tensor", lambda i: i * 3 + 1, ["i64[3]"], lambda i: i * 3 + 1, ["constant", "mul", "constant", "add"]),
    ("rmatmul-array", lambda x: np.eye(3, dtype=np.float32) @ x, ["f32[3, 2]"], lambda x: x, ["constant", "matmul"]),
]


@pytest.mark.parametrize("name, fn, types_, reference, expected_ops", OVERLOADS, ids=[o[0] for o in OVERLOADS])
def test_operator_overloading_builds_the_expected_ops_and_computes_like_numpy(name, fn, types_, reference,
                                                                             expected_ops):
    graph = trace(fn, *types_)
    assert [n.op for n in graph.nodes] == expected_ops
    arrays = [(RNG.uniform(0.5, 2.0, TensorType.parse(t).shape)).astype(TensorType.parse(t).dtype.np) for t in types_]
    (out,) = run(graph, *arrays)
    expected = reference(*arrays)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("tensor_type, scalar, dtype", [
    ("f32[2]", 2.0, np.float32), ("f64[2]", 2.0, np.float64), ("f16[2]", 3, np.float16),
    ("i32[2]", 4, np.int32), ("i64[2]", 5, np.int64), ("bf16[2]", 0.5, fc.bfloat16.np),
])
def test_python_scalars_become_rank_0_constants_of_the_other_operands_dtype(tensor_type, scalar, dtype):
    graph = trace(lambda x: x * scalar, tensor_type)
    _, (const,) = ops_and_constants(graph)
    assert const.shape == () and const.dtype == dtype and const == scalar


def test_equality_operators_stay_identity_so_tensors_work_as_dict_keys_and_in_lists():
    # `==`/`!=` are not overloaded (docs/ops-basic.md): ops.equal / ops.not_equal compare values
    def f(x, y):
        table = {x: "x", y: "y"}
        assert table[x] == "x" and table[y] == "y" and len(table) == 2
        assert (x == y) is False and (x != y) is True and (x == x) is True
        assert y in [x, y] and [x, y].index(y) == 1
        return ops.equal(x, y)
    graph = trace(f, "f32[3]", "f32[3]")
    assert [n.op for n in graph.nodes] == ["equal"]
    (out,) = run(graph, np.array([1, 2, 3], np.float32), np.array([1, 0, 3], np.float32))
    np.testing.assert_array_equal(out, [True, False, True])


def test_an_ordering_comparison_is_a_tensor_that_cannot_be_used_as_a_python_bool():
    def f(x):
        if x > 0.0:
            return x
        return -x
    with pytest.raises(IRError, match="cannot be used in `if`"):
        trace(f, "f32[3]")


def test_a_float_scalar_with_an_int_tensor_is_an_irerror():
    with pytest.raises(IRError) as info:
        trace(lambda i: i * 2.5, "i32[3]")
    message = str(info.value)
    assert "mul" in message and "2.5" in message and "i32[3]" in message and "floating dtype" in message


def test_an_exponent_that_is_not_a_number_or_tensor_is_an_irerror():
    with pytest.raises(IRError, match="must be a Tensor, a Python number or a numpy array, got str"):
        trace(lambda x: x ** "3", "f32[2]")


def test_input_names_come_from_the_traced_functions_parameters():
    graph = trace(lambda features, weights: features @ weights, "f32[2, 3]", "f32[3, 1]")
    assert [v.name for v in graph.inputs] == ["features", "weights"]
    assert graph.name == "graph"
    assert trace(lambda *xs: xs[0], "f32[1]").inputs[0].name is None


def test_returned_python_numbers_and_inputs_become_outputs():
    graph = trace(lambda x: (x, 1.5, 2, True), "f32[2]")
    assert graph.outputs[0] is graph.inputs[0]
    # a bare Python number meets no other operand: it keeps Python's own precision (a float is a double)
    assert [v.type for v in graph.outputs[1:]] == [TensorType.parse(t) for t in ("f64[]", "i64[]", "bool[]")]


# -- the ops namespace ---------------------------------------------------------------------------------------------
def test_ops_namespace_calls_ops_with_attributes_as_keywords():
    graph = trace(lambda x: ops.sum(ops.relu(x), axes=(0,), keepdims=True), "f32[3, 4]")
    assert [n.op for n in graph.nodes] == ["relu", "sum"]
    assert graph.nodes[1].attrs["axes"] == (0,) and graph.nodes[1].attrs["keepdims"] is True
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    (out,) = run(graph, x)
    np.testing.assert_allclose(out, np.maximum(x, 0).sum(axis=0, keepdims=True), rtol=1e-6)


def test_ops_namespace_lists_the_registry_and_documents_each_op():
    assert "relu" in dir(ops) and "constant" in dir(ops)
    assert ops.relu.__doc__.startswith("relu(x")
    assert repr(ops.relu) == "<op relu>"


@pytest.mark.parametrize("name, suggestion", [("reluu", "relu"), ("matmull", "matmul"), ("sigmoyd", "sigmoid")])
def test_unknown_op_names_suggest_close_matches(name, suggestion):
    with pytest.raises(UnknownOpError) as info:
        getattr(ops, name)
    assert f"unknown op {name!r}; did you mean {suggestion!r}" in str(info.value)
    assert isinstance(info.value, fc.FrameError)


def test_hasattr_and_getattr_with_a_default_answer_for_an_unknown_op():
    # Python's attribute protocol: a module's __getattr__ signals "no such attribute" with AttributeError
    assert hasattr(ops, "relu") and not hasattr(ops, "no_such_op_here")
    assert getattr(ops, "no_such_op_here", None) is None
    with pytest.raises(ImportError):
        from frame_core.ops import no_such_op_here  # noqa: F401


def test_dunder_lookups_on_ops_are_plain_attribute_errors():
    with pytest.raises(AttributeError):
        ops.__wrapped__  # noqa: B018 - tools such as doctest and inspect probe these


def test_unknown_attribute_keyword_is_an_attribute_spec_error():
    with pytest.raises(fc.AttributeSpecError, match="unknown attribute 'axis'.*did you mean 'axes'"):
        trace(lambda x: ops.sum(x, axis=0), "f32[3]")


# -- misuse --------------------------------------------------------------------------------------------------------
def test_tensors_from_two_graphs_cannot_meet():
    captured = []
    trace(lambda x: captured.append(x) or x, "f32[2]")
    with pytest.raises(IRError) as info:
        trace(lambda y: y + captured[0], "f32[2]")
    assert "two different graphs" in str(info.value) and "add" in str(info.value)


def test_a_captured_tensor_cannot_be_silently_extended_or_returned():
    captured = []
    first = trace(lambda x: captured.append(x) or x, "f32[2]")
    with pytest.raises(IRError, match="two different graphs"):
        trace(lambda y: captured[0] * 2.0, "f32[2]")
    with pytest.raises(IRError, match="output 0 of the traced function is a tensor of graph"):
        trace(lambda y: captured[0], "f32[2]")
    assert len(first.nodes) == 0  # the finished graph was not edited


@pytest.mark.parametrize("use", [bool, lambda t: t if t else t, lambda t: t and t, np.asarray],
                         ids=["bool", "if", "and", "asarray"])
def test_a_traced_tensor_has_no_value(use):
    with pytest.raises(IRError, match="no (value|data)"):
        trace(use, "f32[2]")


def test_building_outside_a_trace_is_an_irerror():
    with pytest.raises(IRError, match="no graph is being traced"):
        current_graph()
    with pytest.raises(IRError, match="no graph is being traced"):
        constant(1.0)
    with pytest.raises(IRError, match="no graph is being traced"):
        ops.relu(1.0)


def test_bad_operands_are_irerrors_naming_the_op_and_position():
    with pytest.raises(IRError, match="add: input 1 must be a Tensor, a Python number or a numpy array, got str"):
        trace(lambda x: x + "1", "f32[2]")


def test_tensor_properties():
    def check(x):
        assert (x.shape, x.dtype, x.ndim, x.type) == ((2, 3), fc.float32, 2, TensorType.parse("f32[2, 3]"))
        assert isinstance(x, Tensor) and "f32[2, 3]" in repr(x)
        return x.T

    graph = trace(check, "f32[2, 3]")
    assert graph.output_types == [TensorType.parse("f32[3, 2]")]


# -- multi-output ops ----------------------------------------------------------------------------------------------
def _split_pack() -> types.ModuleType:
    def split(ctx):
        (t,) = ctx.input_types
        half = t.with_shape((t.shape[0] // 2,))
        return [half, half]

    module = types.ModuleType("frontend_split_pack")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops():
        return [OpSchema("halves", inputs=("x",), outputs=("lo", "hi"), shape_infer=split,
                         kernels={"cpu": lambda ctx: (lambda x: (x[: len(x) // 2].copy(), x[len(x) // 2:].copy()))},
                         not_differentiable="fixture",
                         examples=[Example(["f32[4]"])])]

    module.frame_register_ops = frame_register_ops
    return module


def test_multi_output_ops_return_a_tuple_of_tensors():
    reg = load_registry([*discover_entry_points(), FakeEntryPoint("halves", _split_pack(), "halves-pack")], environ={},
                        strict=True)
    with use_registry(reg):
        graph = trace(lambda x: (lambda lo, hi: [hi - lo, lo])(*ops.halves(x)), "f32[6]")
        assert [n.op for n in graph.nodes] == ["halves", "sub"]
        x = np.arange(6, dtype=np.float32)
        hi_minus_lo, lo = fc.compile(graph, opt_level=0, cache=False, registry=reg).run([x])
    np.testing.assert_array_equal(hi_minus_lo, [3, 3, 3])
    np.testing.assert_array_equal(lo, [0, 1, 2])


# -- GradientFns written with ctx.grad_graph -----------------------------------------------------------------------
def mul_context():
    return registry().get("mul").context(["f32[3]", "f32[3]"])


def test_grad_graph_traces_over_x_y_gy_slots_and_returns_one_gradient_per_input():
    micro = mul_context().grad_graph(lambda a, b, y, gy: [gy * b, gy * a])
    assert [v.name for v in micro.inputs] == ["a", "b", "y", "gy"]
    assert micro.input_types == [TensorType.parse("f32[3]")] * 4
    assert micro.output_types == [TensorType.parse("f32[3]")] * 2
    a, b, y, gy = (RNG.normal(size=3).astype(np.float32) for _ in range(4))
    ga, gb = run(micro, a, b, y, gy)
    np.testing.assert_allclose(ga, gy * b, rtol=1e-6)
    np.testing.assert_allclose(gb, gy * a, rtol=1e-6)


def test_grad_graph_fills_none_with_a_zero_gradient():
    micro = mul_context().grad_graph(lambda a, b, y, gy: [gy * b, None])
    ones = np.ones(3, np.float32)
    _, gb = run(micro, ones, ones, ones, ones)
    np.testing.assert_array_equal(gb, np.zeros(3, np.float32))


def test_grad_graph_accepts_a_bare_tensor_for_a_single_input_op():
    micro = registry().get("neg").context(["f64[2]"]).grad_graph(lambda x, y, gy: -gy)
    assert micro.output_types == [TensorType.parse("f64[2]")]


@pytest.mark.parametrize("fn, fragments", [
    (lambda a, b, y, gy: [gy], ["'mul'", "returned 1 gradients for 2 inputs", "[a, b]"]),
    (lambda a, b, y, gy: [gy, gy, gy], ["returned 3 gradients for 2 inputs"]),
    (lambda a, b, y, gy: gy, ["returned 1 gradients for 2 inputs"]),
    (lambda a, b, y, gy: [gy, ops.sum(gy)], ["type f32[] for input 1 (b), which has type f32[3]"]),
    (lambda a, b, y, gy: [gy, 1.0], ["type f32[] for input 1 (b)"]),
])
def test_grad_graph_with_wrong_count_or_type_is_a_registration_error(fn, fragments):
    with pytest.raises(RegistrationError) as info:
        mul_context().grad_graph(fn)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_a_numpy_array_from_a_one_input_grad_graph_is_one_gradient_not_one_per_row():
    # found writing a pack from the docs: np.ones(3) was "3 gradients for 1 inputs" (its rows were counted)
    ctx = registry().get("neg").context(["f64[3]"])
    micro = ctx.grad_graph(lambda x, y, gy: np.ones(3))
    np.testing.assert_array_equal(run(micro, *[np.zeros(3)] * 3)[0], np.ones(3))
    with pytest.raises(RegistrationError, match=r"type f64\[2\] for input 0 \(x\), which has type f64\[3\]"):
        ctx.grad_graph(lambda x, y, gy: np.ones(2))


def test_grad_graph_refuses_a_tensor_from_another_graph():
    captured = []
    trace(lambda x: captured.append(x) or x, "f32[3]")
    with pytest.raises((RegistrationError, IRError), match="graph"):
        mul_context().grad_graph(lambda a, b, y, gy: [gy, captured[0]])


def test_apply_is_the_function_behind_operators_and_ops():
    graph = trace(lambda x: apply("add", x, x), "f32[2]")
    assert [n.op for n in graph.nodes] == ["add"]


def test_a_python_int_too_large_for_the_tensor_dtype_is_an_ir_error():
    with pytest.raises(IRError, match=r"does not fit in the other operand's dtype \(i32\[3\]\)"):
        trace(lambda i: i + 2**40, "i32[3]")


@pytest.mark.parametrize("types", [["f32[3]"], ["f32[3]", "f32[3]", "f32[3]"]], ids=["too few", "too many"])
def test_a_function_that_cannot_take_the_given_input_types_is_an_ir_error(types):
    with pytest.raises(IRError, match=r"cannot take \d tensor argument"):
        trace(lambda x, y: x + y, *types)


@pytest.mark.parametrize("build, hint", [
    (lambda x: ops.concat([x, x], axis=0), r"pass the tensors as separate arguments: ops.concat\(\*tensors"),
    (lambda x: ops.stack([], axis=0), r"pass the tensors as separate arguments: ops.stack\(\*tensors"),
    (lambda x: ops.broadcast_to(x, [3, 4]), r"got list \[3, 4\]; attributes are keywords: ops.broadcast_to\(x, shape=\.\.\.\)"),
    (lambda x: ops.cast(x, "f64"), r"got str 'f64'; attributes are keywords: ops.cast\(x, to=\.\.\.\)"),
    (lambda x: ops.add(x, [x]), r"add takes its inputs \(a, b\) as separate arguments"),
])
def test_a_list_or_an_attribute_given_by_position_says_how_to_call_the_op(build, hint):
    with pytest.raises(IRError, match=hint):
        fc.trace(build, "f32[4]")


def test_numpy_reductions_and_numpys_axis_keyword_work_on_traced_tensors():
    # np.sum(x) calls x.sum(axis=None, dtype=None, out=None): a numpy user's first reduction
    x = np.arange(6.0).reshape(2, 3)
    graph = fc.trace(lambda a: [np.sum(a), np.mean(a, axis=0), np.max(a, axis=1, keepdims=True), np.min(a),
                                a.sum(axis=(0, 1))], "f64[2, 3]")
    got = fc.compile(graph).run([x])
    for g, want in zip(got, [x.sum(), x.mean(axis=0), x.max(axis=1, keepdims=True), x.min(), x.sum()]):
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("fn, message", [
    (lambda a: a.sum(axes=0, axis=1), r"sum: give the axes once"),
    (lambda a: np.sum(a, dtype=np.float32), r"sum of a traced Tensor takes no dtype \(got 'f32'\)"),
    (lambda a: np.max(a, out=np.zeros(3)), r"max of a traced Tensor takes no out= array"),
])
def test_numpy_reduction_arguments_frame_cannot_honour_are_named(fn, message):
    with pytest.raises(IRError, match=message):
        fc.trace(fn, "f64[2, 3]")


def test_ops_calls_build_the_nodes_add_node_builds():
    """ops.<name> resolves its op once and builds the node from that answer (apply_resolved): the same op key,
    attributes (defaults filled, canonical forms) and output types as Graph.add_node, with and without
    attributes, for one output and several; a weak operand still goes through apply's lifting."""
    def f(x, m):
        return (ops.sum(x, axes=[1], keepdims=True), ops.relu(x), ops.matmul(x, m), ops.transpose(x, perm=(1, 0)),
                ops.maximum(x, 0.5))

    g = trace(f, "f32[2, 3]", "f32[3, 4]")
    by_hand = fc.Graph("by_hand")
    x, m = by_hand.add_input("f32[2, 3]"), by_hand.add_input("f32[3, 4]")
    by_hand.add_node("sum", [x], {"axes": [1], "keepdims": True})
    by_hand.add_node("relu", [x])
    by_hand.add_node("matmul", [x, m])
    by_hand.add_node("transpose", [x], {"perm": (1, 0)})
    assert len(g.nodes) == 6  # the last call lifted 0.5 into a constant first
    for traced, built in zip(g.nodes, by_hand.nodes):
        assert traced.op == built.op and traced.attrs == built.attrs
        assert [v.type for v in traced.outputs] == [v.type for v in built.outputs]
        assert [v.index for v in traced.outputs] == list(range(len(traced.outputs)))
        assert all(v.producer is traced for v in traced.outputs)
    assert g.nodes[4].op == "constant" and g.nodes[5].op.endswith("maximum")
    verify(g)
