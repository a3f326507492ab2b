"""The graph IR: ``Value``, ``Node`` and ``Graph``, plus ``clone_graph``.

A graph holds ordered inputs, nodes in a topological order, and ordered
outputs. Every ``Value`` is an SSA value: a graph input, or output ``index``
of exactly one ``Node``. Op identity is a string looked up in the registry.

Attributes are plain Python values of these kinds: int, float, bool, str,
tuples of those, ``DType``, shapes (tuples of ints), tensor constants
(``numpy.ndarray``) and sub-graphs (``Graph``, for control-flow ops).

Graphs are edited only through their methods (``add_input``, ``add_node``,
``apply``, ``mark_output``); compile passes never edit a graph in place, they
build a new one. ``clone_graph`` is the one copying routine every caller uses
(ARCH-061's generation step 1, the pipeline, the inliner).
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._args import is_traced_tensor, refuse_unordered
from ..errors import IRError
from .dtypes import as_dtype
from .schemas import SchemaSource, default_source
from .tensors import shared_zeros, zeros as zero_array
from .types import TensorType, as_type

__all__ = ["Value", "Node", "Graph", "MAX_NESTING", "clone_graph", "inline_graph", "constant_array", "is_zero_constant",
           "mark_traced_sizes", "traced_sizes", "TypeTie", "tie_types", "type_ties", "tie_label", "input_roles",
           "carry_type_ties"]

#: Constants above this many elements are not inspected for their values (zero tests, folding rules).
INSPECT_LIMIT = 1 << 16


class Value:
    """One SSA value: a graph input (``producer is None``) or output ``index`` of ``producer``."""

    __slots__ = ("type", "producer", "index", "name")

    def __init__(self, type: TensorType, producer: "Node | None" = None, index: int = -1, name: str | None = None) -> None:
        self.type = type
        self.producer = producer
        self.index = index
        self.name = name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self):  # noqa: ANN201 - DType, kept untyped to avoid an import cycle in annotations
        return self.type.dtype

    def __repr__(self) -> str:
        where = "input" if self.producer is None else f"{self.producer.op}#{self.index}"
        label = f"%{self.name}" if self.name else f"@{id(self):x}"
        return f"<Value {label}: {self.type} ({where})>"


class Node:
    """One operation: ``outputs = op(*inputs; attrs)``."""

    __slots__ = ("op", "inputs", "outputs", "attrs")

    def __init__(self, op: str, inputs: tuple[Value, ...], attrs: dict[str, Any]) -> None:
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.outputs: tuple[Value, ...] = ()

    def __repr__(self) -> str:
        return f"<Node {self.op} ({len(self.inputs)} in, {len(self.outputs)} out)>"


class Graph:
    """Ordered inputs, nodes in topological order, ordered outputs.

    The same value may be marked as an output more than once. An output
    position may carry a name (``mark_output(v, name="loss")``): names belong
    to positions, not values, so a value marked twice can have two names, and
    ``output_index(name)`` finds a position without counting.
    """

    __slots__ = ("name", "inputs", "nodes", "outputs", "_key", "_output_names", "__weakref__")

    def __init__(self, name: str = "graph") -> None:
        if not isinstance(name, str):
            raise IRError(f"a graph's name is a string, got {type(name).__name__}")
        self.name = name
        self._output_names: dict[int, str] = {}  # output position -> its name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._key: tuple[Any, Any] | None = None  # (snapshot of the lists, structural key): see ir.keys

    # -- building --------------------------------------------------------
    def add_input(self, type: TensorType | str, name: str | None = None) -> Value:
        """Append a graph input of ``type`` and return its value."""
        if name is not None and not isinstance(name, str):
            raise IRError(f"an input's name is a string, got {_typename(name)}")
        value = Value(as_type(type), None, -1, name)
        self.inputs.append(value)
        return value

    def add_node(
        self,
        op: str,
        inputs: Sequence[Value] = (),
        attrs: Mapping[str, Any] | None = None,
        output_types: Sequence[TensorType | str] | None = None,
        *,
        registry: SchemaSource | None = None,
    ) -> Node:
        """Append ``op(*inputs; attrs)`` and return the node.

        With ``output_types`` omitted, ``op`` (a short or qualified name) is
        resolved in the registry and the node records the op's canonical key;
        the op's schema normalises the
        attributes (filling defaults) and infers the output types; errors name
        the op and say what was expected (``ShapeError``, ``AttributeSpecError``,
        ``UnknownOpError``). The schema comes from ``registry`` or, without one,
        from the default source (the current registry: see ``ir.schemas``).
        With ``output_types`` given, the node is recorded as is (this is how
        loaders build graphs that ``verify`` then checks).
        """
        if inputs.__class__ is not tuple and inputs.__class__ is not list:  # (the usual case needs no checks)
            if type(inputs) is Value or not isinstance(inputs, Iterable) or is_traced_tensor(inputs):
                raise IRError(f"add_node({op!r}, inputs) takes a list of Values, got {type(inputs).__name__}"
                              + ("; for one input write [value]" if type(inputs) is Value else ""))
            refuse_unordered(inputs, f"add_node({op!r}, inputs)", IRError, "[x, y]")
        if attrs is not None and attrs.__class__ is not dict and not isinstance(attrs, Mapping):
            raise IRError(f"add_node({op!r}, ..., attrs) takes a dict of attributes, got {type(attrs).__name__}")
        if output_types is not None:
            if isinstance(output_types, (str, TensorType)):
                raise IRError(f"add_node({op!r}, ..., output_types) takes a list of types; for one output write "
                              f"[{str(output_types)!r}]")
            if not isinstance(output_types, Iterable):
                raise IRError(f"add_node({op!r}, ..., output_types) takes a list of types such as ['f32[3]'], got "
                              f"{type(output_types).__name__}")
            refuse_unordered(output_types, f"add_node({op!r}, ..., output_types)", IRError, "['f32[3]']")
        inputs = tuple(inputs)
        for position, value in enumerate(inputs):
            if type(value) is not Value:
                raise IRError(
                    f"input {position} of {op!r} must be a Value of this graph, got {type(value).__name__}; "
                    "wrap constants with graph.constant(...)"
                )
        if output_types is None:
            source = registry if registry is not None else default_source()
            op, schema = source.resolve(op)  # the canonical key: `ops_basic::relu` and `relu` build the same node
            in_types = tuple([v.type for v in inputs])
            infer_node = getattr(schema, "infer_node", None)  # (an OpSchema's: both steps as one question)
            if infer_node is not None:
                norm_attrs, types = infer_node(in_types, attrs or {})
            else:
                norm_attrs = schema.normalize_attrs(attrs or {})
                types = schema.infer(in_types, norm_attrs)
        else:
            norm_attrs = dict(attrs) if attrs else {}
            types = [as_type(t) for t in output_types]
        node = Node(op, inputs, norm_attrs)
        node.outputs = tuple(Value(t, node, i) for i, t in enumerate(types))
        self.nodes.append(node)
        return node

    def apply(self, op: str, *inputs: Value, **attrs: Any) -> Any:
        """Append ``op`` with type inference; return its single output or a tuple of outputs."""
        node = self.add_node(op, inputs, attrs)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def constant(self, value: Any, dtype: Any = None) -> Value:
        """Append a ``constant`` node holding ``value`` (array or scalar) and return its value.

        The graph keeps a read-only copy (unless ``value`` is already immutable):
        changing the caller's array later does not change the graph.
        """
        array = np.asarray(value, dtype=None if dtype is None else as_dtype(dtype).np)
        # qualified: inside a pack's scope, a pack op that happens to be called `constant` must not be picked
        return self.add_node("core::constant", (), {"value": array}).outputs[0]

    def zeros(self, type: TensorType | str) -> Value:
        """Append a zero constant of ``type`` (stored as a one-element broadcast) and return its value."""
        return self.constant(zero_array(as_type(type)))

    def zeros_like(self, value: Value) -> Value:
        """Append ``zeros_like_internal(value)``, zeros of ``value``'s type that follow it when the graph is
        specialised for other shapes (``zeros`` keeps the shape it was given); compiled, it is ``zeros``."""
        return self.add_node("core::zeros_like_internal", (value,)).outputs[0]

    def mark_output(self, value: Value, name: str | None = None) -> int:
        """Mark ``value`` as the next output (named ``name`` if given); return its output index."""
        if type(value) is not Value:
            raise IRError(f"mark_output needs a Value, got {type(value).__name__}")
        self.outputs.append(value)
        position = len(self.outputs) - 1
        if name is not None:
            self.name_output(position, name)
        return position

    # -- output names -----------------------------------------------------
    @property
    def output_names(self) -> list[str | None]:
        """One entry per output: its name, or ``None``."""
        return [self._output_names.get(i) for i in range(len(self.outputs))]

    def name_output(self, position: int, name: str | None) -> None:
        """Name output ``position`` (``None`` removes the name)."""
        if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position < len(self.outputs):
            raise IRError(f"output position {position!r} is out of range: the graph has {len(self.outputs)} outputs")
        if name is None:
            self._output_names.pop(position, None)
        elif not isinstance(name, str) or not name:
            raise IRError(f"an output's name is a non-empty string, got {name!r}")
        else:
            self._output_names[position] = name

    def output_index(self, name: str) -> int:
        """The position of the output named ``name``; ``IRError`` listing the names when none or several have it."""
        if not isinstance(name, str):
            raise IRError(f"output_index takes an output's name (a string such as 'loss'), got {type(name).__name__}; "
                          "positions are ints already")
        found = [i for i, n in self._output_names.items() if n == name and i < len(self.outputs)]
        if len(found) == 1:
            return found[0]
        named = ", ".join(f"{i}: {n!r}" for i, n in sorted(self._output_names.items())) or "none"
        why = "several outputs are" if found else "no output is"
        raise IRError(f"{why} named {name!r} in graph {self.name!r} (named outputs: {named})")

    # -- reading ---------------------------------------------------------
    @property
    def input_types(self) -> list[TensorType]:
        return [v.type for v in self.inputs]

    @property
    def output_types(self) -> list[TensorType]:
        return [v.type for v in self.outputs]

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"

    def __str__(self) -> str:
        from .printer import format_graph

        return format_graph(self)

    def to_json(self, **kwargs: Any) -> str:
        from .serialize import dumps

        return dumps(self, **kwargs)

    @staticmethod
    def from_json(text: str) -> "Graph":
        from .serialize import loads

        return loads(text)

    def to_dot(self) -> str:
        from .dot import to_dot

        return to_dot(self)


def _typename(value: Any) -> str:
    return value.__class__.__name__


def constant_array(v: Value) -> np.ndarray | None:
    """The array of ``v`` if a ``constant`` node produces it, else ``None``."""
    p = v.producer
    return p.attrs["value"] if p is not None and p.op == "constant" else None


def is_zero_constant(v: Value) -> bool:
    """Whether ``v`` is a constant of zeros (either sign) no larger than ``INSPECT_LIMIT`` elements."""
    array = constant_array(v)
    return array is not None and array.size <= INSPECT_LIMIT and (shared_zeros(array) is not None or not array.any())


#: How deep sub-graphs may nest (a body inside a body ... counts one per level): every recursive walk (compile,
#: run, differentiate, print, save) stays well inside Python's recursion limit up to here. Past it, loading
#: refuses a document and ``verify`` a graph (rule V8), up front, instead of a RecursionError at run time.
MAX_NESTING = 64

# the graphs a recursive walk (clone, key, print, save, DOT) is inside in this thread, outermost first
_walking: contextvars.ContextVar[tuple[Graph, ...]] = contextvars.ContextVar("frame_graph_walk", default=())


def nesting_message(depth: int) -> str:
    """Why a graph with sub-graphs nested ``depth`` deep is refused."""
    return (f"sub-graphs are nested {depth} deep; frame runs bodies nested at most {MAX_NESTING} deep (each level "
            "costs stack frames in every walk of the graph): flatten the nesting, e.g. merge nested branches into one")


class walking:
    """``with walking(graph):`` around a walk that descends into sub-graph attributes: entering a graph the
    walk is already inside (a hand-built body holding its own graph, or one enclosing it) is an ``IRError``
    saying so, not a ``RecursionError`` (``verify`` reports the same cycle as rule V8)."""

    __slots__ = ("graph", "token")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __enter__(self) -> None:
        enclosing = _walking.get()
        graph = self.graph
        if any(graph is g for g in enclosing):
            raise IRError(f"graph {graph.name!r} holds itself through a sub-graph attribute: a body cannot "
                          "contain itself; give it a graph of its own")
        if len(enclosing) > MAX_NESTING:
            raise IRError(f"graph {graph.name!r}: {nesting_message(len(enclosing))}")
        self.token = _walking.set((*enclosing, graph))

    def __exit__(self, *exc: object) -> None:
        _walking.reset(self.token)


def _copy_nodes(nodes: Iterable[Node], value_map: dict[Value, Value], target: Graph) -> None:
    """Append copies of ``nodes`` to ``target``, reading inputs through ``value_map`` and extending it.

    The single node-copying routine behind ``clone_graph`` and ``inline_graph``.
    Sub-graph attributes are cloned too, so a copy never shares mutable state.
    """
    append = target.nodes.append
    read = value_map.__getitem__
    for node in nodes:
        try:
            inputs = tuple(map(read, node.inputs))
        except KeyError:
            raise IRError(f"node {node.op!r} reads a value that is not defined before it; run verify() for details") from None
        # A fresh dict per copy (editing a clone's attributes never edits the source); values are
        # shared (tensors are immutable by convention) except sub-graphs, which are cloned.
        attrs = node.attrs
        attrs = {k: clone_graph(a) if type(a) is Graph else a for k, a in attrs.items()} if attrs else {}
        copy = Node(node.op, inputs, attrs)
        outs = node.outputs
        if len(outs) == 1:  # (most nodes)
            value = outs[0]
            new = value_map[value] = Value(value.type, copy, value.index, value.name)
            copy.outputs = (new,)
        else:
            copy.outputs = tuple([Value(v.type, copy, v.index, v.name) for v in outs])
            for value, new in zip(outs, copy.outputs):
                value_map[value] = new
        append(copy)


def clone_graph(graph: Graph, value_map: dict[Value, Value] | None = None) -> Graph:
    """Return a structurally identical copy of ``graph`` with fresh values and nodes.

    If ``value_map`` is given it is filled with ``source value -> clone value``
    for every input and node output (ARCH-061, generation step 1). Each node
    gets its own attribute dict; attribute values are shared (tensors are
    treated as immutable) except sub-graphs, which are cloned recursively.
    """
    if not isinstance(graph, Graph):
        raise IRError(f"clone_graph takes a Graph, got {type(graph).__name__}")
    if value_map is not None and not isinstance(value_map, dict):
        raise IRError(f"clone_graph(value_map=) takes a dict to fill (source value -> clone value), got "
                      f"{type(value_map).__name__}")
    vmap: dict[Value, Value] = {} if value_map is None else value_map
    clone = Graph(graph.name)
    for value in graph.inputs:
        vmap[value] = clone.add_input(value.type, value.name)
    with walking(graph):
        _copy_nodes(graph.nodes, vmap, clone)
    for value in graph.outputs:
        if value not in vmap:
            raise IRError(f"output of graph {graph.name!r} is not defined in it; run verify() for details")
        clone.outputs.append(vmap[value])
    clone._output_names = dict(graph._output_names)
    reason = traced_sizes(graph)
    if reason is not None:
        mark_traced_sizes(clone, reason)
    if _TYPE_TIES:
        carry_type_ties(graph, clone, vmap)
    return clone


# Graphs that may hold traced sizes as plain numbers (a function that read ``x.shape``, a gradient written for the
# traced shapes), with the reason: ``specialize`` refuses them rather than give a silently wrong answer at another
# size. A copy or an inlining carries the mark along (docs/design-parameters-and-shapes.md, section 2).
_TRACED_SIZES: "weakref.WeakKeyDictionary[Graph, str]" = weakref.WeakKeyDictionary()


def mark_traced_sizes(graph: Graph, reason: str) -> None:
    """Record that ``graph`` may hold traced sizes as numbers, and why (the first reason given is kept)."""
    _TRACED_SIZES.setdefault(graph, reason)


def traced_sizes(graph: Graph) -> str | None:
    """Why ``graph`` may hold traced sizes as numbers, or ``None`` when nothing marked it."""
    return _TRACED_SIZES.get(graph) if _TRACED_SIZES else None


class TypeTie(NamedTuple):
    """``value`` has ``like``'s type at any input shapes: a seed input (a VJP's cotangent, a JVP's tangent) or a
    gradient output, and the value it belongs to (the output it seeds, the primal input). ``role`` says what
    ``value`` is, for messages (``"the cotangent of output 0 ('y')"``)."""

    value: Value
    like: Value
    role: str


# The type ties of graphs built by the derivative transforms: a cotangent input has its output's type, a tangent
# input its primal's, a gradient output its input's. Traced, the input types say so; re-specialised for new input
# shapes nothing else would, so ``specialize`` checks them (docs/design-parameters-and-shapes.md, section 2). A
# copy and a save carry them along (an inlining does not: the inlined seeds are no inputs any more).
_TYPE_TIES: "weakref.WeakKeyDictionary[Graph, list[TypeTie]]" = weakref.WeakKeyDictionary()


def tie_types(graph: Graph, value: Value, like: Value, role: str) -> None:
    """Record that ``value`` (an input or node output of ``graph``) has ``like``'s type at any input shapes."""
    if value.type != like.type:
        raise IRError(f"cannot tie {role} (of type {value.type}) to a value of type {like.type}: a tie holds at the "
                      "traced shapes first")
    _TYPE_TIES.setdefault(graph, []).append(TypeTie(value, like, role))


def tie_label(graph: Graph, position: int, output: bool = False) -> str:
    """``input 0 ('x')`` or ``output 1 ('y')``: how messages about ties (and re-specialisation) name an input or an
    output of ``graph``."""
    name = graph.output_names[position] if output else graph.inputs[position].name
    return f"{'output' if output else 'input'} {position}" + (f" ({name!r})" if name else "")


def type_ties(graph: Graph) -> tuple[TypeTie, ...]:
    """The type ties recorded on ``graph`` (``tie_types``), in the order recorded."""
    ties = _TYPE_TIES.get(graph) if _TYPE_TIES else None
    return tuple(ties) if ties else ()


def input_roles(graph: Graph) -> dict[int, str]:
    """What each tied input of ``graph`` is, by position (``{1: "the cotangent of output 0"}``); empty for a graph
    the derivative transforms did not build."""
    ties = type_ties(graph)
    if not ties:
        return {}
    position = {v: i for i, v in enumerate(graph.inputs)}
    return {position[t.value]: t.role for t in ties if t.value in position}


def carry_type_ties(source: Graph, target: Graph, vmap: Mapping[Value, Value]) -> None:
    """Give ``target`` the ties of ``source`` whose two values ``vmap`` maps (a copy, a re-specialisation)."""
    ties = _TYPE_TIES.get(source)
    if ties:  # (a tie whose value a transform dropped from the source is dropped with it)
        carried = [TypeTie(vmap[t[0]], vmap[t[1]], t[2]) for t in ties if t[0] in vmap and t[1] in vmap]
        if carried:
            _TYPE_TIES.setdefault(target, []).extend(carried)


def inline_graph(target: Graph, sub: Graph, arguments: Sequence[Value]) -> list[Value]:
    """Copy ``sub``'s nodes into ``target`` with its inputs bound to ``arguments``.

    Returns the values of ``target`` that correspond to ``sub``'s outputs (an
    output that is a ``sub`` input maps to the bound argument). Used by the
    backward transform to inline GradientFn micro-graphs and by decomposition.
    """
    if len(arguments) != len(sub.inputs):
        raise IRError(f"cannot inline {sub.name!r}: it takes {len(sub.inputs)} inputs, {len(arguments)} were given")
    for position, (param, arg) in enumerate(zip(sub.inputs, arguments)):
        if param.type != arg.type:
            raise IRError(
                f"cannot inline {sub.name!r}: its input {position} has type {param.type}, the argument has {arg.type}"
            )
    vmap = dict(zip(sub.inputs, arguments))
    _copy_nodes(sub.nodes, vmap, target)
    reason = traced_sizes(sub)
    if reason is not None:
        mark_traced_sizes(target, reason)
    return [vmap[v] for v in sub.outputs]
