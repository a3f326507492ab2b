"""Compile pass of selective_scan (contributed through ``frame_register_passes``).

merge_selective_scan_saving (after ``decompose``)
    selective_scan's GradientFn runs the forward again as
    ``selective_scan_saving_internal``, which also returns ``a = exp(delta A)``
    and the state ``h`` for the backward kernel. When the graph also holds the
    forward ``selective_scan`` node on the same inputs with the same
    attributes, the forward node's output is read from the saving node instead,
    moved to its place: the scan runs forward once. The saving node computes
    ``out`` with the forward kernel's own code, so the output keeps its bits.
    Without this pass (``opt_level=0``) the results are the same and the
    forward runs twice.
"""

from __future__ import annotations

from typing import Any

from frame_core import Graph, Node, PassSpec

from .control_passes import read_from_saving_twins
from .recurrence import optional_names

__all__ = ["PASSES", "merge_selective_scan_saving"]


def _short(node: Node) -> str:
    return node.op.rpartition("::")[2]


def _key(node: Node) -> tuple:
    return (tuple(map(id, node.inputs)), bool(node.attrs.get("delta_softplus")),
            optional_names(node.attrs, len(node.inputs) - 5))


def merge_selective_scan_saving(graph: Graph, ctx: Any) -> Graph:
    """Read a ``selective_scan`` node's output from its saving twin (module docstring)."""
    ops = {op.rpartition("::")[2] for op in ctx.ops(graph)}  # (the set of ops, memoised per graph)
    if "selective_scan_saving_internal" not in ops or "selective_scan" not in ops:
        return graph
    savers: dict[tuple, Node] = {}
    for node in graph.nodes:
        if _short(node) == "selective_scan_saving_internal":
            savers.setdefault(_key(node), node)
    twins = {n: savers[_key(n)] for n in graph.nodes if _short(n) == "selective_scan" and _key(n) in savers}
    if not twins:
        return graph
    merged = read_from_saving_twins(graph, {node: (saver, [0]) for node, saver in twins.items()})
    ctx.note("merge_selective_scan_saving", f"{len(twins)} selective_scan node(s) read their saving twin's output")
    return merged


PASSES = [
    PassSpec("merge_selective_scan_saving", merge_selective_scan_saving, after="decompose", min_level=1,
             doc="a selective_scan whose gradient recomputes it with a saving kernel reads that kernel's output"),
]
