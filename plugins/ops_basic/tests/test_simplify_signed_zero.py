"""``simplify_algebra`` keeps IEEE signed zeros: only rewrites exact for every x fire.

x + (-0.0) == x for every x (-0.0 included), but x + (+0.0) turns -0.0 into
+0.0; x - (+0.0) == x for every x, but x - (-0.0) does not. Each case is
compiled at opt_level 2 and compared bit for bit (signs of zeros included)
with opt_level 0, on inputs that hold both zeros.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc

X = np.array([-0.0, 0.0, -2.0, np.inf], np.float32)


def run(fn, opt_level: int, x: np.ndarray = X) -> tuple[list[str], np.ndarray]:
    exe = fc.compile(fc.trace(fn, f"f32[{x.size}]"), opt_level=opt_level, cache=False)
    with np.errstate(divide="ignore"):
        (y,) = exe.run([x])
    return [n.op for n in exe.graph.nodes], y


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_adding_positive_zero_keeps_the_sign_of_the_result():
    fn = lambda x: 1.0 / (x + 0.0)  # noqa: E731
    _, want = run(fn, 0, np.array([-0.0], np.float32))
    _, got = run(fn, 2, np.array([-0.0], np.float32))
    assert want[0] == np.inf
    assert_same_bits(got, want)


NEG_ZEROS = np.full(4, -0.0, np.float32)
POS_ZEROS = np.zeros(4, np.float32)

# (id, function of x, the op, whether the rule may remove it)
CASES = [
    ("x + 0.0", lambda x: x + 0.0, "add", False),
    ("0.0 + x", lambda x: 0.0 + x, "add", False),
    ("x + zeros", lambda x: x + fc.constant(POS_ZEROS), "add", False),
    ("x + -0.0", lambda x: x + -0.0, "add", True),
    ("-0.0 + x", lambda x: -0.0 + x, "add", True),
    ("x + -zeros", lambda x: x + fc.constant(NEG_ZEROS), "add", True),
    ("x + mixed zeros", lambda x: x + fc.constant(np.array([-0.0, 0.0, -0.0, -0.0], np.float32)), "add", False),
    ("x - 0.0", lambda x: x - 0.0, "sub", True),
    ("x - -0.0", lambda x: x - -0.0, "sub", False),
    ("x * 1", lambda x: x * 1.0, "mul", True),
    ("x / 1", lambda x: x / 1.0, "div", True),
]


@pytest.mark.parametrize("case, fn, op, removed", CASES, ids=[c[0] for c in CASES])
def test_zero_rules_fire_exactly_when_they_keep_every_bit(case, fn, op, removed):
    found, got = run(fn, 2)
    _, want = run(fn, 0)
    assert (op not in found) == removed, found
    assert_same_bits(got, want)


def test_integer_zero_is_an_exact_identity():
    x = np.array([-3, 0, 5], np.int32)
    exe = fc.compile(fc.trace(lambda v: v + fc.constant(np.zeros(3, np.int32)), "i32[3]"), cache=False)
    assert "add" not in [n.op for n in exe.graph.nodes]
    np.testing.assert_array_equal(exe.run([x])[0], x)
