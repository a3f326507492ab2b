"""Split a fused group that holds a numpy-only op into a numpy part and a compiled part.

``fuse_elementwise`` groups ``tanh(z + b)`` with the exactly rounded ops that
read its result (``1 - y^2``, products with tangents, ...): one body, so the
whole group stayed on numpy, a full numpy pass per member. ``split_body``
cuts such a body in two: the *numpy part* holds every member that is not
compiled (``tanh``, ``exp``, ...) and every member those read (they must run
first), in their order; the *native part* holds the other members, which read
the body's inputs and the numpy part's exported values. Each member still
runs the same kernel or the same exactly rounded code on the same values, so
the results are the group's bits.

``split_prefix`` cuts the other end: the compiled members that run before the
numpy-only ones and read nothing those make (``tanh(x * w + b)``'s ``x * w``
and ``+ b``, broadcasts numpy walks row by row) become a compiled part that
runs first, and the rest reads its exports.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from frame_core import Graph, Node, Value

__all__ = ["MIN_COMPILED", "Prefix", "Split", "split_body", "split_prefix"]


@dataclass
class Split:
    """``body`` cut in two. ``numpy_body`` reads ``numpy_inputs`` and ``native_body`` reads ``native_inputs``:
    each entry is ``("input", i)``, the fused node's input ``i``, or ``("numpy", j)``, output ``j`` of the
    numpy part. ``outputs[k]`` says where the group's output ``k`` now comes from: ``("numpy", j)`` or
    ``("native", j)``."""

    numpy_body: Graph
    numpy_inputs: list[tuple[str, int]]
    native_body: Graph
    native_inputs: list[tuple[str, int]]
    outputs: list[tuple[str, int]]


#: Fewest members a compiled part needs: one member saves no pass over memory, and costs a kernel call.
MIN_COMPILED = 2


def split_body(body: Graph, compiled: Collection[str]) -> Split | None:
    """The split of ``body`` at its members whose op is not in ``compiled``, or ``None`` when the compiled part
    would have fewer than ``MIN_COMPILED`` members (every member compiled, or needed before a numpy-only one)."""
    members = [n for n in body.nodes if n.op != "constant"]
    first: set[Node] = set()
    stack = [n for n in members if n.op not in compiled]
    while stack:  # the numpy-only members and what they read, transitively
        node = stack.pop()
        if node in first:
            continue
        first.add(node)
        stack.extend(v.producer for v in node.inputs if v.producer is not None and v.producer.op != "constant")
    if not first or len(members) - len(first) < MIN_COMPILED:
        return None
    numpy_members = [n for n in members if n in first]
    native_members = [n for n in members if n not in first]
    made_first = {n.outputs[0] for n in numpy_members}
    handed = [v for n in native_members for v in n.inputs if v in made_first]
    numpy_exports = list(dict.fromkeys([*handed, *(v for v in body.outputs if v in made_first)]))
    native_exports = [v for v in body.outputs if v not in made_first]
    if not numpy_exports or not native_exports:
        return None
    position = {v: i for i, v in enumerate(body.inputs)}
    numpy_body, numpy_inputs = _part(body, numpy_members, numpy_exports, position, {})
    handed_index = {v: j for j, v in enumerate(numpy_exports)}
    native_body, native_inputs = _part(body, native_members, native_exports, position, handed_index)
    where = [("numpy", handed_index[v]) if v in made_first else ("native", native_exports.index(v))
             for v in body.outputs]
    return Split(numpy_body, numpy_inputs, native_body, native_inputs, where)


@dataclass
class Prefix:
    """``body`` cut before its numpy-only members: ``native_body`` (its compiled prefix) reads
    ``native_inputs``, all ``("input", i)``, and runs first; ``rest_body`` reads ``rest_inputs``, each
    ``("input", i)`` or ``("native", j)`` (output ``j`` of the prefix). ``outputs[k]``: ``("native", j)`` or
    ``("rest", j)``."""

    native_body: Graph
    native_inputs: list[tuple[str, int]]
    rest_body: Graph
    rest_inputs: list[tuple[str, int]]
    outputs: list[tuple[str, int]]


def split_prefix(body: Graph, compiled: Collection[str], broadcast: Callable[[Node], bool]) -> Prefix | None:
    """The compiled members of ``body`` that read only the body's inputs, constants and each other, cut off to
    run first, or ``None`` when there are none, every member is one, or they are fewer than ``MIN_COMPILED``
    and none reads a ``broadcast`` operand (one member over full arrays saves no pass and costs a call; numpy
    runs a broadcast operand row by row, 2-3x slower than a plain pass)."""
    members = [n for n in body.nodes if n.op != "constant"]
    first: set[Node] = set()
    for node in members:  # graph order: a member's producers come before it
        if node.op in compiled and all(v.producer is None or v.producer.op == "constant" or v.producer in first
                                       for v in node.inputs):
            first.add(node)
    if not first or len(first) == len(members):
        return None
    if len(first) < MIN_COMPILED and not any(broadcast(n) for n in first):
        return None
    native_members = [n for n in members if n in first]
    rest_members = [n for n in members if n not in first]
    made_first = {n.outputs[0] for n in native_members}
    handed = [v for n in rest_members for v in n.inputs if v in made_first]
    native_exports = list(dict.fromkeys([*handed, *(v for v in body.outputs if v in made_first)]))
    rest_exports = [v for v in body.outputs if v not in made_first]
    if not rest_exports:
        return None
    position = {v: i for i, v in enumerate(body.inputs)}
    native_body, native_inputs = _part(body, native_members, native_exports, position, {})
    handed_index = {v: j for j, v in enumerate(native_exports)}
    rest_body, rest_inputs = _part(body, rest_members, rest_exports, position, handed_index, "native")
    where = [("native", handed_index[v]) if v in made_first else ("rest", rest_exports.index(v))
             for v in body.outputs]
    return Prefix(native_body, native_inputs, rest_body, rest_inputs, where)


def _part(body: Graph, members: list[Node], exports: list[Value], position: dict[Value, int],
          handed: dict[Value, int], label: str = "numpy") -> tuple[Graph, list[tuple[str, int]]]:
    """A body of ``members`` (copied) returning ``exports``, and where each of its inputs comes from: a body
    input (``position``) or a value the numpy part hands over (``handed``). Constants are copied in."""
    part = Graph(body.name)
    vmap: dict[Value, Value] = {}
    sources: list[tuple[str, int]] = []
    for node in members:
        for v in node.inputs:
            if v in vmap:
                continue
            producer = v.producer
            if producer is not None and producer.op == "constant":
                const = Node("constant", (), producer.attrs)
                const.outputs = (Value(v.type, const, 0),)
                part.nodes.append(const)
                vmap[v] = const.outputs[0]
            else:
                vmap[v] = part.add_input(v.type, v.name)
                sources.append((label, handed[v]) if v in handed else ("input", position[v]))
        copy = Node(node.op, tuple(vmap[v] for v in node.inputs), node.attrs)
        out = node.outputs[0]
        copy.outputs = (Value(out.type, copy, 0),)
        vmap[out] = copy.outputs[0]
        part.nodes.append(copy)
    part.outputs.extend(vmap[v] for v in exports)
    return part, sources
