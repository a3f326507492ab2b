"""The start-up gradient-closure audit (ARCH-068).

After the packs load, every GradientFn is instantiated on its op's examples
and checked against the contract (inputs ``[x.., y.., gy..]``, one gradient
per input of the input's type, a micro-graph that passes ``verify``). The ops
on the active path of each micro-graph (those reading a floating value that
depends on the micro-graph's inputs and having a floating output; zero-input
constants and ops whose outputs are all integer or boolean are exempt) are
followed recursively: at start-up at the op level (each is audited on its
own examples), and with ``deep=True`` with the very types and attributes
they have inside the micro-graph.

Each op then gets its differentiation order: the number of times a graph
containing it can be put through ``build_backward_graph``. An op without a
GradientFn has order 0; an op whose micro-graphs use only ops of order
``>= k`` has order ``k + 1``; ops whose micro-graphs never reach an op without a
GradientFn are *closed* (differentiable to any order). Orders are a shortest
path in the "gradient uses" graph, computed by breadth-first search from the
order-0 ops, so cycles (``mul``'s gradient uses ``mul``) are handled.

A pack whose GradientFn breaks the contract is marked failed and its ops are
removed before orders are computed (a broken pack is reported, not fatal).

Control flow: an op with graph attributes (its bodies) gets its own order,
from the ops its GradientFn emits around the bodies (``loop``'s gradient is a
``loop``: closed), marked ``bodies=True``: a node of it is differentiable as
often as that order *and* the ops inside its bodies allow. ``graph_order``
gives that for a concrete graph, through every nesting level. The deep audit
does not re-instantiate the GradientFns of control-flow nodes found inside
micro-graphs (each would differentiate an ever larger body).
"""

from __future__ import annotations

import gc
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

from .._gc import gc_paused
from ..errors import AmbiguousOpError, FrameError, UnknownOpError
from ..ir.graph import Graph, is_zero_constant
from ..ir.keys import attrs_key
from ..ir.verify import check_graph, clean_node_memo
from .closure_info import CLOSED, ClosureInfo
from .registry import Registry, op_scope, use_registry
from .schema import NodeContext, OpSchema, _plain_key, inference_memo, instantiate_gradient

__all__ = ["ClosureInfo", "run_closure_audit", "check_gradient_contract", "graph_order", "has_bodies", "CLOSED"]

#: Upper bound on the GradientFn instantiations the deep audit makes beyond the ops' own examples (every example is
#: always checked), so a GradientFn that makes ever new types cannot stall it; what it leaves out is reported.
MAX_CONTEXTS = 5000


def check_gradient_contract(schema: OpSchema, ctx: NodeContext, micro: Any, registry: Registry) -> tuple[list[str], set[str]]:
    """Contract problems of one micro-graph, and the unregistered ops it uses."""
    def where() -> str:  # only on the error path: a clean micro-graph (nearly all) formats no type
        return f"{schema.name} on [{', '.join(map(str, ctx.input_types))}]"
    if not isinstance(micro, Graph):
        return [f"GradientFn of {where()} returned {type(micro).__name__}, expected a Graph"], set()
    problems = []
    expected_in = ctx.gradient_input_types()
    got_in = [v.type for v in micro.inputs]
    if got_in != expected_in:
        problems.append(
            f"GradientFn of {where()}: micro-graph inputs are [{', '.join(map(str, got_in))}], "
            f"expected [x.., y.., gy..] = [{', '.join(map(str, expected_in))}]"
        )
    got_out = [v.type for v in micro.outputs]
    if got_out != list(ctx.input_types):
        problems.append(
            f"GradientFn of {where()}: returns [{', '.join(map(str, got_out))}], expected one gradient per input of "
            f"its type: [{', '.join(map(str, ctx.input_types))}]"
        )
    else:  # the slot of an input that carries no gradient holds a zero (the documented rule, schema module)
        for i, t in enumerate(ctx.input_types):
            if (i in schema.nondiff_inputs or not t.dtype.is_float) and not is_zero_constant(micro.outputs[i]):
                problems.append(f"GradientFn of {where()}: input {i} ({t}) carries no gradient, so its slot must be a "
                                "zero constant (return None for it from grad_graph)")
    unknown = set()
    for p in check_graph(micro, registry):
        if p.rule == "V3":
            unknown.add(p.op or "?")
        else:
            problems.append(f"GradientFn of {where()}: micro-graph fails verify: {p}")
    return problems, unknown


def _active_nodes(micro: Graph, schema: OpSchema, n_inputs: int) -> list:
    """Nodes reading a floating value that depends on the micro-graph's (differentiable) inputs and having a
    floating output: a node whose outputs are all integer or boolean (a comparison) carries no gradient, so
    the backward transform never differentiates it and it does not limit the closure order."""
    active = set()
    for i, v in enumerate(micro.inputs):
        if i < n_inputs and i in schema.nondiff_inputs:
            continue
        if v.type.dtype.is_float:
            active.add(v)
    nodes = []
    for node in micro.nodes:
        if active.isdisjoint(node.inputs):
            continue
        floating = [v for v in node.outputs if v.type.dtype.is_float]
        if floating:
            nodes.append(node)
            active.update(floating)
    return nodes


def run_closure_audit(reg: Registry, deep: bool = False, *, collect: bool = True) -> dict[str, ClosureInfo]:
    """Audit every GradientFn of ``reg``; store and return ``reg.closure``. Failing packs are unloaded.

    The start-up audit instantiates each GradientFn on its op's own examples
    and follows the ops its micro-graphs use at the op level (each of those
    is audited on its own examples). ``deep=True`` (``frame audit
    gradients``, the test suite) also instantiates every op inside a
    micro-graph with the exact types and attributes it has there, recursively.

    ``collect=False`` leaves the audit's garbage (its micro-graphs) to the collector's own schedule instead of
    freeing it with one young collection at the end: for a process that ends soon after (``frame audit
    gradients``), where that walk of about a hundred thousand objects would free memory nobody uses again.
    """
    # every distinct shape question, GradientFn node and verify verdict of a node once (schema.inference_memo,
    # verify.clean_node_memo); no cyclic collections
    # meanwhile: the micro-graphs (cycles of nodes and values) are garbage by the thousand, and one collection
    # of the young objects afterwards frees them with one walk instead of a hundred partial ones
    with use_registry(reg), inference_memo(), clean_node_memo(), gc_paused():
        try:
            return _audit(reg, deep)
        finally:
            if collect:
                gc.collect(0)


def _audit(reg: Registry, deep: bool) -> dict[str, ClosureInfo]:
    # every table is keyed by canonical op key (what node.op holds), never by short name: names may collide
    uses: dict[str, set[str]] = defaultdict(set)
    unresolved: dict[str, set[str]] = defaultdict(set)
    contract: dict[str, list[str]] = defaultdict(list)
    unchecked_bodies: dict[str, set[str]] = defaultdict(set)  # op -> unregistered ops in its examples' bodies
    seen: set[tuple] = set()
    queued: set[tuple] = set()  # contexts found inside micro-graphs, queued once (most are found many times over)
    work: deque[tuple[str, OpSchema, NodeContext, tuple | None]] = deque()  # (.., its seen-key once known)

    for key, schema in reg.schemas.items():
        for example in schema.examples:
            missing = _missing_body_ops(example.attrs, reg)
            if missing:  # a body of ops no loaded pack provides (a pack disabled, not installed): not the pack's
                unchecked_bodies[key] |= missing  # fault, so it stays loaded; unchecked, its order is 0
                continue
            try:
                ctx = schema.context(example.inputs, example.attrs)
                ctx.output_types  # shape inference must accept the op's own examples
            except Exception as exc:  # FrameError or a bug: either way the pack's own example is at fault
                reason = str(exc) if isinstance(exc, FrameError) else f"{type(exc).__name__}: {exc}"
                contract[key].append(f"example {example!r} is rejected by its own op: {reason}")
                continue
            work.append((key, schema, ctx, None))

    schemas, table_get = reg.schemas, dict.get
    examples = len(work)  # every example is checked; only contexts found inside micro-graphs count to the bound
    count = 0
    while work and count < examples + MAX_CONTEXTS:
        key, schema, ctx, seen_key = work.popleft()
        if schema.gradient is None:
            continue
        if seen_key is None:
            seen_key = (key, ctx.input_types, _context_key(ctx.attrs))
        if seen_key in seen:
            continue
        seen.add(seen_key)
        count += 1
        try:  # (the plain attribute key, known here, is the one instantiate_gradient would compute again)
            micro = instantiate_gradient(schema, ctx, seen_key[2][1] if seen_key[2][0] else None)
        except UnknownOpError as exc:  # needs an op no loaded pack provides: a closure break, not a contract error
            unresolved[key].add(exc.name)
            continue
        except (Exception, SystemExit) as exc:  # the pack's code, reported against its op
            contract[key].append(
                f"GradientFn raised {type(exc).__name__} on [{', '.join(map(str, ctx.input_types))}]: {exc}")
            continue
        problems, unknown = check_gradient_contract(schema, ctx, micro, reg)
        if problems:
            contract[key].extend(problems)
            continue
        unresolved[key] |= unknown
        used = uses[key]
        for node in _active_nodes(micro, schema, len(ctx.input_types)):
            op = node.op
            used.add(op)
            inner = table_get(schemas, op)  # (node.op is a canonical key; any other spelling: the table's own get)
            if inner is None:
                inner = schemas.get(op)
            if not deep or inner is None or inner.gradient is None:
                continue
            attrs = node.attrs
            plain = _plain_key(attrs) if attrs else ()
            if plain is not None:  # (plain attributes hold no graph)
                context_key: tuple = (True, plain)
            elif _carries_graphs(attrs):
                continue
            else:
                context_key = (False, attrs_key(attrs))
            in_types = tuple([v.type for v in node.inputs])
            found = (op, in_types, context_key)
            if found not in queued and found not in seen:
                queued.add(found)
                work.append((op, inner, NodeContext(inner, in_types, attrs, [v.type for v in node.outputs]), found))

    unchecked: dict[str, int] = defaultdict(int)
    for key, schema, ctx, seen_key in work:  # each distinct context left once (examples may repeat one)
        if seen_key is None:
            seen_key = (key, ctx.input_types, _context_key(ctx.attrs))
        if schema.gradient is not None and seen_key not in seen:
            seen.add(seen_key)
            unchecked[key] += 1
    _unload_broken_packs(reg, contract)
    reg.closure = _orders(reg, uses, unresolved, unchecked_bodies)
    _forward_orders(reg, reg.closure)
    if unchecked:  # never stop in silence: say what the bound left out
        total = sum(unchecked.values())
        ops = ", ".join(f"{op} ({n})" for op, n in sorted(unchecked.items())[:10])
        reg.notes.append(f"the deep closure audit stopped after {MAX_CONTEXTS} GradientFn instantiations found inside "
                         f"micro-graphs; {total} more were not checked: {ops}"
                         f"{' ...' if len(unchecked) > 10 else ''}. Their orders count only what was checked")
        for op, n in unchecked.items():
            if op in reg.closure:
                reg.closure[op].problems.append(f"the deep audit did not check {n} context(s) of this op "
                                                f"(bound MAX_CONTEXTS={MAX_CONTEXTS} reached)")
    return reg.closure


def _unload_broken_packs(reg: Registry, contract: dict[str, list[str]]) -> None:
    broken: dict[str, list[str]] = defaultdict(list)
    for op, problems in contract.items():
        schema = reg.schemas.get(op)
        if schema is not None:
            broken[schema.pack or "?"].extend(f"op {op!r}: {p}" for p in problems)
    for pack, problems in broken.items():
        if pack == "core" or pack not in reg.packs:  # the core's own ops are part of frame itself: never unload them
            reg.notes.extend(problems)
            continue
        reg.drop_pack(pack, "gradient contract violated: " + "; ".join(problems))


def _orders(reg: Registry, uses: dict[str, set[str]], unresolved: dict[str, set[str]],
            unchecked_bodies: dict[str, set[str]]) -> dict[str, ClosureInfo]:
    order: dict[str, int] = {}
    next_hop: dict[str, str] = {}
    users: dict[str, set[str]] = defaultdict(set)
    queue: deque[str] = deque()
    for name, schema in reg.schemas.items():
        for used in uses.get(name, ()):
            users[used].add(name)
        missing = {u for u in unresolved.get(name, set()) | uses.get(name, set()) | unchecked_bodies.get(name, set())
                   if u not in reg.schemas}
        if schema.gradient is None:
            order[name] = 0
            queue.append(name)
        elif missing:
            order[name] = 0
            next_hop[name] = sorted(missing)[0]
            queue.append(name)
    while queue:
        name = queue.popleft()
        for user in users.get(name, ()):
            if user not in order and reg.schemas[user].gradient is not None:
                order[user] = order[name] + 1
                next_hop[user] = name
                queue.append(user)
    result = {}
    for name, schema in reg.schemas.items():
        chain = [name]
        while chain[-1] in next_hop and len(chain) < 64:
            chain.append(next_hop[chain[-1]])
        problems = [f"gradient uses {op!r}, which is not registered" for op in sorted(unresolved.get(name, ()))
                    if op not in reg.schemas]
        if unchecked_bodies.get(name):
            problems.append(f"not checked: its examples' bodies use {', '.join(map(repr, sorted(unchecked_bodies[name])))}"
                            ", which no loaded pack provides")
        result[name] = ClosureInfo(
            op=name,
            differentiable=schema.differentiable,
            order=order.get(name, CLOSED),
            chain=tuple(chain) if name in order else (),  # from the op to the one that breaks closure
            uses=tuple(sorted(uses.get(name, ()))),
            problems=problems,
            bodies=has_bodies(schema),
        )
    return result


def has_bodies(schema: OpSchema) -> bool:
    """Whether the op carries sub-graphs (an attribute of kind ``graph``): control flow."""
    return any(spec.kind == "graph" for spec in schema.attrs.values())


def _missing_body_ops(attrs: dict[str, Any], reg: Registry) -> set[str]:
    """Op names in the graph-valued attributes ``attrs`` (recursively) that ``reg`` does not provide: an example
    whose body uses ops of a pack that is not loaded cannot be instantiated, whatever its own pack does."""
    missing: set[str] = set()
    for value in attrs.values():
        if isinstance(value, Graph):
            for node in value.nodes:
                try:
                    reg.lookup(node.op)
                except AmbiguousOpError:
                    pass  # there, but ambiguous: the example's own check reports it
                except UnknownOpError:
                    missing.add(node.op)
                missing |= _missing_body_ops(node.attrs, reg)
    return missing


def _context_key(attrs: Mapping[str, Any]) -> tuple:
    """What tells two contexts' attributes apart: their plain key (schema._plain_key: cheap, and exact, by
    class and order) when every value is plain, else ``attrs_key`` (arrays by their bytes, graphs by structure)."""
    plain = _plain_key(attrs)
    return (True, plain) if plain is not None else (False, attrs_key(attrs))


def _carries_graphs(attrs: dict[str, Any]) -> bool:
    for value in attrs.values():  # (a loop: called for every node the deep audit meets)
        if isinstance(value, Graph):
            return True
    return False


def graph_order(graph: Graph, registry: Registry) -> tuple[int | str, tuple[str, ...]]:
    """How many times ``graph`` can be put through ``build_backward_graph`` (``"closed"``: any number), by its ops.

    The smallest closure order among its nodes with a floating output and, through every level, the nodes
    of their bodies (integer and boolean outputs carry no gradient, so a comparison never limits it); the
    second item is the path to a node that sets it (``("node 3 (loop)", "body node 1 (foo)")``), empty when
    closed. Uses ``registry.closure`` (the audit's orders); an unknown op counts as order 0.
    """
    best: int | str = CLOSED
    where: tuple[str, ...] = ()
    for index, node in enumerate(graph.nodes):
        if not any(v.type.dtype.is_float for v in node.outputs):  # never on a gradient chain (comparisons)
            continue
        here = f"node {index} ({node.op})"
        info = registry.closure.get(node.op)
        order = info.order if info is not None else (CLOSED if node.op in registry.schemas else 0)
        if _below(order, best):
            best, where = order, (here,)
        for key, value in node.attrs.items():
            if isinstance(value, Graph):
                inner, path = graph_order(value, registry)
                if _below(inner, best):
                    best, where = inner, (here, f"{key} {path[0]}", *path[1:])
    return best, where


def _below(order: int | str, best: int | str) -> bool:
    """Whether ``order`` is a lower differentiation order than ``best`` (``"closed"`` is the highest)."""
    return isinstance(order, int) and (not isinstance(best, int) or order < best)


# -- forward mode ------------------------------------------------------------------------------------
def _jvp_uses(schema: OpSchema, reg: Registry) -> tuple[set[str], list[str]]:
    """The ops on the active path of the op's JvpFn micro-graphs (on its examples), and contract problems."""
    from ..autodiff.jvp import jvp_contract_problems

    uses: set[str] = set()
    problems: list[str] = []
    jvp = schema.jvp
    if jvp is None:
        return uses, problems
    for example in schema.examples:
        if _missing_body_ops(example.attrs, reg):
            continue
        try:
            ctx = schema.context(example.inputs, example.attrs)
            ctx.output_types
            with op_scope(schema.namespace):
                micro = jvp(ctx)
        except (Exception, SystemExit) as exc:
            problems.append(f"JvpFn raised {type(exc).__name__} on its example: {exc}")
            continue
        found = jvp_contract_problems(ctx, micro)
        if found:
            problems.extend(f"JvpFn breaks the contract: {p}" for p in found)
            continue
        active = {v for v in micro.inputs if v.type.dtype.is_float}
        for node in micro.nodes:
            floating = [v for v in node.outputs if v.type.dtype.is_float]
            if floating and any(v in active for v in node.inputs):
                uses.add(node.op)
                active.update(floating)
    return uses, problems


def _forward_orders(reg: Registry, closure: dict[str, ClosureInfo]) -> None:
    """Fill ``forward_rule`` and ``forward_order`` of every op's ClosureInfo.

    A derived JVP is reverse mode applied to the GradientFn's micro-graph, so it needs one reverse order more
    than it gives: forward order = reverse order - 1 (closed stays closed). A direct JvpFn gives one plus the
    lowest forward order among the ops its micro-graphs use (a cycle of direct rules is closed), found by
    lowering from "closed" until nothing changes."""
    infinite = float("inf")
    value: dict[str, float] = {}
    direct: dict[str, set[str]] = {}
    with use_registry(reg):
        for name, schema in reg.schemas.items():
            info = closure.get(name)
            if info is None:
                continue
            if schema.jvp is not None:
                uses, problems = _jvp_uses(schema, reg)
                if problems:
                    info.problems.extend(problems)
                    info.forward_rule, value[name] = "direct", 0
                    continue
                info.forward_rule = "direct"
                direct[name] = uses
                value[name] = infinite
            elif schema.gradient is not None:
                info.forward_rule = "derived"
                value[name] = infinite if info.closed else max(int(info.order) - 1, 0)
            else:
                value[name] = 0
    for _ in range(len(direct) + 2):
        changed = False
        for name, uses in direct.items():
            lowest = min((value.get(u, 0) for u in uses), default=infinite)
            new = min(value[name], lowest + 1)
            if new != value[name]:
                value[name], changed = new, True
        if not changed:
            break
    for name, info in closure.items():
        v = value.get(name, 0)
        info.forward_order = CLOSED if v == infinite else int(v)
