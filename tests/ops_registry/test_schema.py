"""Attribute specs, NodeContext and the Registry object."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import AttributeSpecError, RegistrationError, ShapeError, TensorType, UnknownOpError
from frame_core.ir.dtypes import float32
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.schema import REQUIRED, AttrSpec, Example, normalize_attr

from .fakepacks import FakeEntryPoint, plugin, unary


@pytest.mark.parametrize("kind, given, expected", [
    ("int", np.int64(3), 3),
    ("float", 2, 2.0),
    ("float", np.float32(0.5), 0.5),
    ("bool", np.bool_(True), True),
    ("ints", 4, (4,)),
    ("ints", [1, np.int32(2)], (1, 2)),
    ("shape", [2, 0], (2, 0)),
    ("floats", [1, 2.5], (1.0, 2.5)),
    ("strs", ["a", "b"], ("a", "b")),
    ("dtype", "float32", float32),
    ("tensor", 1.5, np.asarray(1.5)),
])
def test_attribute_values_are_normalised_to_their_kind(kind, given, expected):
    got = normalize_attr(kind, given)
    if isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(got, expected)
    else:
        assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("kind, given, expected", [
    ("int", 1.0, "an int"), ("int", True, "an int"), ("float", "1", "a float"), ("float", True, "a float"),
    ("bool", 1, "a bool"), ("str", b"x", "a str"), ("ints", [1, 2.0], "a list of (64-bit) ints"),
    ("shape", [2, -1], "non-negative"), ("floats", ["1"], "a list of floats"), ("strs", "ab", "a list of str"),
    ("dtype", "float8", "a dtype"), ("tensor", [1, 2], "a numpy array"), ("graph", "g", "a Graph"),
])
def test_wrong_attribute_kinds_say_expected_and_found(kind, given, expected):
    with pytest.raises(AttributeSpecError) as info:
        normalize_attr(kind, given, "op 'x': attribute 'a'")
    message = str(info.value)
    assert message.startswith("op 'x': attribute 'a' must be") and expected in message and repr(given) in message


def test_attr_spec_rejects_unknown_kinds_and_checks_defaults():
    with pytest.raises(RegistrationError, match="unknown attribute kind 'matrix'"):
        AttrSpec("matrix")
    with pytest.raises(AttributeSpecError):
        AttrSpec("int", default="three")
    assert AttrSpec("int").required and AttrSpec("int").default is REQUIRED
    assert not AttrSpec("int", None).required and AttrSpec("ints", 3).default == (3,)


def test_a_union_kind_takes_the_first_kind_that_fits_and_names_all_of_them_otherwise():
    # conv1d's padding is a mode ("same") or sizes (2, or [1, 3]): one attribute, two kinds
    assert normalize_attr("str|ints", "same") == "same"
    assert normalize_attr("str|ints", 2) == (2,) and normalize_attr("str|ints", [1, 3]) == (1, 3)
    with pytest.raises(AttributeSpecError, match=r"attribute 'padding' must be of kind 'str' or 'ints', got 2\.5"):
        normalize_attr("str|ints", 2.5, "attribute 'padding'")
    spec = AttrSpec("str|ints", "valid")
    assert spec.default == "valid" and AttrSpec("str|ints", 1).default == (1,)
    with pytest.raises(RegistrationError, match="unknown attribute kind 'str|matrix'"):
        AttrSpec("str|matrix")


def test_example_takes_types_or_arrays_not_both():
    assert Example(["f32[2]", TensorType.parse("i64[]")]).inputs == (TensorType.parse("f32[2]"), TensorType.parse("i64[]"))
    fixed = Example([np.ones(2, np.float32)])
    assert fixed.inputs == (TensorType.parse("f32[2]"),)
    np.testing.assert_array_equal(fixed.sample(np.random.default_rng(0))[0], np.ones(2, np.float32))
    with pytest.raises(RegistrationError, match="either all inputs as arrays or none"):
        Example([np.ones(2), "f32[2]"])


def test_example_sample_respects_min_abs_and_types():
    ex = Example(["f32[1000]", "i32[5]", "bool[3]"], low=-1.0, high=1.0, min_abs=0.25)
    x, i, b = ex.sample(np.random.default_rng(1))
    assert x.dtype == np.float32 and np.all(np.abs(x) >= 0.25)
    assert i.dtype == np.int32 and b.dtype == np.bool_


@pytest.fixture(scope="module")
def small_registry():
    def ops():
        return [unary("relu_like", not_differentiable="fixture"), unary("reluish_internal", not_differentiable="fixture")]
    return load_registry([FakeEntryPoint("small", plugin("small", ops))], environ={})


def test_registry_get_suggests_close_names(small_registry):
    with pytest.raises(UnknownOpError) as info:
        small_registry.get("relu_lik")
    assert "unknown op 'relu_lik'; did you mean 'relu_like'" in str(info.value)
    assert isinstance(info.value, KeyError) and info.value.name == "relu_lik"


def test_registry_listing(small_registry):
    assert [s.name for s in small_registry.user_ops()] == ["relu_like"]  # not the core's, not internal ones
    assert "reluish_internal" not in small_registry.names(internal=False)
    assert small_registry.names() == sorted(small_registry.names())
    assert "relu_like" in small_registry and len(small_registry) == len(list(small_registry))
    assert [s.name for s in small_registry.ops_of("small")] == ["relu_like", "reluish_internal"]


def test_node_context_infers_outputs_and_names_the_op_in_errors(small_registry):
    schema = small_registry.get("relu_like")
    ctx = schema.context(["f32[2]"])
    assert ctx.output_types == (TensorType.parse("f32[2]"),)
    assert ctx.gradient_input_types() == [TensorType.parse("f32[2]")] * 3
    assert str(ctx.error("bad")) == "relu_like: bad"
    with pytest.raises(AttributeSpecError, match="'relu_like' has no attribute 'axes'"):
        ctx.attr("axes")


def test_a_buggy_shape_function_becomes_a_shape_error_naming_the_pack():
    def ops():
        return [unary("buggy", not_differentiable="fixture", shape_infer=lambda ctx: [ctx.input_types[5]],
                      examples=[])]
    schema = ops()[0]
    schema.pack = "buggy_pack"
    with pytest.raises(ShapeError) as info:
        schema.infer([TensorType.parse("f32[2]")], {})
    assert "buggy: shape inference raised IndexError" in str(info.value) and "buggy_pack" in str(info.value)


def test_the_signature_of_an_op_without_inputs_has_no_lone_comma():
    # frame ops show / ops list -f json / ops.constant.__doc__ print it
    from frame_core import registry

    assert registry().get("constant").signature() == "constant(value: tensor) -> (y)"
    assert registry().get("sum").signature() == "sum(x, axes: ints = None, keepdims: bool = False) -> (y)"


@pytest.mark.parametrize("values, message", [
    ([np.ones(3, np.float32)] * 2, r"values= gives 2 arrays for 1 inputs \(f32\[3\]\)"),
    ([np.ones(4, np.float32)], r"values\[0\] has shape \[4\], but input 0 is f32\[3\]"),
    ([np.array([True, False, True])], r"values\[0\] holds bool values that input 0 \(f32\[3\]\) cannot take"),
])
def test_example_values_that_do_not_fit_the_inputs_are_the_examples_mistake(values, message):
    # caught later, they were reported as the op's kernel aliasing an input or returning the wrong shape
    from frame_core import RegistrationError

    with pytest.raises(RegistrationError, match=message):
        Example(["f32[3]"], values=values)


def test_example_values_take_the_inputs_dtypes():
    # np.ones(3) is float64: the kernel check used to blame the kernel for the float64 it was fed
    example = Example(["f32[3]", "i32[2]"], values=[np.ones(3), np.array([1, 2])])
    assert [v.dtype for v in example.sample(np.random.default_rng(0))] == [np.float32, np.int32]
    with pytest.raises(Exception, match=r"values\[0\] holds int64 values that input 0 \(i32\[1\]\) cannot take"):
        Example(["i32[1]"], values=[np.array([2**40])])
