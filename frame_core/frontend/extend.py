"""``extend_graph``: add outputs computed from an existing graph's values.

Higher-order autodiff (ARCH-067) works on derived graphs: take the training
graph, compute something from its outputs (a contraction of a gradient, a
physics residual built from second derivatives), mark it as an output and
call ``build_backward_graph`` again. ``extend_graph`` does the middle step
with the tracing front end, on a copy (the given graph is not modified).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import IRError
from ..ir.graph import Graph, clone_graph
from .trace import Tensor, _check_arity, call_and_mark

__all__ = ["extend_graph"]


def extend_graph(graph: Graph, fn: Callable[..., Any], name: str | None = None, *,
                 names: str | Sequence[str] | None = None) -> tuple[Graph, Any]:
    """A copy of ``graph`` with the tensors ``fn(*inputs, *outputs)`` appended as new outputs.

    ``fn`` receives one tensor per graph input, then one per graph output, and
    returns a tensor (or number) or a list of them. Returns the new graph and
    the new outputs' positions in the form ``fn`` returned them: one position
    for one tensor (as ``add_scalar_contraction`` returns its one position), a
    list for a list. ``names`` names the new outputs (a name for one tensor, a
    list for a list) so ``graph.output_index(name)`` finds them later.
    """
    if not isinstance(graph, Graph):
        raise IRError(f"extend_graph(graph, fn) takes a Graph first, got {type(graph).__name__}")
    if not callable(fn):
        raise IRError(f"extend_graph(graph, fn) takes a function second, got {type(fn).__name__}")
    if name is not None and (not isinstance(name, str) or not name):
        raise IRError(f"extend_graph(name=) names the new graph (a non-empty string), got {type(name).__name__} "
                      f"{name!r:.40}")
    _check_arity(fn, len(graph.inputs) + len(graph.outputs))
    copy = clone_graph(graph)
    if name is not None:
        copy.name = name
    single: list[bool] = []

    def call(*args: Any) -> Any:
        result = fn(*args)
        single.append(not isinstance(result, (list, tuple)))
        return result
    positions = call_and_mark(copy, call, [Tensor(v, copy) for v in (*copy.inputs, *copy.outputs)])
    labels = _names(names, len(positions), single[0])
    for position, label in zip(positions, labels):
        copy.name_output(position, label)
    return copy, positions[0] if single[0] else positions


def _names(names: str | Sequence[str] | None, count: int, single: bool) -> list[str | None]:
    if names is None:
        return [None] * count
    listed = [names] if isinstance(names, str) and single else names
    if isinstance(listed, str) or not isinstance(listed, (list, tuple)) or len(listed) != count:
        raise IRError(f"extend_graph(names=...) needs {'a name' if single else f'a list of {count} names'} for the "
                      f"new output{'s' if count != 1 else ''}, got {names!r:.60}")
    return list(listed)
