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
from collections.abc import Callable
from dataclasses import dataclass, field

from ...ir.graph import Graph, Value
from ..fused import FUSED_OP
from ...ops_registry.registry import Registry

__all__ = ["MemoryPlan", "plan_memory", "view_bases", "view_links"]


@dataclass
class MemoryPlan:
    """Which buffer each planned value uses, when every value dies, and the byte counts."""

    buffer_of: dict[Value, int] = field(default_factory=dict)
    buffer_bytes: list[int] = field(default_factory=list)
    last_use: dict[Value, int] = field(default_factory=dict)
    peak_bytes: int = 0
    unplanned_bytes: int = 0
    enabled: bool = True
    links: dict[Value, Value] = field(default_factory=dict, repr=False)  # view outputs -> their base (view_links)

    @property
    def arena_bytes(self) -> int:
        return sum(self.buffer_bytes)

    def summary(self) -> dict[str, int]:
        return {"peak_bytes": self.peak_bytes, "unplanned_bytes": self.unplanned_bytes,
                "arena_bytes": self.arena_bytes, "buffers": len(self.buffer_bytes),
                "planned_values": len(self.buffer_of)}


def _pool(sizes: list[int]) -> tuple[Callable[[int], int], Callable[[int], None]]:
    """Free arena buffers by size: ``(take, give)``. ``take(need)`` is best fit (the smallest free buffer that
    is large enough, else a new one appended to ``sizes``, every buffer's capacity by id); ``give(buffer)``
    returns one (twice is once). Closures over local tables: the planner calls them once per value."""
    by_size: dict[int, list[int]] = {}
    free_sizes: list[int] = []  # sorted capacities that have a free buffer
    free: set[int] = set()
    bisect_left, insort = bisect.bisect_left, bisect.insort
    discard, add = free.discard, free.add

    def take(need: int) -> int:
        bucket = by_size.get(need)
        if bucket:  # a free buffer of exactly this size: the best fit (graphs reuse a handful of sizes)
            buffer = bucket.pop()
            if not bucket:
                del free_sizes[bisect_left(free_sizes, need)]
            discard(buffer)
            return buffer
        k = bisect_left(free_sizes, need)
        if k == len(free_sizes):
            sizes.append(need)
            return len(sizes) - 1
        size = free_sizes[k]
        bucket = by_size[size]
        buffer = bucket.pop()
        if not bucket:
            del free_sizes[k]
        discard(buffer)
        return buffer

    def give(buffer: int) -> None:
        if buffer in free:
            return
        add(buffer)
        size = sizes[buffer]
        bucket = by_size.get(size)
        if bucket is None:
            bucket = by_size[size] = []
        if not bucket:
            insort(free_sizes, size)
        bucket.append(buffer)

    return take, give


def view_bases(graph: Graph, registry: Registry) -> dict[Value, Value]:
    """For each value, the value whose memory it may share (itself unless produced by a ``view`` op)."""
    base: dict[Value, Value] = {}
    for node in graph.nodes:
        is_view = "view" in registry.schemas[node.op].traits and node.inputs
        for v in node.outputs:
            base[v] = base.get(node.inputs[0], node.inputs[0]) if is_view else v
    return base


def view_links(graph: Graph, registry: Registry, ops: set[str] | None = None) -> dict[Value, Value]:
    """``view_bases`` without the identity entries: only the outputs of ``view`` ops, each mapped to the value
    whose memory it may share (``links.get(v, v)`` is ``view_bases(...)[v]``). Empty for a graph without views,
    which is most of them. ``ops``: the graph's set of ops, when the caller has it."""
    schemas = registry.schemas
    views = {op for op in (ops if ops is not None else {n.op for n in graph.nodes}) if "view" in schemas[op].traits}
    links: dict[Value, Value] = {}
    if views:
        for node in graph.nodes:
            if node.op in views and node.inputs:
                first = node.inputs[0]
                b = links.get(first, first)
                for v in node.outputs:
                    links[v] = b
    return links


def plan_memory(graph: Graph, registry: Registry, reuse: bool = True) -> MemoryPlan:
    plan = MemoryPlan(enabled=reuse)
    schemas = registry.schemas
    nodes = graph.nodes
    ops = {n.op for n in nodes}
    links = view_links(graph, registry, ops)  # a view's output -> the value whose memory it shares
    end = len(nodes)
    if links:
        last_use = plan.last_use
        for i, node in enumerate(nodes):
            for v in node.inputs:
                last_use[v] = i
                b = links.get(v)
                if b is not None:
                    last_use[b] = max(last_use.get(b, i), i)
    else:  # the last reader of each value (the last write wins; the order of first reads, as the loop above)
        last_use = plan.last_use = {v: i for i, node in enumerate(nodes) for v in node.inputs}
    setdefault = last_use.setdefault
    escaping = {links.get(v, v) for v in graph.outputs} | set(graph.outputs)
    # each intermediate (every node output but constants and what escapes) is released after its last use;
    # the walk below files a node's outputs here before it looks up what dies at that node (a value never read
    # dies where it is made), so one walk both files and releases
    releases: list[list[Value] | None] = [None] * end  # by position: what dies after that node
    unplanned = 0

    take, give = _pool(plan.buffer_bytes)
    live_unplanned = 0
    peak_unplanned = 0

    # per op: 1 a planned `out` (accepts_out), 2 also in place into a dying input (elementwise)
    kinds = {}
    for op in ops:
        traits = schemas[op].traits
        kinds[op] = (2 if "elementwise" in traits else 1) if "accepts_out" in traits and op != "constant" else 0
    buffer_of = plan.buffer_of
    buffer_get = buffer_of.get
    for i, node in enumerate(nodes):
        op = node.op
        outs = node.outputs
        kind = kinds[op]
        if len(outs) == 1:  # (most nodes)
            out = outs[0]
            t = out.type
            if op == "constant":
                setdefault(out, i)
                continue  # a constant reads nothing and releases nothing
            last = setdefault(out, i)
            if out in escaping:
                chosen = None
            else:
                linked = out in links
                if not linked:
                    unplanned += t.nbytes
                found = releases[last]
                if found is None:
                    releases[last] = [out]
                else:
                    found.append(out)
                chosen = None
                if reuse and kind and t.nbytes > 0:
                    if kind == 2:  # write in place into an input dying here
                        for v in node.inputs:
                            if last_use.get(v) == i and v.type is t:  # (types are interned)
                                chosen = buffer_get(v)
                                if chosen is not None:
                                    break
                    if chosen is None:
                        chosen = take(t.nbytes)
                    buffer_of[out] = chosen
                elif not linked:
                    live_unplanned += t.nbytes
            if live_unplanned > peak_unplanned:
                peak_unplanned = live_unplanned
            released = releases[i]
            if released:
                for v in released:
                    buffer = buffer_get(v)
                    if buffer is not None:
                        if buffer != chosen:
                            give(buffer)
                    elif v not in links:
                        live_unplanned -= v.type.nbytes
            continue
        if op != "constant":
            for v in outs:
                last = setdefault(v, i)
                if v in escaping:
                    continue
                if v not in links:
                    unplanned += v.type.nbytes
                found = releases[last]
                if found is None:
                    releases[last] = [v]
                else:
                    found.append(v)
        else:
            for v in outs:
                setdefault(v, i)
        if reuse and op == FUSED_OP:
            # a fused chain's several exports take planned buffers too (its `out` is then a tuple): left to the
            # kernel, they would be allocated on top of the arena, which once made opt level 2's peak the larger
            for v in outs:
                if v not in escaping and v.type.nbytes > 0:
                    buffer_of[v] = take(v.type.nbytes)
        if op != "constant":
            for v in outs:
                if v not in escaping and v not in buffer_of and v not in links:
                    live_unplanned += v.type.nbytes
        if live_unplanned > peak_unplanned:
            peak_unplanned = live_unplanned
        released = releases[i]
        if released:
            taken_here = {buffer_of[w] for w in outs if w in buffer_of}
            for v in released:
                buffer = buffer_get(v)
                if buffer is not None:
                    if buffer not in taken_here:
                        give(buffer)
                elif v not in links:
                    live_unplanned -= v.type.nbytes
    for v in escaping:
        last_use[v] = end
    plan.unplanned_bytes = unplanned
    plan.peak_bytes = plan.arena_bytes + peak_unplanned
    plan.links = links
    return plan
