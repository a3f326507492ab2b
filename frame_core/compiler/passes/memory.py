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

from dataclasses import dataclass, field

from ...ir.graph import Graph, Value
from ...registry.registry import Registry

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

    free: list[int] = []  # buffer ids available
    live_unplanned = 0
    peak_unplanned = 0
    releases: dict[int, list[Value]] = {}
    position = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            position[v] = i
    for v in intermediates:
        releases.setdefault(plan.last_use.get(v, position[v]), []).append(v)

    for i, node in enumerate(graph.nodes):
        schema = schemas[node.op]
        out = node.outputs[0] if len(node.outputs) == 1 else None
        plannable = (reuse and out is not None and out not in escaping and node.op != "constant"
                     and "accepts_out" in schema.traits and out.type.nbytes > 0)
        if plannable:
            need = out.type.nbytes
            candidates = list(free)
            if "elementwise" in schema.traits:  # may write in place into an input dying here
                candidates += [plan.buffer_of[v] for v in node.inputs
                               if v in plan.buffer_of and plan.last_use.get(v) == i and v.type == out.type]
            fitting = [b for b in candidates if plan.buffer_bytes[b] >= need]
            if fitting:
                chosen = min(fitting, key=lambda b: plan.buffer_bytes[b])
                if chosen in free:
                    free.remove(chosen)
            else:
                chosen = len(plan.buffer_bytes)
                plan.buffer_bytes.append(need)
            plan.buffer_of[out] = chosen
        for v in node.outputs:
            if v not in escaping and v not in plan.buffer_of and node.op != "constant" and base.get(v) is v:
                live_unplanned += v.type.nbytes
        peak_unplanned = max(peak_unplanned, live_unplanned)
        for v in releases.get(i, ()):
            if v in plan.buffer_of:
                b = plan.buffer_of[v]
                if b not in free and not any(plan.buffer_of.get(w) == b for w in node.outputs):
                    free.append(b)
            elif base.get(v) is v:
                live_unplanned -= v.type.nbytes
    plan.peak_bytes = plan.arena_bytes + peak_unplanned
    return plan
