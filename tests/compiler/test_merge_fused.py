"""``merge_into_consumers`` (run by the fuse_elementwise stage): fused groups absorb the elementwise branches
that meet in them, when nothing reads those branches before the group."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

FUSED = "fused_elementwise_internal"


@pytest.fixture(autouse=True)
def numpy_tier(monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE", "0")  # the fused nodes themselves, not frame-native's rewrite of them


def members(node) -> list[str]:
    return [n.op for n in node.attrs["body"].nodes if n.op != "constant"]


def same_bits_as_unoptimised(graph, inputs):
    exe = fc.compile(graph, checks=True, cache=False)
    want = fc.compile(graph, opt_level=0, cache=False).run(inputs)
    for got, ref in zip(exe.run(inputs), want):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))  # bit for bit, NaN and -0.0 too
    return exe


def data(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    out[0].flat[:4] = [np.nan, -0.0, np.inf, -np.inf]
    return out


def test_two_branches_meeting_in_a_group_become_one_fused_node():
    # fusion grows (c * d) -> + -> tanh; the branch a * b joins it here
    graph = fc.trace(lambda a, b, c, d: ops.tanh(a * b + c * d) * 2.0, *["f32[4, 8]"] * 4)
    exe = same_bits_as_unoptimised(graph, data(*[(4, 8)] * 4))
    assert [i.op for i in exe.instructions] == [FUSED]
    assert sorted(members(exe.instructions[0].node)) == ["add", "mul", "mul", "mul", "tanh"]
    assert any(stage == "merge_into_consumers" for stage, _ in exe.log)


def test_a_whole_tree_of_single_products_is_absorbed_and_broadcast_operands_stay_inputs():
    def fn(g, t, s, w):
        return (g * t) * s + (g * w) * t - (t * w)
    graph = fc.trace(fn, "f32[6, 5]", "f32[6, 5]", "f32[6, 5]", "f32[5]")
    exe = same_bits_as_unoptimised(graph, data((6, 5), (6, 5), (6, 5), (5,), seed=1))
    assert [i.op for i in exe.instructions] == [FUSED]


def test_a_branch_read_before_the_group_stays_outside():
    # p = a * b feeds a product (not elementwise) that runs before the group reading p
    def fn(a, b, m):
        p = a * b
        return ops.tanh(p @ m + 1.0) * p
    graph = fc.trace(fn, "f32[4, 4]", "f32[4, 4]", "f32[4, 4]")
    exe = same_bits_as_unoptimised(graph, data((4, 4), (4, 4), (4, 4), seed=2))
    assert [i.op for i in exe.instructions] == ["mul", "matmul", FUSED]
    assert not any(stage == "merge_into_consumers" for stage, _ in exe.log)


def test_a_branch_also_read_after_the_group_becomes_an_extra_output():
    def fn(a, b, c, m):
        p = a * b
        y = ops.tanh(c + 1.0) * 3.0 + p
        return [y, p @ m]  # p is read by the group, and by the product after it
    graph = fc.trace(fn, *["f32[4, 4]"] * 4)
    exe = same_bits_as_unoptimised(graph, data(*[(4, 4)] * 4, seed=3))
    fused = [i for i in exe.instructions if i.op == FUSED]
    assert len(fused) == 1 and len(fused[0].node.outputs) == 2
    assert [i.op for i in exe.instructions] == [FUSED, "matmul"]


def test_groups_of_another_type_are_left_alone():
    # w * w is a [5] value: it cannot join a [3, 5] group, it is read as an input
    graph = fc.trace(lambda x, w: ops.tanh(x + w * w) * x, "f32[3, 5]", "f32[5]")
    exe = same_bits_as_unoptimised(graph, data((3, 5), (5,), seed=4))
    assert sorted(i.op for i in exe.instructions) == [FUSED, "mul"]


def test_a_node_reading_a_group_soon_after_it_joins_the_group_at_its_place():
    # w * w (another type) sits between the group and the product reading both: the product joins the group,
    # which runs where the product ran
    def fn(x, w):
        y = ops.tanh(x + 1.0) * 3.0
        w2 = w * w
        return [y * w2, y]
    graph = fc.trace(fn, "f32[4, 8]", "f32[8]")
    exe = same_bits_as_unoptimised(graph, data((4, 8), (8,), seed=5))
    assert [i.op for i in exe.instructions] == ["mul", FUSED]
    assert len(exe.instructions[1].node.outputs) == 2  # y is still returned
    assert any(stage == "merge_followers" for stage, _ in exe.log)


def test_a_follower_stops_at_a_node_that_needs_the_groups_value_first():
    def fn(x, m):
        y = ops.tanh(x + 1.0) * 3.0
        p = y @ m  # needs y before anything after it can join y's group
        return y * 2.0 + p
    graph = fc.trace(fn, "f32[4, 4]", "f32[4, 4]")
    exe = same_bits_as_unoptimised(graph, data((4, 4), (4, 4), seed=6))
    assert [i.op for i in exe.instructions] == [FUSED, "matmul", "add"]  # the add stays after the product


def test_a_column_broadcast_is_not_brought_into_a_group_without_one():
    # a * col reads a [4, 1] column against [4, 8]: a group of whole and repeated operands (one frame-native can
    # compile) does not take it in; the numpy tier would run it either way
    def fn(a, col, c, d):
        p = a * col
        return (c * d + 1.0) * 2.0 + p
    graph = fc.trace(fn, "f32[4, 8]", "f32[4, 1]", "f32[4, 8]", "f32[4, 8]")
    exe = same_bits_as_unoptimised(graph, data((4, 8), (4, 1), (4, 8), (4, 8), seed=7))
    assert [i.op for i in exe.instructions] == ["mul", FUSED]
