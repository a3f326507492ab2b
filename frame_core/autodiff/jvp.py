"""Forward mode (Jacobian-vector products) as a graph-to-graph transform.

``build_jvp_graph(graph, wrt)`` returns a new graph whose inputs are
``graph``'s inputs followed by one tangent per ``wrt`` input (named
``tangent:<input>``, of the input's type) and whose outputs are
``[outputs..., tangent of each output...]`` (named ``tangent:<output>``);
``graph`` is never modified. The walk goes through the nodes in order (the
primal nodes first, as cloned, then the tangent nodes appended after them)
and gives each node on the chain the tangents of its outputs from the
tangents of its inputs, by one of two rules:

direct
    The op's ``JvpFn`` (``OpSchema(jvp=...)``): a micro-graph over
    ``[x.., y.., dx..]`` returning ``[dy..]``, each of its output's type.
derived
    From the op's GradientFn, with no code from the pack. The VJP micro-graph
    ``gx = M(x, y, gy) = J^T gy`` is linear in ``gy``, so reverse mode applied
    to ``M`` with respect to ``gy``, with cotangent ``u = dx``, gives
    ``d<J^T gy, dx>/dgy = J dx``: the JVP (the "double VJP"). ``gy`` is bound
    to zeros; what does not depend on ``dx`` is dead and removed. Cost: the
    micro-graph's reverse pass, i.e. about the work of the op's own VJP,
    which is about one to two times the op's forward work; ``M``'s own
    forward part reads no tangent and is dropped. It needs the op's GradientFn
    to be differentiable once more (reverse closure order >= 2).

Higher order is re-application (the result is an ordinary graph), and
forward and reverse mode nest in any order: ``build_jvp_graph`` of a
``build_backward_graph`` graph is forward-over-reverse (a Hessian-vector
product), ``build_backward_graph`` of a JVP graph is reverse-over-forward.

Integer and boolean values carry no tangent; an op on the chain without a
GradientFn or JvpFn is reported with every other such op (``MissingGradientError``,
as reverse mode reports it); a tangent whose type differs from its primal's
is a ``TangentError`` wherever tangents are given as arrays (``jvp_inputs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .._gc import gc_paused, made
from ..errors import FrameError, GradientError, MissingGradientError, RegistrationError, TangentError
from ..ir.graph import INSPECT_LIMIT, Graph, Node, Value, clone_graph, inline_graph, is_zero_constant, \
    mark_traced_sizes, tie_label, tie_types, traced_sizes
from ..ir.keys import attrs_key
from ..ir.verify import Problem, check_graph
from ..ops_registry.registry import Registry, op_scope, registry as current_registry, use_registry
from ..ops_registry.schema import NodeContext, node_has_side_effect
from .backward import _Recipe, _chain, _micro_graph, _not_the_packs_fault, _sizes_held, input_position, output_label

__all__ = ["build_jvp_graph", "jvp_rule", "derived_jvp_graph", "direct_jvp_graph", "trace_jvp", "tangent_name",
           "jvp_inputs"]

TANGENT = "tangent:"


def tangent_name(name: str, taken: Iterable[str | None]) -> str:
    """``tangent:<name>``, or ``tangent2:<name>``, ``tangent3:<name>``... when that name is taken already (a JVP
    of a JVP graph has inputs ``x``, ``tangent:x`` and gets ``tangent2:x``)."""
    taken = set(taken)
    candidate, k = f"{TANGENT}{name}", 2
    while candidate in taken:
        candidate, k = f"tangent{k}:{name}", k + 1
    return candidate


def _wrt_positions(graph: Graph, wrt: Any) -> list[int]:
    if wrt is None:
        return [i for i, v in enumerate(graph.inputs) if v.type.dtype.is_float]
    if isinstance(wrt, (str, bytes)) or not isinstance(wrt, Iterable):
        one = isinstance(wrt, (str, int, np.integer)) and not isinstance(wrt, bool)
        raise GradientError(f"wrt is a list of input positions or names such as [0] or ['x'], got "
                            f"{type(wrt).__name__} {wrt!r:.40}" + (f"; for one input write [{wrt!r}]" if one else ""))
    positions = []
    n = len(graph.inputs)
    for item in wrt:
        i = input_position(item, graph) if isinstance(item, str) else item
        if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
            raise GradientError(f"wrt holds input positions (ints) or input names (str), got {item!r} "
                                f"({type(item).__name__})")
        if not 0 <= i < n:
            raise GradientError(f"wrt index {int(i)} is out of range: the graph has {n} inputs (0..{n - 1})")
        if int(i) in positions:
            raise GradientError(f"wrt lists input {int(i)} twice; list each input once")
        t = graph.inputs[i].type
        if not t.dtype.is_float:
            raise TangentError(f"input {int(i)} ({graph.inputs[i].name or 'unnamed'}) has type {t}: integer and "
                               "boolean inputs carry no tangent; leave it out of wrt")
        positions.append(int(i))
    return positions


def build_jvp_graph(graph: Graph, wrt: Sequence[int | str] | None = None, *, registry: Registry | None = None,
                    names: Sequence[str] | None = None) -> Graph:
    """The forward-mode graph of ``graph``: ``(inputs..., tangents of wrt...) -> (outputs..., output tangents...)``.

    ``wrt`` lists input positions or names (default: every floating input);
    each gets a tangent input of its own type named ``tangent:<name>`` (see
    ``tangent_name``), or ``names[k]``. There is one tangent output per output
    (a zero constant for integer and boolean outputs and for outputs no
    ``wrt`` input reaches), named ``tangent:<output label>``. Each tangent is
    tied to its primal's type (``ir.graph.tie_types``): re-specialised at new
    input shapes, a tangent of another shape is a ``ShapeError`` naming it.

    Raises ``GradientError`` for bad arguments, ``TangentError`` for a
    ``wrt`` input that is not floating, and ``MissingGradientError`` listing
    every op on the chain with neither a JvpFn nor a GradientFn.
    """
    if not isinstance(graph, Graph):
        raise GradientError(f"build_jvp_graph needs a Graph, got {type(graph).__name__}")
    if registry is not None and not isinstance(registry, Registry):
        raise GradientError(f"registry= takes a frame_core Registry, got {type(registry).__name__}")
    positions = _wrt_positions(graph, wrt)
    if names is not None:
        from .._args import name_list

        names = list(name_list(names, "build_jvp_graph(names=...)", GradientError, "['dx']"))
        if len(names) != len(positions):
            raise GradientError(f"names= gives {len(names)} names for {len(positions)} tangents; give one per wrt input")
    reg = registry if registry is not None else current_registry()
    with gc_paused(), use_registry(reg):
        result = _build(graph, positions, reg, names)
        made(len(result.nodes))
    return result


def _build(graph: Graph, positions: list[int], reg: Registry, names: list[str] | None) -> Graph:
    problems = check_graph(graph, reg, types=False)  # (not the compiler's quick check: the audit calls this too)
    if problems:
        raise _not_the_packs_fault(problems)
    jvp = clone_graph(graph)
    jvp.name = f"{graph.name}_jvp"
    n_forward = len(jvp.nodes)
    taken = [v.name for v in jvp.inputs]
    seeds: dict[Value, Value] = {}
    for k, i in enumerate(positions):
        x = jvp.inputs[i]
        name = names[k] if names is not None else tangent_name(x.name or f"input {i}", taken)
        taken.append(name)
        seeds[x] = jvp.add_input(x.type, name)
        tie_types(jvp, seeds[x], x, f"the tangent of {tie_label(graph, i)}")  # (specialize checks it at new shapes)
    try:
        tangents = propagate(jvp, seeds, set(jvp.outputs), reg, "")
    except MissingGradientError as exc:
        raise MissingGradientError(
            f"cannot build the forward mode of graph {graph.name!r}: {len(exc.paths)} op(s) on the chain have neither "
            "a JvpFn nor a GradientFn:\n  " + "\n  ".join(exc.paths), exc.paths) from None
    first = len(jvp.outputs)
    for k, y in enumerate(list(jvp.outputs)):
        dy = tangents.get(y)
        dy = dy if dy is not None else jvp.zeros_like(y)
        jvp.mark_output(dy, tangent_name(output_label(graph, k), jvp.output_names[:first]))
        tie_types(jvp, dy, y, f"the tangent of {tie_label(graph, k, output=True)}")
    _drop_unneeded_after(jvp, n_forward, reg)
    return jvp


def _drop_unneeded_after(graph: Graph, start: int, reg: Registry) -> None:
    """Remove the nodes from ``start`` on (those this module appended) that no output needs."""
    live = set(graph.outputs)
    keep = []
    for node in reversed(graph.nodes[start:]):
        if any(v in live for v in node.outputs) or node_has_side_effect(node, reg.schemas):
            keep.append(node)
            live.update(node.inputs)
    keep.reverse()
    graph.nodes[start:] = keep


def without_forward_rule(chain: list[Node], graph: Graph, reg: Registry, label: str = "") -> list[str]:
    """The nodes of ``chain`` whose op has neither a GradientFn nor a JvpFn, each as ``node i (op) (why)``."""
    paths = []
    for node in chain:
        schema = reg.schemas.get(node.op)
        if schema is not None and (schema.gradient is not None or schema.jvp is not None):
            continue
        why = (f" (declared not differentiable: {schema.not_differentiable})" if schema and schema.not_differentiable
               else " (no GradientFn or JvpFn registered)" if schema else " (unknown op)")
        paths.append(f"{label}node {graph.nodes.index(node)} ({node.op}){why}")
    return paths


def propagate(graph: Graph, seeds: dict[Value, Value], targets: set[Value], reg: Registry,
              label: str) -> dict[Value, Value]:
    """Append to ``graph`` the tangents of every value on the chain from ``seeds`` (value -> its tangent) to
    ``targets``; return value -> tangent (seeds included). ``label`` prefixes node paths in errors."""
    chain = _chain(graph, targets, set(seeds), reg)
    paths = without_forward_rule(chain, graph, reg, label)
    if paths:
        raise MissingGradientError("no forward rule:\n  " + "\n  ".join(paths), paths)
    tangents = dict(seeds)
    cache: dict[tuple, tuple[Graph, Any, str | None]] = {}  # rule, its recipe, why it may hold traced sizes
    for node in chain:
        dxs = [tangents.get(v) for v in node.inputs]
        if all(d is None for d in dxs):
            continue
        schema = reg.schemas[node.op]
        nondiff = schema.nondiff_inputs
        present = tuple(d is not None and i not in nondiff for i, d in enumerate(dxs))
        in_types = tuple(v.type for v in node.inputs)
        key = (node.op, in_types, attrs_key(node.attrs) if node.attrs else (), present)
        cached = cache.get(key)
        if cached is None:
            rule = jvp_rule(schema, node, graph, label, reg)
            sized = _sized_rule(schema, rule)
            rule = specialise_zero_tangents(rule, len(node.inputs) + len(node.outputs), present, reg)
            cached = cache[key] = (rule, _Recipe.of(rule), sized)
        if cached[2] is not None:  # (a _Recipe's inlining carries no mark: the rule's is passed on here)
            mark_traced_sizes(graph, cached[2])
        args: list[Value] = [*node.inputs, *node.outputs]
        for v, d, p in zip(node.inputs, dxs, present):
            args.append(d if p and d is not None else graph.zeros_like(v))
        dys = inline_graph(graph, cached[0], args) if cached[1] is None else cached[1].inline(graph, args)
        for y, dy in zip(node.outputs, dys):
            if y.type.dtype.is_float and not _known_zero(dy):
                tangents[y] = dy
    return tangents


def _sized_rule(schema: Any, rule: Graph) -> str | None:
    """Why ``rule`` may hold the traced sizes, or ``None``. An op without ``any_shape_gradient`` vouches for
    neither its JvpFn nor the GradientFn a derived rule transposes; a derived rule is also the VJP of that
    GradientFn, which ``build_vjp_graph`` marks when an op of that gradient lacks the trait (batch_norm's 1/N at
    second order)."""
    if "any_shape_gradient" not in schema.traits:
        why = "its op has no any_shape_gradient trait"
    elif getattr(schema, "jvp", None) is None and traced_sizes(rule) is not None:
        why = f"it is derived from the op's gradient, and {traced_sizes(rule)}"
    elif (held := _sizes_held(rule)) is not None:  # a control-flow op's rule runs its bodies' rules as bodies
        why = f"a body of it does: {held}"
    else:
        return None
    return (f"the forward-mode rule of {schema.name} may hold the traced sizes ({why}); build the JVP graph again "
            "for the new shapes")


def _known_zero(v: Value) -> bool:
    """Whether ``v`` is zeros by construction: a zero constant, or zeros read off a value's type, no larger than
    ``INSPECT_LIMIT`` elements either way (the zeros_like compiles to that constant: the same graph, bit for bit)."""
    p = v.producer
    return p is not None and (p.op == "constant" and is_zero_constant(v) or p.op == "zeros_like_internal"
                              and v.type.size <= INSPECT_LIMIT)


def _context(schema: Any, node: Node, graph: Graph, label: str) -> NodeContext:
    try:
        norm = schema.normalize_attrs(node.attrs)
        inferred = schema.infer([v.type for v in node.inputs], norm)
    except FrameError as exc:
        raise _not_the_packs_fault([Problem("V6", f"shape inference rejects the inputs: {exc}", node.op,
                                            graph.nodes.index(node), label)]) from exc
    if inferred != [v.type for v in node.outputs]:
        raise _not_the_packs_fault([Problem(
            "V6", f"outputs are recorded as [{', '.join(str(v.type) for v in node.outputs)}] but inference gives "
                  f"[{', '.join(map(str, inferred))}]", node.op, graph.nodes.index(node), label)])
    return NodeContext(schema, [v.type for v in node.inputs], norm, inferred)


def jvp_rule(schema: Any, node: Node, graph: Graph, label: str, reg: Registry, *, derived: bool = False) -> Graph:
    """The micro-graph ``[x.., y.., dx..] -> [dy..]`` for ``node``: the op's JvpFn if it declares one (and
    ``derived`` is false), else the double VJP of its GradientFn."""
    ctx = _context(schema, node, graph, label)
    direct = getattr(schema, "jvp", None)
    if direct is not None and not derived:
        return direct_jvp_graph(schema, ctx, f"{label}node {graph.nodes.index(node)} ({node.op})")
    micro = _micro_graph(schema, node, graph, label, ctx.attrs)
    return derived_jvp_graph(micro, ctx, reg)


def direct_jvp_graph(schema: Any, ctx: NodeContext, where: str = "") -> Graph:
    """The op's JvpFn micro-graph for ``ctx``, checked against the contract (``GradientError`` naming the op)."""
    where = where or f"{schema.name} on [{', '.join(map(str, ctx.input_types))}]"
    try:
        with op_scope(schema.namespace):
            micro = schema.jvp(ctx)
    except MissingGradientError as exc:
        paths = [f"{where} > {p}" for p in exc.paths] or [f"{where} > {exc}"]
        raise MissingGradientError(f"ops inside the bodies of {where} have no forward rule:\n  " + "\n  ".join(paths),
                                   paths) from exc
    except FrameError as exc:
        raise GradientError(f"the JvpFn of {where} failed: {exc}") from exc
    except (Exception, SystemExit) as exc:
        raise GradientError(f"the JvpFn of {where} raised {type(exc).__name__}: {exc} "
                            f"(a bug in pack {schema.pack or '?'})") from exc
    problems = jvp_contract_problems(ctx, micro)
    if problems:
        raise GradientError(f"the JvpFn of {where} breaks the contract: {problems[0]} (a bug in pack "
                            f"{schema.pack or '?'})")
    return micro


def jvp_contract_problems(ctx: NodeContext, micro: Any) -> list[str]:
    """What is wrong with a JvpFn micro-graph for ``ctx`` (empty when it keeps the contract)."""
    if not isinstance(micro, Graph):
        return [f"it returned {type(micro).__name__}, expected a Graph"]
    want_in = [*ctx.input_types, *ctx.output_types, *ctx.input_types]
    got_in = [v.type for v in micro.inputs]
    got_out = [v.type for v in micro.outputs]
    problems = []
    if got_in != want_in:
        problems.append(f"its micro-graph takes [{', '.join(map(str, got_in))}], expected [x.., y.., dx..] = "
                        f"[{', '.join(map(str, want_in))}]")
    if got_out != list(ctx.output_types):
        problems.append(f"its micro-graph returns [{', '.join(map(str, got_out))}], expected one tangent per output "
                        f"[{', '.join(map(str, ctx.output_types))}]")
    return problems


def derived_jvp_graph(micro: Graph, ctx: NodeContext, reg: Registry) -> Graph:
    """``[x.., y.., dx..] -> [dy..]`` from a GradientFn micro-graph ``[x.., y.., gy..] -> [gx..]``: reverse mode of
    the micro-graph with respect to ``gy`` (at ``gy = 0``), with cotangent ``dx`` (module docstring)."""
    from .vjp import build_vjp_graph

    n, m = len(ctx.input_types), len(ctx.output_types)
    # no label: a labelled VJP is a control-flow body's, whose shape-reading ops are written down at the traced
    # shapes; here they stay, so a JVP graph re-specialised at another batch size reads them again. Only the
    # cotangents the gradient reads: a zero of the traced shape for another would mark the transpose as holding
    # traced sizes (build_vjp_graph does), and the tangent of that output is zero anyway
    wrt = [n + m + j for j, t in enumerate(ctx.output_types) if t.dtype.is_float]
    full = build_vjp_graph(micro, wrt=wrt, registry=reg) if wrt else None
    read = [k for k, g in zip(wrt, full.outputs) if not is_zero_constant(g)] if full is not None else []
    transpose = full if read == wrt else build_vjp_graph(micro, wrt=read, registry=reg) if read else None
    rule = Graph(f"{ctx.op}_jvp")
    xs = [rule.add_input(t, f"x{i}") for i, t in enumerate(ctx.input_types)]
    ys = [rule.add_input(t, f"y{j}") for j, t in enumerate(ctx.output_types)]
    dxs = [rule.add_input(t, f"dx{i}") for i, t in enumerate(ctx.input_types)]
    # the transpose at gy = y, not at a zero constant of the traced shape: a GradientFn is linear in gy, so its
    # transpose never reads gy's value, only its shape, which y gives at any size
    dys = dict(zip(read, inline_graph(rule, transpose, [*xs, *ys, *ys, *dxs]))) if transpose is not None else {}
    rule.outputs = [dys[n + m + j] if n + m + j in dys else rule.zeros(t) for j, t in enumerate(ctx.output_types)]
    keep_needed(rule)
    return rule


def keep_needed(graph: Graph) -> None:
    """Drop, in place, the nodes of a small rule graph that none of its outputs needs (rule graphs have no side
    effects; a compiled graph goes through the pipeline's dead-node pass instead)."""
    live = set(graph.outputs)
    keep = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            keep.append(node)
            live.update(node.inputs)
    graph.nodes = keep[::-1]


def trace_jvp(fn: Callable[..., Any], ctx: NodeContext) -> Graph:
    """Trace a JvpFn body ``fn(*xs, *ys, *dxs)`` into its micro-graph; ``fn`` returns one tangent per output
    (a bare tensor for one output); ``None`` or a Python number 0 means a zero tangent."""
    from ..frontend.trace import Tensor, _current, _lift, prune_weak

    schema = ctx.schema
    n, outs = len(ctx.input_types), list(ctx.output_types)
    graph = Graph(f"{schema.name}_jvp")
    in_names = list(schema.inputs[:n]) if len(schema.inputs) >= n and not schema.variadic else \
        [f"x{i}" for i in range(n)]
    out_names = list(schema.outputs[:len(outs)]) if len(schema.outputs) >= len(outs) else \
        [f"y{j}" for j in range(len(outs))]
    names = in_names + out_names + ["d" + nm for nm in in_names]
    types = [*ctx.input_types, *outs, *ctx.input_types]
    args = [Tensor(graph.add_input(t, nm), graph) for t, nm in zip(types, names)]
    token = _current.set(graph)
    try:
        with op_scope(schema.namespace):
            result = fn(*args)
        result = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(result) != len(outs):
            raise RegistrationError(f"JvpFn of {schema.name!r} returned {len(result)} tangents for {len(outs)} outputs")
        for j, (d, t) in enumerate(zip(result, outs)):
            # (a zero tangent has y's shape at any batch size: zeros read off y's type)
            value = graph.zeros_like(args[n + j].value) if d is None else \
                _lift(d, graph, t.dtype, f"{schema.name} jvp", j)
            if value.type != t:
                raise RegistrationError(f"JvpFn of {schema.name!r} returned a tangent of type {value.type} for output "
                                        f"{j}, which has type {t}")
            graph.mark_output(value)
    finally:
        _current.reset(token)
    prune_weak(graph)
    return graph


def jvp_inputs(graph: Graph, primals: Sequence[Any], tangents: Sequence[Any],
               wrt: Sequence[int | str] | None = None) -> list[np.ndarray]:
    """The argument list of ``build_jvp_graph(graph, wrt)``'s graph from primal and tangent arrays, each
    tangent checked against its primal's type (``TangentError`` saying which and what to pass): the primal's
    own shape when it has the traced rank (a graph compiled with ``dynamic_shapes=True`` runs at any batch)."""
    positions = _wrt_positions(graph, wrt)
    primals, tangents = list(primals), list(tangents)
    if len(primals) != len(graph.inputs):
        raise TangentError(f"{len(primals)} primals were given for the {len(graph.inputs)} inputs of graph "
                           f"{graph.name!r}; give one per input, in order, then the tangents")
    if len(tangents) != len(positions):
        raise TangentError(f"{len(tangents)} tangents were given for {len(positions)} wrt inputs; give one per wrt "
                           "input, in wrt order")
    out = []
    for k, (i, t) in enumerate(zip(positions, tangents)):
        want = graph.inputs[i].type
        try:  # (a graph compiled with dynamic_shapes runs at the primal's own shape)
            given = tuple(np.shape(primals[i]))
        except ValueError:  # (a ragged list: the executable names it)
            given = want.shape
        if len(given) == want.rank and given != want.shape:
            want = want.with_shape(tuple(int(d) for d in given))
        array = np.asarray(t)
        label = graph.inputs[i].name or f"input {i}"
        if array.dtype.kind not in "f":
            raise TangentError(f"the tangent of {label} has dtype {array.dtype}; a tangent has its primal's type "
                               f"{want} (integer and boolean values carry no tangent)")
        if tuple(array.shape) != tuple(want.shape):
            raise TangentError(f"the tangent of {label} has shape {list(array.shape)}, its primal is {want}; give a "
                               "tangent of the primal's shape")
        if array.dtype != want.dtype.np:
            raise TangentError(f"the tangent of {label} has dtype {array.dtype}, its primal is {want}; cast it "
                               f"(tangent.astype({want.dtype.np.__name__ if hasattr(want.dtype.np, '__name__') else want.dtype.name}))")
        out.append(array)
    return [*primals, *out]


#: Ops whose output is zero when the inputs marked here are zero, whatever the others (linear in those inputs).
#: Used only on tangent micro-graphs, where a missing tangent is a symbolic zero (as in JAX): ``x * 0 -> 0`` holds
#: for tangents even though it does not for IEEE infinities, which is why the compiler's own rewrites lack it.
_ZERO_IF_ANY = {"mul": (0, 1), "matmul": (0, 1), "matmul_grad_lhs_internal": (0,), "matmul_grad_rhs_internal": (1,),
                "relu_grad_internal": (1,), "complex_mul": (0, 1), "complex_matmul": (0, 1)}
_ZERO_IF_FIRST = {"div"}
#: Ops linear in all their floating inputs: zero in, zero out.
_LINEAR = {"neg", "reshape", "transpose", "sum", "mean", "reduce_to_shape_internal", "broadcast_to",
           "broadcast_to_internal", "expand_dims", "squeeze", "slice", "slice_grad_internal", "sum_grad_internal",
           "weighted_sum_internal", "pad", "concat", "stack", "accumulate_internal", "add", "sub", "cast",
           "rfft", "irfft", "fft", "ifft", "conj"}


def specialise_zero_tangents(rule: Graph, first_tangent: int, present: Sequence[bool], reg: Registry) -> Graph:
    """``rule`` (a ``[x.., y.., dx..] -> [dy..]`` micro-graph) with the tangents not ``present`` taken as symbolic
    zeros: products with them, and linear ops of nothing but them, are dropped; a sum with one of them is its other
    operand. The result keeps ``rule``'s inputs and outputs (an unread input stays an input)."""
    if all(present):
        return rule
    out = Graph(rule.name)
    vmap: dict[Value, Value | None] = {}
    like: dict[Value, Value] = {}  # a symbolic zero -> a value of its shape at any batch size (zeros read off it)
    for k, v in enumerate(rule.inputs):
        new = out.add_input(v.type, v.name)
        if k >= first_tangent and not present[k - first_tangent]:
            vmap[v] = None
            like[v] = out.inputs[k - first_tangent]  # the tangent of input x has x's shape
        else:
            vmap[v] = new
    dropped: dict[Value, Node] = {}
    zeros: dict[Value, Value] = {}

    def known(v: Value) -> Value | None:
        return vmap[v]

    def shaped(v: Value) -> Value:
        """A value of ``v``'s type: ``v``'s node computed on ``shaped`` stand-ins for its symbolic zeros (read for
        its type only; compiled, the zeros are a constant and it is dead)."""
        if v in like:
            return like[v]
        node = dropped[v]
        copy = Node(node.op, tuple(known(u) or shaped(u) for u in node.inputs), dict(node.attrs))
        copy.outputs = tuple(Value(u.type, copy, u.index, u.name) for u in node.outputs)
        out.nodes.append(copy)
        like.update(zip(node.outputs, copy.outputs))
        return like[v]

    def real(v: Value) -> Value:
        got = vmap[v]
        if got is not None:
            return got
        zero = zeros.get(v)
        if zero is None:
            zero = zeros[v] = out.zeros_like(shaped(v))
        return zero

    for node in rule.nodes:
        ins = [vmap[v] for v in node.inputs]
        schema = reg.schemas.get(node.op)
        name = schema.name if schema is not None else node.op
        zero = [a is None for a in ins]
        single = len(node.outputs) == 1
        if any(zero) and single and not any(isinstance(a, Graph) for a in node.attrs.values()):
            y = node.outputs[0]
            if (name in _ZERO_IF_ANY and any(zero[i] for i in _ZERO_IF_ANY[name] if i < len(zero))) or \
                    (name in _ZERO_IF_FIRST and zero[0]) or \
                    (name in _LINEAR and all(z for z, v in zip(zero, node.inputs) if v.type.dtype.is_float)):
                vmap[y] = None
                dropped[y] = node
                continue
            if name in ("add", "accumulate_internal", "sub") and len(ins) == 2 and sum(zero) == 1:
                other = ins[1] if zero[0] else ins[0]
                if other is not None and other.type == y.type and not (name == "sub" and zero[0]):
                    vmap[y] = other
                    continue
        copy = Node(node.op, tuple(real(v) for v in node.inputs), dict(node.attrs))
        copy.outputs = tuple(Value(v.type, copy, v.index, v.name) for v in node.outputs)
        for v, c in zip(node.outputs, copy.outputs):
            vmap[v] = c
        out.nodes.append(copy)
    out.outputs = [real(v) for v in rule.outputs]
    return out
