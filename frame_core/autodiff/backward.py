"""Reverse-mode autodiff as a graph-to-graph transform (ARCH-060 ... ARCH-068).

``build_backward_graph(forward, loss_output_index, wrt_input_indices)``
returns a new graph whose outputs are ``[forward outputs..., grad(wrt[0]),
grad(wrt[1]), ...]``; ``forward`` is never modified. Steps:

1. clone the forward graph, checking it and finding the nodes that depend on the ``wrt`` inputs in the
   same walk (``_clone_checked``; a graph that walk cannot vouch for is checked and cloned by
   ``clone_graph``, the one shared cloning routine);
2. seed the loss with ``constant(1)`` of its dtype;
3. walk the nodes on the chain (those that depend on a ``wrt`` input through
   floating values and that the loss depends on through a floating output)
   in reverse topological order, inlining each op's GradientFn micro-graph bound to ``[x.., y.., gy..]``,
   pruned to the gradients wanted (a gradient nobody asked for is never made);
4. sum the contributions to a value with several consumers
   (``accumulate_internal``), never overwrite;
5. a ``wrt`` the loss does not reach gets ``zeros_like_internal`` of itself.

Zeros the walk makes (that gradient, and the cotangent of an output of a
multi-output node that no loss reads: batch_norm's running averages) are
``zeros_like_internal`` of the value, not constants: they follow the value's
shape when the graph is specialised for another batch size, and compile to
the constant they stand for.

Integer and boolean values carry no gradient, nor do inputs a schema lists in
``nondiff_inputs``: a node whose outputs are all integer or boolean (a
comparison feeding ``where``) is off the chain, whatever its op. A gradient that is a known zero constant is not
accumulated, so ``stop_gradient`` and second-order zeros (relu) cut the chain
instead of adding zeros. Higher order (ARCH-067): add a scalar contraction of
a gradient output (``add_scalar_contraction``) and call this function again.

``autodiff.vjp`` runs the same walk seeded by cotangent inputs instead of a
loss: the vector-Jacobian product of a whole graph, which is how control-flow
ops differentiate their bodies. A body op without a gradient is reported with
its path through the enclosing nodes (``MissingGradientError``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain as _chain_iterables
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from .._gc import gc_paused, made
from ..compiler.fused import FUSED_OP
from ..frontend.trace import append_node
from ..errors import FrameError, GradientError, IRError, MissingGradientError, NonScalarLossError
from ..ir.graph import INSPECT_LIMIT, Graph, Node, Value, clone_graph, inline_graph, is_zero_constant, \
    mark_traced_sizes, tie_label, tie_types, traced_sizes
from .._args import refuse_unordered
from ..ir.verify import Problem, check_graph
from ..ir.keys import attrs_key
from ..ops_registry.registry import Registry, registry as current_registry, use_registry
from ..ops_registry.schema import NodeContext, instantiate_gradient, node_has_side_effect
from .recipes import _ZERO_OPS, _Accumulator, _Recipe, _Variant, _known_zero, _taker

__all__ = ["build_backward_graph", "add_scalar_contraction"]

_type = attrgetter("type")
_op = attrgetter("op")
_second = itemgetter(1)
_outputs = attrgetter("outputs")
chain_from = _chain_iterables.from_iterable


def _is_index(value: Any) -> bool:
    """An int or numpy integer, and not a bool (``True`` is not a position)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _output_position(value: Any, graph: Graph, what: str) -> int:
    """An output position, given as one (negative counts from the end) or as the output's name."""
    n = len(graph.outputs)
    if isinstance(value, str):  # outputs carry names so that nobody has to count positions
        try:
            return graph.output_index(value)
        except FrameError as exc:
            raise GradientError(f"{what} is an output's name or an output position (an int), got str {value!r:.40}, "
                                f"but {exc}") from None
    if not _is_index(value):
        raise GradientError(f"{what} is an output's name or an output position (an int), got {type(value).__name__} "
                            f"{value!r:.40}")
    if not -n <= value < n:
        raise GradientError(f"{what} {value!r} is out of range: the graph has {n} outputs")
    return int(value) % n  # the names built from it ("grad(output 0, w)") say the real position, never -1


def input_position(name: str, graph: Graph) -> int:
    """The position of the input named ``name`` (inputs carry the traced function's parameter names)."""
    found = [i for i, v in enumerate(graph.inputs) if v.name == name]
    if len(found) == 1:
        return found[0]
    names = ", ".join(f"{i}: {v.name!r}" for i, v in enumerate(graph.inputs) if v.name) or "none"
    if found:
        raise GradientError(f"wrt names input {name!r:.40}, but inputs {found} share that name; give their positions")
    raise GradientError(f"wrt names input {name!r:.40}, but graph {graph.name!r} has no input of that name "
                        f"(named inputs: {names})")


def _check_arguments(forward: Graph, loss_index: Any, wrt: Sequence[Any]) -> tuple[int, list[int]]:
    """The loss index and the wrt indices as ints, or a GradientError saying what is wrong."""
    if not isinstance(forward, Graph):
        raise GradientError(f"build_backward_graph needs a Graph, got {type(forward).__name__}")
    loss_index = _output_position(loss_index, forward, "loss_output_index")
    loss = forward.outputs[loss_index].type
    if loss.size != 1:
        raise NonScalarLossError(
            f"the loss (output {loss_index}) must be a scalar (rank 0 or one element), but it has shape "
            f"{list(loss.shape)} ({loss}); reduce it first, e.g. ops.sum(y) or ops.mean(y)"
        )
    if not loss.dtype.is_float:
        raise GradientError(f"the loss (output {loss_index}) has type {loss}; only floating losses have gradients")
    n_in = len(forward.inputs)
    given = list(wrt)  # as the caller wrote it: names and positions
    wrt = [input_position(i, forward) if isinstance(i, str) else i for i in wrt]
    for i in wrt:
        if not _is_index(i):
            raise GradientError(f"wrt holds input positions (ints) or input names (str), got {i!r} "
                                f"({type(i).__name__})")
        if not 0 <= i < n_in:
            raise GradientError(f"wrt index {int(i)} is out of range: the graph has {n_in} inputs (0..{n_in - 1})")
    positions = [int(i) for i in wrt]
    for k, i in enumerate(positions):
        if i in positions[:k]:
            first = given[positions.index(i)]
            also = f" ({first!r} and {given[k]!r} both name it)" if first != given[k] else ""
            raise GradientError(f"wrt index {i} is listed twice in {given}{also}; list each input once")
        if not forward.inputs[i].type.dtype.is_float:
            raise GradientError(f"cannot differentiate with respect to input {i} of type {forward.inputs[i].type}: "
                                "only floating inputs carry gradients")
    return loss_index, positions


def _chain(graph: Graph, targets: set[Value], sources: set[Value], reg: Registry) -> list[Node]:
    """Nodes that depend on ``sources`` through floating values and that a target depends on through a
    floating output, in order. Integer and boolean values carry no gradient, so a node whose outputs are
    all integer or boolean (a comparison, an argmax) is never on the chain and needs no GradientFn."""
    active = set(sources)
    forward_active = []
    nondiff_of = {}
    for op in set(map(_op, graph.nodes)):
        schema = reg.schemas.get(op)
        nondiff_of[op] = schema.nondiff_inputs if schema is not None else frozenset()
    isdisjoint = active.isdisjoint
    add = active.add
    for node in graph.nodes:
        ins = node.inputs
        if isdisjoint(ins):  # no input on the chain
            continue
        nondiff = nondiff_of[node.op]
        if nondiff and not any(v in active for i, v in enumerate(ins) if i not in nondiff):
            continue
        outs = node.outputs
        if len(outs) == 1:
            if outs[0].type.dtype.is_float:
                forward_active.append(node)
                add(outs[0])
            continue
        floating = [v for v in outs if v.type.dtype.is_float]
        if floating:
            forward_active.append(node)
            active.update(floating)
    needed = _needed(list(zip(forward_active, forward_active)), set(targets))  # (pairs as _needed takes them)
    return [node for node, _ in reversed(needed)]


def _micro_graph(schema: Any, node: Node, graph: Graph, label: str, attrs: Any = None) -> Graph:
    """The node's GradientFn micro-graph, checked against the contract for this node's very types (the
    start-up audit saw only the op's examples): a GradientError names the node otherwise. A missing
    gradient inside the node's bodies (control flow) comes back with this node prefixed to its path.
    ``attrs`` are the node's attributes normalised (defaults filled in): a GradientFn reads them so."""
    ctx = NodeContext(schema, [v.type for v in node.inputs], node.attrs if attrs is None else attrs,
                      [v.type for v in node.outputs])

    def at() -> str:  # only on the error path: finding the node's index costs a scan
        return f"{label}node {graph.nodes.index(node)} ({node.op})"

    def where() -> str:
        return f"{at()} on [{', '.join(map(str, ctx.input_types))}]"
    gradient = schema.gradient
    if gradient is None:  # cannot happen: the chain was checked; keeps the types honest
        raise MissingGradientError(f"{where()} has no GradientFn", [at()])
    try:
        micro = instantiate_gradient(schema, ctx)  # (each distinct node once inside the closure audit's memo)
    except MissingGradientError as exc:  # inside a body of this node: extend the path
        paths = [f"{at()} > {p}" for p in exc.paths] or [f"{at()} > {exc}"]
        raise MissingGradientError(f"ops inside the bodies of {at()} have no gradient:\n  "
                                   + "\n  ".join(paths), paths) from exc
    except FrameError as exc:
        raise GradientError(f"the GradientFn of {where()} failed: {exc}") from exc
    except (Exception, SystemExit) as exc:  # a bug in the pack's GradientFn (even exit(): the caller's process goes on)
        raise GradientError(f"the GradientFn of {where()} raised {type(exc).__name__}: {exc} "
                            f"(a bug in pack {schema.pack or '?'})") from exc
    if not isinstance(micro, Graph):
        raise GradientError(f"the GradientFn of {where()} returned {type(micro).__name__}, expected a Graph")
    want_in, got_in = ctx.gradient_input_types(), [v.type for v in micro.inputs]
    want_out, got_out = list(ctx.input_types), [v.type for v in micro.outputs]
    if got_in != want_in or got_out != want_out:
        raise GradientError(
            f"the GradientFn of {where()} breaks the GradientFn contract: its micro-graph maps "
            f"[{', '.join(map(str, got_in))}] -> [{', '.join(map(str, got_out))}], expected "
            f"[x.., y.., gy..] = [{', '.join(map(str, want_in))}] -> one gradient per input "
            f"[{', '.join(map(str, want_out))}] (a bug in pack {schema.pack or '?'})")
    return micro


def build_backward_graph(
    forward: Graph, loss_output_index: int | str, wrt_input_indices: Sequence[int | str], *,
    registry: Registry | None = None, names: Sequence[str] | None = None,
) -> Graph:
    """The training graph of ``forward``: outputs ``[forward outputs..., grad(wrt[0]), ...]`` (ARCH-061).

    ``loss_output_index`` is an output's position or name; ``wrt_input_indices`` lists input positions
    or input names (a traced function's parameter names: ``["w", "b"]``).

    The forward outputs keep their names; gradient ``k`` is named ``names[k]``, by default
    ``grad(<loss>, <input>)`` (each the output's or input's name, else ``output i`` / ``input j``), so
    ``training.output_index("grad(loss, w)")`` finds it; a second application gives
    ``grad(sum(grad(loss, w)), w)`` after ``add_scalar_contraction``.

    Raises ``NonScalarLossError`` for a non-scalar loss, ``GradientError`` for
    bad indices, and ``MissingGradientError`` listing every op on the chain
    without a GradientFn (ARCH-062), including ``fused_elementwise_internal``
    and ops inside the bodies of control-flow nodes (``node 3 (loop) > body
    node 1 (foo)``).
    """
    if isinstance(wrt_input_indices, (str, bytes)) or not isinstance(wrt_input_indices, Iterable):
        one = _is_index(wrt_input_indices) or isinstance(wrt_input_indices, str)
        raise GradientError(f"wrt_input_indices is a list of input positions or names such as [0, 2] or ['w'], got "
                            f"{type(wrt_input_indices).__name__} {wrt_input_indices!r:.40}"
                            + (f"; for one input write [{wrt_input_indices!r}]" if one else ""))
    refuse_unordered(wrt_input_indices, "wrt_input_indices", GradientError, "[0, 2] or ['w', 'b']")
    if registry is not None and not isinstance(registry, Registry):
        raise GradientError(f"registry= takes a frame_core Registry (frame_core.registry(), load_registry(...)), got "
                            f"{type(registry).__name__} {registry!r:.40}")
    loss_output_index, wrt = _check_arguments(forward, loss_output_index, list(wrt_input_indices))
    grad_names = _grad_names(forward, loss_output_index, wrt, names)
    if registry is None:
        with gc_paused():
            training = _build(forward, loss_output_index, wrt, current_registry())
            made(len(training.nodes))
    else:
        with gc_paused(), use_registry(registry):  # GradientFns trace against the registry they were given
            training = _build(forward, loss_output_index, wrt, registry)
            made(len(training.nodes))
    first = len(forward.outputs)
    for k, name in enumerate(grad_names):
        training.name_output(first + k, name)
        tie_types(training, training.outputs[first + k], training.inputs[wrt[k]],
                  f"the gradient of {tie_label(forward, wrt[k])}")
    return training


def output_label(graph: Graph, position: int) -> str:
    """How generated names refer to output ``position``: its name, else ``output <position>``."""
    return graph.output_names[position] or f"output {position}"


def _grad_names(forward: Graph, loss: int, wrt: list[int], names: Sequence[str] | None) -> list[str]:
    if names is None:
        of = output_label(forward, loss)
        return [f"grad({of}, {forward.inputs[i].name or f'input {i}'})" for i in wrt]
    from .._args import name_list

    refuse_unordered(names, "build_backward_graph(names=...)", GradientError, "['gw', 'gb']")
    given = list(name_list(names, "build_backward_graph(names=...)", GradientError, "['gw', 'gb']"))
    if len(given) != len(wrt):
        raise GradientError(f"names= gives {len(given)} names for {len(wrt)} gradients; give one per wrt input")
    return given


def _not_the_packs_fault(problems: Sequence[Any]) -> GradientError:
    listing = "\n  ".join(str(p) for p in problems[:10]) + (f"\n  ... and {len(problems) - 10} more"
                                                             if len(problems) > 10 else "")
    missing_ops = all(p.unknown_op for p in problems)
    advice = ("Its ops are not registered: install or load the packs that provide them (`frame plugins list` shows "
              "which are loaded)" if missing_ops else "Fix the graph (built or edited by hand?); no pack is at fault")
    return GradientError(f"cannot differentiate: the forward graph itself is invalid ({len(problems)} problem"
                         f"{'s' if len(problems) != 1 else ''}; frame_core.verify(graph) lists them all):\n  {listing}\n"
                         f"{advice}")


def _build(forward: Graph, loss_output_index: int, wrt: list[int], reg: Registry) -> Graph:
    # The user's mistakes first, so that a GradientFn handed an impossible node is never blamed for it. The
    # structure is checked whole here (cheap); types (rule V6) node by node below, for the nodes on the chain.
    cloned = _clone_checked(forward, reg, wrt)  # check, clone and the forward half of the chain in one walk
    if cloned is None:  # it cannot vouch for the graph: quick_check is sure, or check_graph looks (and words it)
        from ..compiler.passes.verify import quick_check  # (the compiler's passes stay out of start-up)

        if not quick_check(forward, reg)[0]:
            problems = check_graph(forward, reg, types=False)
            if problems:
                raise _not_the_packs_fault(problems)
        graph = clone_graph(forward)
    else:
        graph, on_chain, mistyped = cloned
    graph.name = f"{forward.name}_grad"
    loss = graph.outputs[loss_output_index]
    seeds = {loss: graph.constant(np.ones(loss.type.shape, loss.type.dtype.np))}
    sources = {graph.inputs[i] for i in wrt}
    try:
        if cloned is None:
            grads, all_read = _walk_back(graph, seeds, sources, reg, "", mark=True)
        else:
            chain = _needed(on_chain, set(seeds))
            ops = set(map(_op, set(map(_second, chain))))  # (by the kinds: a set of a few, made in C)
            _check_chain(graph, ops, lambda: [node for node, _ in reversed(chain)], reg, "", mark=True)
            grads, all_read = _reverse_walk(graph, seeds, chain, mistyped, sources, reg, "")
    except MissingGradientError as exc:
        raise MissingGradientError(
            f"cannot differentiate output {loss_output_index}: {len(exc.paths)} op(s) on its dependency chain have "
            f"no gradient:\n  " + "\n  ".join(exc.paths), exc.paths) from None
    for i in wrt:
        x = graph.inputs[i]
        gx = grads.get(x)
        graph.mark_output(gx if gx is not None else graph.zeros_like(x))
    if not all_read:  # the reverse walk left a cotangent or a zero unread (a stop_gradient): drop it (issue 17)
        _drop_unneeded(graph, reg, first=len(forward.nodes))
    return graph


def _clone_checked(forward: Graph, reg: Registry, wrt: list[int]) -> tuple[Graph, list, set[Node]] | None:
    """``clone_graph(forward)``, checked as ``quick_check`` checks (V1-V5, V7; no sub-graphs), with the forward
    half of ``_chain`` (the nodes that depend on the inputs ``wrt`` through floating values), in one walk: the
    clone, those of its nodes in order with their kinds (``_Kind``), and the nodes recorded with other output
    types than inference gives (the reverse walk names them if they are on the chain). ``None`` when the walk
    cannot vouch for ``forward``: the caller checks (and words any problem) and clones apart."""
    inputs = forward.inputs
    if len(set(inputs)) != len(inputs) or any(v.producer is not None for v in inputs):
        return None
    graph = Graph(forward.name)
    copies: dict[Value, Value] = {v: graph.add_input(v.type, v.name) for v in inputs}
    read = copies.__getitem__
    active = {copies[inputs[i]] for i in wrt}
    isdisjoint, add = active.isdisjoint, active.add
    kinds: dict[tuple, _Kind] = {}  # (op, input types, attribute names and identities) -> its kind
    on_chain: list[tuple[Node, _Kind]] = []
    mistyped: set[Node] = set()
    append = graph.nodes.append
    for node in forward.nodes:
        try:
            ins = tuple(map(read, node.inputs))
        except KeyError:  # read before it is defined (V2)
            return None
        op, attrs = node.op, node.attrs
        in_types = tuple(map(_type, ins))
        key = (op, in_types, tuple(attrs), tuple(map(id, attrs.values()))) if attrs else (op, in_types)
        kind = kinds.get(key)
        if kind is None:
            kind = _Kind.checked(reg, op, in_types, attrs, len(ins))
            if kind is None:
                return None
            kinds[key] = kind
        copy = Node(op, ins, dict(attrs) if attrs else {})
        outs = node.outputs
        if len(outs) == 1:  # (most nodes)
            v = outs[0]
            if v.producer is not node or v.index != 0 or v in copies:
                return None
            new = copies[v] = Value(v.type, copy, 0, v.name)
            copy.outputs = (new,)
            append(copy)
            if new.type is kind.single:
                floating = kind.floating
            else:
                mistyped.add(copy)
                floating = new.type.dtype.is_float
            if not floating or isdisjoint(ins) or kind.nondiff and not any(
                    x in active for i, x in enumerate(ins) if i not in kind.nondiff):
                continue
            on_chain.append((copy, kind))
            add(new)
            continue
        for position, v in enumerate(outs):
            if v.producer is not node or v.index != position or v in copies:
                return None
            copies[v] = Value(v.type, copy, position, v.name)
        copy.outputs = tuple(map(read, outs))
        append(copy)
        if tuple(map(_type, outs)) != kind.inferred:
            mistyped.add(copy)
        if isdisjoint(ins) or kind.nondiff and not any(x in active for i, x in enumerate(ins) if i not in kind.nondiff):
            continue
        floating = [v for v in copy.outputs if v.type.dtype.is_float]
        if floating:
            on_chain.append((copy, kind))
            active.update(floating)
    try:
        graph.outputs = list(map(read, forward.outputs))
    except KeyError:  # an output not defined in the graph (V7)
        return None
    for position, name in enumerate(forward.output_names):
        if name is not None:
            graph.name_output(position, name)
    reason = traced_sizes(forward)
    if reason is not None:
        mark_traced_sizes(graph, reason)
    return graph, on_chain, mistyped


class _Kind:
    """What the nodes of one op, input types and attribute objects share in the walks: the schema's
    ``nondiff_inputs``, the output types inference gives (``None`` if it rejects the inputs; ``single`` the
    one type of a single output, ``floating`` whether it carries gradients), and the reverse walk's
    ``_Signature`` once it has met one of them."""

    __slots__ = ("op", "in_types", "schema", "nondiff", "inferred", "single", "floating", "sig")

    def __init__(self, op: str, in_types: tuple, schema: Any, inferred: tuple | None) -> None:
        self.op = op
        self.in_types = in_types
        self.schema = schema
        self.nondiff = schema.nondiff_inputs
        self.inferred = inferred
        self.single = inferred[0] if inferred is not None and len(inferred) == 1 else None
        self.floating = self.single is not None and self.single.dtype.is_float
        self.sig: _Signature | None = None

    @staticmethod
    def checked(reg: Registry, op: str, in_types: tuple, attrs: dict, n_inputs: int) -> "_Kind | None":
        """The kind, or ``None`` where ``quick_check`` would not vouch for its nodes (an unknown op, a wrong
        arity, attributes that do not normalise, a sub-graph attribute)."""
        try:
            schema = reg.lookup(op)
            schema.check_arity(n_inputs)
            if attrs and any(type(a) is Graph for a in attrs.values()):
                return None
            normal = schema.normalize_attrs(attrs)
        except FrameError:
            return None
        return _Kind(op, in_types, schema, _inferred(schema, in_types, normal))

    @staticmethod
    def of(reg: Registry, node: Node) -> "_Kind":
        """The kind of a node of a graph already checked."""
        in_types = tuple(map(_type, node.inputs))
        schema = reg.schemas[node.op]
        try:
            normal = schema.normalize_attrs(node.attrs)
        except FrameError:
            return _Kind(node.op, in_types, schema, None)
        return _Kind(node.op, in_types, schema, _inferred(schema, in_types, normal))


def _inferred(schema: Any, in_types: tuple, attrs: Any) -> tuple | None:
    try:
        return tuple(schema.infer(in_types, attrs))
    except FrameError:
        return None


def _needed(on_chain: list[tuple[Node, Any]], targets: set[Value]) -> list[tuple[Node, Any]]:
    """Of the nodes that depend on the sources, in order, each paired with what its caller keeps beside it (a
    kind), those a target depends on through a floating output, in reverse order: the reverse walk's (and
    ``_chain``'s second half). ``targets`` grows by the inputs of the nodes kept."""
    needed = targets
    unneeded = needed.isdisjoint
    chain = []
    for pair in reversed(on_chain):
        node = pair[0]
        outs = node.outputs
        if len(outs) == 1:  # (on the forward chain: floating)
            if outs[0] in needed:
                chain.append(pair)
                needed.update(node.inputs)
        elif not unneeded(outs) and any(v in needed and v.type.dtype.is_float for v in outs):
            chain.append(pair)
            needed.update(node.inputs)
    return chain


def _origin(graph: Graph, op: str, reg: Registry) -> str:
    """Which op of ``graph`` brought ``op`` in through its gradient: differentiating a training graph again meets
    the ops of the first gradient (``matmul_grad_lhs_internal``, a declared-not-differentiable ``step``), which the
    user never called; the closure audit's chains (``ramp -> step``) name the op the user did call."""
    users = sorted({n.op for n in graph.nodes if n.op != op and op in getattr(reg.closure.get(n.op), "chain", ())})
    if not users:
        return ""
    chains = "; ".join(" -> ".join(reg.closure[u].chain) for u in users[:3])
    orders = sorted({str(reg.closure[u].order) for u in users})
    return (f"; the gradient of {', '.join(users[:3])} uses it, so {'that op is' if len(users) == 1 else 'those are'} "
            f"differentiable to order {' or '.join(orders)} only ({chains})")


def _drop_unneeded(graph: Graph, reg: Registry, first: int = 0) -> None:
    """Remove (in place, on a graph this module just built) the nodes from position ``first`` on that no output
    needs and that have no side effect: gradients not asked for, recomputed forward values nothing reads. The
    nodes before ``first`` (the user's forward graph, as written) stay."""
    live = set(graph.outputs)
    effects = {name for name, schema in reg.schemas.items() if schema.has_side_effect}
    keep = []
    for node in reversed(graph.nodes[first:]):
        outs = node.outputs
        if (outs[0] in live if len(outs) == 1 else any(v in live for v in outs)) or node.op in effects or (
                node.attrs and node_has_side_effect(node, reg.schemas)):  # (a body may hold a side effect)
            keep.append(node)
            live.update(node.inputs)
    keep.reverse()
    graph.nodes[first:] = keep


def _backpropagate(graph: Graph, seeds: dict[Value, Value], sources: set[Value], reg: Registry,
                   label: str, mark: bool = False) -> dict[Value, Value]:
    """Append to ``graph`` the reverse walk from ``seeds`` (value -> its cotangent) to ``sources``; return
    the accumulated cotangent of every value that got one. ``label`` prefixes node paths in errors. With
    ``mark``, a chain through an op whose GradientFn may hold traced sizes (no ``any_shape_gradient`` trait)
    marks ``graph`` so that ``specialize`` refuses it rather than run it wrongly at another size."""
    return _walk_back(graph, seeds, sources, reg, label, mark)[0]


def _walk_back(graph: Graph, seeds: dict[Value, Value], sources: set[Value], reg: Registry,
               label: str, mark: bool = False) -> tuple[dict[Value, Value], bool]:
    """``_backpropagate``, and whether every node it appended is read (``_reverse_walk``)."""
    chain = _chain(graph, set(seeds), sources, reg)
    _check_chain(graph, set(map(_op, chain)), lambda: chain, reg, label, mark)
    kinds: dict[tuple, _Kind] = {}
    pairs = []
    mistyped = set()
    for node in reversed(chain):
        attrs = node.attrs
        in_types = tuple(map(_type, node.inputs))
        key = (node.op, in_types, tuple(attrs), tuple(map(id, attrs.values()))) if attrs else (node.op, in_types)
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = _Kind.of(reg, node)
        if tuple(map(_type, node.outputs)) != kind.inferred:
            mistyped.add(node)
        pairs.append((node, kind))
    return _reverse_walk(graph, seeds, pairs, mistyped, sources, reg, label)


def _check_chain(graph: Graph, ops: set[str], chain: Callable[[], list[Node]], reg: Registry, label: str,
                 mark: bool) -> None:
    """A ``MissingGradientError`` listing every node of ``chain()`` (in order; ``ops`` are their ops) whose op
    has no GradientFn; with ``mark``, ``graph`` marked if a GradientFn on the chain may hold traced sizes
    (``_mark_sized_gradients``)."""
    if mark:
        _mark_sized_gradients(graph, ops, reg)
    schemas = reg.schemas
    without = {op for op in ops if op not in schemas or schemas[op].gradient is None}
    if without:
        missing = [n for n in chain() if n.op in without]
        paths = []
        for node in missing:
            schema = reg.schemas.get(node.op)
            why = (" (a compile-pipeline product: differentiate the graph before compiling it)" if node.op == FUSED_OP
                   else f" (declared not differentiable: {schema.not_differentiable})" if schema and schema.not_differentiable
                   else " (no GradientFn registered)" if schema else " (unknown op)")
            paths.append(f"{label}node {graph.nodes.index(node)} ({node.op}){why}{_origin(graph, node.op, reg)}")
        raise MissingGradientError("no gradient:\n  " + "\n  ".join(paths), paths)


def _reverse_walk(graph: Graph, seeds: dict[Value, Value], chain: list[tuple[Node, _Kind]], mistyped: set[Node],
                  sources: set[Value], reg: Registry, label: str) -> tuple[dict[Value, Value], bool]:
    """The reverse walk over ``chain``, ``(node, its kind)`` in reverse order (checked: every op has a GradientFn;
    ``mistyped`` the nodes whose recorded types differ from their kind's, named here if reached): the accumulated cotangents, and
    whether every node it appended is read (by a later node, or as a cotangent of a source), so that
    ``_drop_unneeded`` has nothing to find. Each node inlines its signature's recipe pruned to the gradients
    wanted (its inputs that carry one and may be nonzero), so a gradient nobody asked for is never made."""
    grads = dict(seeds)
    get = grads.get
    signatures: dict[tuple, _Signature] = {}  # (op, input types, attrs) -> what every node of that signature shares

    def signature(node: Node, kind: _Kind) -> _Signature:  # (once per kind, and at a mistyped node: it raises)
        key = (kind.op, kind.in_types, attrs_key(node.attrs) if node.attrs else ())
        sig = signatures.get(key)
        if sig is None:
            sig = signatures[key] = _Signature.of(kind.schema, node, kind.in_types, graph, label)
        elif tuple(map(_type, node.outputs)) != sig.out_types:  # (checked before any GradientFn sees the node)
            raise _recorded_types_differ(node, sig.out_types, graph, label)
        return sig
    with_grad = sources.union(chain_from([node.outputs for node, _ in chain]))
    wanted = with_grad.__contains__
    accumulate: _Accumulator | None = None
    all_read = True  # (until a node leaves a cotangent or a zero unread)
    for node, kind in chain:
        outs = node.outputs
        ins = node.inputs
        if len(outs) == 1:  # (most nodes)
            y = outs[0]
            gy = get(y)
            if gy is None:
                continue
            arguments = [*ins, y, gy]
            typed = gy.type is y.type
        else:
            gys = [grads.get(y) for y in outs]
            if all(g is None for g in gys):
                continue
            seeds_here = [g if g is not None else graph.zeros_like(y) for g, y in zip(gys, outs)]
            arguments = [*ins, *outs, *seeds_here]
            typed = all(map(_same_type, seeds_here, outs))
        sig = kind.sig
        if sig is None or mistyped and node in mistyped:
            sig = kind.sig = signature(node, kind)
        variant = sig.sole  # (one input carries a gradient: on the chain, it wants it)
        if variant is None:
            mask = tuple(map(wanted, sig.carried(ins)))
            variant = sig.variants.get(mask)
            if variant is None:
                variant = sig.variants[mask] = sig.variant(mask)
        recipe = variant.recipe
        gxs: Sequence[Value]
        if recipe is None:
            gxs = inline_graph(graph, sig.micro, arguments)
        elif typed:  # (gy as y: x and y are of the signature's types)
            gxs = recipe.fill(graph, arguments)
        else:
            gxs = recipe.inline(graph, arguments)  # (raises, naming the types)
        if not variant.reads_seeds:
            all_read = False
        for (i, r, maybe_zero) in variant.assign:  # (input position, its result, whether it may be a zero)
            x = ins[i]
            gx = gxs[r]
            if maybe_zero:
                p = gx.producer
                if p is not None and (p.op == "constant" and is_zero_constant(gx) or p.op == "zeros_like_internal"
                                      and gx.type.size <= INSPECT_LIMIT):  # (as the constant zeros it compiles to)
                    all_read = False
                    continue
            previous = get(x)
            if previous is None:
                grads[x] = gx
            else:
                if accumulate is None:
                    accumulate = _Accumulator(graph, reg)
                grads[x] = accumulate(previous, gx)
    if all_read:
        all_read = with_grad.issuperset(seeds) and all(sig.constants_read() for sig in signatures.values())
    return grads, all_read


def _same_type(a: Value, b: Value) -> bool:
    return a.type is b.type


def _recorded_types_differ(node: Node, inferred: Sequence[Any], graph: Graph, label: str) -> GradientError:
    return _not_the_packs_fault([Problem(
        "V6", f"outputs are recorded as [{', '.join(str(v.type) for v in node.outputs)}] but inference gives "
              f"[{', '.join(map(str, inferred))}]", node.op, graph.nodes.index(node), label)])


class _Signature:
    """What the reverse walk needs of every node of one signature (op, input types, attributes), found at its
    first node: the inferred output types (each node's recorded ones are compared with them), the GradientFn's
    micro-graph checked against the contract and its recipe, the input positions that carry a gradient (floating
    and not in ``nondiff_inputs``), those whose gradient may be a zero constant (not made by a fresh node; known
    zeros, a zero constant or a small ``zeros_like_internal`` of the micro-graph, are never made), and the
    recipe pruned to each set of wanted gradients met (``variants``, by which carrying inputs want one)."""

    __slots__ = ("out_types", "micro", "recipe", "carries", "carried", "may_be_zero", "zeros", "variants", "sole")

    def __init__(self, out_types: tuple, micro: Graph, recipe: "_Recipe | None", carries: tuple,
                 may_be_zero: frozenset, zeros: frozenset) -> None:
        self.out_types = out_types
        self.micro = micro
        self.recipe = recipe
        self.carries = carries
        self.carried = _taker(carries)  # a node's inputs -> those that carry a gradient (a tuple)
        self.may_be_zero = may_be_zero
        self.zeros = zeros
        self.variants: dict[tuple, _Variant] = {}
        # A node on the chain has an input that depends on a source through floating values, at a position
        # not in nondiff_inputs: with one such position, that input is it, and it wants its gradient.
        self.sole = None
        if len(carries) == 1:
            self.sole = self.variants[(True,)] = self.variant((True,))

    @staticmethod
    def of(schema: Any, node: Node, in_types: tuple, graph: Graph, label: str) -> "_Signature":
        try:
            norm = schema.normalize_attrs(node.attrs)
            inferred = tuple(schema.infer(in_types, norm))
        except FrameError as exc:
            raise _not_the_packs_fault([Problem("V6", f"shape inference rejects the inputs: {exc}", node.op,
                                                graph.nodes.index(node), label)]) from exc
        if tuple(map(_type, node.outputs)) != inferred:  # checked before the GradientFn sees the node
            raise _recorded_types_differ(node, inferred, graph, label)
        micro = _micro_graph(schema, node, graph, label, norm)
        _mark_sized_bodies(graph, node.op, micro)
        recipe = _Recipe.of(micro)
        nondiff = schema.nondiff_inputs
        carries = tuple(i for i, t in enumerate(in_types) if i not in nondiff and t.dtype.is_float)
        fresh = {v for n in micro.nodes if n.op not in _ZERO_OPS for v in n.outputs}  # never zeros
        may_be_zero = frozenset(i for i in carries if micro.outputs[i] not in fresh)
        zeros = frozenset(i for i in may_be_zero if _known_zero(micro.outputs[i])) if recipe is not None \
            else frozenset()
        return _Signature(inferred, micro, recipe, carries, may_be_zero - zeros, zeros)

    def variant(self, mask: tuple) -> "_Variant":
        """The recipe pruned to the gradients of the carrying inputs ``mask`` flags (known zeros left out)."""
        kept = [i for i, wanted in zip(self.carries, mask) if wanted and i not in self.zeros]
        if self.recipe is None:  # inlined whole (sub-graphs): the drop after the walk removes what is not read
            return _Variant(None, tuple((i, i, i in self.may_be_zero) for i in kept), False, frozenset())
        recipe, reads_seeds, constants = self.recipe.pruned(kept, len(self.out_types))
        return _Variant(recipe, tuple((i, r, i in self.may_be_zero) for r, i in enumerate(kept)), reads_seeds,
                        constants)

    def constants_read(self) -> bool:
        """Whether every constant the recipe made is read by a pruned recipe that ran (a constant is made at the
        first inlining, as the whole recipe would, whichever gradients that node wanted)."""
        if self.recipe is None or not self.recipe.made:
            return True
        read = set().union(*(v.constants for v in self.variants.values()))
        return read.issuperset(self.recipe.made)


def _mark_sized_gradients(graph: Graph, ops: set[str], reg: Registry) -> None:
    fixed = sorted(op for op in ops if op in reg.schemas
                   and "any_shape_gradient" not in reg.schemas[op].traits)
    if fixed:
        mark_traced_sizes(graph, f"the gradient{'s' if len(fixed) > 1 else ''} of {', '.join(fixed[:5])}"
                                 f"{' ...' if len(fixed) > 5 else ''} may hold the traced sizes (no "
                                 "any_shape_gradient trait); build the training graph again for the new shapes "
                                 "(value_and_grad and frame-train's TrainStep do)")


def _mark_sized_bodies(graph: Graph, op: str, micro: Graph) -> None:
    """Mark ``graph`` when the GradientFn micro-graph ``micro`` of a node of ``op`` may hold traced sizes: marked
    itself, or through a body of one of its nodes (at any depth). A control-flow op's gradient runs its bodies'
    gradients as bodies, which no inlining carries a mark out of; so its ``any_shape_gradient`` trait vouches for
    what its GradientFn writes itself, and whether the gradient of one node holds sizes is decided here, per node,
    by its bodies (docs/design-parameters-and-shapes.md, "Training graphs at any batch size")."""
    reason = _sizes_held(micro)
    if reason is not None:
        mark_traced_sizes(graph, f"the gradient of {op} may hold the traced sizes: {reason}")


def _sizes_held(graph: Graph) -> str | None:
    """Why ``graph`` may hold traced sizes: its own mark, or the first found on a body of one of its nodes."""
    reason = traced_sizes(graph)
    if reason is None:
        for node in graph.nodes:
            if node.attrs:
                for body in node.attrs.values():
                    if type(body) is Graph:
                        reason = _sizes_held(body)
                        if reason is not None:
                            return reason
    return reason


def _accumulate(graph: Graph, grads: dict[Value, Value], x: Value, gx: Value, reg: Registry) -> None:
    previous = grads.get(x)
    grads[x] = gx if previous is None else append_node(graph, "accumulate_internal", (previous, gx),
                                                       source=reg).outputs[0]


def add_scalar_contraction(graph: Graph, output_index: int, weights: np.ndarray | None = None, *,
                           name: str | None = None) -> tuple[Graph, int]:
    """A copy of ``graph`` with one more output: the scalar ``sum(weights * output)`` (ARCH-067).

    ``weights`` default to all ones. Returns the new graph and the new output's
    position (as ``extend_graph`` returns the position of a single new output),
    ready for another call to ``build_backward_graph``. The new output is named
    ``name``, by default ``sum(<output>)`` (``contract(<output>)`` with weights). The contraction
    is the core op ``weighted_sum_internal``, so higher order needs no pack.
    A full-ones contraction of a gradient gives a vector-Jacobian product (the
    Hessian's row sums), not a Hessian: choose ``weights`` (a direction, or a
    basis vector for one Hessian row) for anything else.
    """
    if not isinstance(graph, Graph):
        raise GradientError(f"add_scalar_contraction needs a Graph, got {type(graph).__name__}")
    if name is not None and (not isinstance(name, str) or not name):
        raise GradientError(f"name= names the new output (a non-empty string such as 'loss2'), got "
                            f"{type(name).__name__} {name!r:.40}")
    output_index = _output_position(output_index, graph, "output_index")
    target = graph.outputs[output_index].type
    if not target.dtype.is_float:
        raise GradientError(f"output {output_index} has type {target}; only floating outputs can be contracted")
    try:
        w = np.ones(target.shape, target.dtype.np) if weights is None else np.asarray(weights, dtype=target.dtype.np)
    except (TypeError, ValueError) as exc:
        raise GradientError(f"weights must be an array of numbers of output {output_index}'s shape ({target}), got "
                            f"{type(weights).__name__} ({exc})") from None
    if w.shape != target.shape:
        raise GradientError(f"weights of shape {list(w.shape)} do not match output {output_index} ({target})")
    label = output_label(graph, output_index)
    copy = clone_graph(graph)
    scalar = copy.add_node("weighted_sum_internal", [copy.outputs[output_index]], {"weights": w}).outputs[0]
    return copy, copy.mark_output(scalar, name or (f"sum({label})" if weights is None else f"contract({label})"))
