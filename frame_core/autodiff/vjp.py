"""Vector-Jacobian products of whole graphs: how control-flow ops differentiate their bodies (ARCH-067).

``build_vjp_graph(g)`` is the graph ``(inputs..., gy per output...) -> (gx
per input...)``: the reverse walk of ``build_backward_graph`` seeded by the
cotangent inputs instead of ``constant(1)``, with the forward recomputed
inside. An ``if_else`` branches over two of them.

``split_vjp_graph(g, invariant=...)`` is the same product cut in two, as a
loop needs it (partial evaluation):

- ``forward``: ``g``'s inputs -> ``g``'s outputs, then the *residuals*: the
  forward values its gradient reads that change from call to call (a tanh
  derivative, an activation);
- ``backward``: ``(inputs..., residuals..., gy...) -> gx...``, reading the
  residuals instead of recomputing them.

A loop runs ``forward`` as its body and stacks the residuals per step; its
reverse loop runs ``backward``. What is not a residual is recomputed in
``backward``: values made only from the ``invariant`` inputs and constants
(the same at every call), and the outputs of nodes that carry sub-graphs
(nested control flow: stacking a nested loop's own trajectory at every outer
step would cost memory squared; recomputing it is checkpointing). Both
parts are ordinary graphs, so they differentiate again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._gc import gc_paused
from .._text import short_repr
from ..errors import GradientError
from ..ir.graph import Graph, Node, Value, _copy_nodes, clone_graph, inline_graph, mark_traced_sizes, tie_label, \
    tie_types, traced_sizes
from ..ops_registry.registry import Registry, registry as current_registry, use_registry
from .._args import refuse_unordered
from ..ir.verify import check_graph
from .backward import _accumulate, _backpropagate, _drop_unneeded, input_position, _not_the_packs_fault

__all__ = ["build_vjp_graph", "split_vjp_graph", "VJPSplit"]


def _positions(graph: Graph, wrt: Sequence[int] | None, label: Any = "", registry: Any = None,
               invariant: Any = ()) -> list[int]:
    """``wrt`` as input positions, after checking every argument of the two entry points (GradientError)."""
    if not isinstance(graph, Graph):
        raise GradientError(f"a vector-Jacobian product needs a Graph, got {type(graph).__name__}")
    if not isinstance(label, str):
        raise GradientError(f"label= is a string naming the graph in error paths, got {short_repr(label)}")
    if registry is not None and not isinstance(registry, Registry):
        raise GradientError(f"registry= takes a frame_core Registry (frame_core.registry(), load_registry(...)), got "
                            f"{type(registry).__name__} {short_repr(registry)}")
    n = len(graph.inputs)
    positions = list(range(n)) if wrt is None else _indices(wrt, "wrt", "[0, 2]", graph)
    for i in positions:
        if not 0 <= i < n:
            raise GradientError(f"wrt index {i} is out of range: the graph has {n} inputs (0..{n - 1})")
    _indices(invariant, "invariant", "[1]", graph)
    return positions


def _indices(value: Any, what: str, example: str, graph: Graph) -> list[int]:
    """``value`` as a list of ints: input positions or input names (as ``build_backward_graph`` takes them),
    never the characters of a string or a bare number."""
    refuse_unordered(value, f"{what}=", GradientError, example)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or \
            (isinstance(value, np.ndarray) and value.ndim != 1):
        raise GradientError(f"{what}= is a list of input positions such as {example}, got {type(value).__name__} "
                            f"{short_repr(value)}" + (f"; for one input write [{value!r}]"
                                                      if isinstance(value, (int, np.integer)) else ""))
    items = [input_position(i, graph) if isinstance(i, str) else i for i in value]
    bad = [i for i in items if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_))]
    if bad:
        raise GradientError(f"{what}= holds input positions (ints) or names (str), got {short_repr(bad[0])} "
                            f"({type(bad[0]).__name__})")
    return [int(i) for i in items]


def _combined(graph: Graph, positions: list[int], label: str, reg: Registry,
              split: set[int] | None = None) -> tuple[Graph, list[Value], list[Value]]:
    """A clone of ``graph`` plus one cotangent input per output, with the reverse walk appended; returns it,
    its cotangent inputs and the gradient of each ``wrt`` input (a zero constant where there is none). ``split``:
    the invariant input positions of a body that ``split_vjp_graph`` cuts in two for a loop."""
    problems = check_graph(graph, reg, types=False)  # the caller's mistakes first: no GradientFn is blamed for them
    if problems:
        raise _not_the_packs_fault(problems)
    vjp = clone_graph(graph)
    vjp.name = f"{graph.name}_vjp"
    outputs, vjp.outputs = vjp.outputs, []
    cotangents = [vjp.add_input(v.type, f"g{v.name}" if v.name else None) for v in outputs]
    seeds: dict[Value, Value] = {}
    for y, gy in zip(outputs, cotangents):
        if y.type.dtype.is_float:
            _accumulate(vjp, seeds, y, gy, reg)
    sources = {vjp.inputs[i] for i in positions if vjp.inputs[i].type.dtype.is_float}
    grads = _backpropagate(vjp, seeds, sources, reg, f"{label} " if label else "", mark=True)
    result = []
    for i in positions:
        x = vjp.inputs[i]
        g = grads.get(x) if x.type.dtype.is_float else None
        result.append(g if g is not None else vjp.zeros_like(x))  # (x's shape, at any batch size)
    vjp.outputs = outputs  # the forward outputs, for the caller that splits
    if label and split is not None:  # a loop's body: its forward would otherwise save, per step, values read for
        result = _shapes_written_down(vjp, reg, result, len(graph.nodes), split)  # their shape only
    return vjp, cotangents, result


def _shapes_written_down(graph: Graph, reg: Registry, values: list[Value], first: int,
                         invariant: set[int]) -> list[Value]:
    """Replace (in place, on a graph this module built) every node of an op with the ``shape_operand`` trait (and
    every ``zeros_like_internal``) that reads the shape of a value made inside the body by its DecomposeFn, which
    writes that shape down as an attribute (or, where the shapes already agree, hands its input on); return
    ``values`` mapped. Saved per step, such a value would cost a row of memory for its shape only. A node whose
    shape operands are inputs of the body stays: the reverse body has them anyway, and reading the shape at run
    time keeps the gradient right at any batch size (the compile pass of frame-ops-basic lowers it there, the
    same program); so does one whose shape operands are made from the ``invariant`` inputs and constants alone
    (recomputed, never saved: ``_split``). Only nodes from position ``first`` on (the reverse walk's; the
    forward's stay as written) are replaced; the graph is marked as holding traced sizes when a lowering wrote a
    node (a shape), not when it handed its input on (a gradient of another type at new sizes is then refused by
    the ops that read it: ``accumulate_internal``, the loop's check of its body, the training graph's ties)."""
    from ..ops_registry.schema import NodeContext

    inputs = _fixed_values(graph, invariant)
    inputs.update(graph.inputs)
    found = {n for n in graph.nodes[first:] if (n.op == "zeros_like_internal" or "shape_operand" in getattr(
        reg.schemas.get(n.op), "traits", ())) and not inputs.issuperset(_shape_operands(n, reg))}
    if not found:
        return values
    lowered: dict[Value, Value] = {}
    nodes: list[Node] = []
    wrote = []
    for node in graph.nodes:
        if lowered:
            node.inputs = tuple([lowered.get(v, v) for v in node.inputs])
        schema = reg.schemas.get(node.op)
        if node in found and schema.decomposition is not None:
            scratch = Graph("lowered")
            ctx = NodeContext(schema, [v.type for v in node.inputs], node.attrs, [v.type for v in node.outputs])
            outs = inline_graph(scratch, schema.decomposition(ctx), list(node.inputs))
            if scratch.nodes:
                wrote.append(node.op)
            nodes.extend(scratch.nodes)
            lowered.update(zip(node.outputs, outs))
            continue
        nodes.append(node)
    graph.nodes = nodes
    graph.outputs = [lowered.get(v, v) for v in graph.outputs]
    if wrote:
        mark_traced_sizes(graph, f"a control-flow body's gradient holds its traced shapes (its "
                                 f"{', '.join(sorted(set(wrote))[:3])} read the shape of a value made inside the "
                                 "body, written down so that the loop does not save that value for its shape only)")
    return [lowered.get(v, v) for v in values]


def _fixed_values(graph: Graph, invariant: set[int]) -> set[Value]:
    """The ``invariant`` inputs of a loop body's ``graph`` and the values made from them and constants alone: the
    same at every step, so recomputed in the reverse body rather than saved (a cotangent is never invariant, so
    nothing that reads one is among them)."""
    fixed = {v for i, v in enumerate(graph.inputs) if i in invariant}
    for node in graph.nodes:
        if all(v in fixed for v in node.inputs):  # constants too (no inputs)
            fixed.update(node.outputs)
    return fixed


def _shape_operands(node: Node, reg: Registry) -> tuple[Value, ...]:
    """The inputs of ``node`` that it reads for their type only: a ``zeros_like_internal``'s one input; the last
    input of an op with the ``shape_operand`` trait, or every input of its variadic last operand."""
    if node.op == "zeros_like_internal":
        return node.inputs
    schema = reg.schemas[node.op]
    return node.inputs[len(schema.inputs) - 1:] if schema.variadic else node.inputs[-1:]


def build_vjp_graph(graph: Graph, wrt: Sequence[int] | None = None, *, label: str = "",
                    registry: Registry | None = None) -> Graph:
    """The vector-Jacobian product of ``graph``: a graph ``(inputs..., gy per output...) -> (gx per wrt input...)``.

    Inputs are ``graph``'s inputs followed by one cotangent per output, of the
    output's type (those of integer and boolean outputs are read by nothing);
    outputs are the cotangent of each input in ``wrt`` (default: every input),
    a zero constant for an input that no output depends on through floating
    values or that is not floating. The forward is recomputed inside and its
    nodes stay, read or not, so that re-specialised at new shapes the graph is
    refused where the forward's ops refuse their inputs (compile drops the
    unread ones from ``opt_level=1``); nodes of the reverse walk the gradients
    do not need are dropped. With a ``label`` (a control-flow body, whose op
    checks its shapes) the unread forward nodes are dropped too. Each
    cotangent is tied to its output's type and each gradient to its input's
    (``ir.graph.tie_types``): re-specialised at new input shapes, a cotangent
    of another shape is a ``ShapeError`` naming it, never broadcast.

    ``label`` names ``graph`` in error paths (a GradientFn passes the attribute
    name, giving ``body node 1 (foo)``); ``MissingGradientError`` lists every
    node without a gradient that the cotangents reach.
    """
    positions = _positions(graph, wrt, label, registry)
    reg = registry if registry is not None else current_registry()
    with gc_paused(), use_registry(reg):
        vjp, cotangents, grads = _combined(graph, positions, label, reg)
        if not label:  # (a body's op checks its shapes, and the body drops the forward nodes its ties would read)
            _tie_seeds(graph, vjp, cotangents, positions, grads)
        vjp.outputs = list(grads)
        # the forward's nodes stay, read or not: specialize re-infers them, so at new shapes the graph is refused
        # where the op itself refuses its inputs (compile drops the unread ones, from opt_level 1). A body's
        # op checks its shapes: its forward node stays in the graph that holds the body
        _drop_unneeded(vjp, reg, first=0 if label else len(graph.nodes))
    return vjp


def _tie_seeds(graph: Graph, vjp: Graph, cotangents: list[Value], positions: list[int], grads: list[Value]) -> None:
    """Record that each cotangent input has its output's type and each gradient its input's, at any input shapes:
    ``specialize`` checks it, so a cotangent of another batch size is refused by name, never broadcast."""
    for k, (y, gy) in enumerate(zip(vjp.outputs, cotangents)):
        tie_types(vjp, gy, y, f"the cotangent of {tie_label(graph, k, output=True)}")
    for i, g in zip(positions, grads):
        tie_types(vjp, g, vjp.inputs[i], f"the gradient of {tie_label(graph, i)}")


@dataclass
class VJPSplit:
    """``forward``: inputs -> outputs + residuals; ``backward``: (inputs, residuals, gy) -> gx per wrt input."""

    forward: Graph
    backward: Graph
    n_residuals: int


def split_vjp_graph(graph: Graph, wrt: Sequence[int] | None = None, *, invariant: Sequence[int] = (),
                    label: str = "", registry: Registry | None = None) -> VJPSplit:
    """The vector-Jacobian product of ``graph`` cut into a forward part that returns residuals and a backward
    part that reads them (see the module docstring).

    ``forward`` takes ``graph``'s inputs and returns its outputs (its nodes
    first, in order: it extends ``graph``), then the residuals.
    ``backward`` takes ``graph``'s inputs, the residuals, then one cotangent
    per output, and returns the cotangent of each ``wrt`` input (default:
    all). ``invariant`` lists the input positions that are the same at every
    call (a loop's invariants): values made from them alone are recomputed,
    never saved. Errors as ``build_vjp_graph``.
    """
    positions = _positions(graph, wrt, label, registry, invariant)
    reg = registry if registry is not None else current_registry()
    with gc_paused(), use_registry(reg):
        fixed = set(_indices(invariant, "invariant", "[1]", graph))
        combined, cotangents, grads = _combined(graph, positions, label, reg, split=fixed)
        return _split(graph, combined, cotangents, grads, fixed, reg)


def _split(graph: Graph, combined: Graph, cotangents: list[Value], grads: list[Value], invariant: set[int],
           reg: Registry) -> VJPSplit:
    n_forward = len(graph.nodes)
    tangent: set[Value] = set(cotangents)
    fixed = _fixed_values(combined, invariant)  # the same at every call
    producer: dict[Value, Node] = {}
    for node in combined.nodes:
        for v in node.outputs:
            producer[v] = node
        if any(v in tangent for v in node.inputs):
            tangent.update(node.outputs)

    def recomputed(node: Node) -> bool:  # not worth saving: fixed values, zeros read off a type, a nested trajectory
        return node.outputs[0] in fixed or node.op == "zeros_like_internal" or \
            any(isinstance(a, Graph) for a in node.attrs.values())

    # the backward part: tangent nodes, and primal nodes they read that are recomputed rather than saved
    inputs = set(combined.inputs)
    in_backward: set[Node] = set()
    residuals: list[Value] = []
    seen: set[Value] = set()
    stack = list(grads)
    while stack:
        v = stack.pop()
        if v in seen or v in inputs:
            continue
        seen.add(v)
        node = producer[v]
        if v in tangent or recomputed(node):
            if node not in in_backward:
                in_backward.add(node)
                stack.extend(node.inputs)
        else:
            residuals.append(v)
    order = {node: k for k, node in enumerate(combined.nodes)}
    residuals.sort(key=lambda v: (order[producer[v]], v.index))

    # forward: graph's nodes (a prefix: merge_trajectory_recompute recognises the extension), then what the
    # residuals need of the appended primal nodes
    needed: set[Node] = set()
    todo = [producer[v] for v in residuals]
    while todo:
        node = todo.pop()
        if node in needed or order[node] < n_forward:
            continue
        needed.add(node)
        todo.extend(producer[v] for v in node.inputs if v in producer)
    forward = Graph(graph.name)
    forward.inputs = list(combined.inputs[:len(graph.inputs)])
    forward.nodes = combined.nodes[:n_forward] + [n for n in combined.nodes[n_forward:] if n in needed]
    forward.outputs = list(combined.outputs) + residuals

    backward = Graph(f"{graph.name}_backward")
    vmap: dict[Value, Value] = {}
    for v in combined.inputs[:len(graph.inputs)]:
        vmap[v] = backward.add_input(v.type, v.name)
    for k, v in enumerate(residuals):
        vmap[v] = backward.add_input(v.type, f"r{k}")
    for v in cotangents:
        vmap[v] = backward.add_input(v.type, v.name)
    _copy_nodes([n for n in combined.nodes if n in in_backward], vmap, backward)
    backward.outputs = [vmap[g] for g in grads]
    reason = traced_sizes(combined)
    if reason is not None:  # (the two parts are new graphs: the mark goes with them)
        mark_traced_sizes(forward, reason)
        mark_traced_sizes(backward, reason)
    return VJPSplit(forward, backward, len(residuals))
