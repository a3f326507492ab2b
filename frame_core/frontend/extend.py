"""``extend_graph``: add outputs computed from an existing graph's values.

Higher-order autodiff (ARCH-067) works on derived graphs: take the training
graph, compute something from its outputs (a contraction of a gradient, a
physics residual built from second derivatives), mark it as an output and
call ``build_backward_graph`` again. ``extend_graph`` does the middle step
with the tracing front end, on a copy (the given graph is not modified).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import IRError
from ..ir.graph import Graph, clone_graph
from .trace import Tensor, call_and_mark

__all__ = ["extend_graph"]


def extend_graph(graph: Graph, fn: Callable[..., Any], name: str | None = None) -> tuple[Graph, list[int]]:
    """A copy of ``graph`` with the tensors ``fn(*inputs, *outputs)`` appended as new outputs.

    ``fn`` receives one tensor per graph input, then one per graph output, and
    returns a tensor or a sequence of tensors. Returns the new graph and the
    indices of the new outputs.
    """
    if not isinstance(graph, Graph):
        raise IRError(f"extend_graph(graph, fn) takes a Graph first, got {type(graph).__name__}")
    if not callable(fn):
        raise IRError(f"extend_graph(graph, fn) takes a function second, got {type(fn).__name__}")
    copy = clone_graph(graph)
    if name is not None:
        copy.name = name
    return copy, call_and_mark(copy, fn, [Tensor(v, copy) for v in (*copy.inputs, *copy.outputs)])
