"""The reverse walk's micro-graph recipes (``build_backward_graph``, ``autodiff.backward``): a GradientFn's
micro-graph read once into steps and inlined many times without a value map, pruned to the gradients a node
wants; and ``accumulate_internal`` appended with its type inferred once per pair of input types."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

from ..errors import IRError
from ..ir.graph import INSPECT_LIMIT, Graph, Node, Value, is_zero_constant
from ..ops_registry.registry import Registry

_type = attrgetter("type")


class _Variant:
    """A signature's recipe pruned to some of its gradients: ``assign`` lists ``(input position, its result's
    position, whether it may be a zero)``; ``reads_seeds`` says whether it reads every cotangent it is given
    (else an unread one may be left for ``_drop_unneeded``), ``constants`` which of the recipe's constant steps
    it reads."""

    __slots__ = ("recipe", "assign", "reads_seeds", "constants")

    def __init__(self, recipe: "_Recipe | None", assign: tuple, reads_seeds: bool, constants: frozenset) -> None:
        self.recipe = recipe
        self.assign = assign
        self.reads_seeds = reads_seeds
        self.constants = constants


def _known_zero(v: Value) -> bool:
    """Whether the walk's zero test holds for every inlining of ``v``, a micro-graph's output: a zero constant,
    or a ``zeros_like_internal`` small enough to compile to one (the copies have its attributes and type)."""
    p = v.producer
    return p is not None and (p.op == "constant" and is_zero_constant(v) or p.op == "zeros_like_internal"
                              and v.type.size <= INSPECT_LIMIT)


#: ops whose output may be zeros the walk skips (a zero constant; zeros read off a value's type)
_ZERO_OPS = frozenset({"constant", "zeros_like_internal"})


class _Accumulator:
    """``accumulate_internal(a, b)`` appended to ``graph``: the op resolved once, its type inferred once per
    pair of input types (``append_node`` resolves and looks the signature up at every call)."""

    __slots__ = ("graph", "key", "schema", "types")

    def __init__(self, graph: Graph, reg: Registry) -> None:
        self.graph = graph
        self.key, self.schema = reg.resolve("accumulate_internal")
        self.types: dict[tuple, Any] = {}

    def __call__(self, a: Value, b: Value) -> Value:
        pair = (a.type, b.type)
        t = self.types.get(pair)
        if t is None:
            schema = self.schema
            (t,) = schema.infer(pair, schema.normalize_attrs({}))
            self.types[pair] = t
        node = Node(self.key, (a, b), {})
        value = Value(t, node, 0)
        node.outputs = (value,)
        self.graph.nodes.append(node)
        return value


class _Recipe:
    """A micro-graph read once into steps, to inline it many times quickly: what ``inline_graph`` does
    (fresh nodes and values, a fresh attribute dict per node, value names kept), without a value map.
    ``of`` gives ``None`` for a micro-graph with sub-graph attributes (``inline_graph`` clones those).
    ``pruned`` gives the recipe of some of its results: the steps they need, and every constant.

    Its constants are made once, at the first inlining, and read by every later one (they come after it):
    a GradientFn's ``1 - y**2`` inlined at a thousand tanh nodes reads one constant ``1``, where copies
    would be a thousand nodes for every compile stage to walk until CSE merged them. Pruned recipes share
    them (``made``, by the constant's step in the whole recipe)."""

    __slots__ = ("in_types", "raw", "result_slots", "steps", "results", "made")

    def __init__(self, in_types: list[Any], raw: list[tuple], results: list[int],
                 made: dict[int, Value] | None = None) -> None:
        self.in_types = in_types
        self.raw = raw  # (op, its input slots, attrs, [(type, name), ...], its step in the whole recipe)
        self.result_slots = results
        # (op, its inputs from the value list, or for a constant its step in the whole recipe (an int), attrs,
        # type, name, [(type, name), ...] for several outputs else None)
        self.steps = [(op, key if op == "constant" and not slots else _taker(slots), attrs, *outs[0],
                       None if len(outs) == 1 else outs) for op, slots, attrs, outs, key in raw]
        self.results = _taker(tuple(results))
        self.made: dict[int, Value] = {} if made is None else made  # step -> the constant it made (one graph)

    @staticmethod
    def of(micro: Graph) -> "_Recipe | None":
        slot: dict[Value, int] = {v: i for i, v in enumerate(micro.inputs)}
        steps = []
        for k, node in enumerate(micro.nodes):
            if any(type(a) is Graph for a in node.attrs.values()):
                return None
            steps.append((node.op, tuple([slot[v] for v in node.inputs]), node.attrs,
                          tuple([(v.type, v.name) for v in node.outputs]), k))
            for v in node.outputs:
                slot[v] = len(slot)
        return _Recipe([v.type for v in micro.inputs], steps, [slot[v] for v in micro.outputs])

    def pruned(self, kept: list[int], n_seeds: int) -> tuple["_Recipe", bool, frozenset]:
        """The recipe of results ``kept`` only (its results in that order), whether it reads each of the last
        ``n_seeds`` inputs (the cotangents), and the constant steps it reads (by step in the whole recipe)."""
        n_in = len(self.in_types)
        first = []  # each step's first output slot
        slot = n_in
        for step in self.raw:
            first.append(slot)
            slot += len(step[3])
        need = {self.result_slots[i] for i in kept}
        keep = []
        constants = set()
        for (op, slots, _, outs, key), s in zip(reversed(self.raw), reversed(first)):
            if op == "constant" and not slots:  # kept: made at the first inlining, whatever it wants
                keep.append(True)
                if s in need:
                    constants.add(key)
            elif not need.isdisjoint(range(s, s + len(outs))):
                keep.append(True)
                need.update(slots)
            else:
                keep.append(False)
        keep.reverse()
        renumber = list(range(n_in))  # a slot of the whole recipe -> its slot in the pruned one
        raw = []
        for step, kept_step in zip(self.raw, keep):
            n_out = len(step[3])
            if kept_step:
                raw.append((step[0], tuple([renumber[i] for i in step[1]]), *step[2:]))
                renumber.extend(range(n_in, n_in + n_out))
                n_in += n_out
            else:
                renumber.extend([-1] * n_out)  # (never read: pruned)
        recipe = _Recipe(self.in_types, raw, [renumber[self.result_slots[i]] for i in kept], self.made)
        n_in = len(self.in_types)
        return recipe, need.issuperset(range(n_in - n_seeds, n_in)), frozenset(constants)

    def inline(self, graph: Graph, arguments: list[Value]) -> Sequence[Value]:
        """``inline_graph(graph, micro, arguments)`` (a tuple of the results)."""
        if list(map(_type, arguments)) != self.in_types:
            raise IRError(f"cannot inline a gradient micro-graph: its inputs have types "
                          f"[{', '.join(map(str, self.in_types))}], the arguments [{', '.join(str(v.type) for v in arguments)}]")
        return self.fill(graph, list(arguments))

    def fill(self, graph: Graph, arguments: list[Value]) -> Sequence[Value]:
        """``inline`` for arguments the caller knows to be of the recipe's input types; the list grows."""
        values = arguments
        add = values.append
        append = graph.nodes.append
        made = self.made
        for op, take, attrs, t, name, several in self.steps:
            if take.__class__ is int:  # a constant: made at the first inlining, read by the later ones
                value = made.get(take)
                if value is None:
                    node = Node(op, (), dict(attrs))
                    node.outputs = (Value(t, node, 0, name),)
                    append(node)
                    value = made[take] = node.outputs[0]
                add(value)
                continue
            node = Node(op, take(values), dict(attrs) if attrs else {})
            if several is None:
                value = Value(t, node, 0, name)
                node.outputs = (value,)
                add(value)
            else:
                node.outputs = tuple([Value(t, node, i, name) for i, (t, name) in enumerate(several)])
                values.extend(node.outputs)
            append(node)
        return self.results(values)


def _taker(slots: tuple[int, ...]) -> Any:
    """``values -> tuple(values[s] for s in slots)`` (in C for two slots or more)."""
    if len(slots) > 1:
        return itemgetter(*slots)
    if slots:
        return lambda values, s=slots[0]: (values[s],)
    return lambda values: ()
