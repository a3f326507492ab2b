"""Stage 1: structural verification (rules V1-V5, V7, V8; V6 is stage 2).

A graph that reaches ``compile`` is almost always valid, so the stage first
walks it once checking the rules in their cheapest form (set lookups, one
schema lookup per op and attribute set) and calls the full ``check_graph``
only when that walk finds something, or meets a sub-graph: the problems a
user sees always come from ``check_graph``, with its wording.

The same walk re-infers every node's output types (rule V6, stage 2's
contract) from a memo of signatures, and records in the context that this
very graph has its types checked: ``infer_types`` then has nothing to do
(see ``CompileContext.types_checked``). Any mismatch leaves the record unset,
so stage 2 finds and words it.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from ...errors import FrameError, VerifyError
from ...ir.graph import Graph
from ...ir.verify import check_graph
from ..context import CompileContext
from .infer import canonical

_type = attrgetter("type")
_NOT_ONE = object()


def verify_structure(graph: Graph, ctx: CompileContext) -> Graph:
    """Return ``graph`` unchanged, or raise ``VerifyError`` listing every problem but type mismatches."""
    ops: set[str] = set()
    valid, typed = quick_check(graph, ctx.registry, ops)
    ctx.types_checked = (graph, tuple(graph.nodes)) if typed else None
    if valid:
        ctx.know_ops(graph, ops)  # the walk met every node: the stages after it need not walk for the set
        return graph
    problems = check_graph(graph, ctx.registry, types=False)
    if problems:
        raise VerifyError(problems)
    return graph


def quick_check(graph: Graph, registry: Any, ops: set[str] | None = None) -> tuple[bool, bool]:
    """``(valid, typed)``: ``valid`` when ``graph`` satisfies V1-V5 and V7 and has no sub-graphs (False when
    ``check_graph`` must look), ``typed`` when it is valid and every recorded type also equals the inferred
    one (V6).

    V1 inputs are distinct and unproduced, every output records its node and index, nothing is defined twice;
    V2 every input is defined earlier; V3 the op exists; V4 attributes normalise; V5 the arity fits;
    V7 the outputs are values of the graph.

    Nodes are memoised by signature: op, input types and the attribute names with the *identities* of their
    values. Every node of the graph is alive during the walk, so an identity names one object throughout
    it; nodes that share attribute objects (a GradientFn's micro-graph inlined a thousand times shares its
    constants and shapes) are checked once. ``ops``, when given, receives the set of the graph's ops (complete
    when the graph is valid: every op starts a signature).
    """
    defined = set(graph.inputs)
    if len(defined) != len(graph.inputs) or any(v.producer is not None for v in graph.inputs):
        return False, False
    lookup = registry.lookup
    issuperset = defined.issuperset
    add = defined.add
    # signature -> (the output types inference gives (None: inference rejects it), the one type a single-output
    # node must record (_NOT_ONE when inference gives no single type: no recorded type is that object))
    memo: dict[tuple, Any] = {}
    typed = True
    for node in graph.nodes:
        ins = node.inputs
        if not issuperset(ins):
            return False, False
        op = node.op
        attrs = node.attrs
        # one flat tuple (types are never tuples, so the two forms cannot meet)
        key = (op, tuple(attrs), tuple(map(id, attrs.values())), *map(_type, ins)) if attrs else (op, *map(_type, ins))
        known = memo.get(key)
        if known is None:  # a signature not met before in this walk
            in_types = tuple(map(_type, ins))
            try:
                schema = lookup(op)  # a stored key: no pack scope applies
            except FrameError:
                return False, False
            try:
                schema.check_arity(len(ins))
            except FrameError:
                return False, False
            if attrs:
                for a in attrs.values():
                    if type(a) is Graph:
                        return False, False  # sub-graphs: check_graph knows their rules (V8)
            try:
                normal = schema.normalize_attrs(attrs)
            except FrameError:
                return False, False
            if typed and not canonical(attrs, normal):  # stage 2 normalises them: it must run
                typed = False
            try:
                inferred = tuple(schema.infer(in_types, normal))
            except FrameError:
                inferred = None  # stage 2 words it (V6)
            known = memo[key] = (inferred, inferred[0] if inferred is not None and len(inferred) == 1 else _NOT_ONE)
        outs = node.outputs
        if len(outs) == 1:  # most nodes: no loop
            v = outs[0]
            if v.producer is not node or v.index != 0 or v in defined:
                return False, False
            add(v)
            if typed and v.type is not known[1]:  # types are interned
                typed = False
            continue
        inferred = known[0]
        for pos, v in enumerate(outs):
            if v.producer is not node or v.index != pos or v in defined:
                return False, False
            add(v)
        if typed and (inferred is None or tuple(map(_type, outs)) != inferred):
            typed = False
    if not issuperset(graph.outputs):
        return False, False
    if ops is not None:
        ops.update([key[0] for key in memo])
    return True, typed
