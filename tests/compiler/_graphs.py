"""Graphs shared by the compiler tests."""

from __future__ import annotations

import frame_core as fc
from frame_core import ops


def chain_training(n: int) -> fc.Graph:
    """The training graph of benchmarks/backward_scaling.py's chain (sin + residual and tanh(matmul) in turn) of
    ``n`` links: fusable runs, matmuls between them and values read by two nodes."""
    def fn(x, w):
        h = x
        for i in range(n):
            h = ops.tanh(h @ w) if i % 2 else ops.sin(h) + h
        return ops.sum(h)
    return fc.build_backward_graph(fc.trace(fn, "f32[4, 8]", "f32[8, 8]"), 0, [0, 1])
