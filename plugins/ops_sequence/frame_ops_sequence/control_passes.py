"""Compile passes for the control-flow ops (contributed through ``frame_register_passes``).

merge_trajectory_recompute (after ``decompose``)
    The GradientFn of a ``loop``/``scan`` runs the forward again with a
    *saving body*: the body extended with outputs that stack the trajectory
    and the residuals its gradient reads. When the graph also holds the
    original forward node (same op, inputs and attributes, a body the saving
    body extends), the forward node is replaced by the saving one, moved to
    its place: the loop runs once and saves what the backward needs, instead
    of running twice. Without this pass (``opt_level=0``) the results are the
    same and the forward runs twice.
prune_control_flow (before ``eliminate_dead_nodes``)
    Outputs of a control-flow node that nothing reads are removed from its
    bodies: unread stacked outputs (trajectory rows or residuals the backward
    does not read), loop-carried states whose final value is unread and that
    no kept output depends on (e.g. the accumulated gradient of an invariant
    that is not differentiated), an unread trip count. Inputs the pruned
    bodies no longer read are dropped, so their producers become dead too.

Both run on bodies as well, since bodies are compiled through the same
pipeline (``compile_subgraph``).
"""

from __future__ import annotations

from typing import Any

from frame_core import Graph, Node, PassSpec, Rewriter, Value, attrs_key, graph_key, node_has_side_effect

__all__ = ["PASSES", "merge_trajectory_recompute", "prune_control_flow", "sink_scan_accumulations"]

_SAVING = ("loop", "scan")


def _node_key(node: Node) -> tuple:
    """What a forward node and its saving twin share: op, inputs, and attributes but the body and trip_count."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("body", "trip_count")}
    return (node.op, tuple(map(id, node.inputs)), attrs_key(attrs))


def _extends(big: Graph, small: Graph) -> bool:
    """Whether ``big`` is ``small`` with nodes and outputs appended (``split_vjp_graph``'s forward part)."""
    if len(big.nodes) < len(small.nodes) or len(big.outputs) < len(small.outputs) or \
            [v.type for v in big.inputs] != [v.type for v in small.inputs]:
        return False
    prefix = Graph(small.name)
    prefix.inputs, prefix.nodes = list(big.inputs), big.nodes[:len(small.nodes)]
    prefix.outputs = big.outputs[:len(small.outputs)]
    return graph_key(prefix) == graph_key(small)


def _output_map(small: Node, big: Node) -> list[int] | None:
    """Where each output of ``small`` is among ``big``'s, when ``big`` computes all of them, else None."""
    is_loop = small.op == "loop"
    if is_loop and small.attrs["trip_count"] and not big.attrs["trip_count"]:
        return None
    if not _extends(big.attrs["body"], small.attrs["body"]):
        return None
    n = len(small.outputs) - (1 if is_loop and small.attrs["trip_count"] else 0)
    return list(range(n)) + ([len(big.outputs) - 1] if n < len(small.outputs) else [])


def merge_trajectory_recompute(graph: Graph, ctx: Any) -> Graph:
    """Replace a ``loop``/``scan`` by the saving copy of it that its gradient computes (module docstring)."""
    if ctx.ops(graph).isdisjoint(_SAVING):  # (the usual graph: no loop to merge)
        return graph
    groups: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.op in _SAVING:
            groups.setdefault(_node_key(node), []).append(node)
    twins: dict[Node, tuple[Node, list[int]]] = {}  # forward node -> (saving node, output positions)
    for nodes in groups.values():
        for small in nodes:
            for big in nodes:
                if big is not small and len(big.outputs) > len(small.outputs) and small not in twins:
                    where = _output_map(small, big)
                    if where is not None:
                        twins[small] = (big, where)
    for small in list(twins):  # follow chains (a saving node that another one extends) to the largest
        big, where = twins[small]
        while big in twins:
            bigger, more = twins[big]
            big, where = bigger, [more[k] for k in where]
        twins[small] = (big, where)
    if not twins:
        return graph
    merged = read_from_saving_twins(graph, twins)
    ctx.note("merge_trajectory_recompute", f"{len(twins)} forward loop(s) now save what their gradient reads")
    return merged


def read_from_saving_twins(graph: Graph, twins: dict[Node, tuple[Node, list[int]]]) -> Graph:
    """``graph`` without the forward nodes of ``twins`` (forward node -> (saving node, positions)): output ``k``
    of a forward node is read from output ``positions[k]`` of its saving twin, which is emitted where its first
    forward twin stood (their inputs are the same, so they are defined there). Shared by the passes that merge
    a recomputation into the saving node a gradient made of it."""
    rw = Rewriter(graph)
    placed: dict[Node, Node] = {}  # saving node -> its node in the new graph
    savers = {big for big, _ in twins.values()}
    for node in graph.nodes:
        if node in placed:  # already emitted where its forward twin was
            continue
        twin = twins.get(node)
        if twin is None:
            copy = rw.copy(node)
            if node in savers:
                placed[node] = copy
            continue
        big, where = twin
        if big not in placed:
            placed[big] = rw.copy(big)
        for k, old in enumerate(node.outputs):
            rw.alias(old, placed[big].outputs[where[k]])
    return rw.finish()


def _live(body: Graph, outputs: list[Value], schemas: dict[str, Any]) -> tuple[list[Node], set[Value]]:
    """The body's nodes the given outputs need (and side effects), and every value they read."""
    live = set(outputs)
    keep = []
    for node in reversed(body.nodes):
        if any(v in live for v in node.outputs) or node_has_side_effect(node, schemas):
            keep.append(node)
            live.update(node.inputs)
    keep.reverse()
    return keep, live


def _subgraph(body: Graph, inputs: list[Value], outputs: list[Value], nodes: list[Node]) -> Graph:
    g = Graph(body.name)
    g.inputs, g.nodes, g.outputs = list(inputs), list(nodes), list(outputs)
    return g


def _prune_sequential(node: Node, used: set[int], schemas: dict[str, Any]) -> tuple[list[int], dict, list[int]] | None:
    """For a loop/scan node: (kept input positions, new attrs, kept output positions) or None if nothing changes."""
    is_loop = node.op == "loop"
    a = node.attrs
    body: Graph = a["body"]
    ns = a["n_states"] if is_loop else a["n_carry"]
    nx = a["n_scanned"]
    head = 2 if is_loop else 0  # limit, cond
    lead = 1 if is_loop else 0  # the body's position input / cond output
    ny = len(body.outputs) - lead - ns
    n_out = len(node.outputs)
    trip_count = is_loop and a["trip_count"] and n_out - 1 in used
    ys = [k for k in range(ny) if ns + k in used]
    states = {k for k in range(ns) if k in used}
    b_states = body.inputs[lead:lead + ns]
    while True:
        outs = body.outputs[:lead] + [body.outputs[lead + k] for k in sorted(states)] + \
            [body.outputs[lead + ns + k] for k in ys]
        nodes, read = _live(body, outs, schemas)
        grown = states | {k for k in range(ns) if b_states[k] in read}
        if grown == states:
            break
        states = grown
    kept_states = sorted(states)
    rows = [k for k in range(nx) if body.inputs[lead + ns + k] in read]
    n_inv = len(body.inputs) - lead - ns - nx
    invs = [k for k in range(n_inv) if body.inputs[lead + ns + nx + k] in read]
    if (len(kept_states), len(rows), len(invs), len(ys), trip_count) == (ns, nx, n_inv, ny, is_loop and a["trip_count"]):
        return None
    b_in = body.inputs[:lead] + [b_states[k] for k in kept_states] + \
        [body.inputs[lead + ns + k] for k in rows] + [body.inputs[lead + ns + nx + k] for k in invs]
    new_body = _subgraph(body, b_in, outs, nodes)
    inputs = list(range(head)) + [head + k for k in kept_states] + [head + ns + k for k in rows] + \
        [head + ns + nx + k for k in invs]
    attrs = {**a, "body": new_body, "n_scanned": len(rows), ("n_states" if is_loop else "n_carry"): len(kept_states)}
    if is_loop:
        attrs["trip_count"] = trip_count
    outputs = kept_states + [ns + k for k in ys] + ([n_out - 1] if trip_count else [])
    return inputs, attrs, outputs


def _prune_branches(node: Node, used: set[int], schemas: dict[str, Any]) -> tuple[list[int], dict, list[int]] | None:
    keep_out = [k for k in range(len(node.outputs)) if k in used]
    if len(keep_out) == len(node.outputs):
        return None
    branches = {}
    read_any: set[int] = set()
    for key in ("then_branch", "else_branch"):
        body: Graph = node.attrs[key]
        outs = [body.outputs[k] for k in keep_out]
        nodes, read = _live(body, outs, schemas)
        branches[key] = (body, outs, nodes)
        read_any |= {k for k, v in enumerate(body.inputs) if v in read}
    kept_in = sorted(read_any)
    attrs = dict(node.attrs)
    for key, (body, outs, nodes) in branches.items():
        attrs[key] = _subgraph(body, [body.inputs[k] for k in kept_in], outs, nodes)
    return [0] + [1 + k for k in kept_in], attrs, keep_out


_PRUNERS = {"loop": _prune_sequential, "scan": _prune_sequential, "if_else": _prune_branches}


def prune_control_flow(graph: Graph, ctx: Any) -> Graph:
    """Drop unread outputs (and then unread states and inputs) of control-flow nodes."""
    if ctx.ops(graph).isdisjoint(_PRUNERS):
        return graph
    schemas = ctx.registry.schemas
    read: set[Value] = set(graph.outputs)
    for node in graph.nodes:
        read.update(node.inputs)
    plans = {}
    for node in graph.nodes:
        if node.op in _PRUNERS:
            used = {k for k, v in enumerate(node.outputs) if v in read}
            if used:
                plan = _PRUNERS[node.op](node, used, schemas)
                if plan is not None:
                    plans[node] = plan
    if not plans:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        plan = plans.get(node)
        if plan is None:
            rw.copy(node)
            continue
        inputs, attrs, outputs = plan
        new = rw.emit(node.op, [rw.vmap[node.inputs[k]] for k in inputs], attrs,
                      [node.outputs[k].type for k in outputs])
        for k, v in zip(outputs, new.outputs):
            rw.alias(node.outputs[k], v)
    ctx.note("prune_control_flow", f"pruned {len(plans)} control-flow node(s)")
    return rw.finish()


# -- sink_scan_accumulations ------------------------------------------------------------------------------
def _short(node: Node | None) -> str:
    return "" if node is None else node.op.rpartition("::")[2]


def _sinkable(body: Graph, k: int, nc: int, nx: int, users: dict[Value, list[Node]]) -> tuple[Node, Node] | None:
    """For carry ``k`` of a scan body: ``(accumulate, contribution)`` when the carry only sums a per-step
    ``matmul_grad_rhs_internal`` of two per-step matrices, or a ``reduce_to_shape_internal`` of one per-step
    value, into itself (and nothing else reads it); None otherwise."""
    acc_in, out = body.inputs[k], body.outputs[k]
    add = out.producer
    if add is None:  # the carry is a body input passed through
        return None
    if _short(add) != "accumulate_internal" or add.inputs[0] is not acc_in or users.get(acc_in) != [add] or \
            acc_in in body.outputs or users.get(out) or body.outputs.count(out) != 1:  # (a trajectory stacks acc_in)
        return None
    contribution = add.inputs[1].producer
    if contribution is None or users.get(add.inputs[1]) != [add]:
        return None
    per_step = set(body.inputs[nc:nc + nx])  # rows; or values the body computes (not carries or invariants)

    def stackable(v: Value) -> bool:
        return v.producer is not None or v in per_step
    op = _short(contribution)
    if op == "matmul_grad_rhs_internal":
        a, g = contribution.inputs
        return (add, contribution) if (stackable(a) and stackable(g) and a.type.rank == 2 and g.type.rank == 2
                                       and list(contribution.attrs["shape"]) == [a.shape[1], g.shape[1]]) else None
    if op == "reduce_to_shape_internal":
        return (add, contribution) if stackable(contribution.inputs[0]) else None
    return None


def sink_scan_accumulations(graph: Graph, ctx: Any) -> Graph:
    """Sum per-step gradient contributions of a scan after the loop, as one contraction (module docstring)."""
    if "scan" not in {op.rpartition("::")[2] for op in ctx.ops(graph)}:  # (the set of ops, memoised per graph)
        return graph
    plans = {}
    for node in graph.nodes:
        if _short(node) == "scan":
            plan = _sink_plan(node, ctx.registry.schemas)
            if plan is not None:
                plans[node] = plan
    from_scan = {v for n in graph.nodes if _short(n) == "scan" for v in n.outputs[n.attrs["n_carry"]:]}
    folds = {n for n in graph.nodes if _foldable(n, from_scan)}
    if not plans and not folds:
        return graph
    reg = ctx.registry
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in folds:  # a stacked gradient of a hoisted projection: one contraction over steps and rows
            folded = [_fold(rw, reg, v) for v in rw.read(node.inputs)]
            rw.alias(node.outputs[0], rw.new.add_node(node.op, folded, dict(node.attrs), registry=reg).outputs[0])
            continue
        if node not in plans:
            rw.copy(node)
            continue
        sunk, body, n_new = plans[node]
        a = node.attrs
        nc, nx = a["n_carry"], a["n_scanned"]
        ins = rw.read(node.inputs)
        kept = [k for k in range(nc) if k not in sunk]
        new_ins = [ins[k] for k in kept] + list(ins[nc:])
        out_types = [node.outputs[k].type for k in kept] + [v.type for v in node.outputs[nc:]] + \
            [body.outputs[len(body.outputs) - n_new + j].type.with_shape((a["length"], *body.outputs[
                len(body.outputs) - n_new + j].type.shape)) for j in range(n_new)]
        new = rw.emit(node.op, new_ins, {**a, "body": body, "n_carry": len(kept)}, out_types)
        for j, k in enumerate(kept):
            rw.alias(node.outputs[k], new.outputs[j])
        for j in range(len(node.outputs) - nc):
            rw.alias(node.outputs[nc + j], new.outputs[len(kept) + j])

        def stacked(where: tuple[str, int]) -> Value:
            kind, j = where
            if kind == "row":
                return ins[nc + j]
            return new.outputs[len(kept) + j + (0 if kind == "ys" else len(node.outputs) - nc)]
        for k, (op, attrs, sources) in sunk.items():
            parts = [stacked(w) for w in sources]
            if op == "matmul_grad_rhs_internal":  # sum_t a_t^T g_t = A^T G over the steps and rows folded together
                parts = [_fold(rw, reg, v) for v in parts]
            total = rw.new.add_node(op, parts, attrs, registry=reg).outputs[0]
            rw.alias(node.outputs[k], rw.new.add_node("accumulate_internal", [ins[k], total],
                                                      registry=reg).outputs[0])
    ctx.note("sink_scan_accumulations", f"{sum(len(p[0]) for p in plans.values())} scan accumulation(s) summed "
                                        f"after the loop, {len(folds)} stacked product(s) folded")
    return rw.finish()


def _foldable(node: Node, from_scan: set[Value]) -> bool:
    """``matmul_grad_rhs_internal(A, G)`` of ``[L, B, K]`` and ``[L, B, N]`` into ``[K, N]``, G stacked by a scan:
    the gradient of ``xs @ W`` that scan's front end hoisted (control_hoist)."""
    if _short(node) != "matmul_grad_rhs_internal":
        return False
    a, g = node.inputs
    return (g in from_scan and a.type.rank == 3 and g.type.rank == 3 and a.shape[:2] == g.shape[:2]
            and list(node.attrs["shape"]) == [a.shape[2], g.shape[2]])


def _fold(rw: Rewriter, reg: Any, v: Value) -> Value:
    """``[L, B, K]`` seen as ``[L * B, K]`` (a reshape of a contiguous stack: no copy)."""
    length, rows, width = v.type.shape
    return rw.new.add_node("reshape", [v], {"shape": [length * rows, width]}, registry=reg).outputs[0]


def _sink_plan(node: Node, schemas: dict[str, Any]) -> tuple[dict, Graph, int] | None:
    """How a scan node's sinkable accumulations leave it: ``({carry: (op, attrs, sources)}, new body,
    number of new stacked outputs)``; a source is ``("row", j)`` (scanned input j), ``("ys", j)`` (the
    node's j-th stacked output) or ``("out", j)`` (the j-th new stacked output). None when no carry is sinkable."""
    a = node.attrs
    body: Graph = a["body"]
    nc, nx = a["n_carry"], a["n_scanned"]
    users: dict[Value, list[Node]] = {}
    for n in body.nodes:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    found = {k: f for k in range(nc) if (f := _sinkable(body, k, nc, nx, users)) is not None}
    if not found:
        return None
    rows = {v: j for j, v in enumerate(body.inputs[nc:nc + nx])}
    new_outs: list[Value] = []
    sunk = {}
    for k, (_, contribution) in found.items():
        sources = []
        for v in contribution.inputs:
            if v in rows:
                sources.append(("row", rows[v]))
            elif v in body.outputs[nc:]:  # already stacked
                sources.append(("ys", body.outputs[nc:].index(v)))
            else:
                if v not in new_outs:
                    new_outs.append(v)
                sources.append(("out", new_outs.index(v)))
        sunk[k] = (_short(contribution), dict(contribution.attrs), sources)
    kept = [k for k in range(nc) if k not in found]
    outs = [body.outputs[k] for k in kept] + body.outputs[nc:] + new_outs
    nodes, _ = _live(body, outs, schemas)
    new_body = _subgraph(body, [body.inputs[k] for k in kept] + body.inputs[nc:], outs, nodes)
    return sunk, new_body, len(new_outs)


PASSES = [
    PassSpec("merge_trajectory_recompute", merge_trajectory_recompute, after="decompose", min_level=1,
             doc="a loop/scan whose gradient recomputes it with trajectory=True saves the trajectory itself"),
    PassSpec("sink_scan_accumulations", sink_scan_accumulations, before="eliminate_dead_nodes", min_level=1,
             doc="a scan carry that sums a per-step matrix product or reduction is summed after the loop"),
    PassSpec("prune_control_flow", prune_control_flow, before="eliminate_dead_nodes", min_level=1,
             doc="control-flow nodes drop outputs, carried states and inputs that nothing reads"),
]
