"""The closure audit's memo of shape inference and attribute normalisation (schema.inference_memo): each
distinct question is answered by the pack's code once, answers equal the unmemoised ones, a failure is never
stored, attributes that are not plain values are never keyed, and nothing is remembered outside the block."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import AttributeSpecError, ShapeError, TensorType
from frame_core.ops_registry.schema import (
    AttrSpec, Example, OpSchema, _plain_key, inference_memo, instantiate_gradient,
)

F3 = TensorType("f32", (3,))


def counting_op(calls: list, fail_on: int | None = None) -> OpSchema:
    def shape(ctx):
        calls.append(ctx.attrs["k"])
        if ctx.attrs["k"] == fail_on:
            raise ctx.error(f"k={fail_on} refused")
        return [TensorType("f32", (ctx.attrs["k"],))]

    return OpSchema("counted", inputs=("x",), attrs={"k": AttrSpec("int", 1), "v": AttrSpec("tensor", None)},
                    shape_infer=shape, kernels={"cpu": lambda ctx: (lambda x: x)}, not_differentiable="a fixture",
                    examples=[Example(["f32[3]"])], doc="fixture")


def test_each_distinct_question_is_answered_once_and_the_answers_are_equal():
    calls: list = []
    op = counting_op(calls)
    plain = [op.infer([F3], {"k": k, "v": None}) for k in (2, 3, 2)]
    with inference_memo():
        memoised = [op.infer([F3], {"k": k, "v": None}) for k in (2, 3, 2, 3)]
    assert memoised == plain + [plain[1]] and len(calls) == 3 + 2
    memoised[0].append("a caller's edit")  # each caller gets its own list
    with inference_memo():
        assert op.infer([F3], {"k": 2, "v": None}) == [TensorType("f32", (2,))]


def test_a_failure_is_never_stored():
    calls: list = []
    op = counting_op(calls, fail_on=5)
    with inference_memo():
        for _ in range(2):
            with pytest.raises(ShapeError, match="k=5 refused"):
                op.infer([F3], {"k": 5, "v": None})
        with pytest.raises(AttributeSpecError):
            op.normalize_attrs({"k": "five"})
        with pytest.raises(AttributeSpecError):
            op.normalize_attrs({"k": "five"})
    assert calls == [5, 5]


def test_large_arrays_are_not_keyed_and_nothing_outlives_the_block():
    calls: list = []
    op = counting_op(calls)
    with inference_memo():
        for _ in range(2):
            op.infer([F3], {"k": 2, "v": np.zeros(129)})  # an array attribute over 1 kB: asked each time
        for _ in range(2):
            op.infer([F3], {"k": 3, "v": np.zeros(2)})  # a small one, keyed by its bytes: asked once
        op.infer([F3], {"k": 4, "v": None})
    op.infer([F3], {"k": 4, "v": None})  # outside the block: asked again
    assert calls == [2, 2, 3, 4, 4]


def test_normalised_attributes_come_back_as_a_fresh_dict_each_time():
    op = counting_op([])
    with inference_memo():
        first = op.normalize_attrs({"k": 2})
        first["k"] = 99
        assert op.normalize_attrs({"k": 2}) == {"k": 2, "v": None}


@pytest.mark.parametrize("a, b", [
    ({"k": 1}, {"k": True}), ({"k": 1}, {"k": 1.0}), ({"k": 0.0}, {"k": -0.0}), ({"k": [1]}, {"k": (1,)}),
    ({"k": (1, 2)}, {"k": (1.0, 2)}), ({"k": ("a",)}, {"k": (1,)}), ({"k": 1}, {"k": "1"}),
    ({"v": np.zeros(2)}, {"v": np.zeros(2, np.float32)}), ({"v": np.zeros(2)}, {"v": np.zeros((2, 1))}),
    ({"v": np.zeros(2)}, {"v": -np.zeros(2)}), ({"v": np.zeros(2)}, {"v": np.zeros(2).astype(">f8")}),
    ({"v": np.zeros(2, bool)}, {"v": np.zeros(2, np.uint8)}), ({"v": np.zeros(1)}, {"v": 0.0}),
])
def test_plain_keys_tell_apart_values_that_compare_equal(a, b):
    ka, kb = _plain_key(a), _plain_key(b)
    assert ka != kb or ka is None


@pytest.mark.parametrize("attrs", [{"v": np.zeros(129)}, {"v": np.array([None])}, {"v": np.zeros(1, complex)},
                                   {"v": np.ma.zeros(1)}, {"k": (1, True)}, {"k": [np.int64(1)]}, {"k": object()},
                                   {"k": (1, "a")}, {"k": ("a", 1)}, {"k": [1, 2.0]}, {"k": (1.0,)}, {"k": (None,)}])
def test_values_that_are_not_plain_have_no_key(attrs):
    assert _plain_key(attrs) is None


def test_small_arrays_are_keyed_by_dtype_shape_and_bytes():
    a = np.arange(3, dtype=np.float32)
    assert _plain_key({"v": a}) == _plain_key({"v": a.copy()}) == (("v", np.ndarray, "<f4", (3,), a.tobytes()),)
    view = np.broadcast_to(np.float32(0), (2, 3))  # a zero-stride view: keyed by the values it shows
    assert _plain_key({"v": view}) == _plain_key({"v": np.zeros((2, 3), np.float32)})


def test_sequences_of_one_plain_class_are_keyed_with_it():
    assert _plain_key({"k": (1, 2)}) == (("k", tuple, (int,), (1, 2)),)
    assert _plain_key({"k": ["a"]}) == (("k", list, (str,), ("a",)),)
    assert _plain_key({"k": ()}) == (("k", tuple, (), ()),)


def gradient_op(calls: list, fail: bool = False) -> OpSchema:
    def gradient(ctx):
        calls.append(ctx.input_types)
        if fail:
            raise ValueError("refused")
        return ctx.grad_graph(lambda x, y, gy: gy)

    return OpSchema("graded", inputs=("x",), attrs={"k": AttrSpec("int", 1), "v": AttrSpec("tensor", None)},
                    shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: (lambda x: x)},
                    gradient=gradient, examples=[Example(["f32[3]"])], doc="fixture")


def test_each_distinct_gradient_node_is_instantiated_once_inside_the_memo():
    calls: list = []
    op = gradient_op(calls)
    f4 = TensorType("f32", (4,))
    plain = [instantiate_gradient(op, op.context([t], {"k": 2})) for t in (F3, F3)]  # outside: every time
    assert len(calls) == 2 and plain[0] is not plain[1]
    with inference_memo():
        first = instantiate_gradient(op, op.context([F3], {"k": 2}))
        again = instantiate_gradient(op, op.context([F3], {"k": 2}))
        other_type = instantiate_gradient(op, op.context([f4], {"k": 2}))
        other_attr = instantiate_gradient(op, op.context([F3], {"k": 3}))
        arrays = [instantiate_gradient(op, op.context([F3], {"v": np.ones(3)})) for _ in range(2)]
        large = [instantiate_gradient(op, op.context([F3], {"v": np.ones(200)})) for _ in range(2)]
    assert again is first and len({id(other_type), id(other_attr), id(first)}) == 3
    assert arrays[0] is arrays[1]  # a small array attribute is keyed by its bytes
    assert large[0] is not large[1]  # a large one is never keyed
    assert [v.type for v in first.inputs] == [F3, F3, F3] and len(calls) == 2 + 3 + 1 + 2
    with inference_memo():  # nothing outlives the block
        instantiate_gradient(op, op.context([F3], {"k": 2}))
    assert len(calls) == 9


def test_a_gradient_that_raises_is_asked_again_each_time():
    calls: list = []
    op = gradient_op(calls, fail=True)
    with inference_memo():
        for _ in range(2):
            with pytest.raises(ValueError, match="refused"):
                instantiate_gradient(op, op.context([F3], {"k": 2}))
    assert len(calls) == 2


def test_infer_node_is_normalize_then_infer_asked_once():
    """OpSchema.infer_node (what Graph.add_node records): the pair normalize_attrs + infer, one memoised question
    inside the block; every caller gets its own attribute dict, and a failure is never stored."""
    calls: list = []
    op = counting_op(calls, fail_on=5)
    expected = (op.normalize_attrs({"k": 2}), op.infer((F3,), op.normalize_attrs({"k": 2})))
    assert op.infer_node((F3,), {"k": 2}) == (expected[0], expected[1]) and len(calls) == 2
    with inference_memo():
        first = op.infer_node((F3,), {"k": 2})
        first[0]["k"] = 99  # a caller's edit of its attributes reaches no other caller
        again = op.infer_node((F3,), {"k": 2})
        assert (again[0], list(again[1])) == (expected[0], expected[1]) and again[0] == {"k": 2, "v": None}
        assert len(calls) == 3  # the pack's shape function asked once in the block
        for _ in range(2):
            with pytest.raises(ShapeError, match="k=5 refused"):
                op.infer_node((F3,), {"k": 5})
        assert len(calls) == 5
        with pytest.raises(AttributeSpecError):
            op.infer_node((F3,), {"k": "two"})
