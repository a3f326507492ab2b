"""What a control-flow kernel hands back: arrays of its own, never sharing memory with each other, with its
inputs or with the body's constants (the memory plan promises that outputs never alias)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.frontend.trace import apply


def _same_value_twice_loop(x):  # noqa: ANN001, ANN202
    def body(i, s, t):  # noqa: ANN001, ANN202
        u = ops.sin(s)
        return True, u, u  # one body value for both states
    return ops.loop(body, 3, True, x, x)


def _same_value_twice_scan(x):  # noqa: ANN001, ANN202
    def body(c, r):  # noqa: ANN001, ANN202
        u = ops.sin(c[0]) + r
        return (u, u), u
    (a, b), ys = ops.scan(body, (x, x), ops.reshape(ops.stack(x, x, axis=0), shape=(2, 3)))
    return a, b, ys


def _state_passed_through_twice(x):  # noqa: ANN001, ANN202
    return ops.loop(lambda i, s, t: (True, t, t), 2, True, ops.sin(x), ops.cos(x))


@pytest.mark.parametrize("fn", [_same_value_twice_loop, _same_value_twice_scan, _state_passed_through_twice])
@pytest.mark.parametrize("opt_level", [0, 2])
def test_outputs_never_share_memory(fn, opt_level):
    x = np.array([0.1, 0.2, 0.3])
    exe = fc.compile(fc.trace(fn, "f64[3]"), opt_level=opt_level)
    outs = exe.run([x])
    want = [o.copy() for o in outs]
    for i, a in enumerate(outs):
        for b in outs[i + 1:]:
            assert not np.may_share_memory(a, b)
    outs[0][...] = -7.0  # the caller owns what it gets: writing one output changes no other, nor the next run
    for got, expected in zip(outs[1:], want[1:]):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip(exe.run([x]), want):
        np.testing.assert_array_equal(got, expected)


def _unused_loop(x):  # noqa: ANN001, ANN202
    ops.loop(lambda i, s: (True, apply("record", s) * 2.0), 3, True, x)  # nothing reads it
    return ops.sin(x)


def _two_equal_loops(x):  # noqa: ANN001, ANN202
    a = ops.loop(lambda i, s: (True, apply("record", s) * 2.0), 2, True, x)
    b = ops.loop(lambda i, s: (True, apply("record", s) * 2.0), 2, True, x)
    return a + b


def _loop_over_constants(x):  # noqa: ANN001, ANN202
    c = fc.constant(np.array([1.0, 2.0, 3.0]))
    return x + ops.loop(lambda i, s: (True, apply("record", s) * 2.0), 2, True, c)


def _unused_branch_nested_in_a_scan(x):  # noqa: ANN001, ANN202
    def body(c, r):  # noqa: ANN001, ANN202
        ops.if_else(True, lambda v: apply("record", v), lambda v: v, c)
        return c, None
    ops.scan(body, x, length=2)
    return x * 1.0


@pytest.mark.parametrize("fn, runs", [(_unused_loop, 3), (_two_equal_loops, 4), (_loop_over_constants, 2),
                                      (_unused_branch_nested_in_a_scan, 2)])
@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_a_side_effect_inside_a_body_runs_at_every_run(fn, runs, opt_level, recorded):
    """A node whose bodies hold an op with a side effect has one too, at any depth: dead-node elimination
    keeps it, CSE does not merge it, folding does not run it at compile time."""
    exe = fc.compile(fc.trace(fn, "f64[3]"), opt_level=opt_level, cache=False)
    recorded.clear()
    exe.run([np.array([0.1, 0.2, 0.3])])
    assert len(recorded) == runs
