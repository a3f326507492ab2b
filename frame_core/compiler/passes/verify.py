"""Stage 1: structural verification (rules V1-V5, V7, V8; V6 is stage 2)."""

from __future__ import annotations

from ...errors import VerifyError
from ...ir.graph import Graph
from ...ir.verify import check_graph
from ..context import CompileContext


def verify_structure(graph: Graph, ctx: CompileContext) -> Graph:
    """Return ``graph`` unchanged, or raise ``VerifyError`` listing every problem but type mismatches."""
    problems = check_graph(graph, ctx.registry, types=False)
    if problems:
        raise VerifyError(problems)
    return graph
