"""The ``compile_fused_groups`` pass: eligible fused groups become ``native_fused_internal`` nodes.

Runs right after ``fuse_elementwise``. A ``fused_elementwise_internal`` node
whose body holds only exactly rounded ops on float32 or float64 (see
``codegen.why_not``) is rewritten into the pack's op with the same body
(``fuse_elementwise`` has put the group's constants in it); everything else
is left alone. The pass does no compiling itself (that happens in the
background, after the group has run on numpy), so it adds a scan of the
fused nodes to ``compile``, nothing more.

Under ``compile(fast_math=True)`` each float32 ``tanh`` member of a group is
first replaced by ``fast_tanh_internal`` (``approx.py``, a clamped rational
approximation that both tiers compute alike), so groups holding tanh compile.

Switched off by ``FRAME_NATIVE=0`` (read at every compile), by
``FRAME_DISABLE_PLUGINS=native``, in a forked child, and when llvmlite is not
installed (a one-line note).
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from frame_core import FUSED_OP, Graph, Node, Rewriter, Value, env_flag

from .tiered import NATIVE_OP

if TYPE_CHECKING:  # (split.py is loaded by the first compile that has fused groups, not when the pack registers)
    from .split import Prefix, Split

__all__ = ["compile_fused_groups", "enabled", "switched_off"]

_LLVMLITE: list[bool] = []  # found or not, looked up once per process
_op = attrgetter("op")


def switched_off() -> bool:
    """Whether ``FRAME_NATIVE`` says off (0, false, no or off; a word it does not accept warns and leaves it on, as
    for every ``FRAME_*`` switch). Also the pass's part of the compile cache's key: a graph compiled with the pack
    on is compiled again, not served from the cache, once it is switched off."""
    return not env_flag("FRAME_NATIVE", default=True)


def enabled() -> str | None:
    """Why the pack is off in this process right now, or None when it is on."""
    if switched_off():
        return "FRAME_NATIVE=0"
    if not _LLVMLITE:
        import importlib.util

        _LLVMLITE.append(importlib.util.find_spec("llvmlite") is not None)
    if not _LLVMLITE[0]:
        return "llvmlite is not installed (pip install llvmlite)"
    from . import jit  # (loaded at the first compile that has fused groups, not when the pack registers)

    status = jit.status()
    if not status["active"]:
        return status["disabled"] or "forked child process"
    return None


def _verdict(body: Graph, packs: dict[str, str | None], schemas: Any) -> str | None:
    from .codegen import EXACT, why_not

    other = next((n.op for n in body.nodes if n.op not in EXACT and n.op != "constant"), None)
    if other is not None:  # most rejections: an op that is not compiled (tanh, exp, ...)
        return f"op {other}"
    for n in body.nodes:
        if n.op not in packs:
            packs[n.op] = schemas[n.op].pack if n.op in schemas else None
    return why_not(body, packs)


def _approximations(fused: list[Node], packs: dict[str, str | None], schemas: Any) -> dict[Node, Graph]:
    """Under ``compile(fast_math=True)``: each fused node whose body holds a float32 tanh, to the body with
    ``fast_tanh_internal`` in its place (``approx.py``; made once per shared body)."""
    from .approx import approximate_body

    if "tanh" not in packs:
        packs["tanh"] = schemas["tanh"].pack if "tanh" in schemas else None
    made: dict[int, Graph | None] = {}
    result = {}
    for node in fused:
        body = node.attrs["body"]
        if id(body) not in made:
            made[id(body)] = approximate_body(body, packs)
        approximated = made[id(body)]
        if approximated is not None:
            result[node] = approximated
    return result


def compile_fused_groups(graph: Graph, ctx: Any) -> Graph:
    if FUSED_OP not in ctx.ops(graph) or ctx.backend != "cpu":
        return graph
    nodes = graph.nodes
    at = [i for i, op in enumerate(map(_op, nodes)) if op == FUSED_OP]
    fused = list(map(nodes.__getitem__, at))
    off = enabled()
    if off is not None:
        if "FRAME_NATIVE" not in off:
            from . import jit

            jit.note(off)
        ctx.note("compile_fused_groups", f"off: {off}")
        return graph
    schemas = ctx.registry.schemas
    packs: dict[str, str | None] = {}
    approximated = _approximations(fused, packs, schemas) if getattr(ctx, "fast_math", False) else {}
    reasons: Counter = Counter()
    verdicts: dict[int, str | None] = {}  # fusion shares one body among groups of one structure
    cut: dict[int, Cut | None] = {}  # ... and its split, made once per body
    plans: dict[int, Any] = {}  # position -> its cut, or None to compile the whole group
    for i, node in zip(at, fused):
        body = approximated.get(node) or node.attrs["body"]
        key = id(body)
        reason = verdicts.get(key, "")
        if reason == "":
            reason = verdicts[key] = _verdict(body, packs, schemas)
        if reason is None:
            plans[i] = None
            continue
        if reason.startswith("op ") and key not in cut:  # a numpy-only op: compile the members around it
            cut[key] = _native_split(body, packs, schemas)
        split = cut.get(key)
        if split is not None:
            plans[i] = split
        else:
            reasons[reason.split(" (")[0]] += 1
    if not plans:
        ctx.note("compile_fused_groups", f"no group compiles ({dict(reasons)})")
        return graph
    rw = Rewriter(graph, ctx)
    append, vmap = rw.new.nodes.append, rw.vmap
    done = 0  # nodes before this position are placed
    for i, split in plans.items():  # (in graph order)
        rw.keep(nodes[done:i])
        done = i + 1
        node = nodes[i]
        if split is not None:
            _emit_split(node, split, rw)
            continue
        body = approximated.get(node)  # (fast_math: its float32 tanh approximated) or the same body, with its constants
        new = Node(NATIVE_OP, rw.read(node.inputs), node.attrs if body is None else {**node.attrs, "body": body})
        new.outputs = tuple([Value(v.type, new, j) for j, v in enumerate(node.outputs)])
        append(new)
        for old, value in zip(node.outputs, new.outputs):
            vmap[old] = value
    rw.keep(nodes[done:])
    chosen = sum(1 for split in plans.values() if split is None)
    note = f"{chosen} of {len(fused)} fused groups tier up to native code"
    if chosen < len(plans):
        note += f", {len(plans) - chosen} more after their numpy-only members"
    ctx.note("compile_fused_groups", note + (f"; the others: {dict(reasons)}" if reasons else ""))
    ctx.dropped = list(map(nodes.__getitem__, plans))  # (replaced; the pipeline releases them)
    return rw.finish()


#: How a group with a numpy-only op is cut: a compiled prefix (``split_prefix``) of its numpy part, and a
#: compiled part after it (``split_body``); at least one of the two.
Cut = tuple["Prefix | None", "Split | None"]


def _broadcast(node: Node) -> bool:
    """Whether ``node`` reads an operand broadcast across rows (neither a scalar nor of its own size)."""
    size = node.outputs[0].type.size
    return any(v.type.size not in (1, size) for v in node.inputs)


def _native_split(body: Graph, packs: dict[str, str | None], schemas: Any) -> Cut | None:
    """``body`` cut around its numpy-only members where the parts compile, else None: the members after them
    (``split_body``) and the members before them that numpy would run slower (``split_prefix``)."""
    from .codegen import EXACT
    from .split import split_body, split_prefix

    split = split_body(body, EXACT)
    if split is not None and _verdict(split.native_body, packs, schemas) is not None:
        split = None
    prefix = split_prefix(split.numpy_body if split is not None else body, EXACT, _broadcast)
    if prefix is not None and _verdict(prefix.native_body, packs, schemas) is not None:
        prefix = None
    return None if prefix is None and split is None else (prefix, split)


def _new_node(op: str, inputs: list[Value], body: Graph, rw: Rewriter) -> Node:
    node = Node(op, tuple(inputs), {"body": body})
    node.outputs = tuple([Value(v.type, node, j) for j, v in enumerate(body.outputs)])
    rw.new.nodes.append(node)
    return node


def _emit_split(node: Node, cut: Cut, rw: Rewriter) -> None:
    """``node`` as two or three nodes: a compiled prefix, the fused numpy group, then the compiled group
    reading its outputs."""
    prefix, split = cut
    inputs = rw.read(node.inputs)
    numpy_body = split.numpy_body if split is not None else node.attrs["body"]
    numpy_inputs = [inputs[i] for _, i in split.numpy_inputs] if split is not None else list(inputs)
    if prefix is None:
        first = _new_node(FUSED_OP, numpy_inputs, numpy_body, rw)
        made = list(first.outputs)
    else:
        early = _new_node(NATIVE_OP, [numpy_inputs[i] for _, i in prefix.native_inputs], prefix.native_body, rw)
        rest = _new_node(FUSED_OP, [numpy_inputs[i] if kind == "input" else early.outputs[i]
                                    for kind, i in prefix.rest_inputs], prefix.rest_body, rw)
        made = [(early if part == "native" else rest).outputs[j] for part, j in prefix.outputs]
    if split is None:
        for old, value in zip(node.outputs, made):
            rw.alias(old, value)
        return
    second = _new_node(NATIVE_OP, [inputs[i] if kind == "input" else made[i] for kind, i in split.native_inputs],
                       split.native_body, rw)
    for old, (part, j) in zip(node.outputs, split.outputs):
        rw.alias(old, made[j] if part == "numpy" else second.outputs[j])
