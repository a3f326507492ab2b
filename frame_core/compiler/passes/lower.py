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
    buffers: dict[str, np.ndarray] = field(default_factory=dict)


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


def lower(graph: Graph, plan: MemoryPlan, ctx: CompileContext) -> Program:
    schemas = ctx.registry.schemas
    printable = _LazyNames(graph)
    reg: dict[Value, str] = {}
    for i, v in enumerate(graph.inputs):
        reg[v] = f"x{i}"
    constants: dict[str, np.ndarray] = {}
    arenas = [np.empty(n, np.uint8) for n in plan.buffer_bytes]
    buffers: dict[str, np.ndarray] = {}
    instructions: list[Instruction] = []
    dies_after: dict[int, list[Value]] = {}
    for v, i in plan.last_use.items():
        dies_after.setdefault(i, []).append(v)
    counter = 0
    built: dict[tuple, Callable[..., Any]] = {}
    for index, node in enumerate(graph.nodes):
        if node.op == "constant":
            name = f"c{len(constants)}"
            constants[name] = node.attrs["value"]
            reg[node.outputs[0]] = name
            continue
        schema = schemas[node.op]
        builder = schema.kernels.get(ctx.backend)
        if builder is None:
            raise CompileError(f"op {node.op!r} has no kernel for backend {ctx.backend!r}")
        in_types = tuple([v.type for v in node.inputs])
        key = (node.op, in_types, attrs_key(node.attrs))
        kernel = built.get(key)
        if kernel is None:  # kernels are stateless (schema contract): nodes of one signature share one
            nctx = NodeContext(schema, in_types, node.attrs, [v.type for v in node.outputs])
            try:
                with op_scope(schema.namespace):
                    kernel = built[key] = builder(nctx)
            except Exception as exc:
                raise CompileError(f"building the {ctx.backend} kernel of node {index} ({node.op}) failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
        outs = []
        for v in node.outputs:
            name = f"v{counter}"
            counter += 1
            reg[v] = name
            outs.append(name)
        out_buffer = None
        if len(node.outputs) == 1 and node.outputs[0] in plan.buffer_of:
            v = node.outputs[0]
            out_buffer = f"b{len(buffers)}"
            arena = arenas[plan.buffer_of[v]]
            buffers[out_buffer] = arena[: v.type.nbytes].view(v.type.dtype.np).reshape(v.type.shape)
        frees = tuple(reg[v] for v in dies_after.get(index, ()) if v in reg and reg[v].startswith("v")
                      and v not in plan.buffer_of)
        instructions.append(Instruction(index, node.op, kernel, tuple([reg[v] for v in node.inputs]), tuple(outs),
                                        out_buffer, frees, node, printable))
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
