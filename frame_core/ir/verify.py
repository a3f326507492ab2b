"""``verify``: the named structural and typing rules of a graph.

Rules (each problem names its rule, the node, the op and what differs):

V1  SSA: every value is a graph input or output ``index`` of exactly one node;
    graph inputs are distinct.
V2  Order: a node reads only graph inputs and outputs of earlier nodes (a
    cycle is reported as such).
V3  The op exists in the registry.
V4  Attributes match the schema: none unknown, none missing, each of its kind.
V5  Arity: input and output counts match the schema.
V6  Recorded output types equal the types shape inference gives.
V7  Outputs are values defined in the graph.
V8  Sub-graph attributes are closed graphs that pass these rules themselves, nested at most
    ``MAX_NESTING`` (64) deep.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Sequence

from ..errors import FrameError, IRError, UnknownOpError, VerifyError
from .graph import MAX_NESTING, Graph, Node, Value, nesting_message
from .keys import plain_attrs_key
from .schemas import SchemaSource, default_source
from .types import TensorType

__all__ = ["Problem", "RULES", "check_graph", "clean_node_memo", "output_count_message", "verify"]

RULES = {
    "V1": "SSA: one producer per value, distinct graph inputs",
    "V2": "defined before use / acyclic",
    "V3": "op exists in the registry",
    "V4": "attributes match the op's schema",
    "V5": "input and output counts match the op's schema",
    "V6": "recorded types equal inferred types",
    "V7": "outputs belong to the graph",
    "V8": "sub-graphs are valid, recursively",
}


@dataclass(frozen=True)
class Problem:
    """One broken rule: ``rule`` (``"V1"``...), where (``path``/``node_index``/``op``) and ``message``."""

    rule: str
    message: str
    op: str | None = None
    node_index: int | None = None
    path: str = ""

    def __str__(self) -> str:
        where = self.path
        if self.node_index is not None:
            where += f"node {self.node_index}" + (f" ({self.op})" if self.op else "")
        return f"{self.rule} {RULES[self.rule]}: {where + ': ' if where else ''}{self.message}"

    @property
    def unknown_op(self) -> bool:
        """An op no loaded pack provides (V3), at the top or inside a body (V8 carrying the inner V3): a pack to
        install or load, not a graph to fix."""
        return self.rule == "V3" or (self.rule == "V8" and self.message.startswith("V3:"))


def verify(graph: Graph, registry: SchemaSource | None = None) -> None:
    """Raise :class:`~frame_core.errors.VerifyError` listing every problem, or return ``None``."""
    problems = check_graph(graph, registry)
    if problems:
        raise VerifyError(problems)


#: The bodies one outermost ``check_graph`` has already checked: ``(id(graph), id(registry), types)`` -> (graph,
#: its problems with paths relative to it). A body is checked once per walk however it is reached: through V8,
#: and again through shape inference of an op that checks its body (the fused op's), which made each level of
#: nesting double the work (a 10 kB document 40 deep never finished).
_checked: contextvars.ContextVar[dict[tuple[int, int, bool], tuple[Graph, list[Problem]]] | None] = \
    contextvars.ContextVar("frame_verify_checked", default=None)


#: Inside :func:`clean_node_memo`: per registry (by id, with the registry kept alive), the nodes found clean by
#: rules V3-V6, as ``(op, input types, output types, plain attribute key)``.
_clean: contextvars.ContextVar[dict[int, tuple[Any, set[tuple]]] | None] = \
    contextvars.ContextVar("frame_verify_clean_nodes", default=None)


@contextmanager
def clean_node_memo() -> Iterator[None]:
    """Inside the block, rules V3-V6 are checked once per distinct node: a node with the op, input and output
    types and plain attributes (``keys.plain_attrs_key``) of a node found clean before is clean too, for those
    rules depend on nothing else (shape inference is a function of the types and attributes, as
    ``schema.inference_memo`` assumes). A node with a problem, a graph attribute (V8) or attributes without a
    plain key is checked in full every time. The closure audit checks thousands of micro-graphs made of the same
    few nodes. Nested blocks share the outer memo."""
    if _clean.get() is not None:
        yield
        return
    token = _clean.set({})
    try:
        yield
    finally:
        _clean.reset(token)


def check_graph(graph: Graph, registry: SchemaSource | None = None, path: str = "", *, types: bool = True,
                _enclosing: tuple[Graph, ...] = ()) -> list[Problem]:
    """Every rule violation in ``graph`` (empty list when it is valid).

    ``types=False`` skips rule V6 (shape inference), for callers that infer types themselves (the compile pipeline).
    ``_enclosing`` are the graphs whose sub-graph ``graph`` is (V8 refuses a body that holds one of them).
    The work is linear in the graph and its bodies: within one call each body is checked once, whoever asks.
    """
    if not isinstance(graph, Graph):
        raise IRError(f"verify/check_graph takes a Graph, got {type(graph).__name__}; load a saved one with "
                      "frame_core.load_graph(path)")
    if not isinstance(types, bool):
        raise IRError(f"check_graph(types=) is True or False, got {type(types).__name__}")
    if registry is None:
        registry = default_source()
    elif not hasattr(registry, "lookup"):
        raise IRError(f"registry= takes a frame_core Registry (frame_core.registry()), got {type(registry).__name__}")
    memo = _checked.get()
    if memo is None:  # the outermost call: the walk's memo lives as long as it does
        token = _checked.set({})
        try:
            problems = _check_graph(graph, registry, types, _enclosing)
        finally:
            _checked.reset(token)
    else:
        key = (id(graph), id(registry), types)
        hit = memo.get(key)
        if hit is None or hit[0] is not graph:
            problems = _check_graph(graph, registry, types, _enclosing)
            memo[key] = (graph, problems)
        else:
            problems = hit[1]
    return [dataclasses.replace(p, path=path + p.path) for p in problems] if path else list(problems)


def _check_graph(graph: Graph, registry: SchemaSource, types: bool,
                 _enclosing: tuple[Graph, ...]) -> list[Problem]:
    path = ""  # problems carry paths relative to this graph; check_graph puts the caller's prefix before them
    problems: list[Problem] = []
    names: dict[Value, str] = {}
    unknown: dict[str, str] = {}  # op name -> its V3 message: suggestions cost, so only for the first few names

    # Names and the producer index serve only the messages, so they are made on the first problem (nearly every
    # graph checked has none): the graph inputs take the first numbers, in order, then every other value as a
    # message first names it, as if the inputs had been named up front.
    def name(v: Value) -> str:
        if not names:
            for u in graph.inputs:
                if u not in names:
                    names[u] = f"%{u.name}" if u.name else f"%{len(names)}"
        if v not in names:
            names[v] = f"%{v.name}" if v.name else f"%{len(names)}"
        return names[v]

    producers: dict[Value, int] = {}

    def producer_index() -> dict[Value, int]:
        if not producers:
            for index, node in enumerate(graph.nodes):
                for v in node.outputs:
                    producers.setdefault(v, index)
        return producers

    defined: set[Value] = set()
    for i, v in enumerate(graph.inputs):
        if v in defined:
            problems.append(Problem("V1", f"graph input {i} ({name(v)}) appears twice in the input list", path=path))
        if v.producer is not None:
            problems.append(Problem("V1", f"graph input {i} ({name(v)}) claims to be produced by a {v.producer.op} node", path=path))
        defined.add(v)

    # rules V3-V6: a node with the op, input and output types and plain attributes of a node found clean before in
    # this clean_node_memo block is clean (see there); a node without a plain key is checked in full every time
    memo = _clean.get() if types else None
    clean: set[tuple] | None = None
    if memo is not None:
        seen = memo.get(id(registry))
        if seen is None:
            seen = memo[id(registry)] = (registry, set())
        clean = seen[1]
    within = (*_enclosing, graph)
    for index, node in enumerate(graph.nodes):
        for pos, v in enumerate(() if defined.issuperset(node.inputs) else node.inputs):  # (one test, usually)
            if v in defined:
                continue
            later = producer_index().get(v)
            if later is None:
                problems.append(Problem("V2", f"input {pos} ({name(v)}: {v.type}) is not defined in this graph "
                                              "(a value from another graph or a removed node)", node.op, index, path))
            elif _reaches(graph, later, index, producer_index()):
                problems.append(Problem("V2", f"input {pos} ({name(v)}) is produced by node {later} ({graph.nodes[later].op}), "
                                              "which depends on this node: the graph has a cycle", node.op, index, path))
            else:
                problems.append(Problem("V2", f"input {pos} ({name(v)}) is produced by node {later} "
                                              f"({graph.nodes[later].op}), which comes later; "
                                              "nodes must be in topological order", node.op, index, path))
        outputs = node.outputs
        if len(outputs) == 1 and outputs[0].producer is node and not outputs[0].index and outputs[0] not in defined:
            single = outputs[0]  # (most nodes: one output, recorded as it should be)
            defined.add(single)
        else:
            single = None
            _check_outputs(graph, node, index, outputs, defined, problems, name, producer_index, path)
        if clean is not None:
            attrs = node.attrs
            plain = plain_attrs_key(attrs) if attrs else ()  # None for a graph attribute (V8) or a large array
            if plain is not None:
                in_types = tuple(map(_type, node.inputs))
                key = (node.op, in_types, single.type if single is not None else tuple(map(_type, outputs)), plain)
                if key in clean:
                    continue
                schema = None
                if not (unknown and node.op in unknown):
                    try:
                        schema = registry.lookup(node.op)  # (once for both checks below)
                    except UnknownOpError as exc:
                        problems.append(_unknown_op(exc, node, index, path, unknown))
                        continue
                    if _infers_as_recorded(schema, node, in_types):
                        clean.add(key)
                        continue
                found = _check_node_in_full(node, index, registry, path, types, unknown, within, schema)
                if found:
                    problems.extend(found)
                else:
                    clean.add(key)
                continue
        problems.extend(_check_node_in_full(node, index, registry, path, types, unknown, within))

    for i, v in enumerate(graph.outputs):
        if v not in defined:
            origin = ("an input of another graph" if v.producer is None
                      else f"output {v.index} of a {v.producer.op} node that is not in this graph")
            problems.append(Problem("V7", f"output {i} ({v.type}) must be a value of this graph, but it is {origin}; "
                                          "mark values of this graph only", v.producer.op if v.producer else None,
                                    path=path))
    return problems


_type = attrgetter("type")


def _infers_as_recorded(schema: Any, node: Node, in_types: tuple[TensorType, ...]) -> bool:
    """Whether ``node`` (plain attributes: no sub-graph), an op of ``schema``, passes rules V4-V6, asked as one
    question: ``schema.infer_node`` (the attributes normalised and the output types inferred, which the closure
    audit's inference memo answers with one look-up for a node tracing has just built) gives the recorded output
    types. ``False`` on any doubt: :func:`_check_node_in_full` then checks the node rule by rule and names what is
    wrong."""
    try:
        _, inferred = schema.infer_node(in_types, node.attrs)
    except (FrameError, AttributeError):  # (AttributeError: a schema source whose schemas lack infer_node)
        return False
    outputs = node.outputs
    if len(inferred) != len(outputs):
        return False
    for v, t in zip(outputs, inferred):
        if v.type != t:
            return False
    return True


def _check_outputs(graph: Graph, node: Node, index: int, outputs: tuple[Value, ...], defined: set[Value],
                   problems: list[Problem], name: Callable[[Value], str],
                   producer_index: Callable[[], dict[Value, int]], path: str) -> None:
    """Rule V1 for the outputs of ``node`` (several, or one not recorded as it should be), which become defined."""
    for pos, v in enumerate(outputs):
        if v.producer is not node or v.index != pos or v in defined:  # (one test for the usual case)
            if v.producer is not node or v.index != pos:
                owner = "none (a graph input)" if v.producer is None else f"a {v.producer.op} node, index {v.index}"
                problems.append(Problem("V1", f"output {pos} ({name(v)}) does not record this node as its "
                                              f"producer at index {pos} (it records {owner})", node.op, index, path))
            if v in defined:
                first = producer_index().get(v)
                by = ("as a graph input" if first is None or first == index
                      else f"by node {first} ({graph.nodes[first].op})")
                problems.append(Problem("V1", f"output {pos} ({name(v)}) is already defined {by}; a value has "
                                              "exactly one producer", node.op, index, path))
        defined.add(v)


def _reaches(graph: Graph, start: int, target: int, producer_index: dict[Value, int]) -> bool:
    """Whether node ``start`` depends (transitively) on node ``target``."""
    seen = set()
    stack = [start]
    while stack:
        i = stack.pop()
        if i == target:
            return True
        if i in seen:
            continue
        seen.add(i)
        for v in graph.nodes[i].inputs:
            j = producer_index.get(v)
            if j is not None:
                stack.append(j)
    return False


#: Distinct unknown op names whose V3 message suggests close matches; past them the message is the short one, so
#: checking a huge document of unknown ops costs time in proportion to what a report shows (VerifyError shows 20).
SUGGESTED_NAMES = 20


def _unknown_op(exc: UnknownOpError, node: Node, index: int, path: str, unknown: dict[str, str] | None) -> Problem:
    """The V3 problem of ``node``, whose op the registry does not know (``exc`` says so); ``unknown`` remembers its
    message for the graph's other nodes of that op."""
    memo = {} if unknown is None else unknown
    message = memo.get(node.op)
    if message is None:
        message = memo[node.op] = str(exc) if len(memo) < SUGGESTED_NAMES else exc.brief
    return Problem("V3", message, node.op, index, path)


def _check_node_in_full(node: Node, index: int, registry: SchemaSource, path: str, types: bool,
                        unknown: dict[str, str] | None, enclosing: tuple[Graph, ...],
                        schema: Any = None) -> list[Problem]:
    """Rules V3-V6 (and V8 for sub-graph attributes) of one node; ``schema`` is its op's when the caller has just
    looked it up."""
    if unknown and node.op in unknown:  # known to be unknown: no second lookup
        return [Problem("V3", unknown[node.op], node.op, index, path)]
    if schema is None:
        try:
            schema = registry.lookup(node.op)  # a stored key: no pack scope applies
        except UnknownOpError as exc:
            return [_unknown_op(exc, node, index, path, unknown)]
    problems = []
    try:
        attrs = schema.normalize_attrs(node.attrs)
    except FrameError as exc:
        return [Problem("V4", str(exc), node.op, index, path)]
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            if len(enclosing) > MAX_NESTING:
                problems.append(Problem("V8", f"attribute {key!r}: {nesting_message(len(enclosing))}", node.op, index,
                                        path))
                continue
            if any(value is g for g in enclosing):
                problems.append(Problem("V8", f"attribute {key!r} is the graph {value.name!r} that holds this node (or "
                                              "one enclosing it): a body cannot contain itself; give it a graph of "
                                              "its own", node.op, index, path))
                continue
            for p in check_graph(value, registry, f"{path}node {index} ({node.op}).{key}: ", _enclosing=enclosing):
                # the innermost rule leads the message once, however deep the nesting
                message = p.message if p.rule == "V8" else f"{p.rule}: {p.message}"
                problems.append(Problem("V8", message, p.op, p.node_index, p.path))
    try:
        schema.check_arity(len(node.inputs))
    except FrameError as exc:
        return problems + [Problem("V5", str(exc), node.op, index, path)]
    if not types:
        return problems
    try:
        inferred = schema.infer(tuple(v.type for v in node.inputs), attrs)
    except FrameError as exc:
        return problems + [Problem("V6", f"shape inference rejects the inputs: {exc}", node.op, index, path)]
    if len(inferred) != len(node.outputs):
        return problems + [Problem("V5", output_count_message(node, inferred), node.op, index, path)]
    for pos, (v, t) in enumerate(zip(node.outputs, inferred)):
        if v.type != t:
            problems.append(Problem("V6", f"output {pos} is recorded as {v.type} but inference gives {t}", node.op, index, path))
    return problems


def output_count_message(node: Node, inferred: Sequence[TensorType]) -> str:
    """Why ``node`` has the wrong number of outputs: for a node with a body, the body decides how many (a hand
    edit of the body, not of the node, is the usual cause), so the message says so."""
    bodies = [k for k, a in node.attrs.items() if isinstance(a, Graph)]
    why = f" from its {' and '.join(bodies)} and attributes" if bodies else ""
    return (f"has {len(node.outputs)} outputs, but shape inference gives {len(inferred)}{why}: "
            f"{', '.join(map(str, inferred)) or 'none'}")
