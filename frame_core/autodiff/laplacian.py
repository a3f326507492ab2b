"""One-pass differential operators: the forward Laplacian and univariate Taylor mode as graph transforms.

``build_laplacian_graph(graph, wrt)`` propagates, for every value ``y`` on the chain from input ``x``, the
triple ``(y, G_y, L_y)`` in one forward pass: ``G_y`` the derivatives of ``y`` along ``K`` directions (a leading
axis of ``K``), ``L_y = sum_k w_k d2y/dv_k2`` the weighted sum of second directional derivatives. With the
coordinate directions and unit weights ``L_y`` is the Laplacian; any symmetric ``A`` gives
``sum_ij A_ij d2y/dx_i dx_j`` (``A = sum_k w_k v_k v_k^T``, its eigen-decomposition). This is the forward
Laplacian of Li et al. (2024) and, with the directions summed early, the collapsed Taylor mode of Dangel et al.

Per-op rules (each ``G`` keeps a leading ``K`` axis and may hold size-1 axes where it does not vary, so a
direction that is the same for every point costs one row, not one per point):

linear ops ``add``, ``sub``, ``neg``
    ``G_y = G_a +- G_b``, ``L_y = L_a +- L_b``.
``mul``
    ``G_y = a G_b + b G_a``, ``L_y = a L_b + b L_a + 2 sum_k w_k G_a G_b``.
``matmul``
    ``G_y = G_A B + A G_B``, ``L_y = L_A B + A L_B + 2 sum_k w_k G_A G_B``.
other elementwise ops (any pack: the ``elementwise`` trait)
    ``G_y = sum_a f_a G_a``, ``L_y = sum_a f_a L_a + sum_ab f_ab sum_k w_k G_a G_b`` with the first and second
    partial derivatives ``f_a``, ``f_ab`` derived from the op's forward rule (``build_jvp_graph`` applied once
    and twice with unit tangents).
every other op (generic, derived from the JVP)
    Per direction ``k``, the JVP-of-JVP of the op gives ``J v_k`` and ``H[v_k, v_k]``; ``L_y = J L_x + sum_k
    w_k H[v_k, v_k]``. Costs ``K`` applications of the op's second-order forward rule.

``build_taylor_graph(graph, wrt, order)`` gives ``u', u'', ..., u^(K)`` of every output along the all-ones
direction of ``x`` (for a batch of independent points ``x[n]``, the derivatives at each point): orders 1 and 2
by the rules above with the one direction; higher orders by per-op recurrences (``_Series``: Leibniz for
products, ``y' = g x'`` for ``exp``/``tanh``/``sigmoid``, solved implicit forms for ``div``/``log``/``sqrt``)
where the op has one, else by the generic rule ``y_(j+1) = jvp(h_j)`` (the JVP of the order-``j`` rule along
``(x_1, ..., x_(j+1))``).

Both results are ordinary graphs: ``build_backward_graph`` differentiates them again (a PINN loss trains).
The Taylor graph, and the Laplacian graph with ``batch_dims >= 1``, run at any number of points (compiled with
``dynamic_shapes=True``): the seed is a row broadcast like ``x``, every zero, broadcast and reshape added reads
its size off a value; ``_holds_traced_batch`` marks a graph where an added node still holds the traced size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._gc import gc_paused, made
from ..errors import GradientError, MissingGradientError, TangentError
from ..ir.graph import Graph, Node, Value, clone_graph, constant_array, inline_graph, mark_traced_sizes
from ..ir.keys import attrs_key
from ..ir.verify import check_graph
from ..ops_registry.registry import Registry, registry as current_registry, use_registry
from .backward import _chain, _not_the_packs_fault, _output_position, input_position, output_label
from .jvp import _drop_unneeded_after, build_jvp_graph, keep_needed, without_forward_rule

__all__ = ["MAX_SERIES_ORDER", "MAX_TAYLOR_ORDER", "SERIES_RULES", "build_laplacian_graph", "build_taylor_graph"]


def _check_wrt(graph: Graph, wrt: Any, what: str) -> int:
    if not isinstance(graph, Graph):
        raise GradientError(f"{what} needs a Graph, got {type(graph).__name__}")
    if isinstance(wrt, str):
        names = [v.name for v in graph.inputs]
        if wrt not in names:
            raise TangentError(f"{what}: wrt={wrt!r} names no input of graph {graph.name!r} (inputs: "
                               f"{', '.join(repr(n) for n in names if n) or 'none named'}); a differential operator "
                               "is taken with respect to a graph input")
        i = input_position(wrt, graph)
    elif isinstance(wrt, (int, np.integer)) and not isinstance(wrt, (bool, np.bool_)):
        i = int(wrt)
        if not 0 <= i < len(graph.inputs):
            raise TangentError(f"{what}: wrt={i} is out of range: the graph has {len(graph.inputs)} inputs")
    else:
        raise TangentError(f"{what}: wrt is one input's name or position (a differential operator is taken with "
                           f"respect to a graph input), got {type(wrt).__name__} {wrt!r:.40}")
    t = graph.inputs[i].type
    if not t.dtype.is_float:
        raise TangentError(f"{what}: input {i} ({graph.inputs[i].name or 'unnamed'}) has type {t}; derivatives are "
                           "taken with respect to floating inputs only")
    return i


def _check_outputs(graph: Graph, outputs: Any, what: str) -> list[int]:
    if outputs is None:
        return [k for k, v in enumerate(graph.outputs) if v.type.dtype.is_float]
    if isinstance(outputs, (str, int, np.integer)):
        outputs = [outputs]
    positions = []
    for o in outputs:
        k = _output_position(o, graph, "outputs")
        if not graph.outputs[k].type.dtype.is_float:
            raise TangentError(f"{what}: output {k} has type {graph.outputs[k].type}; only floating outputs have "
                               "derivatives")
        positions.append(k)
    return positions


class _Builder:
    """Appends the (G, L) propagation to ``graph``; ``G`` values have a leading K axis and the rank of their
    primal plus one (size-1 axes where they do not vary), ``L`` values the primal's rank; ``None`` is zero."""

    def __init__(self, graph: Graph, reg: Registry, k: int, weights: np.ndarray | None) -> None:
        self.graph, self.reg, self.k, self.weights = graph, reg, k, weights
        self.lead = 0 if k == 1 else 1  # one direction: no K axis at all (the products stay plain 2-D GEMMs)
        self.deriv_cache: dict[tuple, Graph] = {}
        self.generic_cache: dict[tuple, tuple[Graph, Graph]] = {}
        self.weight_values: dict[tuple, Value] = {}

    # -- small graph helpers -------------------------------------------------------------------------
    def apply(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        return self.graph.apply(op, *inputs, **attrs)

    def add(self, a: Value | None, b: Value | None) -> Value | None:
        if a is None:
            return b
        if b is None:
            return a
        return self.apply("add", a, b)

    def align(self, g: Value, rank: int) -> Value:
        """``g`` (leading K axis, none for one direction) with size-1 axes inserted after K up to the rank of a
        tangent of a rank-``rank`` value."""
        lead = self.lead
        missing = rank + lead - g.type.rank
        if missing <= 0:
            return g
        return self.apply("expand_dims", g, axes=list(range(lead, lead + missing)))

    def align_l(self, v: Value, rank: int) -> Value:
        missing = rank - v.type.rank
        if missing <= 0:
            return v
        return self.apply("expand_dims", v, axes=list(range(missing)))

    def like(self, v: Value, value: Value, prefix: tuple[int, ...] = ()) -> Value:
        """``v`` broadcast to ``(*prefix, *value.shape)``, read off ``value`` (so the graph follows it to another
        batch): against ``zeros(prefix + 1s) + zeros_like(value)``, which compiling drops (read for its shape only)."""
        if prefix:
            zeros = self.graph.constant(np.zeros((*prefix, *([1] * value.type.rank)), value.type.dtype.np))
            value = self.apply("add", zeros, self.graph.zeros_like(value))
        return _broadcast_like(self.graph, self.reg, v, value)

    def flat_matmul(self, a: Value, b: Value) -> Value:
        """``a @ b`` for a stacked ``a`` ([..., m, k]) and a matrix ``b``, as one [prod(...) m, k] @ [k, n] product
        and reshapes (views): numpy's stacked matmul with a broadcast matrix runs far slower than one GEMM."""
        lead = list(a.type.shape[:-1])
        lead[min(self.lead, len(lead) - 1)] = -1  # the points' axis (after K): the sizes follow the batch
        flat = self.apply("reshape", a, shape=(-1, a.type.shape[-1]))
        return self.apply("reshape", self.apply("matmul", flat, b), shape=(*lead, b.type.shape[-1]))

    def ksum(self, g: Value) -> Value:
        """``sum_k w_k g[k]``."""
        if self.weights is not None and not self.lead:
            w = self.graph.constant(np.asarray(self.weights[0], g.type.dtype.np))
            return self.apply("mul", g, w)
        if not self.lead:
            return g
        if self.weights is not None:
            shape = (self.k, *([1] * (g.type.rank - 1)))
            key = (shape, g.type.dtype)
            known = self.weight_values.get(key)
            if known is None:
                known = self.weight_values[key] = self.graph.constant(self.weights.reshape(shape).astype(g.type.dtype.np))
            g = self.apply("mul", g, known)
        return self.apply("sum", g, axes=[0])

    def cross(self, ga: Value, gb: Value) -> Value:
        return self.ksum(self.apply("mul", ga, gb))

    # -- the walk --------------------------------------------------------------------------------------
    def run(self, chain: list[Node], state: dict[Value, tuple[Value | None, Value | None]]) -> None:
        for node in chain:
            if not any(v in state for v in node.inputs):
                continue
            schema = self.reg.schemas[node.op]
            active = [i for i, v in enumerate(node.inputs)
                      if v in state and i not in schema.nondiff_inputs and v.type.dtype.is_float]
            if not active:
                continue
            name = schema.name
            if name in ("add", "sub") and len(node.outputs) == 1:
                out = self._linear(node, active, negate_second=name == "sub", state=state)
            elif name == "neg":
                g0, l0 = state[node.inputs[0]]
                out = [(None if g0 is None else self.apply("neg", g0), None if l0 is None else self.apply("neg", l0))]
            elif name == "mul":
                out = self._product(node, active, state, "mul")
            elif name == "matmul" and all(v.type.rank >= 2 for v in node.inputs):
                out = self._product(node, active, state, "matmul")
            elif "elementwise" in schema.traits and len(node.outputs) == 1 and \
                    not any(isinstance(a, Graph) for a in node.attrs.values()):
                out = self._elementwise(node, active, state)
            else:
                out = self._generic(node, active, state)
            for y, pair in zip(node.outputs, out):
                if y.type.dtype.is_float and pair is not None and pair[0] is not None:
                    state[y] = pair

    def _linear(self, node: Node, active: list[int], negate_second: bool, state: dict) -> list:
        rank = node.outputs[0].type.rank
        g = l_ = None
        for i in active:
            gi, li = state[node.inputs[i]]
            gi = self.align(gi, rank)
            li = None if li is None else self.align_l(li, rank)
            if i == 1 and negate_second:
                gi = self.apply("neg", gi)
                li = None if li is None else self.apply("neg", li)
            g, l_ = self.add(g, gi), self.add(l_, li)
        return [(g, l_)]

    def _product(self, node: Node, active: list[int], state: dict, op: str) -> list:
        a, b = node.inputs
        rank = node.outputs[0].type.rank
        g = l_ = None
        aligned = {}
        for i in active:
            gi, li = state[node.inputs[i]]
            aligned[i] = self.align(gi, rank)
            axis = -1 if i == 0 else -2  # the contraction axis must be there in full
            if op == "matmul" and aligned[i].type.shape[axis] != node.inputs[i].type.shape[axis]:
                aligned[i] = self._stretch(aligned[i], node.inputs[i])
            other = node.inputs[1 - i]
            if op == "matmul" and i == 0 and other.type.rank == 2 and aligned[i].type.rank > 2:
                g = self.add(g, self.flat_matmul(aligned[i], other))
            else:
                first, second = (aligned[i], other) if i == 0 else (other, aligned[i])
                g = self.add(g, self.apply(op, first, second))
            if li is not None:
                li = self.align_l(li, node.inputs[i].type.rank if op == "matmul" else rank)
                if op == "matmul" and li.type.shape[axis] != node.inputs[i].type.shape[axis]:  # a row: as for G
                    li = self._stretch(li, node.inputs[i])
                if op == "matmul" and i == 0 and other.type.rank == 2 and li.type.rank > 2:
                    l_ = self.add(l_, self.flat_matmul(li, other))
                else:
                    first, second = (li, other) if i == 0 else (other, li)
                    l_ = self.add(l_, self.apply(op, first, second))
        if len(active) == 2:
            both = self.ksum(self.apply(op, aligned[0], aligned[1]))
            l_ = self.add(l_, self.apply("mul", both, self.graph.constant(np.asarray(2, both.type.dtype.np))))
        return [(g, l_)]

    def _stretch(self, v: Value, operand: Value) -> Value:
        """``v`` (a tangent of the matmul operand ``operand``) with its last two axes broadcast to the operand's."""
        full = (*v.type.shape[:-2], *operand.type.shape[-2:])
        if operand.type.rank == 2:
            return self.like(v, operand, full[:-2])
        return self.apply("broadcast_to", v, shape=full)  # a stacked operand: _holds_traced_batch marks the graph

    def _derivatives(self, node: Node, active: list[int]) -> Graph:
        """``(xs, y) -> [f_a for a in active] + [f_ab for a <= b in active]`` for an elementwise node ``y = f(xs)``,
        from the op's forward rule with unit tangents (one and two applications of ``build_jvp_graph``); where the
        rule reads ``f(xs)`` (tanh' = 1 - tanh^2) it reads ``y``, which the forward pass has computed."""
        key = (node.op, tuple(v.type for v in node.inputs), attrs_key(node.attrs) if node.attrs else (), tuple(active))
        cached = self.deriv_cache.get(key)
        if cached is not None:
            return cached
        single = Graph(f"{node.op}_node")
        xs = [single.add_input(v.type, f"x{i}") for i, v in enumerate(node.inputs)]
        (y,) = single.add_node(node.op, xs, dict(node.attrs), registry=self.reg).outputs
        single.mark_output(y)
        with _naming(self.graph, node):
            first = build_jvp_graph(single, active, registry=self.reg)
        # bind the tangents to ones, one input at a time: f_a = J e_a (the Jacobian of an elementwise op is diagonal)
        result = Graph(f"{node.op}_derivatives")
        rxs = [result.add_input(v.type, f"x{i}") for i, v in enumerate(node.inputs)]
        for a in active:
            unit = [self._unit(result, rxs[b]) if b == a else result.zeros_like(rxs[b]) for b in active]
            result.mark_output(inline_graph(result, first, [*rxs, *unit])[1])
        # second derivatives: d/dx_b of f_a, by forward mode over the graph of f_a
        firsts = Graph(f"{node.op}_first")
        fx = [firsts.add_input(v.type, f"x{i}") for i, v in enumerate(node.inputs)]
        for a in active:
            unit = [self._unit(firsts, fx[b]) if b == a else firsts.zeros_like(fx[b]) for b in active]
            firsts.mark_output(inline_graph(firsts, first, [*fx, *unit])[1])
        second = build_jvp_graph(firsts, active, registry=self.reg)
        for ia, a in enumerate(active):
            for b in active[ia:]:
                unit = [self._unit(result, rxs[c]) if c == b else result.zeros_like(rxs[c]) for c in active]
                outs = inline_graph(result, second, [*rxs, *unit])
                result.mark_output(outs[len(active) + ia])
        _reuse_primal(result, node, rxs, result.add_input(node.outputs[0].type, "y"))
        _tidy(result)
        keep_needed(result)
        self.deriv_cache[key] = result
        return result

    def _unit(self, graph: Graph, x: Value) -> Value:
        """Ones of ``x``'s type, read off ``x`` (a row of ones broadcast like it): the unit tangent of an
        elementwise op's derivatives: it follows ``x`` to another batch where a rule keeps it (atan's
        ``t / (1 + x^2)``)."""
        one = graph.constant(np.ones((1,) * x.type.rank, x.type.dtype.np))
        return one if one.type.shape == x.type.shape else _broadcast_like(graph, self.reg, one, x)

    def _elementwise(self, node: Node, active: list[int], state: dict) -> list:
        rank = node.outputs[0].type.rank
        d = inline_graph(self.graph, self._derivatives(node, active), [*node.inputs, node.outputs[0]])
        na = len(active)
        firsts, seconds = d[:na], d[na:]
        gs = {i: self.align(state[node.inputs[i]][0], rank) for i in active}
        g = l_ = None
        for fa, i in zip(firsts, active):
            g = self.add(g, self.apply("mul", fa, gs[i]))
            li = state[node.inputs[i]][1]
            if li is not None:
                l_ = self.add(l_, self.apply("mul", fa, self.align_l(li, rank)))
        k = 0
        for ia, a in enumerate(active):
            for b in active[ia:]:
                term = self.apply("mul", seconds[k], self.cross(gs[a], gs[b]))
                if a != b:
                    term = self.apply("mul", term, self.graph.constant(np.asarray(2, term.type.dtype.np)))
                l_ = self.add(l_, term)
                k += 1
        return [(g, l_)]

    def _generic(self, node: Node, active: list[int], state: dict) -> list:
        """``J v_k`` and ``H[v_k, v_k]`` per direction by forward-over-forward of the node; ``J L_x`` once."""
        key = (node.op, tuple(v.type for v in node.inputs), attrs_key(node.attrs) if node.attrs else (), tuple(active))
        cached = self.generic_cache.get(key)
        if cached is None:
            single = Graph(f"{node.op}_node")
            xs = [single.add_input(v.type, f"x{i}") for i, v in enumerate(node.inputs)]
            made_node = single.add_node(node.op, xs, dict(node.attrs), registry=self.reg)
            for y in made_node.outputs:
                single.mark_output(y)
            with _naming(self.graph, node):
                first = build_jvp_graph(single, active, registry=self.reg)   # (xs, dxs) -> (ys, dys)
                second = build_jvp_graph(first, active, registry=self.reg)   # (xs, dxs, txs) -> (ys, dys, tys, tdys)
            cached = self.generic_cache[key] = (first, second)
        first, second = cached
        m = len(node.outputs)
        graph = self.graph
        per_direction: list[list[Value]] = [[] for _ in range(m)]
        l_terms: list[list[Value]] = [[] for _ in range(m)]
        for k in range(self.k):
            vs = [self._direction(state[node.inputs[i]][0], k, node.inputs[i]) for i in active]
            outs = inline_graph(graph, second, [*node.inputs, *vs, *vs])
            for j in range(m):
                per_direction[j].append(outs[m + j])
                l_terms[j].append(outs[3 * m + j])
        ls = [state[node.inputs[i]][1] for i in active]
        jl = None
        if any(v is not None for v in ls):
            # an L may be a row (size-1 axes) where it is the same for every point, as x * x of the seed is
            filled = [self._full(v, node.inputs[i]) if v is not None else graph.zeros_like(node.inputs[i])
                      for v, i in zip(ls, active)]
            jl = inline_graph(graph, first, [*node.inputs, *filled])[m:]
        result: list[tuple[Value | None, Value | None] | None] = []
        for j, y in enumerate(node.outputs):
            if not y.type.dtype.is_float:
                result.append(None)
                continue
            g = self.apply("stack", *per_direction[j], axis=0) if self.lead else per_direction[j][0]
            hs = self.apply("stack", *l_terms[j], axis=0) if self.lead else l_terms[j][0]
            l_ = self.ksum(hs)
            if jl is not None:
                l_ = self.apply("add", l_, jl[j])
            result.append((g, l_))
        return result

    def _full(self, l_: Value, primal: Value) -> Value:
        """An ``L`` value (the primal's rank or less, size-1 axes where it does not vary) as ``primal``'s type."""
        l_ = self.align_l(l_, primal.type.rank)
        return l_ if l_.type.shape == primal.type.shape else self.like(l_, primal)

    def _direction(self, g: Value, k: int, primal: Value) -> Value:
        """Row ``k`` of ``g`` (leading K axis), broadcast to ``primal``'s type."""
        t = primal.type
        if self.lead:
            row = self.apply("slice", g, starts=[k], stops=[k + 1], axes=[0])
            row = self.apply("squeeze", row, axes=[0])
        else:
            row = g
        if row.type.rank < t.rank:
            row = self.align_l(row, t.rank)
        if row.type.shape != t.shape:
            row = self.like(row, primal)
        return row

    def materialise(self, y: Value, pair: tuple[Value | None, Value | None] | None) -> tuple[Value, Value]:
        """``(G, L)`` of output ``y`` in full: ``G`` of shape ``[K, *y.shape]``, ``L`` of ``y``'s; every size read
        off ``y``, so the graph follows it to another batch."""
        g0, l_ = pair if pair is not None else (None, None)
        if g0 is None:
            zero = self.graph.constant(np.zeros((self.k, *([1] * y.type.rank)), y.type.dtype.np))
            g = self.like(zero, y, (self.k,))
        else:
            g = self.align(g0, y.type.rank)
            if g.type.shape[self.lead:] != y.type.shape:
                g = self.like(g, y, (self.k,) if self.lead else ())
            if not self.lead:
                g = self.apply("expand_dims", g, axes=[0])
        return g, self.graph.zeros_like(y) if l_ is None else self._full(l_, y)


def _broadcast_like(graph: Graph, reg: Registry, v: Value, value: Value) -> Value:
    """``v`` broadcast to ``value``'s shape: ``broadcast_like_internal`` (compiled, ``broadcast_to`` of the shape
    then known) where the registry has it, so the graph follows ``value`` to another batch; else ``broadcast_to``
    of the traced shape (then ``_holds_traced_batch`` finds it and the graph is marked)."""
    if "broadcast_like_internal" in reg.schemas:
        return graph.apply("broadcast_like_internal", v, value)
    return graph.apply("broadcast_to", v, shape=value.type.shape)


def _holds_traced_batch(graph: Graph, first: int) -> bool:
    """Whether a node from ``first`` on may hold an input's traced leading size as a number: a constant with
    an axis of that size, or an attribute listing it (conservative: a size that merely equals it counts too; a
    shape with -1, flat_matmul's, stands for the points' axis there and lists the others' fixed sizes)."""
    sizes = {v.type.shape[0] for v in graph.inputs if v.type.rank}

    def holds(shape: Sequence[int]) -> bool:
        if any(d in sizes for d in shape if d > 1):
            return True
        return 1 in sizes and len(shape) > 1 and shape[0] == 1 and math.prod(shape) > 1  # traced at one point

    for node in graph.nodes[first:] if sizes else ():
        if node.op == "constant":
            if holds(node.attrs["value"].shape):
                return True
            continue
        for a in node.attrs.values() if node.attrs else ():
            if isinstance(a, (tuple, list)) and a and -1 not in a and \
                    all(isinstance(d, (int, np.integer)) for d in a) and holds(a):
                return True
    return False


@contextmanager
def _naming(graph: Graph, node: Node) -> Iterator[None]:
    """Report an op without a forward rule that the forward rule of ``node`` (built on a one-node graph, where
    the node is node 0) runs into at ``node``'s place in ``graph``: ``node 7 (loop) > node 0 (nograd)``."""
    try:
        yield
    except MissingGradientError as exc:
        where = f"node {graph.nodes.index(node)} ({node.op})"
        paths = [where + p[len(f"node 0 ({node.op})"):] if p.startswith(f"node 0 ({node.op})") else f"{where} > {p}"
                 for p in exc.paths]
        raise MissingGradientError(f"the forward rule of {where} needs {len(paths)} op(s) that have none:\n  "
                                   + "\n  ".join(paths), paths) from None


def _tidy(graph: Graph) -> None:
    """Drop the unit tangents' products (``mul(ones, v) -> v``, same type) and merge repeated nodes in the small
    graph of an op's derivatives: f' appears once from the first application of forward mode and again inside the
    second; the compile pipeline would merge them too, but only where its memory rule allows."""
    swap: dict[Value, Value] = {}
    seen: dict[tuple, Node] = {}
    for n in graph.nodes:
        if swap:
            n.inputs = tuple([swap.get(v, v) for v in n.inputs])
        if n.op == "mul" and len(n.outputs) == 1:
            for one, other in (n.inputs, n.inputs[::-1]):
                value = _ones_array(one)
                if value is not None and other.type == n.outputs[0].type and np.all(value == 1):
                    swap[n.outputs[0]] = other
                    break
            if n.outputs[0] in swap:
                continue
        if n.op == "constant":
            value = n.attrs["value"]
            if value.size > 16:
                continue
            key: tuple = (n.op, value.dtype.str, value.shape, value.tobytes())  # the scalars 1, 2, 0 of each rule
        else:
            key = (n.op, n.inputs, attrs_key(n.attrs) if n.attrs else ())
        twin = seen.get(key)
        if twin is None:
            seen[key] = n
        else:
            swap.update(zip(n.outputs, twin.outputs))
    graph.outputs = [swap.get(v, v) for v in graph.outputs]


def _ones_array(v: Value) -> np.ndarray | None:
    """The constant array of ``v``, seen through a ``broadcast_like_internal`` of a constant (a unit tangent)."""
    p = v.producer
    if p is not None and p.op == "broadcast_like_internal":
        v = p.inputs[0]
    return constant_array(v)


def _reuse_primal(result: Graph, node: Node, xs: list[Value], y: Value) -> None:
    """Point the uses of every copy of ``node`` over ``xs`` in ``result`` at ``y`` (the copies are then dead).

    Common-subexpression elimination would not merge such a copy with the forward node: it recomputes an
    elementwise value whose first computation is dead by then, trading work for peak memory, and a recomputed
    tanh costs about as much as a [256, 64] x [64, 64] product (numpy's float32 tanh is not vectorised here)."""
    key = attrs_key(node.attrs) if node.attrs else ()
    inputs = tuple(xs)
    swap: dict[Value, Value] = {}
    for n in result.nodes:
        if swap:
            n.inputs = tuple([swap.get(v, v) for v in n.inputs])
        if n.op == node.op and n.inputs == inputs and (attrs_key(n.attrs) if n.attrs else ()) == key:
            swap[n.outputs[0]] = y
    result.outputs = [swap.get(v, v) for v in result.outputs]


def _directions(x_type: Any, batch_dims: int, operator: Any) -> tuple[np.ndarray, np.ndarray | None]:
    event = x_type.shape[batch_dims:]
    d = int(np.prod(event, dtype=np.int64))
    if operator is None:
        return _at_least_one(np.eye(d).reshape(d, *event), None)
    if np.iscomplexobj(operator):
        raise TangentError(f"operator= is a real symmetric [d, d] matrix, got complex values "
                           f"({np.asarray(operator).dtype}); pass its real part if that is what you mean")
    try:
        a = np.asarray(operator, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TangentError(f"operator= is a symmetric [d, d] matrix of numbers, got {type(operator).__name__} ({exc})") \
            from None
    if a.shape != (d, d):
        raise TangentError(f"operator= must be a [{d}, {d}] matrix (d = the number of coordinates of one point, "
                           f"{list(event)}), got shape {list(a.shape)}")
    if not np.all(np.isfinite(a)):
        raise TangentError("operator= holds non-finite numbers")
    s, v = np.linalg.eigh((a + a.T) / 2)
    # eigenvalues below eigh's rounding (relative to the largest) are zero; a small A (1e-14 I) keeps its own scale
    keep = np.abs(s) > 1e-12 * float(np.max(np.abs(s), initial=0.0))
    s, v = s[keep], v[:, keep]
    dirs = (v * np.sqrt(np.abs(s))).T.reshape(-1, *event)
    weights = np.sign(s)
    return _at_least_one(dirs, None if np.all(weights > 0) else weights)


def _at_least_one(dirs: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``(dirs, weights)``, or one zero direction when there is none (``A = 0``, or a point with no coordinates):
    the operator is then zero, and the walk keeps its one-direction layout."""
    if dirs.shape[0]:
        return dirs, weights
    return np.zeros((1, *dirs.shape[1:])), None


def build_laplacian_graph(graph: Graph, wrt: int | str, outputs: Sequence[int | str] | None = None, *,
                          operator: Any = None, batch_dims: int = 0, registry: Registry | None = None) -> Graph:
    """``graph`` plus, for each selected output ``u``, its gradient along the directions and its Laplacian (or
    ``sum_ij A_ij d2u/dx_i dx_j`` for ``operator=A``) with respect to input ``wrt``, in one forward pass.

    ``batch_dims`` leading axes of ``x`` index independent points (collocation points: ``x`` of shape
    ``[N, d]`` with ``batch_dims=1``): the operator acts on the coordinates of each point, which is exact
    when ``u[n]`` depends on ``x[n]`` alone (the usual PINN setting; the cross-point terms are not formed).
    With ``batch_dims=0`` it acts on all of ``x``'s elements.

    Outputs: ``graph``'s outputs, then per selected output ``jac(<output>, <input>)`` of shape
    ``[K, *u.shape]`` (``K = d`` coordinate directions for the Laplacian: ``du/dx_k``; the scaled eigenvectors
    of ``A`` otherwise), then per selected output ``laplacian(<output>, <input>)`` (``op(...)`` with an
    operator) of ``u``'s shape. ``outputs`` defaults to every floating output.

    With ``batch_dims >= 1`` the graph, compiled with ``dynamic_shapes=True``, runs at any number of points (bit
    for bit a graph built there); with ``batch_dims=0`` it is refused at another shape.

    Raises ``TangentError`` when ``wrt`` is not a floating input or an output is not floating,
    ``MissingGradientError`` naming every op on the chain without a forward rule.
    """
    what = "build_laplacian_graph"
    i = _check_wrt(graph, wrt, what)
    selected = _check_outputs(graph, outputs, what)
    x_type = graph.inputs[i].type
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, (int, np.integer)) or \
            not 0 <= batch_dims < max(1, x_type.rank) + (x_type.rank == 0):
        raise TangentError(f"{what}: batch_dims is the number of leading axes of x that index points, from 0 to "
                           f"{max(0, x_type.rank - 1)} for x of type {x_type}, got {batch_dims!r}")
    dirs, weights = _directions(x_type, int(batch_dims), operator)
    if registry is not None and not isinstance(registry, Registry):
        raise GradientError(f"registry= takes a frame_core Registry, got {type(registry).__name__}")
    reg = registry if registry is not None else current_registry()
    with gc_paused(), use_registry(reg):
        result, holds = _laplacian(graph, i, selected, dirs, weights, int(batch_dims), reg, operator is None)
        made(len(result.nodes))
    # with batch_dims=0 the directions span every element of x, constants of its traced shape: at another batch
    # the graph is refused, never run wrongly (broadcast against one row, a batch of 1 gave the traced batch's
    # shapes). With points (batch_dims >= 1) they act on one point's coordinates and every size is read off a
    # value: the graph runs at any number of points, unless a node holds the traced size (an op's rule)
    if batch_dims == 0 or holds:
        mark_traced_sizes(result, f"build_laplacian_graph wrote its directions for x of type {x_type}; build the "
                                  "Laplacian graph again for the new shapes")
    return result


def _prepare(graph: Graph, reg: Registry, name: str) -> Graph:
    from ..compiler.passes.verify import quick_check

    if not quick_check(graph, reg)[0]:
        problems = check_graph(graph, reg, types=False)
        if problems:
            raise _not_the_packs_fault(problems)
    result = clone_graph(graph)
    result.name = name
    return result


def _check_chain(chain: list[Node], graph: Graph, reg: Registry, what: str) -> None:
    paths = without_forward_rule(chain, graph, reg)
    if paths:
        raise MissingGradientError(f"cannot build {what}: {len(paths)} op(s) on the chain have no forward rule:\n  "
                                   + "\n  ".join(paths), paths)


def _laplacian(graph: Graph, i: int, selected: list[int], dirs: np.ndarray, weights: np.ndarray | None,
               batch_dims: int, reg: Registry, plain: bool) -> tuple[Graph, bool]:
    result = _prepare(graph, reg, f"{graph.name}_laplacian")
    n_forward = len(result.nodes)
    x = result.inputs[i]
    k = dirs.shape[0]
    seed = dirs.reshape(k, *([1] * batch_dims), *dirs.shape[1:]).astype(x.type.dtype.np)
    targets = {result.outputs[j] for j in selected}
    chain = _chain(result, targets, {x}, reg)
    _check_chain(chain, result, reg, "the Laplacian")
    builder = _Builder(result, reg, k, weights)
    state: dict[Value, tuple[Value | None, Value | None]] = {x: (result.constant(seed if k > 1 else seed[0]), None)}
    builder.run(chain, state)
    label = x.name or f"input {i}"
    pairs = [builder.materialise(result.outputs[j], state.get(result.outputs[j])) for j in selected]
    for j, (g, _) in zip(selected, pairs):
        result.mark_output(g, f"jac({output_label(graph, j)}, {label})")
    for j, (_, l_) in zip(selected, pairs):
        result.mark_output(l_, f"{'laplacian' if plain else 'op'}({output_label(graph, j)}, {label})")
    _drop_unneeded_after(result, n_forward, reg)
    return result, _holds_traced_batch(result, n_forward)


#: the highest order of the generic rule (ops without a recurrence): it nests JVPs, so its graph grows
#: geometrically with the order
MAX_TAYLOR_ORDER = 8
#: the highest order build_taylor_graph takes when every op on the chain has a recurrence (about K^2 / 2
#: products per op)
MAX_SERIES_ORDER = 30


def build_taylor_graph(graph: Graph, wrt: int | str, order: int = 2, outputs: Sequence[int | str] | None = None, *,
                       registry: Registry | None = None) -> Graph:
    """``graph`` plus ``u', u'', ..., u^(order)`` of each selected output along the all-ones direction of input
    ``wrt``, in one forward pass (univariate Taylor mode).

    For ``x`` holding independent scalar points (shape ``[N]`` or ``[N, 1]``, ``u[n]`` depending on ``x[n]``
    alone) these are the pointwise derivatives ``d^j u/dx^j``. Outputs: ``graph``'s outputs, then for each
    selected output ``d1(<output>, <input>)``, ..., ``d<order>(...)`` (all orders of the first output, then of
    the next). Errors as ``build_laplacian_graph``; ``order`` is an int from 1 to ``MAX_SERIES_ORDER`` (30).
    Above order 2, ops with a recurrence (``SERIES_RULES``: arithmetic, ``matmul``, shape ops, ``exp``,
    ``tanh``, ``sigmoid``, ``sin``, ``cos``, ``log``, ``sqrt``, ...) cost about ``order^2 / 2`` products; any
    other op takes the generic rule, which nests JVPs and grows about 2.8x per order, so a chain holding one is
    capped at ``MAX_TAYLOR_ORDER`` (8), a ``TangentError`` naming the op rather than a build that never ends.
    Compiled with ``dynamic_shapes=True`` the graph runs at any leading size of ``x``, bit for bit a graph built
    there, unless an op's forward rule on the chain holds the traced sizes (then it is refused by name).
    """
    what = "build_taylor_graph"
    i = _check_wrt(graph, wrt, what)
    selected = _check_outputs(graph, outputs, what)
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise TangentError(f"{what}: order is the highest derivative wanted, an int >= 1, got {order!r}")
    if order > MAX_SERIES_ORDER:
        raise TangentError(f"{what}: order {order} is above {MAX_SERIES_ORDER}, the highest this pass builds; "
                           f"differentiate the order-{MAX_SERIES_ORDER} outputs again with build_jvp_graph if you "
                           "need more")
    if registry is not None and not isinstance(registry, Registry):
        raise GradientError(f"registry= takes a frame_core Registry, got {type(registry).__name__}")
    reg = registry if registry is not None else current_registry()
    with gc_paused(), use_registry(reg):
        result, holds = _taylor(graph, i, selected, int(order), reg)
        made(len(result.nodes))
    # the seed is one row of ones and every zero and broadcast reads the shape of a value: the graph runs at any
    # batch. Where a node holds the traced size still (a broadcast_to without broadcast_like_internal in the
    # registry; an op's rule that holds it marks the graph as it is inlined), at another batch it is refused
    if holds:
        mark_traced_sizes(result, f"build_taylor_graph wrote its directions for x of type {graph.inputs[i].type}; "
                                  "build the Taylor graph again for the new shapes")
    return result


def _taylor(graph: Graph, i: int, selected: list[int], order: int, reg: Registry) -> tuple[Graph, bool]:
    result = _prepare(graph, reg, f"{graph.name}_taylor")
    n_forward = len(result.nodes)
    x = result.inputs[i]
    targets = {result.outputs[j] for j in selected}
    chain = _chain(result, targets, {x}, reg)
    _check_chain(chain, result, reg, "the Taylor expansion")
    label = x.name or f"input {i}"
    coefficients: dict[Value, list[Value | None]] = {}
    if order <= 2:  # the one-pass rules with the single all-ones direction: (u', u'')
        builder = _Builder(result, reg, 1, None)
        state: dict[Value, tuple[Value | None, Value | None]] = {
            x: (result.constant(np.ones((1,) * x.type.rank, x.type.dtype.np)), None)}  # the same for every point
        builder.run(chain, state)
        for j in selected:
            y = result.outputs[j]
            coefficients[y] = [None if v is None else builder._full(v, y) for v in state.get(y) or (None, None)][:order]
    else:
        coefficients = _taylor_generic(result, chain, x, order, reg)
    for j in selected:
        y = result.outputs[j]
        series = coefficients.get(y) or []
        for q in range(order):
            known = series[q] if q < len(series) else None
            v = known if known is not None else result.zeros_like(y)
            result.mark_output(v, f"d{q + 1}({output_label(graph, j)}, {label})")
    _drop_unneeded_after(result, n_forward, reg)
    return result, _holds_traced_batch(result, n_forward)


def _taylor_generic(graph: Graph, chain: list[Node], x: Value, order: int, reg: Registry) -> dict:
    """Derivative series ``[y_1..y_order]`` of every value on the chain: ops with a recurrence (``_Series``) by
    it, every other op by the generic rule (``_Series.fallback``)."""
    return _Series(graph, reg, order).run(chain, x)


#: a Taylor series: the value, then its derivatives (None: known to be zero)
Series = list[Any]
#: ops linear in their one differentiable input: each coefficient is the op applied to the input's coefficient
_LINEAR = frozenset({"neg", "reshape", "slice", "transpose", "broadcast_to", "expand_dims", "squeeze", "sum", "mean"})
#: y' = g(y) x': the first coefficient of g from y (the later ones are the recurrences of _Series._unary)
_ODE = frozenset({"exp", "expm1", "tanh", "sigmoid"})
#: ops with a recurrence in _Series (everything else takes the generic rule)
SERIES_RULES = frozenset({"add", "sub", "mul", "div", "matmul", "square", "sin", "cos", "log", "log1p", "sqrt",
                          "concat", "stack", *_LINEAR, *_ODE})


class _Series:
    """Taylor coefficients ``u^(1..K)`` (derivatives along the all-ones direction) by per-op recurrences.

    For ``z = a * b`` (or ``a @ b``) Leibniz: ``z_k = sum_j C(k, j) a_j b_(k-j)``. For ``y = f(x)`` with
    ``y' = g x'`` (``exp``: ``g = y``; ``tanh``: ``g = 1 - y^2``; ``sigmoid``: ``g = y - y^2``; ``expm1``:
    ``g = y + 1``): ``y_k = sum_(j<k) C(k-1, j) g_j x_(k-j)``, the ``g_j`` by Leibniz on ``y``'s own
    coefficients. ``sin``/``cos`` carry each other's series; ``log``, ``log1p``, ``sqrt`` and ``div`` solve
    ``x y' = x'``, ``y^2 = x`` and ``z b = a`` for the newest coefficient. About ``K^2 / 2`` products per op,
    against the generic rule's nested JVPs (about 2.8x more nodes per order). Index 0 of a series is the value
    itself; ``None`` is a coefficient known to be zero.
    """

    def __init__(self, graph: Graph, reg: Registry, order: int, recurrences: bool = True) -> None:
        self.graph, self.reg, self.order, self.recurrences = graph, reg, order, recurrences
        self.binomial = [[math.comb(k, j) for j in range(k + 1)] for k in range(order + 1)]
        self.constants: dict[tuple, Value] = {}
        self.generic_rules: dict[tuple, list[tuple[Graph, list[tuple[int, int]]]]] = {}

    # -- None-aware arithmetic --------------------------------------------------------------------------
    def const(self, c: float, like: Value) -> Value:
        key = (c, like.type.dtype)
        known = self.constants.get(key)
        if known is None:
            known = self.constants[key] = self.graph.constant(np.asarray(c, like.type.dtype.np))
        return known

    def add(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else self.graph.apply("add", a, b)

    def scaled(self, c: int, v: Value) -> Value:
        return v if c == 1 else self.graph.apply("mul", v, self.const(c, v))

    def leibniz(self, op: str, a: Series, b: Series, k: int, low: int = 0, high: int | None = None) -> Any:
        """``sum_(j=low..high) C(k, j) op(a_j, b_(k-j))`` (``high`` defaults to ``k``)."""
        total = None
        for j in range(low, k + 1 if high is None else high + 1):
            if a[j] is not None and b[k - j] is not None:
                total = self.add(total, self.scaled(self.binomial[k][j], self.graph.apply(op, a[j], b[k - j])))
        return total

    def chain_rule(self, g: Series, x: Series, k: int) -> Any:
        """``(g x')^(k-1) = sum_(j<k) C(k-1, j) g_j x_(k-j)``."""
        total = None
        for j in range(k):
            if g[j] is not None and x[k - j] is not None:
                term = self.graph.apply("mul", g[j], x[k - j])
                total = self.add(total, self.scaled(self.binomial[k - 1][j], term))
        return total

    def solve(self, known: Any, rest: Any, denominator: Any) -> Any:
        """``(known - rest) / denominator``, either term possibly zero."""
        if rest is None:
            top = known
        elif known is None:
            top = self.graph.apply("neg", rest)
        else:
            top = self.graph.apply("sub", known, rest)
        return None if top is None else self.graph.apply("div", top, denominator)

    def fit(self, v: Value | None, y: Value) -> Value | None:
        if v is None or v.type.shape == y.type.shape:
            return v
        return _broadcast_like(self.graph, self.reg, v, y)

    # -- the walk --------------------------------------------------------------------------------------
    def run(self, chain: list[Node], x: Value) -> dict:
        K = self.order
        # the seed: a row of ones broadcast to x's shape (read off x: it follows x to another batch)
        seed = self.graph.constant(np.ones((1,) * x.type.rank, x.type.dtype.np))
        if seed.type.shape != x.type.shape:
            seed = _broadcast_like(self.graph, self.reg, seed, x)
        series: dict[Value, Series] = {x: [x, seed, *([None] * (K - 1))]}
        for node in chain:
            schema = self.reg.schemas[node.op]
            active = [i for i, v in enumerate(node.inputs)
                      if v in series and i not in schema.nondiff_inputs and v.type.dtype.is_float]
            if not active:
                continue
            ins = [series.get(v) or [v, *([None] * K)] for v in node.inputs]
            outs = (self.rule(node, active, ins)
                    if self.recurrences and node.op in SERIES_RULES and len(node.outputs) == 1 else None)
            if outs is None:
                outs = self.fallback(node, active, ins)
            for y, s in zip(node.outputs, outs):
                if y.type.dtype.is_float and any(c is not None for c in s):
                    series[y] = [y, *(self.fit(c, y) for c in s)]
        return {v: s[1:] for v, s in series.items()}

    def rule(self, node: Node, active: list[int], ins: list[Series]) -> list | None:
        """``[[y_1..y_K]]`` for a node with a recurrence, or ``None`` to take the generic rule."""
        op, K, graph = node.op, self.order, self.graph
        (y,) = node.outputs
        ks = range(1, K + 1)
        if op in ("add", "sub"):
            sign = [1, -1 if op == "sub" else 1]
            out = []
            for k in ks:
                total = None
                for i in active:
                    c = ins[i][k]
                    if c is not None:
                        total = self.add(total, graph.apply("neg", c) if sign[i] < 0 else c)
                out.append(total)
            return [out]
        if op in _LINEAR:
            if active != [0]:
                return None
            return [[None if ins[0][k] is None else
                     graph.apply(op, ins[0][k], *node.inputs[1:], **dict(node.attrs)) for k in ks]]
        if op in ("concat", "stack"):
            out = []
            for k in ks:
                if all(ins[i][k] is None for i in active):
                    out.append(None)
                    continue
                parts = [ins[i][k] if i in active and ins[i][k] is not None else graph.zeros_like(v)
                         for i, v in enumerate(node.inputs)]
                out.append(graph.apply(op, *parts, **dict(node.attrs)))
            return [out]
        if op in ("mul", "matmul", "square"):
            a, b = (ins[0], ins[0]) if op == "square" else (ins[0], ins[1])
            return [[self.leibniz("mul" if op == "square" else op, a, b, k) for k in ks]]
        if op == "div":
            a, b = ins
            z: Series = [y]
            for k in ks:
                rest = self.leibniz("mul", z, b, k, high=k - 1)
                z.append(self.solve(a[k], rest, b[0]))
            return [z[1:]]
        if node.attrs or active != [0] or len(node.inputs) != 1:
            return None
        x = ins[0]
        if op in _ODE:
            out_y: Series = [y]
            g: Series = []
            for k in ks:
                j = k - 1  # g_j from y_0..y_j
                if op in ("exp", "expm1"):
                    g.append(graph.apply("add", y, self.const(1, y)) if op == "expm1" and j == 0 else out_y[j])
                else:
                    square = self.leibniz("mul", out_y, out_y, j)
                    if op == "tanh":
                        g.append(graph.apply("sub", self.const(1, y), square) if j == 0 else
                                 None if square is None else graph.apply("neg", square))
                    else:  # sigmoid
                        g.append(None if out_y[j] is None and square is None else
                                 out_y[j] if square is None else graph.apply("neg", square) if out_y[j] is None
                                 else graph.apply("sub", out_y[j], square))
                out_y.append(self.chain_rule(g, x, k))
            return [out_y[1:]]
        if op in ("sin", "cos"):
            other = graph.apply("cos" if op == "sin" else "sin", x[0])
            sines: Series = [y] if op == "sin" else [other]
            cosines: Series = [other] if op == "sin" else [y]
            for k in ks:
                s_k, c_k = self.chain_rule(cosines, x, k), self.chain_rule(sines, x, k)
                sines.append(s_k)
                cosines.append(None if c_k is None else graph.apply("neg", c_k))
            return [(sines if op == "sin" else cosines)[1:]]
        # x y' = x' (log, log1p with 1 + x), y^2 = x (sqrt): solve for the newest coefficient
        denominator = (x[0] if op == "log" else graph.apply("add", x[0], self.const(1, x[0])) if op == "log1p"
                       else graph.apply("mul", y, self.const(2, y)))
        out_y = [y]
        for k in ks:
            if op == "sqrt":
                rest = self.leibniz("mul", out_y, out_y, k, low=1, high=k - 1)
            else:
                rest = None
                for j in range(1, k):
                    if x[j] is not None and out_y[k - j] is not None:
                        rest = self.add(rest, self.scaled(self.binomial[k - 1][j],
                                                          graph.apply("mul", x[j], out_y[k - j])))
            out_y.append(self.solve(x[k], rest, denominator))
        return [out_y[1:]]

    def fallback(self, node: Node, active: list[int], ins: list[Series]) -> list:
        """The generic rule: ``y_(j+1)`` is the JVP of the order-``j`` rule along ``(x_1, .., x_(j+1))`` (rules
        built once per op, types and attributes; the graph grows about 2.8x per order)."""
        graph, reg, order = self.graph, self.reg, self.order
        if order > MAX_TAYLOR_ORDER:
            raise TangentError(
                f"build_taylor_graph: order {order} is above {MAX_TAYLOR_ORDER} and node {graph.nodes.index(node)} "
                f"({node.op}) has no Taylor recurrence: its generic rule nests JVPs, so the graph grows about 2.8x "
                f"per order (a 3-layer MLP of such ops: about 6,000 nodes at order 7, 48,000 at order 9). Ask for "
                f"order {MAX_TAYLOR_ORDER} or less, or differentiate those outputs again with build_jvp_graph")
        key = (node.op, tuple(v.type for v in node.inputs), attrs_key(node.attrs) if node.attrs else (), tuple(active))
        levels = self.generic_rules.get(key)
        m = len(node.outputs)
        if levels is None:
            single = Graph(f"{node.op}_node")
            xs = [single.add_input(v.type, f"x{i}") for i, v in enumerate(node.inputs)]
            for y in single.add_node(node.op, xs, dict(node.attrs), registry=reg).outputs:
                single.mark_output(y)
            levels = []
            current = single
            extras: list[tuple[int, int]] = []  # (active input, q): the extra inputs of `current`, each x_q
            # level j: inputs (xs, x_q per extra) -> y_(j+1) = the JVP of level j-1 along the next coefficients
            # (the tangent of x is x_1, of x_q is x_(q+1))
            for _ in range(order):
                wrt = [*active, *range(len(node.inputs), len(current.inputs))]
                with _naming(graph, node):
                    step = build_jvp_graph(current, wrt, registry=reg)
                step.outputs = step.outputs[len(step.outputs) - m:]   # only the new coefficient
                step._output_names = {}
                _drop_unneeded_after(step, 0, reg)
                extras = [*extras, *((i, 1) for i in active), *((i, q + 1) for i, q in extras)]
                levels.append((step, list(extras)))
                current = step
            self.generic_rules[key] = levels
        zeros = {i: graph.zeros_like(node.inputs[i]) for i in active}
        out_series: list[Series] = [[] for _ in range(m)]
        for step, extras in levels:
            coeffs = []
            for i, q in extras:
                c = ins[i][q] if q <= order else None
                coeffs.append(c if c is not None else zeros[i])
            outs = inline_graph(graph, step, [*node.inputs, *coeffs])
            for q in range(m):
                out_series[q].append(outs[q])
        return out_series
