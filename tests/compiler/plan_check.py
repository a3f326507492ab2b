"""An independent check of a memory plan and of the aliasing of a run's outputs (used by several test files)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from frame_core.ir.graph import Graph, Value


def live_ranges(graph: Graph, registry) -> dict[Value, tuple[int, float]]:
    """Each node output's ``(defined at, last read at)``, counting reads of views of it; inf if it escapes."""
    base: dict[Value, Value] = {}
    for node in graph.nodes:
        is_view = "view" in registry.get(node.op).traits
        for v in node.outputs:
            base[v] = base.get(node.inputs[0], node.inputs[0]) if is_view else v
    ranges: dict[Value, list] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            ranges[v] = [i, i]
        for v in node.inputs:
            for w in {v, base.get(v, v)}:
                if w in ranges:
                    ranges[w][1] = max(ranges[w][1], i)
    for v in graph.outputs:
        for w in {v, base.get(v, v)}:
            if w in ranges:
                ranges[w][1] = math.inf
    return {v: (a, b) for v, (a, b) in ranges.items()}


def check_plan(exe, registry) -> None:
    """Values sharing a buffer never overlap in time; in place only into an elementwise op's dying input."""
    graph, plan = exe.graph, exe.plan
    ranges = live_ranges(graph, registry)
    by_buffer: dict[int, list[Value]] = {}
    for v, buffer in plan.buffer_of.items():
        assert ranges[v][1] != math.inf, f"a value that reaches an output is planned: {v}"
        assert plan.buffer_bytes[buffer] >= v.type.nbytes, f"buffer {buffer} is too small for {v}"
        by_buffer.setdefault(buffer, []).append(v)
    for buffer, values in by_buffer.items():
        values.sort(key=lambda v: ranges[v][0])
        for first, later in itertools.combinations(values, 2):
            (_, end), (start, _) = ranges[first], ranges[later]
            assert end <= start, f"buffer {buffer} holds {first} (live to node {end}) and {later} (made at node {start})"
            if end == start:  # written in place at the node that last reads `first`
                node = graph.nodes[start]
                assert "elementwise" in registry.get(node.op).traits, f"{node.op} writes in place into its input"
                assert first in node.inputs and first.type == later.type
    assert plan.arena_bytes == sum(plan.buffer_bytes)
    assert plan.peak_bytes <= plan.unplanned_bytes or plan.unplanned_bytes == 0


def check_outputs_alias_nothing(exe, inputs, outputs) -> None:
    """No output shares memory with another output, an input, a constant or a planned buffer; all writable."""
    held = [("input", a) for a in inputs if isinstance(a, np.ndarray)]
    held += [("constant", a) for a in exe.program.constants.values()]
    for buffer in exe.program.buffers.values():  # an array, or a tuple of them (a fused node's several outputs)
        held += [("planned buffer", a) for a in (buffer if isinstance(buffer, tuple) else (buffer,)) if a is not None]
    for i, out in enumerate(outputs):
        assert isinstance(out, np.ndarray) and out.flags.writeable, f"output {i} is not a writable ndarray"
        for kind, array in held:
            assert not np.shares_memory(out, array), f"output {i} shares memory with a {kind}"
        for j in range(i):
            assert not np.shares_memory(out, outputs[j]), f"outputs {j} and {i} share memory"
