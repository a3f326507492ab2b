"""``dead(graph, first)``: the nodes from position ``first`` on that no output of ``graph`` depends on (shared by
the tests that check build_backward_graph leaves none)."""

from __future__ import annotations

import frame_core as fc


def dead(graph: fc.Graph, first: int) -> list[str]:
    live = set(graph.outputs)
    found = []
    for k in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[k]
        if any(v in live for v in node.outputs):
            live.update(node.inputs)
        elif k >= first:
            found.append(f"%{k} {node.op}")
    return found
