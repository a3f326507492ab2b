"""Control flow over sub-graphs: ``if_else``, ``loop`` and ``scan``, differentiable to any order (seed 004).

Each op carries its bodies as graph attributes and uses only public core API
(``trace_body`` in its front end, ``compile_subgraph`` in its kernel,
``build_vjp_graph``/``split_vjp_graph`` in its GradientFn), so a third-party
pack can define control flow the same way (``docs/control-flow.md``).

``if_else(cond, *xs; then_branch, else_branch) -> ys``
    Runs one branch on ``xs``; both take ``xs`` and return the same types.
    Gradient: ``if_else`` on the same ``cond`` over the branches' VJP graphs;
    ``cond`` gets none.
``loop(limit, cond, *states, *scanned, *invariants; body, max_trip, ...)``
    ONNX ``Loop``: while ``cond`` and fewer than ``limit`` (<= ``max_trip`` = M)
    steps, ``(cond, states, y) = body(i, states, scanned[i], invariants)``.
    Outputs the final states and the per-step ``y`` stacked to ``[M, ...]``
    (rows not run are zero); with ``trip_count=True`` also ``T``, the number
    of steps run. Gradient: a ``loop`` of ``T`` steps in the opposite
    direction, carrying the state cotangent and the invariants' accumulated
    cotangents over what the forward saved.
``scan(*init, *xs, *invariants; body, length, ...)``
    ``(carry, y) = body(carry, xs[t], invariants)`` for t < length; outputs the
    final carry and the stacked ``y``. Gradient: a reverse ``scan``.

What the forward saves is explicit in the IR: the GradientFn runs the loop
again with a *saving body* (``split_vjp_graph``) that also returns, per step,
the states entering the step and the residuals the gradient reads (a tanh
derivative); the loop stacks them like any per-step output (``[M, ...]``, the
first T rows valid) and outputs T. A cotangent reaching those stacked outputs
(second order) flows through the saving body like any other: that is what
keeps third derivatives right (the PyTensor #1772 class of bug). This pack's
pass ``merge_trajectory_recompute`` then makes the forward node itself run
the saving body, so the loop runs once, and ``prune_control_flow`` drops the
stacks, states and inputs nothing reads. Saving costs ``M`` rows of each
saved value only in graphs that differentiate through the loop.

``scan``'s front end moves products of a row by an invariant matrix before the
loop (``control_hoist``), and the pass ``sink_scan_accumulations`` sums the
reverse scan's per-step weight gradients after it (``docs/control-flow.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from frame_core import (
    AttrSpec, DataError, Example, Graph, GradientError, IRError, NodeContext, OpSchema, ShapeError, Tensor,
    TensorType, apply, constant, inline_graph,
)

from .control_hoist import hoist_row_products

I64 = TensorType("int64", ())
BOOL = TensorType("bool", ())

__all__ = ["SCHEMAS", "if_else", "loop", "scan"]


# -- shared helpers ------------------------------------------------------------------------------------
def _types(values: Sequence[Any]) -> str:
    return "[" + ", ".join(str(getattr(v, "type", v)) for v in values) + "]"


def _is_flag(t: TensorType) -> bool:
    """A condition: a boolean with one element."""
    return t.dtype.name == "bool" and t.size == 1


def _stacked(t: TensorType, n: int) -> TensorType:
    return t.with_shape((n, *t.shape))


def _check_body_inputs(ctx: NodeContext, attr: str, want: Sequence[TensorType], what: str) -> None:
    got = [v.type for v in ctx.attrs[attr].inputs]
    if got != list(want):
        raise ctx.error(f"its {attr} must take {what} = {_types(want)}, but it takes {_types(got)}")


def _check_returned(ctx: NodeContext, attr: str, got: Sequence[TensorType], want: Sequence[TensorType],
                    what: str) -> None:
    for k, (g, w) in enumerate(zip(got, want)):
        if g != w:
            raise ctx.error(f"its {attr} returns {g} for {what} {k}, which has type {w}; a body returns each "
                            f"carried value with the type it came in with (cast it, or fix the initial value)")


def _owned(outs: Sequence[np.ndarray], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``outs``, each copied when it may share memory with the kernel's inputs (a loop that ran no step, a
    body returning a row or an invariant), with an earlier output (a body returning one value as two
    states) or is a body constant (read-only): kernels return arrays of their own, which never alias."""
    owned: list[np.ndarray] = []
    for out in outs:
        if not out.flags.writeable or any(np.may_share_memory(out, a) for a in (*inputs, *owned)):
            out = np.array(out, copy=True)
        owned.append(out)
    return owned


def _constant_true(value: Any) -> bool:
    p = value.producer
    return p is not None and p.op == "constant" and bool(np.all(p.attrs["value"]))


def _tensor(x: Any, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, np.ndarray, np.generic)):
        return constant(np.asarray(x))
    raise IRError(f"{what} must be a tensor (or a number/array), got {type(x).__name__}")


def _seq(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (Tensor, np.ndarray)):
        return [value]
    raise IRError(f"{what} must be a tensor or a list/tuple of tensors, got {type(value).__name__}")


# -- if_else -------------------------------------------------------------------------------------------
def _if_shape(ctx: NodeContext) -> list[TensorType]:
    cond, *xs = ctx.input_types
    if not _is_flag(cond):
        raise ctx.error(f"cond must be a boolean with one element (bool[]), got {cond}; compare to make one, "
                        f"e.g. ops.greater(ops.sum(x), 0) (for an elementwise choice, use ops.where(cond, a, b))")
    then, other = ctx.attrs["then_branch"], ctx.attrs["else_branch"]
    _check_body_inputs(ctx, "then_branch", xs, "the inputs after cond")
    _check_body_inputs(ctx, "else_branch", xs, "the inputs after cond")
    a, b = then.output_types, other.output_types
    if a != b:
        raise ctx.error(f"then_branch returns {_types(a)} but else_branch returns {_types(b)}; both branches must "
                        "return the same number of values with the same types")
    if not a:
        raise ctx.error("its branches return nothing; an if_else needs at least one output")
    return list(a)


def _if_kernel(ctx: NodeContext) -> Callable[..., Any]:
    from frame_core import compile_subgraph  # the compiler loads only when a kernel is built

    then = compile_subgraph(ctx.attrs["then_branch"]).unchecked()
    other = compile_subgraph(ctx.attrs["else_branch"]).unchecked()
    single = len(ctx.output_types) == 1

    def kernel(cond: np.ndarray, *xs: np.ndarray) -> Any:
        outs = (then if cond.reshape(()) else other)(list(xs))
        return outs[0] if single else tuple(outs)
    return kernel


# if_else gradient: gxs = if_else(cond, xs, gys; then=VJP(then_branch), else=VJP(else_branch)); cond gets none
def _if_gradient(ctx: NodeContext) -> Graph:
    from frame_core import build_vjp_graph  # (autodiff loads when a gradient is built, not with the pack)

    then = build_vjp_graph(ctx.attrs["then_branch"], label="then_branch")
    other = build_vjp_graph(ctx.attrs["else_branch"], label="else_branch")
    n, m = len(ctx.input_types) - 1, len(ctx.output_types)

    def fn(cond: Tensor, *rest: Tensor) -> list[Any]:
        xs, gys = rest[:n], rest[n + m:]
        gxs = apply("if_else", cond, *xs, *gys, then_branch=then, else_branch=other)
        gxs = [gxs] if isinstance(gxs, Tensor) else list(gxs)
        return [None, *(g if t.dtype.is_float else None for g, t in zip(gxs, ctx.input_types[1:]))]
    return ctx.grad_graph(fn)


def if_else(cond: Any, then_fn: Callable[..., Any] | Graph, else_fn: Callable[..., Any] | Graph, *xs: Any) -> Any:
    """``then_fn(*xs)`` if ``cond`` else ``else_fn(*xs)``: one branch runs (seed 004).

    ``cond`` is a boolean tensor with one element (or a Python bool). Each
    branch is a callable (or a Graph) taking ``xs`` and returning a tensor or a
    tuple of tensors; both must return the same types. Tensors the branches
    read from outside are captured as extra inputs. Returns what a branch
    returns (a tensor, or a tuple).
    """
    # (frame_core's body tracing loads at the first trace, not with the pack: start-up, benchmarks/startup.py)
    from frame_core import align_captures, trace_body

    values = [_tensor(x, f"if_else input {i}") for i, x in enumerate(xs)]
    types = [x.type for x in values]
    how = f"one argument per input after the two branches: {len(types)}"
    then = trace_body(then_fn, types, name="then_branch", role="then branch of if_else", called_as=how)
    other = trace_body(else_fn, types, name="else_branch", role="else branch of if_else",
                       expect=then.graph.output_types, called_as=how)
    (then, other), captured = align_captures([then, other])
    return apply("if_else", _flag(cond), *values, *captured, then_branch=then.graph, else_branch=other.graph)


# -- forward mode: control flow over the JVP of its bodies (docs/forward-mode.md) -------------------------
def _tangent_body(body: Graph, groups: Sequence[Sequence[int]], outs: Sequence[Sequence[int]], name: str) -> Graph:
    """``build_jvp_graph(body)`` w.r.t. its floating inputs, with inputs and outputs reordered so that each group
    of primal positions is followed by the tangents of its floating members: inputs ``[g0, dg0, g1, dg1, ..]``,
    outputs likewise over ``outs`` (groups of output positions). The layout a loop or scan expects of a body."""
    from frame_core import build_jvp_graph  # (autodiff loads when a JVP is built, not with the pack)

    floating = [k for k, v in enumerate(body.inputs) if v.type.dtype.is_float]
    jvp = build_jvp_graph(body, floating)
    n_in, n_out = len(body.inputs), len(body.outputs)
    tangent_in = {k: n_in + j for j, k in enumerate(floating)}
    order_in = []
    for group in groups:
        order_in += list(group) + [tangent_in[k] for k in group if k in tangent_in]
    order_out = []
    for group in outs:
        order_out += list(group) + [n_out + k for k in group if body.outputs[k].type.dtype.is_float]
    jvp.inputs = [jvp.inputs[k] for k in order_in]
    jvp.outputs = [jvp.outputs[k] for k in order_out]
    jvp._output_names = {}
    jvp.name = name
    return jvp


def _float_positions(types: Sequence[TensorType], start: int, count: int) -> list[int]:
    return [k for k in range(start, start + count) if types[k].dtype.is_float]


# if_else JVP: dys = if_else(cond, xs, dxs; then=JVP(then_branch), else=JVP(else_branch)), keeping only the tangents
def _if_jvp(ctx: NodeContext) -> Graph:
    from frame_core import build_jvp_graph

    n, m = len(ctx.input_types) - 1, len(ctx.output_types)
    branches = []
    for attr in ("then_branch", "else_branch"):
        body = ctx.attrs[attr]
        floating = [k for k, v in enumerate(body.inputs) if v.type.dtype.is_float]
        jvp = build_jvp_graph(body, floating)
        jvp.outputs = jvp.outputs[m:]
        jvp._output_names = {}
        branches.append((jvp, floating))
    (then, floating), (other, _) = branches

    def fn(cond: Tensor, *rest: Tensor) -> list[Any]:
        xs, dxs = rest[:n], rest[n + m + 1:]
        dys = _as_list(apply("if_else", cond, *xs, *(dxs[k] for k in floating), then_branch=then, else_branch=other))
        return [d if t.dtype.is_float else None for d, t in zip(dys, ctx.output_types)]
    return ctx.jvp_graph(fn)


# scan JVP: a scan carrying (carry, dcarry) over (xs, dxs) with invariants (θ, dθ), its body the body's JVP
def _scan_jvp(ctx: NodeContext) -> Graph:
    length, nc, nx, ni = _scan_layout(ctx)
    a = ctx.attrs
    body = a["body"]
    ny = len(body.outputs) - nc
    types = ctx.input_types
    fc_, fx, fi = (_float_positions(types, 0, nc), _float_positions(types, nc, nx), _float_positions(types, nc + nx, ni))
    tangent_body = _tangent_body(body, [range(nc), range(nc, nc + nx), range(nc + nx, nc + nx + ni)],
                                 [range(nc), range(nc, nc + ny)], "body_jvp")
    n_in, n_out = len(types), len(ctx.output_types)
    fy = [j for j in range(ny) if ctx.output_types[nc + j].dtype.is_float]

    def fn(*rest: Tensor) -> list[Any]:
        xs, dxs = rest[:n_in], rest[n_in + n_out:]
        carry, scanned, invariants = xs[:nc], xs[nc:nc + nx], xs[nc + nx:]
        out = _as_list(apply("scan", *carry, *(dxs[k] for k in fc_), *scanned, *(dxs[k] for k in fx), *invariants,
                             *(dxs[k] for k in fi), body=tangent_body, length=length, n_carry=nc + len(fc_),
                             n_scanned=nx + len(fx), reverse=a["reverse"]))
        dcarry = dict(zip(fc_, out[nc:nc + len(fc_)]))
        dys = dict(zip(fy, out[nc + len(fc_) + ny:]))
        return [dcarry.get(k) for k in range(nc)] + [dys.get(j) for j in range(ny)]
    return ctx.jvp_graph(fn)


# loop JVP: a loop over the body's JVP carrying (states, dstates); the same trip count, cond and rows
def _loop_jvp(ctx: NodeContext) -> Graph:
    m, ns, nx, ni = _loop_layout(ctx)
    a = ctx.attrs
    body = a["body"]
    ny = len(body.outputs) - 1 - ns
    types = ctx.input_types
    fs, fx, fi = (_float_positions(types, 2, ns), _float_positions(types, 2 + ns, nx),
                  _float_positions(types, 2 + ns + nx, ni))
    tangent_body = _tangent_body(body, [[0], range(1, 1 + ns), range(1 + ns, 1 + ns + nx),
                                        range(1 + ns + nx, 1 + ns + nx + ni)],
                                 [[0], range(1, 1 + ns), range(1 + ns, 1 + ns + ny)], "body_jvp")
    n_in, n_out = len(types), len(ctx.output_types)
    fy = [j for j in range(ny) if ctx.output_types[ns + j].dtype.is_float]

    def fn(*rest: Tensor) -> list[Any]:
        xs, dxs = rest[:n_in], rest[n_in + n_out:]
        limit, cond, states = xs[0], xs[1], xs[2:2 + ns]
        scanned, invariants = xs[2 + ns:2 + ns + nx], xs[2 + ns + nx:]
        out = _as_list(apply("loop", limit, cond, *states, *(dxs[k] for k in fs), *scanned, *(dxs[k] for k in fx),
                             *invariants, *(dxs[k] for k in fi), body=tangent_body, max_trip=m,
                             n_states=ns + len(fs), n_scanned=nx + len(fx), reverse=a["reverse"],
                             trip_count=a["trip_count"]))
        dstates = dict(zip(fs, out[ns:ns + len(fs)]))
        dys = dict(zip(fy, out[ns + len(fs) + ny:ns + len(fs) + ny + len(fy)]))
        tangents = [dstates.get(2 + k) for k in range(ns)] + [dys.get(j) for j in range(ny)]
        return tangents + ([None] if a["trip_count"] else [])
    return ctx.jvp_graph(fn)


# -- loop ------------------------------------------------------------------------------------------------
def _loop_layout(ctx: NodeContext) -> tuple[int, int, int, int]:
    """``(M, states, scanned, invariants)`` counts of a loop node; ``ShapeError`` if they do not fit."""
    a = ctx.attrs
    m, ns, nx = a["max_trip"], a["n_states"], a["n_scanned"]
    if m < 0:
        raise ctx.error(f"max_trip (the most steps the loop may run) must be 0 or more, got {m}")
    if ns < 0 or nx < 0:
        raise ctx.error(f"n_states and n_scanned must be 0 or more, got {ns} and {nx}")
    ni = len(ctx.input_types) - 2 - ns - nx
    if ni < 0:
        raise ctx.error(f"takes limit, cond, {ns} states and {nx} scanned inputs, but only "
                        f"{len(ctx.input_types)} inputs were given")
    return m, ns, nx, ni


def _loop_shape(ctx: NodeContext) -> list[TensorType]:
    m, ns, nx, ni = _loop_layout(ctx)
    limit, cond, *rest = ctx.input_types
    if limit != I64:
        raise ctx.error(f"limit (the trip count bound) must be i64[], got {limit}")
    if not _is_flag(cond):
        raise ctx.error(f"the initial cond must be a boolean with one element (bool[]), got {cond}")
    states, scanned, invariants = rest[:ns], rest[ns:ns + nx], rest[ns + nx:]
    for k, t in enumerate(scanned):
        if t.rank == 0 or t.shape[0] != m:
            raise ctx.error(f"scanned input {k} is {t}; a scanned input has max_trip = {m} rows (leading axis)")
    rows = [t.with_shape(t.shape[1:]) for t in scanned]
    _check_body_inputs(ctx, "body", [I64, *states, *rows, *invariants],
                       "(i: i64[], states..., one row of each scanned input..., invariants...)")
    outs = ctx.attrs["body"].output_types
    if len(outs) < 1 + ns:
        raise ctx.error(f"its body returns {len(outs)} values; it must return (cond, {ns} new states..., "
                        "per-step outputs...)")
    if not _is_flag(outs[0]):
        raise ctx.error(f"its body returns {outs[0]} as cond (its first output); the condition must be a boolean "
                        "with one element (bool[])")
    _check_returned(ctx, "body", outs[1:1 + ns], states, "state")
    return [*states, *(_stacked(t, m) for t in outs[1 + ns:]), *([I64] if ctx.attrs["trip_count"] else [])]


def _run_body(graph: Graph) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """The body compiled once (with the enclosing compile's options), run without checks or copies: the
    loop kernels copy what they keep (rows into stacked outputs, the final values through ``_owned``)."""
    from frame_core import compile_subgraph  # the compiler loads only when a kernel is built

    return compile_subgraph(graph).unchecked(copy_outputs=False)


def _frozen_step(i: int) -> np.ndarray:
    """The step input of the body: read-only, so a body that returns it hands on a copy (``_owned``)."""
    step = np.asarray(i, np.int64)
    step.flags.writeable = False
    return step


def _loop_kernel(ctx: NodeContext) -> Callable[..., Any]:
    m, ns, nx, ni = _loop_layout(ctx)
    body = _run_body(ctx.attrs["body"])
    reverse, trip_count = ctx.attrs["reverse"], ctx.attrs["trip_count"]
    outs = ctx.output_types
    y_types = outs[ns:len(outs) - (1 if trip_count else 0)]
    positions = [_frozen_step(i) for i in range(min(m, 4096))]  # the step inputs, made once

    def position(i: int) -> np.ndarray:
        return positions[i] if i < len(positions) else _frozen_step(i)

    def kernel(limit: np.ndarray, cond: np.ndarray, *values: np.ndarray) -> Any:
        n = int(limit)
        if not 0 <= n <= m:
            raise DataError(f"the trip count limit is {n}, outside [0, max_trip = {m}]; pass a limit in that range "
                            "(it bounds the steps run), or build the loop with a larger max_trip")
        states = list(values[:ns])
        scanned, invariants = values[ns:ns + nx], list(values[ns + nx:])
        ys = [np.zeros(t.shape, t.dtype.np) for t in y_types]
        go = bool(cond.reshape(()))
        steps = 0
        while go and steps < n:
            i = n - 1 - steps if reverse else steps
            out = body([position(i), *states, *[x[i] for x in scanned], *invariants])
            go = bool(out[0])
            states = out[1:1 + ns]
            for y, row in zip(ys, out[1 + ns:]):
                y[i] = row
            steps += 1
        result = _owned(states, values) + ys
        if trip_count:
            result.append(np.asarray(steps, np.int64))
        return tuple(result) if len(result) != 1 else result[0]
    return kernel


#: ops cheap enough to compute a residual from a stacked per-step output after the loop, for all steps (a tanh's
#: ``1 - t**2``) instead of computing it in the forward and stacking it
_RECOMPUTED_OPS = frozenset({"square", "sub", "add", "mul", "neg"})
_RECOMPUTED_MOST = 4  # nodes per residual


def _from_outputs(r: Any, outputs: Sequence[Any]) -> list[Any] | None:
    """The nodes computing ``r`` from ``outputs`` (values the loop stacks anyway) and constants alone, through
    at most ``_RECOMPUTED_MOST`` cheap elementwise ops, in order; ``None`` if there is no such chain."""
    chain: list[Any] = []
    seen: set[int] = set()

    def visit(v: Any) -> bool:
        if any(v is o for o in outputs):
            return True
        node = v.producer
        if node is None:
            return False
        if id(node) in seen:
            return True
        if node.op == "constant":
            return True
        if node.op not in _RECOMPUTED_OPS or len(node.outputs) != 1 or len(chain) >= _RECOMPUTED_MOST:
            return False
        # on whole stacks a per-step operand broadcasts against the step axis: every operand but a constant
        # (which broadcasts from the right, as per step) must have the node's own shape
        shape = node.outputs[0].type.shape
        if any(x.type.shape != shape for x in node.inputs if x.producer is None or x.producer.op != "constant"):
            return False
        seen.add(id(node))
        if not all(visit(x) for x in node.inputs):
            return False
        chain.append(node)
        return True
    return chain if r.producer is not None and r.producer.op != "constant" and visit(r) and chain else None


def _reverse_body(body: Graph, lead: int, ns: int, nx: int,
                  name: str) -> tuple[Graph, Graph, int, Callable[[Sequence[Tensor], Sequence[Tensor]], list[Tensor]]]:
    """How a loop (``lead=1``: a step input and a cond output) or a scan over ``body`` is differentiated.

    Returns the *saving body*, the *reverse body*, the number of residuals the saving body stacks and
    ``residuals(saved, ys)``, which gives (in the enclosing gradient graph) the stacked residuals the reverse
    body reads from the stacked residuals ``saved`` and the stacked per-step outputs ``ys`` of the saving
    loop. The saving body extends ``body`` (``split_vjp_graph``): ``([i,] s.., x.., θ..) -> ([cond,] s'..,
    y.., r.., s..)``, i.e. it also returns, per step, the residuals ``r`` its gradient reads and the states
    ``s`` it was given (the trajectory), which the forward loop stacks. The reverse body is ``([i,] gs'..,
    acc.., s.., x.., gy.., r.., θ..) -> ([true,] gs.., acc + gθ.., gx..)``: the VJP at ``(s, x, θ)`` with
    cotangents ``(gs', gy)``, reading the stacked residuals instead of recomputing them. A residual that is a
    few cheap elementwise ops of per-step outputs ``y`` (a tanh's ``1 - t**2`` of its output ``t``) is not
    computed per step: ``residuals`` computes it from the stacked ``y`` in one pass over all steps (the same
    ops on the same values, so the same bits).
    """
    from frame_core import split_vjp_graph

    n_in = len(body.inputs)
    split = split_vjp_graph(body, list(range(lead, n_in)), invariant=list(range(lead + ns + nx, n_in)), label="body")
    saving = split.forward
    outs = [v.type for v in body.outputs]
    n_out = len(outs)
    ys = saving.outputs[lead + ns:n_out]
    all_residuals = saving.outputs[n_out:n_out + split.n_residuals]
    chains = [_from_outputs(r, ys) for r in all_residuals]
    kept = [r for r, c in zip(all_residuals, chains) if c is None]
    saving.outputs[n_out:] = kept
    saving.outputs.extend(saving.inputs[lead:lead + ns])  # the trajectory (rows nothing reads are pruned)
    ins = [v.type for v in body.inputs]
    s_t, x_t, th_t = ins[lead:lead + ns], ins[lead + ns:lead + ns + nx], ins[lead + ns + nx:]
    y_t = outs[lead + ns:]
    g = Graph(name)
    i = [g.add_input(I64, "i")] if lead else []
    gs_next = [g.add_input(t, f"gs{k}") for k, t in enumerate(s_t)]
    acc = [g.add_input(t, f"acc{k}") for k, t in enumerate(th_t)]
    s = [g.add_input(t, f"s{k}") for k, t in enumerate(s_t)]
    x = [g.add_input(t, f"x{k}") for k, t in enumerate(x_t)]
    gy = [g.add_input(t, f"gy{k}") for k, t in enumerate(y_t)]
    r = [g.add_input(v.type, f"r{k}") for k, v in enumerate(all_residuals)]
    theta = [g.add_input(t, f"th{k}") for k, t in enumerate(th_t)]
    gcond = [g.zeros(outs[0])] if lead else []
    grads = inline_graph(g, split.backward, [*i, *s, *x, *theta, *r, *gcond, *gs_next, *gy])
    gs, gx, gth = grads[:ns], grads[ns:ns + nx], grads[ns + nx:]
    new_acc = [g.apply("accumulate_internal", a, b) if a.type.dtype.is_float else a for a, b in zip(acc, gth)]
    if lead:
        g.mark_output(g.constant(np.True_))
    for v in (*gs, *new_acc, *gx):
        g.mark_output(v)

    def residuals(saved: Sequence[Tensor], stacked: Sequence[Tensor]) -> list[Tensor]:
        rows, result = iter(saved), []
        for res, chain in zip(all_residuals, chains):
            if chain is None:
                result.append(next(rows))
                continue
            made = {id(y): stacked[j] for j, y in enumerate(ys)}  # elementwise: the ops apply to whole stacks
            for node in chain:
                args = [made[id(v)] if id(v) in made else constant(v.producer.attrs["value"]) for v in node.inputs]
                made[id(node.outputs[0])] = apply(node.op, *args, **node.attrs)
            result.append(made[id(res)])
        return result
    return saving, g, len(kept), residuals


def _zeros_like(values: Sequence[Tensor]) -> list[Tensor]:
    """Zeros of each value's type, read off the value (not written down): right at any batch size."""
    return [apply("zeros_like_internal", v) for v in values]


# loop gradient: a loop of the forward's T steps in the other direction over the stacked states and residuals,
# carrying the state cotangent and the invariants' accumulated cotangents; limit and cond get none
def _loop_gradient(ctx: NodeContext) -> Graph:
    m, ns, nx, ni = _loop_layout(ctx)
    a = ctx.attrs
    body, reverse = a["body"], a["reverse"]
    if reverse and not _constant_true(body.outputs[0]):
        raise GradientError("a reverse loop is differentiated only when its body's cond is the constant true "
                            "(its rows are counted from the trip limit, so an early exit would misplace them)")
    ny = len(body.outputs) - 1 - ns
    saving, back_body, nr, stacked_residuals = _reverse_body(body, 1, ns, nx, "body_backward")
    n_in, n_out = len(ctx.input_types), len(ctx.output_types)
    in_types = ctx.input_types

    def fn(limit: Tensor, cond: Tensor, *rest: Tensor) -> list[Any]:
        values, gouts = rest[:n_in - 2], rest[n_in - 2 + n_out:]
        scanned, invariants = values[ns:ns + nx], values[ns + nx:]
        saved = _as_list(apply("loop", limit, cond, *values, **{**a, "body": saving, "trip_count": True}))
        residuals, trajectory, steps = saved[ns + ny:ns + ny + nr], saved[ns + ny + nr:ns + ny + nr + ns], saved[-1]
        residuals = stacked_residuals(residuals, saved[ns:ns + ny])
        back = _as_list(apply(
            "loop", steps, constant(np.array(True)), *gouts[:ns], *_zeros_like(invariants), *trajectory,
            *scanned, *gouts[ns:ns + ny], *residuals, *invariants, body=back_body, max_trip=m, n_states=ns + ni,
            n_scanned=ns + nx + ny + len(residuals), reverse=not reverse))
        gs0, gth, gx = back[:ns], back[ns:ns + ni], back[ns + ni:]
        grads = [None, None, *gs0, *gx, *gth]
        return [g if t.dtype.is_float else None for g, t in zip(grads, in_types)]
    return ctx.grad_graph(fn)


def _as_list(out: Any) -> list[Any]:
    return [out] if isinstance(out, Tensor) else list(out)


def loop(body_fn: Callable[..., Any] | Graph, max_trip: int, cond: Any, *states: Any, xs: Any = None,
         invariants: Any = None, checkpoint_every: int | None = None, trip_count: bool = False) -> Any:
    """ONNX-style ``Loop``: run ``body_fn`` while ``cond`` holds, at most ``max_trip`` times (seed 004).

    ``body_fn(i, *states, *x_rows, *invariants)`` returns ``(cond, *new_states,
    *per_step_outputs)``: ``i`` is the step (an i64 scalar), ``x_rows`` the
    ``i``-th rows of the tensors in ``xs`` (each with ``max_trip`` rows), and
    the new states have the states' types. The loop stops when a step returns
    a false cond, or after ``max_trip`` steps; a false initial ``cond`` runs no
    step. Tensors the body reads from outside become invariants. Returns the
    final states, then each per-step output stacked to ``[max_trip, ...]``
    (rows of steps that did not run are zero): one tensor, or a tuple.

    ``checkpoint_every=k`` keeps, when the loop is differentiated, only every
    k-th state and recomputes the others (memory ``M/k + k`` states instead of
    ``M``, the same gradients; see ``docs/control-flow.md``). ``trip_count=True``
    adds the number of steps run (an ``i64[]``) as the last output.
    """
    if not isinstance(trip_count, (bool, np.bool_)):
        raise IRError(f"loop: trip_count must be a bool (add the number of steps run as the last output), got "
                      f"{trip_count!r}")
    if isinstance(max_trip, (bool, np.bool_)) or not isinstance(max_trip, (int, np.integer)):
        raise IRError(f"loop: max_trip must be an int (the most steps the loop may run), got {max_trip!r}")
    max_trip = int(max_trip)
    if not 0 <= max_trip < 2**63:
        raise IRError(f"loop: max_trip must be 0 or more, and fit 64 bits (the most steps the loop may run), got "
                      f"{max_trip:.3g}" if max_trip >= 2**63 else
                      f"loop: max_trip must be 0 or more (the most steps the loop may run), got {max_trip}")
    init = [_tensor(s, f"loop state {k}") for k, s in enumerate(states)]
    scanned = [_tensor(x, f"loop xs[{k}]") for k, x in enumerate(_seq(xs, "loop xs"))]
    invs = [_tensor(v, f"loop invariant {k}") for k, v in enumerate(_seq(invariants, "loop invariants"))]
    for k, x in enumerate(scanned):
        if x.ndim == 0 or x.type.shape[0] != max_trip:
            raise ShapeError(f"loop: xs[{k}] is {x.type}; each scanned tensor needs max_trip = {max_trip} rows "
                             "(leading axis)")
    if checkpoint_every is not None:
        from .control_checkpoint import checkpointed_loop

        if trip_count:
            raise IRError("loop: trip_count=True and checkpoint_every cannot be combined (a checkpointed loop runs "
                          "in segments); count the steps in a state instead")

        if not isinstance(body_fn, Graph):
            from frame_core import check_arity

            check_arity(body_fn, 1 + len(init) + len(scanned) + len(invs), "loop body")
        return checkpointed_loop(body_fn, max_trip, cond, init, scanned, invs, checkpoint_every)
    return build_loop(body_fn, max_trip, np.asarray(max_trip, np.int64), cond, init, scanned, invs,
                      trip_count=bool(trip_count))


def build_loop(body_fn: Callable[..., Any] | Graph, max_trip: int, limit: Any, cond: Any, init: Sequence[Tensor],
               scanned: Sequence[Tensor], invs: Sequence[Tensor], reverse: bool = False,
               trip_count: bool = False) -> Any:
    """Trace ``body_fn`` and append the ``loop`` node (the front end's last step, shared with checkpointing)."""
    from frame_core import trace_body

    rows = [x.type.with_shape(x.shape[1:]) for x in scanned]
    types = [I64, *(s.type for s in init), *rows, *(v.type for v in invs)]
    how = f"body(i, *states, *rows of xs, *invariants): 1 + {len(init)} + {len(scanned)} + {len(invs)} arguments"
    body = trace_body(body_fn, types, name="body", role="loop body", expect=[BOOL, *(s.type for s in init)],
                      called_as=how)
    return apply("loop", limit, _flag(cond), *init, *scanned, *invs, *body.captures, body=body.graph,
                 max_trip=max_trip, n_states=len(init), n_scanned=len(scanned), reverse=reverse,
                 trip_count=trip_count)


# -- scan ------------------------------------------------------------------------------------------------
def _scan_layout(ctx: NodeContext) -> tuple[int, int, int, int]:
    a = ctx.attrs
    length, nc, nx = a["length"], a["n_carry"], a["n_scanned"]
    if length < 0 or nc < 0 or nx < 0:
        raise ctx.error(f"length, n_carry and n_scanned must be 0 or more, got {length}, {nc} and {nx}")
    ni = len(ctx.input_types) - nc - nx
    if ni < 0:
        raise ctx.error(f"takes {nc} carries and {nx} scanned inputs, but only {len(ctx.input_types)} inputs "
                        "were given")
    return length, nc, nx, ni


def _scan_shape(ctx: NodeContext) -> list[TensorType]:
    length, nc, nx, ni = _scan_layout(ctx)
    types = ctx.input_types
    carry, scanned, invariants = types[:nc], types[nc:nc + nx], types[nc + nx:]
    for k, t in enumerate(scanned):
        if t.rank == 0 or t.shape[0] != length:
            raise ctx.error(f"scanned input {k} is {t}; a scanned input has length = {length} rows (leading axis)")
    rows = [t.with_shape(t.shape[1:]) for t in scanned]
    _check_body_inputs(ctx, "body", [*carry, *rows, *invariants],
                       "(carries..., one row of each scanned input..., invariants...)")
    outs = ctx.attrs["body"].output_types
    if len(outs) < nc:
        raise ctx.error(f"its body returns {len(outs)} values; it must return ({nc} new carries..., "
                        "per-step outputs...)")
    _check_returned(ctx, "body", outs[:nc], carry, "carry")
    return [*carry, *(_stacked(t, length) for t in outs[nc:])]


def _scan_steps(nc: int, nx: int, ni: int, ny: int) -> Callable[..., tuple]:
    """The loop of a scan with this layout, as straight-line Python (one statement per carry, row and stacked
    output, no per-step lists but the body's arguments): ``steps(body, order, *carry, *scanned, *invariants,
    *ys) -> carry``, writing each step's outputs into its row of ``ys``."""
    c = [f"c{k}" for k in range(nc)]
    x = [f"x{k}" for k in range(nx)]
    th = [f"t{k}" for k in range(ni)]
    y = [f"y{k}" for k in range(ny)]
    args = ", ".join([*c, *(f"{v}[i]" for v in x), *th])
    lines = [f"def steps(body, order, {', '.join([*c, *x, *th, *y, ''])}):",
             "    for i in order:",
             f"        out = body([{args}])"]
    lines += [f"        {v} = out[{k}]" for k, v in enumerate(c)]
    lines += [f"        {v}[i] = out[{nc + k}]" for k, v in enumerate(y)]
    lines.append(f"    return ({', '.join([*c, ''])})")
    ns: dict[str, Any] = {}
    exec(compile("\n".join(lines) + "\n", "<frame scan loop>", "exec"), ns)
    return ns["steps"]


def _scan_kernel(ctx: NodeContext) -> Callable[..., Any]:
    from frame_core import compile_subgraph  # the compiler loads only when a kernel is built

    length, nc, nx, ni = _scan_layout(ctx)
    exe = compile_subgraph(ctx.attrs["body"])
    body = exe.unchecked(copy_outputs=False)
    y_types = [(t.shape, t.dtype.np) for t in ctx.output_types[nc:]]
    order = range(length - 1, -1, -1) if ctx.attrs["reverse"] else range(length)
    steps = _scan_steps(nc, nx, ni, len(y_types))
    # after the body's first (checked) step, the others run inline in one generated loop, writing per-step
    # outputs into their rows (Executable.scan_steps); with FRAME_CHECKS every step goes through the runner
    inline = exe.scan_steps(nc, nx)
    first = [inline is not None]  # the body's first step is still to run (through the checked runner)
    empty = np.empty

    def kernel(*values: np.ndarray) -> Any:
        ys = [empty(shape, dtype) for shape, dtype in y_types]  # the scan writes every row: no zero fill
        if inline is None:
            carry = steps(body, order, *values, *ys)
        elif first[0] and length:
            carry = steps(body, order[:1], *values, *ys)
            first[0] = False
            carry = inline(order[1:], *carry, *values[nc:], *ys)
        else:
            carry = inline(order, *values, *ys)
        result = _owned(carry, (*values, *ys)) + ys  # a final carry may be a row of a stacked output
        return tuple(result) if len(result) != 1 else result[0]
    return kernel


# scan gradient: a scan in the other direction over the stacked carries and residuals, carrying (gcarry, Σ gθ)
def _scan_gradient(ctx: NodeContext) -> Graph:
    length, nc, nx, ni = _scan_layout(ctx)
    a = ctx.attrs
    ny = len(a["body"].outputs) - nc
    saving, back_body, nr, stacked_residuals = _reverse_body(a["body"], 0, nc, nx, "body_backward")
    n_in, n_out = len(ctx.input_types), len(ctx.output_types)
    in_types = ctx.input_types

    def fn(*rest: Tensor) -> list[Any]:
        values, gouts = rest[:n_in], rest[n_in + n_out:]
        scanned, invariants = values[nc:nc + nx], values[nc + nx:]
        saved = _as_list(apply("scan", *values, **{**a, "body": saving}))
        residuals, trajectory = saved[nc + ny:nc + ny + nr], saved[nc + ny + nr:]
        residuals = stacked_residuals(residuals, saved[nc:nc + ny])
        back = _as_list(apply(
            "scan", *gouts[:nc], *_zeros_like(invariants), *trajectory, *scanned, *gouts[nc:nc + ny],
            *residuals, *invariants, body=back_body, length=length, n_carry=nc + ni,
            n_scanned=nc + nx + ny + len(residuals), reverse=not a["reverse"]))
        gc0, gth, gx = back[:nc], back[nc:nc + ni], back[nc + ni:]
        return [g if t.dtype.is_float else None for g, t in zip([*gc0, *gx, *gth], in_types)]
    return ctx.grad_graph(fn)


def scan(body_fn: Callable[..., Any] | Graph, init: Any, xs: Any = None, *, invariants: Any = None,
         length: int | None = None, reverse: bool = False, checkpoint_every: int | None = None) -> Any:
    """``carry, ys = scan(f, init, xs)``: ``carry, y = f(carry, x)`` over the rows of ``xs`` (JAX's ``lax.scan``).

    ``init`` is a tensor or a tuple/list of tensors (the carry keeps that
    structure and its types); ``xs`` is a tensor, a tuple/list of tensors
    (each with ``length`` rows) or ``None`` (then ``length`` is required and
    ``f`` receives ``None``). ``f`` returns ``(carry, y)`` where ``y`` is a
    tensor, a tuple of tensors or ``None``; ``ys`` stacks each ``y`` to
    ``[length, ...]`` in step order. ``invariants`` are passed to ``f`` after
    ``x``. ``reverse=True`` runs from the last row to the first. Tensors ``f``
    reads from outside are captured. ``checkpoint_every=k``: as for ``loop``.
    """
    from frame_core import check_arity, trace_body

    if init is None:
        raise IRError("scan: init must be a tensor or a tuple/list of tensors, got None; give () for a scan "
                      "without a carry")
    carry_struct = isinstance(init, (tuple, list))
    carry0 = [_tensor(c, f"scan init[{k}]") for k, c in enumerate(_seq(init, "scan init"))]
    xs_struct = isinstance(xs, (tuple, list))
    scanned = [_tensor(x, f"scan xs[{k}]") for k, x in enumerate(_seq(xs, "scan xs"))]
    invs = [_tensor(v, f"scan invariant {k}") for k, v in enumerate(_seq(invariants, "scan invariants"))]
    lengths = {x.type.shape[0] for x in scanned if x.ndim}
    if any(x.ndim == 0 for x in scanned) or len(lengths) > 1 or (length is not None and lengths - {length}):
        raise ShapeError(f"scan: xs {_types(scanned)} must all have the same number of rows"
                         + (f" (length={length})" if length is not None else ""))
    if length is None:
        if not lengths:
            raise ShapeError("scan: without xs, give length=... (the number of steps)")
        length = lengths.pop()
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise IRError(f"scan: length must be an int, 0 or more, got {length!r}")
    length = int(length)
    if checkpoint_every is not None:
        from .control_checkpoint import checkpointed_scan

        if not isinstance(body_fn, Graph):
            check_arity(body_fn, 2 + len(invs), "scan body")

        return checkpointed_scan(body_fn, carry0, carry_struct, scanned, xs_struct, invs, length, bool(reverse),
                                 checkpoint_every)
    nc, nx = len(carry0), len(scanned)
    y_struct: list[Any] = []

    def call(fn: Callable[..., Any], args: list[Tensor]) -> list[Any]:
        c = tuple(args[:nc]) if carry_struct else args[0]
        x = (tuple(args[nc:nc + nx]) if xs_struct else args[nc]) if nx else None
        return scan_step_outputs(fn(c, x, *args[nc + nx:]), nc, carry_struct, y_struct)

    rows = [x.type.with_shape(x.shape[1:]) for x in scanned]
    types = [*(c.type for c in carry0), *rows, *(v.type for v in invs)]
    how = "f(carry, x, *invariants), carry and x a tensor, a tuple or None as given"
    body = trace_body(body_fn, types, name="body", role="scan body", call=call, expect=[c.type for c in carry0],
                      arity=2 + len(invs), called_as=how)
    # row @ invariant products move before the loop, one batched matmul for all steps (control_hoist)
    graph, scanned, invs = hoist_row_products(body.graph, nc, scanned, [*invs, *body.captures])
    outs = _as_list(apply("scan", *carry0, *scanned, *invs, body=graph, length=length, n_carry=nc,
                          n_scanned=len(scanned), reverse=bool(reverse)))
    carry = tuple(outs[:nc]) if carry_struct else outs[0]
    ys = outs[nc:]
    if not y_struct:  # a graph body: its per-step outputs are a tensor, a tuple or nothing by their count
        y_struct.append(None if not ys else ys[0] if len(ys) == 1 else tuple(ys))
    y = y_struct[0]
    return carry, (None if y is None else tuple(ys) if isinstance(y, (tuple, list)) else ys[0])


def scan_step_outputs(result: Any, nc: int, carry_struct: bool, y_struct: list[Any]) -> list[Any]:
    """What a scan body returned, ``(carry, y)``, as its flat outputs (carries, then each y); records y's
    structure in ``y_struct``. Shared by the plain and the checkpointed scan, so both refuse the same."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise IRError(f"scan: the body must return a pair (carry, y), got {type(result).__name__}")
    new_carry, y = result
    carry_out = list(new_carry) if isinstance(new_carry, (tuple, list)) else [new_carry]
    if len(carry_out) != nc:
        given = f"a tuple of {nc}" if carry_struct else "one tensor"
        raise ShapeError(f"scan: the body returns {len(carry_out)} carries, the initial carry has {nc} ({given}); "
                         "return the new carry in the structure of init")
    y_struct.append(y)
    return carry_out + ([] if y is None else list(y) if isinstance(y, (tuple, list)) else [y])


def _flag(cond: Any) -> Any:
    """A Python bool as a bool[] constant (not lifted to another operand's dtype); tensors as they are; a
    Python or numpy number that is not a bool is refused (1 is not a condition: compare to make one)."""
    if isinstance(cond, (bool, np.bool_)):
        return constant(np.asarray(bool(cond)))
    if isinstance(cond, (int, float, np.number)):
        raise IRError(f"cond must be a boolean tensor (bool[]) or a Python bool, got {type(cond).__name__} {cond!r}; "
                      "compare to make one, e.g. ops.greater(x, 0)")
    return cond


# -- examples (built by hand: the registry is loading while this module is imported) ---------------------
def _node(g: Graph, op: str, inputs: Sequence[Any], out: str, **attrs: Any) -> Any:
    return g.add_node(op, inputs, attrs, [out]).outputs[0]


def _example_branches() -> tuple[Graph, Graph]:
    then = Graph("then_branch")  # x * y
    x, y = then.add_input("f32[3]", "x"), then.add_input("f32[3]", "y")
    then.mark_output(_node(then, "mul", [x, y], "f32[3]"))
    other = Graph("else_branch")  # sin(x) + y
    x, y = other.add_input("f32[3]", "x"), other.add_input("f32[3]", "y")
    other.mark_output(_node(other, "add", [_node(other, "sin", [x], "f32[3]"), y], "f32[3]"))
    return then, other


def _example_loop_body() -> Graph:
    """(i, s, x, w) -> (true, sin(s) * w + x, s * s): a recurrence with a per-step input and output."""
    g = Graph("body")
    g.add_input("i64[]", "i")
    s, x, w = g.add_input("f32[2]", "s"), g.add_input("f32[2]", "x"), g.add_input("f32[2]", "w")
    g.mark_output(g.add_node("constant", [], {"value": np.array(True)}, ["bool[]"]).outputs[0])
    g.mark_output(_node(g, "add", [_node(g, "mul", [_node(g, "sin", [s], "f32[2]"), w], "f32[2]"), x], "f32[2]"))
    g.mark_output(_node(g, "mul", [s, s], "f32[2]"))
    return g


def _example_exit_body() -> Graph:
    """(i, s, x, w) -> (sum(new) < 1.6, new = sin(s) * w + x, s * s): on the example's values the loop stops
    after two of three steps (the sums are 1.54, then 1.63), far enough from 1.6 for finite differences."""
    g = Graph("body")
    g.add_input("i64[]", "i")
    s, x, w = g.add_input("f32[2]", "s"), g.add_input("f32[2]", "x"), g.add_input("f32[2]", "w")
    new = _node(g, "add", [_node(g, "mul", [_node(g, "sin", [s], "f32[2]"), w], "f32[2]"), x], "f32[2]")
    total = _node(g, "sum", [new], "f32[]", axes=None, keepdims=False)
    bound = g.add_node("constant", [], {"value": np.array(1.6, np.float32)}, ["f32[]"]).outputs[0]
    g.mark_output(_node(g, "less", [total, bound], "bool[]"))
    g.mark_output(new)
    g.mark_output(_node(g, "mul", [s, s], "f32[2]"))
    return g


def _example_scan_body() -> Graph:
    """(c, x, w) -> (tanh-free Elman-like step: sin(c * w + x), c * x)."""
    g = Graph("body")
    c, x, w = g.add_input("f32[2]", "c"), g.add_input("f32[2]", "x"), g.add_input("f32[2]", "w")
    g.mark_output(_node(g, "sin", [_node(g, "add", [_node(g, "mul", [c, w], "f32[2]"), x], "f32[2]")], "f32[2]"))
    g.mark_output(_node(g, "mul", [c, x], "f32[2]"))
    return g


# fixed example values (numpy.random is not imported at start-up for them)
_X3 = np.array([[0.8861122, 0.022655105, 0.9524874], [-0.83832794, 0.21471167, -0.24702683]], np.float32)
_THEN, _ELSE = _example_branches()
_LOOP_BODY = _example_loop_body()
_EXIT_BODY = _example_exit_body()
_SCAN_BODY = _example_scan_body()
_S0 = np.array([0.60380244, -0.65094435], np.float32)
_XS = np.array([[0.7432706, 0.0878828], [0.8044302, -0.04569295], [-0.13900745, 0.57789344]], np.float32)
_W = np.array([0.968306, -0.2605484], np.float32)


IF_ELSE = OpSchema(
    "if_else",
    inputs=("cond", "xs"),
    outputs=("ys",),
    variadic=True,
    attrs={"then_branch": AttrSpec("graph", doc="xs -> ys, run when cond is true"),
           "else_branch": AttrSpec("graph", doc="xs -> ys (the same types), run when cond is false")},
    shape_infer=_if_shape,
    kernels={"cpu": _if_kernel},
    gradient=_if_gradient,
    jvp=_if_jvp,
    traits=("any_shape_gradient",),  # per node: unless its bodies' gradients hold sizes
    nondiff_inputs=(0,),
    frontend=if_else,
    doc="Runs then_branch(*xs) if cond else else_branch(*xs); both branches return the same types. "
        "Front end: ops.if_else(cond, then_fn, else_fn, *xs). Gradient: if_else over the branches' VJPs.",
    examples=[Example([np.array(True), _X3[0], _X3[1]], {"then_branch": _THEN, "else_branch": _ELSE},
                      note="then branch runs"),
              Example([np.array(False), _X3[0], _X3[1]], {"then_branch": _THEN, "else_branch": _ELSE},
                      note="else branch runs")],
)

_LOOP_ATTRS = {
    "body": AttrSpec("graph", doc="(i, states.., rows of scanned.., invariants..) -> (cond, states.., ys..)"),
    "max_trip": AttrSpec("int", doc="M: the most steps; scanned inputs and stacked outputs have M rows"),
    "n_states": AttrSpec("int", doc="how many inputs after limit and cond are loop-carried states"),
    "n_scanned": AttrSpec("int", 0, doc="how many inputs after the states are scanned row by row"),
    "reverse": AttrSpec("bool", False, doc="step k reads and writes row n-1-k (n = the trip limit)"),
    "trip_count": AttrSpec("bool", False, doc="also output T, the number of steps run (i64[], the last output)"),
}

LOOP = OpSchema(
    "loop",
    inputs=("limit", "cond", "values"),
    outputs=("ys",),
    variadic=True,
    attrs=_LOOP_ATTRS,
    shape_infer=_loop_shape,
    kernels={"cpu": _loop_kernel},
    gradient=_loop_gradient,
    jvp=_loop_jvp,
    traits=("any_shape_gradient",),  # per node: unless its bodies' gradients hold sizes
    nondiff_inputs=(0, 1),
    frontend=loop,
    doc="ONNX Loop with scanned inputs: while cond and fewer than limit (<= max_trip) steps, "
        "(cond, states, y) = body(i, states, scanned[i], invariants). Outputs the final states and the stacked "
        "per-step outputs ([max_trip, ...], zero rows after the last step). Front end: ops.loop(body_fn, "
        "max_trip, cond, *states, xs=..., invariants=...). Gradient: a reverse loop over the saved trajectory.",
    examples=[Example([np.array(3, np.int64), np.array(True), _S0, _XS, _W],
                      {"body": _LOOP_BODY, "max_trip": 3, "n_states": 1, "n_scanned": 1}, note="all steps run"),
              Example([np.array(2, np.int64), np.array(True), _S0, _XS, _W],
                      {"body": _LOOP_BODY, "max_trip": 3, "n_states": 1, "n_scanned": 1, "trip_count": True},
                      note="a shorter trip limit, trip count output"),
              Example([np.array(3, np.int64), np.array(True), _S0, _XS, _W],
                      {"body": _LOOP_BODY, "max_trip": 3, "n_states": 1, "n_scanned": 1, "reverse": True},
                      note="reverse"),
              Example([np.array(3, np.int64), np.array(True), _S0, _XS, _W],
                      {"body": _EXIT_BODY, "max_trip": 3, "n_states": 1, "n_scanned": 1, "trip_count": True},
                      note="a data-dependent exit after 2 of 3 steps")],
)

SCAN = OpSchema(
    "scan",
    inputs=("values",),
    outputs=("ys",),
    variadic=True,
    attrs={"body": AttrSpec("graph", doc="(carries.., rows of scanned.., invariants..) -> (carries.., ys..)"),
           "length": AttrSpec("int", doc="the number of steps (rows of each scanned input and stacked output)"),
           "n_carry": AttrSpec("int", doc="how many leading inputs are carried from step to step"),
           "n_scanned": AttrSpec("int", 0, doc="how many inputs after the carries are scanned row by row"),
           "reverse": AttrSpec("bool", False, doc="run from the last row to the first")},
    shape_infer=_scan_shape,
    kernels={"cpu": _scan_kernel},
    gradient=_scan_gradient,
    jvp=_scan_jvp,
    traits=("any_shape_gradient",),  # per node: unless its bodies' gradients hold sizes
    frontend=scan,
    doc="A fixed-length loop over the leading axis: (carry, y) = body(carry, xs[t], invariants); outputs the "
        "final carry and the stacked y. Front end: carry, ys = ops.scan(f, init, xs). Gradient: a reverse scan.",
    examples=[Example([_S0, _XS, _W], {"body": _SCAN_BODY, "length": 3, "n_carry": 1, "n_scanned": 1}),
              Example([_S0, _XS, _W], {"body": _SCAN_BODY, "length": 3, "n_carry": 1, "n_scanned": 1,
                                       "reverse": True}, note="reverse")],
)

SCHEMAS = [IF_ELSE, LOOP, SCAN]
