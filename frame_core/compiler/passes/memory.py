"""Stage 8: memory planning.

Liveness: a value lives from its node to the last node that reads it or any
view of it (ops with the ``view`` trait may return views of their first
input). Buffer reuse: the output of a single-output op whose kernel
``accepts_out`` gets a buffer from a pool of arena buffers; a buffer returns
to the pool after its value's last use. An ``elementwise`` op may write in
place into the buffer of an input that dies at that very node; other ops
never get a buffer one of their inputs still occupies. Values that reach a
graph output (directly or through views) are never planned, so outputs never
alias each other, the inputs or a reused buffer. Values that are not planned
are released right after their last use.

``peak_bytes`` is the most the intermediates (everything but inputs,
constants and outputs) hold at any point under the plan: the arena, which
persists between runs, plus the live unplanned intermediates.
``unplanned_bytes`` is the sum of all intermediates, what a run that never
frees or reuses would hold.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ...ir.graph import Graph, Value
from ..fused import FUSED_OP
from ...ops_registry.registry import Registry

__all__ = ["MemoryPlan", "plan_memory", "view_bases"]


@dataclass
class MemoryPlan:
    """Which buffer each planned value uses, when every value dies, and the byte counts."""

    buffer_of: dict[Value, int] = field(default_factory=dict)
    buffer_bytes: list[int] = field(default_factory=list)
    last_use: dict[Value, int] = field(default_factory=dict)
    peak_bytes: int = 0
    unplanned_bytes: int = 0
    enabled: bool = True

    @property
    def arena_bytes(self) -> int:
        return sum(self.buffer_bytes)

    def summary(self) -> dict[str, int]:
        return {"peak_bytes": self.peak_bytes, "unplanned_bytes": self.unplanned_bytes,
                "arena_bytes": self.arena_bytes, "buffers": len(self.buffer_bytes),
                "planned_values": len(self.buffer_of)}


class _Pool:
    """Free arena buffers by size; ``take`` is best fit (smallest buffer that is large enough)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes            # every buffer's capacity, by id (shared with the plan)
        self.by_size: dict[int, list[int]] = {}
        self.free_sizes: list[int] = []  # sorted capacities that have a free buffer
        self.free: set[int] = set()

    def take(self, need: int) -> int:
        k = bisect.bisect_left(self.free_sizes, need)
        if k == len(self.free_sizes):
            self.sizes.append(need)
            return len(self.sizes) - 1
        size = self.free_sizes[k]
        bucket = self.by_size[size]
        buffer = bucket.pop()
        if not bucket:
            del self.free_sizes[k]
        self.free.discard(buffer)
        return buffer

    def give(self, buffer: int) -> None:
        if buffer in self.free:
            return
        self.free.add(buffer)
        size = self.sizes[buffer]
        bucket = self.by_size.setdefault(size, [])
        if not bucket:
            bisect.insort(self.free_sizes, size)
        bucket.append(buffer)


def view_bases(graph: Graph, registry: Registry) -> dict[Value, Value]:
    """For each value, the value whose memory it may share (itself unless produced by a ``view`` op)."""
    base: dict[Value, Value] = {}
    for node in graph.nodes:
        is_view = "view" in registry.schemas[node.op].traits and node.inputs
        for v in node.outputs:
            base[v] = base.get(node.inputs[0], node.inputs[0]) if is_view else v
    return base


def plan_memory(graph: Graph, registry: Registry, reuse: bool = True) -> MemoryPlan:
    plan = MemoryPlan(enabled=reuse)
    schemas = registry.schemas
    base = view_bases(graph, registry)
    end = len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            plan.last_use[v] = i
            b = base.get(v)
            if b is not None and b is not v:
                plan.last_use[b] = max(plan.last_use.get(b, i), i)
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            plan.last_use.setdefault(v, i)  # never read: dies where it is made
    escaping = {base.get(v, v) for v in graph.outputs} | set(graph.outputs)
    for v in escaping:
        plan.last_use[v] = end

    intermediates = [v for n in graph.nodes if n.op != "constant" for v in n.outputs if v not in escaping]
    plan.unplanned_bytes = sum(v.type.nbytes for v in intermediates if base.get(v) is v)

    pool = _Pool(plan.buffer_bytes)
    live_unplanned = 0
    peak_unplanned = 0
    releases: dict[int, list[Value]] = {}
    for v in intermediates:
        releases.setdefault(plan.last_use[v], []).append(v)

    buffer_of = plan.buffer_of
    for i, node in enumerate(graph.nodes):
        schema = schemas[node.op]
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if (reuse and out is not None and out not in escaping and node.op != "constant"
                and "accepts_out" in schema.traits and out.type.nbytes > 0):
            chosen = None
            if "elementwise" in schema.traits:  # write in place into an input dying here
                for v in node.inputs:
                    if v in buffer_of and plan.last_use.get(v) == i and v.type == out.type:
                        chosen = buffer_of[v]
                        break
            buffer_of[out] = pool.take(out.type.nbytes) if chosen is None else chosen
        elif reuse and out is None and node.op == FUSED_OP:
            # a fused chain's several exports take planned buffers too (its `out` is then a tuple): left to the
            # kernel, they would be allocated on top of the arena, which once made opt level 2's peak the larger
            for v in node.outputs:
                if v not in escaping and v.type.nbytes > 0:
                    buffer_of[v] = pool.take(v.type.nbytes)
        for v in node.outputs:
            if v not in escaping and v not in buffer_of and node.op != "constant" and base.get(v) is v:
                live_unplanned += v.type.nbytes
        if live_unplanned > peak_unplanned:
            peak_unplanned = live_unplanned
        taken_here = {buffer_of[w] for w in node.outputs if w in buffer_of}
        for v in releases.get(i, ()):
            if v in buffer_of:
                if buffer_of[v] not in taken_here:
                    pool.give(buffer_of[v])
            elif base.get(v) is v:
                live_unplanned -= v.type.nbytes
    plan.peak_bytes = plan.arena_bytes + peak_unplanned
    return plan
