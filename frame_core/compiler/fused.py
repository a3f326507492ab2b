"""``fused_elementwise_internal``: the op that elementwise fusion produces.

Its ``body`` attribute is the fused chain as a graph (it may also hold
``constant`` nodes, which the code reads as globals). The kernel builder
assigns the body's values to a handful of registers (arrays of the chain's
one type): a member writes in place into the register of an input that dies
there, registers of dead values are recycled, and exported values keep their
own. With one export the register that ends up holding it is the planned
``out`` buffer, so a fused chain allocates nothing per run; with several
exports ``out`` is a tuple of buffers (``None`` for an export that is not
planned), one per export. The straight-line
code is generated once per node; the members' kernels are called with a
positional ``out`` (their ``accepts_out`` contract), numpy's fastest form for
a ufunc. A kernel that is a ufunc applied to its inputs and some constants can
say so with an attribute, ``kernel.ufunc_form = (ufunc, constants)`` meaning
``kernel(*xs, out) == ufunc(*xs, *constants, out=out)``; the fused code then
calls the ufunc directly (relu is ``maximum`` with a zero).

It has no GradientFn on purpose: fusion runs after differentiation, and
``build_backward_graph`` refuses graphs containing it (ARCH-062).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import KernelError
from ..ir.graph import Graph, Value
from ..ir.types import TensorType
from ..ops_registry.registry import op_scope
from ..ops_registry.schema import AttrSpec, Example, NodeContext, OpSchema

__all__ = ["FUSED", "FUSED_OP", "build_fused_kernel"]

FUSED_OP = "fused_elementwise_internal"


def _fused_shape(ctx: NodeContext) -> list[TensorType]:
    body: Graph = ctx.attrs["body"]
    got = list(ctx.input_types)
    want = [v.type for v in body.inputs]
    if got != want:
        raise ctx.error(f"inputs [{', '.join(map(str, got))}] do not match the body's [{', '.join(map(str, want))}]")
    problem = body_problem(body)
    if problem:
        raise ctx.error(f"its body {problem} (a fused body is made by the fuse_elementwise stage; one built by hand "
                        "must follow the same rules)")
    return [v.type for v in body.outputs]


def body_problem(body: Graph) -> str | None:
    """What makes ``body`` unfit for the fused kernel, or ``None``: a valid graph (``verify``) of one or more
    single-output ``elementwise`` + ``accepts_out`` ops without side effects, every value of one type, every
    output made by a member (an output that is an input would alias it)."""
    from ..ir.verify import check_graph
    from ..ops_registry.registry import registry

    if not body.outputs:
        return "has no outputs"
    if not body.nodes:
        return "has no nodes"
    reg = registry()
    problems = check_graph(body, reg)
    if problems:
        return f"fails verify: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
    members = [n for n in body.nodes if n.op != "constant"]  # a body may hold its constants
    if not members:
        return "has no nodes but constants"
    kind = members[0].outputs[0].type if members[0].outputs else None
    for i, node in enumerate(body.nodes):
        if node.op == "constant":
            continue
        traits = reg.lookup(node.op).traits
        if "elementwise" not in traits or "accepts_out" not in traits or "has_side_effect" in traits or \
                node.op == FUSED_OP:
            return (f"holds node {i} ({node.op}), which is not an elementwise op that accepts `out` (traits "
                    f"{sorted(traits)}); only such ops can be fused")
        if len(node.outputs) != 1 or node.outputs[0].type != kind:
            return (f"holds node {i} ({node.op}) with outputs [{', '.join(str(v.type) for v in node.outputs)}]; "
                    f"every member has one output of the chain's one type {kind}")
    for j, v in enumerate(body.outputs):
        if v.producer is None or v.producer.op == "constant":
            return (f"returns {'its input' if v.producer is None else 'a constant'} as output {j}; every output "
                    "must be made by a member")
        if v in body.outputs[:j]:
            return f"returns one value twice (outputs {body.outputs.index(v)} and {j})"
    return None


_CODE: dict[str, Any] = {}  # generated source -> code object
_CODE_LIMIT = 4096


def build_fused_kernel(ctx: NodeContext) -> Callable[..., Any]:
    from ..ops_registry.registry import registry

    body: Graph = ctx.attrs["body"]
    reg = registry()
    out_type = body.outputs[0].type
    last_use: dict[Value, int] = {}
    for i, node in enumerate(body.nodes):
        for v in node.inputs:
            last_use[v] = i
    exports = set(body.outputs)
    namespace: dict[str, Any] = {"_empty": np.empty, "_shape": out_type.shape, "_dtype": out_type.dtype.np}

    def ignored_out(i: int) -> None:
        node = body.nodes[i]
        schema = reg.lookup(node.op)
        raise KernelError(f"the cpu kernel of op {node.op!r} (pack {schema.pack}, {schema.distribution}), member {i} "
                          "of a fused elementwise chain, did not return the `out` array it was given; with the "
                          "accepts_out trait a kernel must write its result into `out` and return it (a bug in "
                          f"pack {schema.pack})")
    namespace["_ignored_out"] = ignored_out

    # 1. register allocation: in place into a dying input, else a recycled register, else a new one
    reg_of: dict[Value, int] = {}
    free: list[int] = []
    first_write: dict[int, int] = {}
    steps = []
    extra: dict[int, str] = {}  # member -> trailing constant arguments of its ufunc form
    arg = {v: f"a{i}" for i, v in enumerate(body.inputs)}
    for i, node in enumerate(body.nodes):
        if node.op == "constant":  # a body may hold its constants: the code reads them as globals
            arg[node.outputs[0]] = f"c{i}"
            namespace[f"c{i}"] = node.attrs["value"]
            continue
        schema = reg.lookup(node.op)  # a stored key: no pack scope applies
        with op_scope(schema.namespace):
            kernel = schema.kernels["cpu"](
                NodeContext(schema, [v.type for v in node.inputs], node.attrs, [v.type for v in node.outputs]))
        form = getattr(kernel, "ufunc_form", None)
        if form is not None:  # call the ufunc itself, out by keyword: no Python frame per member
            kernel, constants = form
            for j, c in enumerate(constants):
                namespace[f"k{i}_{j}"] = c
            extra[i] = "".join(f", k{i}_{j}" for j in range(len(constants)))
        namespace[f"k{i}"] = kernel
        dying = [v for v in node.inputs if v in reg_of and last_use[v] == i and v not in exports]
        if dying:
            r = reg_of[dying[0]]
        elif free:
            r = free.pop()
        else:
            r = len(first_write)
        first_write.setdefault(r, i)
        for v in dying:
            if reg_of[v] != r and reg_of[v] not in free:
                free.append(reg_of[v])
        out = node.outputs[0]
        reg_of[out] = r
        steps.append((i, node.inputs, r))

    # 2. code: the register that ends up holding an export is the caller's `out` (one array for one export, a
    # tuple with one array or None per export for several), so planned buffers take every export
    export_of = {reg_of[v]: j for j, v in enumerate(body.outputs) if v in reg_of}
    lines = []
    for i, inputs, r in steps:
        if first_write[r] == i:
            export = export_of.get(r)
            if export is None:
                alloc = "_empty(_shape, _dtype)"
            elif len(body.outputs) == 1:
                alloc = "out if out is not None else _empty(_shape, _dtype)"
            else:
                alloc = f"out[{export}] if out is not None and out[{export}] is not None else _empty(_shape, _dtype)"
            lines.append(f"    r{r} = {alloc}")
        args = ", ".join(arg.get(v) or f"r{reg_of[v]}" for v in inputs)
        # a member that ignored `out` would leave the register unwritten: a silent wrong answer, so refuse it
        if i in extra:
            lines.append(f"    if k{i}({args}{extra[i]}, out=r{r}) is not r{r}: _ignored_out({i})")
        else:
            lines.append(f"    if k{i}({args}, r{r}) is not r{r}: _ignored_out({i})")
    params = ", ".join(f"a{i}" for i in range(len(body.inputs)))
    result = ", ".join(arg.get(v) or f"r{reg_of[v]}" for v in body.outputs)
    source = f"def fused({params}{', ' if params else ''}out=None):\n" + "\n".join(lines) + f"\n    return {result}\n"
    code = _CODE.get(source)
    if code is None:  # graphs repeat the same fused shapes (layers, chains): compile each text once
        if len(_CODE) >= _CODE_LIMIT:
            _CODE.clear()
        code = _CODE[source] = compile(source, "<fused_elementwise_internal>", "exec")
    exec(code, namespace)
    fn = namespace["fused"]
    fn.source = source
    return fn


def _example_body() -> Graph:
    g = Graph("fused")
    a = g.add_input("f32[4]")
    b = g.add_input("f32[4]")
    node = g.add_node("accumulate_internal", [a, b], {}, ["f32[4]"])
    node2 = g.add_node("accumulate_internal", [node.outputs[0], a], {}, ["f32[4]"])
    g.mark_output(node2.outputs[0])
    return g


FUSED = OpSchema(
    FUSED_OP,
    inputs=("xs",),
    outputs=("ys",),
    variadic=True,
    attrs={"body": AttrSpec("graph", doc="the fused chain: elementwise ops whose outputs share one type")},
    shape_infer=_fused_shape,
    kernels={"cpu": build_fused_kernel},
    not_differentiable="a compile-pipeline product made after differentiation; differentiate the "
                       "graph before compiling it",
    traits=("accepts_out",),  # not "elementwise": `out` must not alias an input (members read inputs late)
    doc="A chain of elementwise ops run with no intermediate allocations. Produced by the fuse_elementwise "
        "stage after differentiation; not differentiable (differentiate before compiling).",
    examples=[Example(["f32[4]", "f32[4]"], {"body": _example_body()})],
)
FUSED.namespace = "core"
