"""Stage 9: lowering to a flat list of prebound instructions.

Each non-constant node becomes an :class:`Instruction` holding the kernel its
schema built for the node's types and attributes (built once, here), the
registers it reads and writes, the planned ``out`` buffer if any, and the
registers that die after it. Constants become preloaded arrays. Outputs that
could alias an input, a constant, a view of either, or an earlier output are
copied on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir.graph import Graph, Node, Value
from ...ir.keys import attrs_key
from ...ir.printer import ValueNames
from ...ops_registry.registry import op_scope
from ...ops_registry.schema import NodeContext
from ..context import CompileContext
from .memory import MemoryPlan, view_bases

__all__ = ["Instruction", "Program", "lower"]


@dataclass(slots=True)
class Instruction:
    """One kernel call: ``outputs = kernel(*inputs[, out_buffer])``, then ``frees`` are released."""

    index: int
    op: str
    kernel: Callable[..., Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    out_buffer: str | None
    frees: tuple[str, ...]
    node: Node
    names: Callable[[Value], str]  # shared by the program's instructions; used only for messages
    schema: Any = None  # the op's schema: where the kernel comes from, for messages

    @property
    def text(self) -> str:
        """The node as the printer shows it, for errors and the profiler."""
        n = self.names
        return f"{', '.join(n(v) for v in self.node.outputs)} = {self.op}({', '.join(n(v) for v in self.node.inputs)})"


@dataclass
class Program:
    """Everything the runtime needs: instructions, preloaded arrays, input and output bindings."""

    instructions: list[Instruction]
    input_names: list[str]
    input_types: list[Any]
    output_names: list[str]
    output_copies: list[bool]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    buffers: dict[str, Any] = field(default_factory=dict)  # an array, or a tuple of them for several outputs


class _LazyNames:
    """``ValueNames`` of a graph, computed the first time a message needs one."""

    __slots__ = ("graph", "names")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.names: ValueNames | None = None

    def __call__(self, v: Value) -> str:
        if self.names is None:
            self.names = ValueNames(self.graph)
        return self.names(v)


def _view(arenas: list[np.ndarray], plan: MemoryPlan, v: Value) -> np.ndarray:
    """The planned buffer of ``v``: its arena, viewed as ``v``'s dtype and shape."""
    t = v.type
    return arenas[plan.buffer_of[v]][: t.nbytes].view(t.dtype.np).reshape(t.shape)


def _human(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.4g} {unit}"
        size /= 1024
    return f"{size:.4g} PiB"


_type = attrgetter("type")


def _build_kernel(schema: Any, node: Node, index: int, in_types: tuple, backend: str) -> Callable[..., Any]:
    builder = schema.kernels.get(backend)
    if builder is None:
        raise CompileError(f"op {node.op!r} has no kernel for backend {backend!r}")
    nctx = NodeContext(schema, in_types, node.attrs, [v.type for v in node.outputs])
    try:
        with op_scope(schema.namespace):
            kernel = builder(nctx)
    except (Exception, SystemExit) as exc:  # the pack's code: even exit() is this node's CompileError
        raise CompileError(f"building the {backend} kernel of node {index} ({node.op}) failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    if not callable(kernel):  # else the first run fails as if the kernel had, and names no pack
        raise CompileError(f"the {backend} kernel builder of op {node.op!r} (pack {schema.pack}) returned "
                           f"{type(kernel).__name__}, expected the function that computes the node (node {index})")
    return kernel


def lower(graph: Graph, plan: MemoryPlan, ctx: CompileContext) -> Program:
    schemas = ctx.registry.schemas
    backend = ctx.backend
    printable = _LazyNames(graph)
    reg: dict[Value, str] = {}
    for i, v in enumerate(graph.inputs):
        reg[v] = f"x{i}"
    constants: dict[str, np.ndarray] = {}
    try:
        arenas = [np.empty(n, np.uint8) for n in plan.buffer_bytes]
    except (MemoryError, ValueError) as exc:  # ValueError: "array is too big" past numpy's own limit
        need = plan.arena_bytes
        raise CompileError(
            f"the memory plan needs {need:,} bytes ({_human(need)}) for the graph's intermediates in "
            f"{len(plan.buffer_bytes)} buffers, more than this machine can allocate ({type(exc).__name__}: {exc}); "
            f"the largest single intermediate is {_human(max(plan.buffer_bytes))}. Use smaller shapes (a smaller "
            "batch), or split the computation") from None
    buffers: dict[str, Any] = {}
    instructions: list[Instruction] = []
    append = instructions.append
    buffer_of = plan.buffer_of
    dies_after: dict[int, list[Value]] = {}
    for v, i in plan.last_use.items():
        if v not in buffer_of:  # planned buffers persist; only unplanned values are released
            dies_after.setdefault(i, []).append(v)
    counter = 0
    built: dict[tuple, Callable[..., Any]] = {}
    for index, node in enumerate(graph.nodes):
        op = node.op
        if op == "constant":
            name = f"c{len(constants)}"
            constants[name] = node.attrs["value"]
            reg[node.outputs[0]] = name
            continue
        in_types = tuple(map(_type, node.inputs))
        attrs = node.attrs
        key = (op, in_types, attrs_key(attrs) if attrs else ())
        kernel = built.get(key)
        if kernel is None:  # kernels are stateless (schema contract): nodes of one signature share one
            kernel = built[key] = _build_kernel(schemas[op], node, index, in_types, backend)
        outs = []
        for v in node.outputs:
            name = reg[v] = f"v{counter}"
            counter += 1
            outs.append(name)
        out_buffer = None
        if len(outs) == 1:
            out = node.outputs[0]
            if out in buffer_of:
                out_buffer = f"b{len(buffers)}"
                buffers[out_buffer] = _view(arenas, plan, out)
        elif any(v in buffer_of for v in node.outputs):  # a fused node's several outputs: a tuple (None: unplanned)
            out_buffer = f"b{len(buffers)}"
            buffers[out_buffer] = tuple(_view(arenas, plan, v) if v in buffer_of else None for v in node.outputs)
        dying = dies_after.get(index)
        frees = () if dying is None else tuple([reg[v] for v in dying if v in reg and reg[v][0] == "v"])
        append(Instruction(index, op, kernel, tuple([reg[v] for v in node.inputs]), tuple(outs),
                           out_buffer, frees, node, printable, schemas[op]))
    base = view_bases(graph, ctx.registry)
    seen_bases: set[Value] = set()
    output_names, output_copies = [], []
    for v in graph.outputs:
        b = base.get(v, v)
        alias = b.producer is None or b.producer.op == "constant" or b in seen_bases  # outputs are never planned
        seen_bases.add(b)
        output_names.append(reg[v])
        output_copies.append(alias)
    return Program(instructions, [reg[v] for v in graph.inputs], [v.type for v in graph.inputs],
                   output_names, output_copies, constants, buffers)
