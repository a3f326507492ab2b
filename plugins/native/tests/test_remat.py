"""``recompute_in_readers``: a compiled group recomputes a value it alone reads instead of reading it back.

``1 - y^2`` made next to ``tanh`` and read once more after a matrix product: the later group reads ``y``
anyway, so it computes ``1 - y^2`` again and the first group stops exporting it. Same bits, numpy tier and
compiled tier alike (checked against the unoptimised graph, with signed zeros, infinities and a NaN).
"""

from __future__ import annotations

import numpy as np

import frame_core as fc
import frame_native
from frame_core import ops

NATIVE = "native_fused_internal"


def groups(exe) -> list[tuple[list[str], int]]:
    """(members, number of outputs) of each compiled group, in order."""
    return [([n.op for n in i.node.attrs["body"].nodes if n.op != "constant"], len(i.node.outputs))
            for i in exe.instructions if i.op == NATIVE]


def recomputed(exe) -> list[str]:
    return [note for stage, note in exe.log if stage == "recompute_in_readers"]


def inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    dx = rng.standard_normal((16, 8)).astype(np.float32)
    dx[1, :2] = [np.nan, -0.0]
    return [x, rng.standard_normal((8, 8)).astype(np.float32), dx]


def bits_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        both_nan = np.isnan(a) & np.isnan(b)  # (a NaN's sign and payload are left open: see test_tiering)
        np.testing.assert_array_equal(np.where(both_nan, 0, a).view(np.uint32),
                                      np.where(both_nan, 0, b).view(np.uint32))


def test_the_later_group_recomputes_one_minus_y_squared_with_the_same_bits():
    def fn(x, w, dx):
        y = ops.tanh(x)
        t = 1.0 - y * y
        d = (t * dx) @ w
        return d * t * 3.0 + y * d
    g = fc.trace(fn, "f32[16, 8]", "f32[8, 8]", "f32[16, 8]")
    exe = fc.compile(g, cache=False)
    assert recomputed(exe) == ["1 values recomputed by their one compiled reader instead of read back"]
    (first, _), (second, _) = groups(exe)
    assert groups(exe)[0][1] == 1  # t * dx only: t itself is no longer written
    assert second[:2] == ["mul", "sub"]  # 1 - y * y again, ahead of the reader's own members
    want = fc.compile(g, opt_level=0, cache=False).run(inputs())
    with np.errstate(all="ignore"):
        bits_equal(exe.run(inputs()), want)  # numpy tier
        assert frame_native.wait(60)
        assert set(frame_native.tier_of(exe)) == {"native"}
        bits_equal(exe.run(inputs()), want)  # compiled tier


def test_a_reader_that_would_need_a_new_full_size_input_reads_the_value_back():
    def fn(x, w, dx):
        t = 1.0 - ops.tanh(x) * ops.tanh(x)
        d = (t * dx) @ w
        return d * t * 3.0 + d  # reads d and t, not y: recomputing t would read y, a new [16, 8] stream
    exe = fc.compile(fc.trace(fn, "f32[16, 8]", "f32[8, 8]", "f32[16, 8]"), cache=False)
    assert not recomputed(exe)
    assert groups(exe)[0][1] == 2


def test_a_value_the_caller_gets_is_not_recomputed():
    def fn(x, w, dx):
        y = ops.tanh(x)
        t = 1.0 - y * y
        d = (t * dx) @ w
        return [d * t * 3.0 + y * d, t]
    exe = fc.compile(fc.trace(fn, "f32[16, 8]", "f32[8, 8]", "f32[16, 8]"), cache=False)
    assert not recomputed(exe)
    assert groups(exe)[0][1] == 2
