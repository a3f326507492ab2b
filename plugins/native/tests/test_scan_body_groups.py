"""Native groups inside a scan body: the scan's later steps run inline (``Executable.scan_steps``) and pass each
group an ``out`` array that is its row of a stacked output (0-d for a rank-0 row). After the swap to compiled
code the results are the numpy tier's bit for bit, and a run on other inputs in between leaves nothing behind."""

from __future__ import annotations

import numpy as np

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import jit


def _scan(h, xs, w):  # noqa: ANN001, ANN202
    def step(c, x):  # noqa: ANN001, ANN202
        a = ops.relu(c * w + x)  # a native group (no transcendental op), its output a row of a stack
        b = a * 0.75 - c * 0.5
        return b, (a, b, c, ops.sum(b))
    last, ys = ops.scan(step, h, xs, reverse=True)
    return (last, *ys)


def test_native_groups_in_a_scan_body_keep_the_numpy_bits(monkeypatch, same_bits):
    graph = fc.trace(_scan, "f32[2, 64]", "f32[9, 2, 64]", "f32[64]")
    rng = np.random.default_rng(0)
    runs = [[rng.standard_normal(s).astype(np.float32) for s in ((2, 64), (9, 2, 64), (64,))] for _ in range(2)]
    exe = fc.compile(graph, cache=False)
    first = [exe.run(xs) for xs in runs]
    assert frame_native.wait(60)
    assert jit.status()["compiled"] + jit.status()["from_cache"] >= 1, jit.status()
    monkeypatch.setenv("FRAME_NATIVE", "0")
    numpy_only = fc.compile(graph, cache=False, checks=True)
    for k in (0, 1, 0):
        want = numpy_only.run(runs[k])
        for got_first, got, w in zip(first[k], exe.run(runs[k]), want):
            same_bits(got_first, w)
            same_bits(got, w)
