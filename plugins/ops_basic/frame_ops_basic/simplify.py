"""``simplify_algebra``: this pack's algebraic rewrites, contributed as a compile pass.

Runs after constant folding (hook ``frame_register_passes``). Each rule
applies only when the result has exactly the type of the node it replaces,
so broadcasting is never lost, and only when it is exact in IEEE arithmetic
for every x, signed zeros, infinities and NaN included: ``x + 0.0 -> x`` is
not (``-0.0 + 0.0`` is ``+0.0``), ``x + (-0.0) -> x`` is. ``x * 0 -> 0`` is
deliberately absent: it is wrong for infinities and NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import Graph, PassSpec, Rewriter, Value

MAX_CONSTANT_ELEMENTS = 1 << 16


def _constant(v: Value) -> np.ndarray | None:
    p = v.producer
    return p.attrs["value"] if p is not None and p.op == "constant" else None


def _all_equal(v: Value, x: float) -> bool:
    value = _constant(v)
    return value is not None and value.size <= MAX_CONSTANT_ELEMENTS and bool(np.all(value == x))


def _zeros(v: Value, negative: bool) -> bool:
    """Whether ``v`` is a constant of zeros all of one sign: -0.0 if ``negative``, else +0.0.

    Integer zeros count as either sign: integers have a single zero, and adding or subtracting it is exact.
    """
    value = _constant(v)
    if value is None or value.size > MAX_CONSTANT_ELEMENTS or np.any(value):
        return False
    return np.issubdtype(value.dtype, np.integer) or bool(np.all(np.signbit(value) == negative))


#: Ops that only copy their input along new or size-1 axes: an expansion of constant ones is ones.
_EXPANSIONS = frozenset({"sum_grad_internal", "broadcast_to_internal", "broadcast_to"})


def _ones(v: Value) -> bool:
    """Whether ``v`` is a constant of ones, or an expansion of one (a loss's seed ``sum_grad_internal(1.0)`` is
    far larger than constant folding materialises, so it stays an expansion of a scalar)."""
    p = v.producer
    if p is not None and p.op in _EXPANSIONS:
        v = p.inputs[0]
    return _all_equal(v, 1)


def _producer_op(v: Value) -> str | None:
    return v.producer.op if v.producer is not None else None


# (op, rule) where rule(inputs, node) returns the value that replaces the node's output, or None.
RULES: list[tuple[str, Callable]] = [
    # x + (-0.0) -> x: exact for every x (-0.0 + -0.0 = -0.0); x + (+0.0) is not (-0.0 + 0.0 = +0.0)
    ("add", lambda i, n: i[0] if _zeros(i[1], negative=True) else None),
    ("add", lambda i, n: i[1] if _zeros(i[0], negative=True) else None),           # (-0.0) + x -> x, likewise
    # x - (+0.0) -> x: it is x + (-0.0), exact; x - (-0.0) is x + (+0.0), which is not
    ("sub", lambda i, n: i[0] if _zeros(i[1], negative=False) else None),
    ("mul", lambda i, n: i[0] if _ones(i[1]) else None),                            # x * 1 -> x: exact, signs and NaN kept
    ("mul", lambda i, n: i[1] if _ones(i[0]) else None),                            # 1 * x -> x: likewise
    ("div", lambda i, n: i[0] if _all_equal(i[1], 1) else None),                    # x / 1 -> x: likewise
    ("neg", lambda i, n: i[0].producer.inputs[0] if _producer_op(i[0]) == "neg" else None),   # -(-x) -> x
    ("stop_gradient", lambda i, n: i[0]),                                           # identity once differentiated
    ("reshape", lambda i, n: i[0]),                                                 # to its own shape -> x
    ("transpose", lambda i, n: i[0] if n.attrs["perm"] == tuple(range(len(i[0].shape))) else None),  # identity perm
    ("reduce_to_shape_internal", lambda i, n: i[0]),                                # to its own shape -> x
    ("broadcast_to_internal", lambda i, n: i[0]),                                   # to its own shape -> x
]
_BY_OP: dict[str, list[Callable]] = {}
for _op, _rule in RULES:
    _BY_OP.setdefault(_op, []).append(_rule)


#: Ops whose rules all need a constant operand (x+-0, x-0, x*1, x/1), or for mul an expanded constant:
#: without one nothing applies.
_WITH_CONSTANT = frozenset({"add", "sub", "mul", "div"})


def _rewrite_of(node, inputs, constants: set, expansions: set) -> Value | None:  # noqa: ANN001 - a Node, its inputs
    """The value that replaces ``node``'s output by the first rule that applies, or ``None``. ``constants`` and
    ``expansions`` hold the outputs of the constants and of the ``_EXPANSIONS`` nodes before ``node`` (a walk files
    them as it passes: sets of values answer without reading each input's producer)."""
    op = node.op
    if op in _WITH_CONSTANT and constants.isdisjoint(inputs) and (op != "mul" or expansions.isdisjoint(inputs)):
        return None
    for rule in _BY_OP.get(op, ()):
        candidate = rule(inputs, node)
        if candidate is not None and candidate.type == node.outputs[0].type:
            return candidate
    return None


def simplify_algebra(graph: Graph, ctx) -> Graph:  # noqa: ANN001 - a CompileContext
    nodes = graph.nodes
    constants: set[Value] = set()  # the outputs of the constants and expansions met so far
    expansions: set[Value] = set()
    first = None
    for i, node in enumerate(nodes):  # (nothing changes before the first rule applies, so the walk starts there)
        op = node.op
        if op in _BY_OP:
            if _rewrite_of(node, node.inputs, constants, expansions) is not None:
                first = i
                break
            if op in _EXPANSIONS:
                expansions.add(node.outputs[0])
        elif op == "constant":
            constants.add(node.outputs[0])
        elif op in _EXPANSIONS:
            expansions.add(node.outputs[0])
    if first is None:
        return graph
    rw = Rewriter(graph, ctx)
    rw.keep(nodes[:first])
    copy, append, read = rw.copy, rw.new.nodes.append, rw.read
    unchanged = rw.vmap.keys().isdisjoint  # reads nothing rewritten
    dropped = []
    for node in nodes[first:]:
        op = node.op
        if op not in _BY_OP:
            if unchanged(node.inputs):
                append(node)
                kept = node
            else:
                kept = copy(node)
            if op == "constant":
                constants.add(node.outputs[0])
            elif op in _EXPANSIONS:  # (the node the readers read: a copy when it was copied)
                expansions.add(kept.outputs[0])
            continue
        ins = node.inputs
        inputs = ins if unchanged(ins) else read(ins)
        replacement = _rewrite_of(node, inputs, constants, expansions)
        if replacement is None:
            if inputs is ins:
                append(node)
                kept = node
            else:
                kept = copy(node, inputs)
            if op in _EXPANSIONS:  # (broadcast_to_internal: a rule's op, and an expansion when it stays)
                expansions.add(kept.outputs[0])
        else:
            rw.alias(node.outputs[0], replacement)
            dropped.append(node)
    ctx.note("simplify_algebra", f"rewrote {len(dropped)} nodes")
    ctx.dropped = dropped  # (the rewritten nodes: every other one is kept, or copied if the caller's)
    return rw.finish()


PASSES = [PassSpec("simplify_algebra", simplify_algebra, after="fold_constants", min_level=1,
                   doc="x+(-0.0), x-(+0.0), x*1 (1 also broadcast), x/1, -(-x), identity reshapes/transposes/broadcasts, stop_gradient -> x")]
