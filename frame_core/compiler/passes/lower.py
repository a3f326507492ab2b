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
from dataclasses import dataclass
from itertools import filterfalse
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from ..._gc import gc_paused, made
from ...errors import CompileError, MemoryLimitError, human_bytes, machine_memory
from ...ir.graph import Graph, Node, Value
from ...ir.keys import attrs_key
from ...ir.printer import ValueNames
from ...ops_registry.registry import op_scope
from ...ops_registry.schema import NodeContext
from ..context import CompileContext
from .memory import MemoryPlan

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
    #: the same call over the program's register slots (``Program.slots``), as the runtime's loop takes it:
    #: (kernel, arguments (see ``Program``), output slot (a tuple of them for several outputs), single output?,
    #: slots freed after)
    step: Any = None

    @property
    def text(self) -> str:
        """The node as the printer shows it, for errors and the profiler."""
        n = self.names
        return f"{', '.join(n(v) for v in self.node.outputs)} = {self.op}({', '.join(n(v) for v in self.node.inputs)})"


class Program:
    """Everything the runtime needs: the calls over register slots, preloaded arrays, input and output bindings.

    Lowering records what running needs: ``rows``, one per kernel call ``(node index, node, kernel, schema,
    step, out buffer, values freed after)`` where ``step`` is the call as the runtime's loop makes it,
    ``(kernel, arguments, output slot (a tuple of them for several outputs), single output?, slots freed
    after)``, ``arguments`` being the one argument slot (an int) or a function of the register list giving
    the arguments' tuple (an ``itemgetter`` of the slots, the out buffer's last; ``argument_slots`` reads the
    slots back); ``presets``, the
    ``(slot, array)`` pairs preloaded into the registers (constants and planned buffers); and the input
    slots (``0 .. n-1``) and ``output_slots``. The named view of the same program, the :class:`Instruction`
    list, ``buffers``, ``slots``, ``output_names`` (registers ``x0``.. for inputs, ``c0``.. for constants,
    ``v0``.. for node outputs, ``b0``.. for buffers, in graph order), is made the first time something reads
    it: code generation of a short program, a message, the profiler. A program of 100k calls that only runs
    never names a register.
    """

    def __init__(self, graph: Graph, rows: list[tuple], input_types: list[Any], output_slots: list[int],
                 output_copies: list[bool], constants: dict[str, np.ndarray], presets: list[tuple[int, Any]],
                 n_slots: int) -> None:
        self.graph = graph
        self.rows = rows
        self.input_types = input_types
        self.input_names = [f"x{i}" for i in range(len(input_types))]
        self.output_slots = output_slots
        self.output_copies = output_copies
        self.constants = constants
        self.presets = presets
        self.n_slots = n_slots
        self._named: tuple[list[Instruction], dict[str, Any], dict[str, int], list[str]] | None = None

    @property
    def instructions(self) -> list["Instruction"]:
        return self._names()[0]

    @property
    def buffers(self) -> dict[str, Any]:
        """Planned buffers by register name: an array, or a tuple of them (``None`` for an unplanned one) for
        a node with several outputs."""
        return self._names()[1]

    @property
    def slots(self) -> dict[str, int]:
        """Register name -> its slot (inputs first, in order)."""
        return self._names()[2]

    @property
    def output_names(self) -> list[str]:
        return self._names()[3]

    def _names(self) -> tuple[list["Instruction"], dict[str, Any], dict[str, int], list[str]]:
        named = self._named
        if named is None:
            with gc_paused():  # an instruction per call lives on: no collection walks them while they are made
                made(len(self.rows))
                named = self._named = self._name_registers()
        return named

    def _name_registers(self) -> tuple[list["Instruction"], dict[str, Any], dict[str, int], list[str]]:
        """Name every register in the order lowering numbered it (graph order), and make the instructions."""
        graph = self.graph
        reg: dict[Value, str] = dict(zip(graph.inputs, self.input_names))
        slots = {name: i for i, name in enumerate(self.input_names)}
        constants = iter(self.constants)
        rows = iter(self.rows)
        printable = _LazyNames(graph)
        instructions: list[Instruction] = []
        buffers: dict[str, Any] = {}
        n = len(slots)
        counter = 0
        for node in graph.nodes:
            if node.op == "constant":
                reg[node.outputs[0]] = name = next(constants)
                slots[name] = n
                n += 1
                continue
            index, _, kernel, schema, step, buffer, frees = next(rows)
            names = []
            for v in node.outputs:
                reg[v] = name = f"v{counter}"
                counter += 1
                slots[name] = n
                n += 1
                names.append(name)
            out_buffer = None
            if buffer is not None:
                out_buffer = f"b{len(buffers)}"
                buffers[out_buffer] = buffer
                slots[out_buffer] = n
                n += 1
            instructions.append(Instruction(index, node.op, kernel, tuple([reg[v] for v in node.inputs]), tuple(names),
                                            out_buffer, tuple([reg[v] for v in frees]), node, printable, schema, step))
        return instructions, buffers, slots, [reg[v] for v in graph.outputs]


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


def _no_arguments(registers: Any) -> tuple:
    """A step's arguments when it has none."""
    return ()


def argument_slots(arguments: Any) -> tuple[int, ...]:
    """The slots a step's ``arguments`` read (one slot, an ``itemgetter`` of several, or ``_no_arguments``)."""
    if arguments.__class__ is int:
        return (arguments,)
    if arguments is _no_arguments:
        return ()
    return tuple(arguments.__reduce__()[1])  # an itemgetter of two or more slots


def _view(arenas: list[np.ndarray], plan: MemoryPlan, v: Value) -> np.ndarray:
    """The planned buffer of ``v``: its arena, viewed as ``v``'s dtype and shape."""
    t = v.type
    return arenas[plan.buffer_of[v]][: t.nbytes].view(t.dtype.np).reshape(t.shape)


_type = attrgetter("type")


def _build_kernel(schema: Any, node: Node, index: int, in_types: tuple, backend: str) -> Callable[..., Any]:
    builder = schema.kernels.get(backend)
    if builder is None:
        raise CompileError(f"op {node.op!r} has no kernel for backend {backend!r}")
    nctx = NodeContext(schema, in_types, node.attrs, [v.type for v in node.outputs])
    try:
        with op_scope(schema.namespace):
            kernel = builder(nctx)
    except MemoryLimitError as exc:  # the graph's shapes, not the pack, are at fault
        raise MemoryLimitError(f"node {index} ({node.op}): {exc}") from None
    except (Exception, SystemExit) as exc:  # the pack's code: even exit() is this node's CompileError
        raise CompileError(f"building the {backend} kernel of node {index} ({node.op}) failed: "
                           f"{type(exc).__name__}: {exc} (a bug in pack {schema.pack or '?'})") from exc
    if not callable(kernel):  # else the first run fails as if the kernel had, and names no pack
        raise CompileError(f"the {backend} kernel builder of op {node.op!r} (pack {schema.pack}) returned "
                           f"{type(kernel).__name__}, expected the function that computes the node (node {index})")
    return kernel


def lower(graph: Graph, plan: MemoryPlan, ctx: CompileContext) -> Program:
    schemas = ctx.registry.schemas
    backend = ctx.backend
    # every value's slot in the runtime's register list: inputs first, then constants and node outputs in
    # graph order, each planned buffer right after its node's outputs
    slot_of: dict[Value, int] = {v: i for i, v in enumerate(graph.inputs)}
    n = len(slot_of)
    constants: dict[str, np.ndarray] = {}
    presets: list[tuple[int, Any]] = []
    total = machine_memory()
    try:
        if total is not None and plan.arena_bytes > total:  # np.empty would succeed lazily, then swap for minutes
            raise MemoryError(f"this machine has {human_bytes(total)} of memory")
        arenas = [np.empty(size, np.uint8) for size in plan.buffer_bytes]
    except (MemoryError, ValueError) as exc:  # ValueError: "array is too big" past numpy's own limit
        need = plan.arena_bytes
        raise MemoryLimitError(
            f"the memory plan needs {need:,} bytes ({human_bytes(need)}) for the graph's intermediates in "
            f"{len(plan.buffer_bytes)} buffers, more than this machine can allocate ({type(exc).__name__}: {exc}); "
            f"the largest single intermediate is {human_bytes(max(plan.buffer_bytes))}. Use smaller shapes (a smaller "
            "batch), or split the computation") from None
    views: dict[tuple[int, Any], np.ndarray] = {}  # (buffer, type) -> its view: values of one type share it
    views_get = views.get
    rows: list[tuple] = []
    append = rows.append
    buffer_of = plan.buffer_of
    buffer_get = buffer_of.get
    # what each call releases: the unplanned values whose last use it is (planned buffers persist), in the
    # order of ``last_use``; graph inputs and constants are the caller's or the program's and never released
    dies_after: dict[int, list[Value]] = {}
    dying_at = dies_after.get
    last_use = plan.last_use
    for v in filterfalse(buffer_of.__contains__, last_use):  # (most values are planned: the filter runs in C)
        producer = v.producer
        if producer is not None and producer.op != "constant":
            i = last_use[v]
            dying = dying_at(i)
            if dying is None:
                dies_after[i] = [v]
            else:
                dying.append(v)

    built: dict[tuple, tuple[Callable[..., Any], Any]] = {}  # signature -> (its kernel, the op's schema)
    # attribute keys by the values' identities (every node is alive meanwhile), as small ints: equal keys get
    # one number, and a kernel's signature then hashes no attribute (a fused body's key is a large tuple)
    attr_keys: dict[tuple, int] = {}
    numbers: dict[tuple, int] = {}
    by_dict: dict[int, int] = {}  # id of an attribute dict (alive meanwhile) -> its number
    slot_get = slot_of.__getitem__
    for index, node in enumerate(graph.nodes):
        op = node.op
        outs = node.outputs
        if op == "constant":
            slot_of[outs[0]] = n
            constants[f"c{len(constants)}"] = array = node.attrs["value"]
            presets.append((n, array))
            n += 1
            continue
        ins = node.inputs
        attrs = node.attrs
        key: tuple[Any, ...]  # (op, attribute number, input types...) or (op, input types...): one flat tuple
        if attrs:
            number = by_dict.get(id(attrs))  # nodes may share one attribute dict (fusion's, per structure)
            if number is None:
                ident = (tuple(attrs), tuple(map(id, attrs.values())))
                number = attr_keys.get(ident)
                if number is None:
                    number = attr_keys[ident] = numbers.setdefault(attrs_key(attrs), len(numbers))
                by_dict[id(attrs)] = number
            key = (op, number, *map(_type, ins))
        else:
            key = (op, *map(_type, ins))
        entry = built.get(key)
        if entry is None:  # kernels are stateless (schema contract): nodes of one signature share one
            schema = schemas[op]
            entry = built[key] = (_build_kernel(schema, node, index, tuple(map(_type, ins)), backend), schema)
        kernel, schema = entry
        args = tuple(map(slot_get, ins))
        buffer: Any = None
        out_slot: Any
        if len(outs) == 1:
            out = outs[0]
            slot_of[out] = out_slot = n
            n += 1
            planned = buffer_get(out)
            if planned is not None:
                buffer = views_get((planned, out.type))
                if buffer is None:
                    buffer = views[planned, out.type] = _view(arenas, plan, out)
                presets.append((n, buffer))
                args += (n,)
                n += 1
            single = True
        else:
            out_slot = tuple(range(n, n + len(outs)))
            for v in outs:
                slot_of[v] = n
                n += 1
            several: list[Any] = []
            any_planned = False
            for v in outs:
                planned = buffer_get(v)
                if planned is not None:
                    array = views_get((planned, v.type))
                    if array is None:
                        array = views[planned, v.type] = _view(arenas, plan, v)
                    several.append(array)
                    any_planned = True
                else:
                    several.append(None)
            if any_planned:  # a fused node's several outputs: a tuple (None: unplanned)
                buffer = tuple(several)
                presets.append((n, buffer))
                args += (n,)
                n += 1
            single = False
        count = len(args)
        # what the call reads: one slot, or registers -> the tuple of its arguments (no list per call)
        arguments = args[0] if count == 1 else itemgetter(*args) if count else _no_arguments
        dying = dying_at(index)
        if dying is None:
            append((index, node, kernel, schema, (kernel, arguments, out_slot, single, ()), buffer, ()))
        else:
            append((index, node, kernel, schema, (kernel, arguments, out_slot, single, tuple(map(slot_get, dying))),
                    buffer, tuple(dying)))
    links = plan.links
    seen_bases: set[Value] = set()
    output_copies = []
    for v in graph.outputs:
        b = links.get(v, v)
        alias = b.producer is None or b.producer.op == "constant" or b in seen_bases  # outputs are never planned
        seen_bases.add(b)
        output_copies.append(alias)
    return Program(graph, rows, [v.type for v in graph.inputs], [slot_of[v] for v in graph.outputs], output_copies,
                   constants, presets, n)
