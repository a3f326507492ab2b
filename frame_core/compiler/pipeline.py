"""The compile pipeline: one ordered list of stages (SPEC §7).

    1 verify                 structural rules V1-V5, V7, V8
    2 infer_types            re-derive every output type from the schemas (V6)
    3 decompose              DecomposeFn where the backend has no kernel
    4 fold_constants         evaluate nodes whose inputs are all constants
    5 eliminate_common_subexpressions   merge identical nodes
    6 eliminate_dead_nodes   drop what no output needs (cleans up after autodiff)
    7 fuse_elementwise       chains of elementwise ops -> fused_elementwise_internal
    8 plan_memory            liveness, buffer reuse, peak bytes
    9 lower                  flat list of prebound instructions for the backend

Stages 1-7 are pure functions ``(Graph, CompileContext) -> Graph``; 8 and 9
produce the plan and the program. Plugins insert passes before or after a
named stage (``PassSpec``, hook ``frame_register_passes``), never by numeric
priority; a graph pass runs before ``plan_memory`` at the latest.
``opt_level`` picks which optional stages run (0: none, 1: folding and
dead-node elimination, 2: everything, the default); ``disable`` removes
named stages. With ``FRAME_CHECKS=1`` (or ``checks=True``) the full ``verify``
runs on the input (a ``VerifyError``, as without checks) and after every stage,
and an error names the stage that broke the graph.
"""

from __future__ import annotations

from operator import attrgetter

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import CompileError, FrameError, VerifyError
from ..ir.graph import Graph
from ..ops_registry.registry import op_scope
from .context import CompileContext
from .passspec import PLAN_STAGES, STAGES, PassSpec, pass_problems

__all__ = ["Stage", "PassSpec", "CompileContext", "STAGES", "OPTIONAL_STAGES", "run_graph_stages"]


@dataclass(frozen=True)
class Stage:
    """A built-in stage: ``name``, its function, the lowest ``opt_level`` that runs it, a one-line contract."""

    name: str
    fn: Callable[[Graph, CompileContext], Graph]
    min_level: int
    doc: str


def _stages() -> list[Stage]:
    from .passes.cse import eliminate_common_subexpressions
    from .passes.dce import eliminate_dead_nodes
    from .passes.decompose import decompose
    from .passes.fold import fold_constants
    from .passes.fuse import fuse_elementwise
    from .passes.infer import infer_types
    from .passes.verify import verify_structure

    return [
        Stage("verify", verify_structure, 0, "the graph satisfies rules V1-V5, V7, V8"),
        Stage("infer_types", infer_types, 0, "every recorded type equals the type its schema infers (V6)"),
        Stage("decompose", decompose, 0, "every op has a kernel for the backend"),
        Stage("fold_constants", fold_constants, 1, "no side-effect-free node has only constant inputs"),
        Stage("eliminate_common_subexpressions", eliminate_common_subexpressions, 2, "no two nodes compute the same thing"),
        Stage("eliminate_dead_nodes", eliminate_dead_nodes, 1, "every node is needed by an output or has a side effect"),
        Stage("fuse_elementwise", fuse_elementwise, 2, "chains of elementwise ops run as one fused node"),
    ]


_STAGE_CACHE: tuple[Stage, ...] = ()
_STAGE_LOCK = threading.Lock()


def stages() -> tuple[Stage, ...]:
    """The built-in graph stages, in order (built once; the passes are imported on first use).

    Threads making their first compile at once must not each add the stages (they once did, leaving
    7 x threads stages that every later compile ran): the tuple is built under a lock and published whole.
    """
    global _STAGE_CACHE
    if not _STAGE_CACHE:
        with _STAGE_LOCK:
            if not _STAGE_CACHE:
                _STAGE_CACHE = tuple(_stages())
    return _STAGE_CACHE


#: Stages a user may disable (the rest are needed for a correct program).
OPTIONAL_STAGES = ("fold_constants", "eliminate_common_subexpressions", "eliminate_dead_nodes",
                   "fuse_elementwise", "plan_memory")


def _ordered(ctx: CompileContext, disable: frozenset[str]) -> list[tuple[str, Callable[[Graph, CompileContext], Graph]]]:
    plugin = ctx.registry.passes
    for spec in plugin:  # the loader refuses bad specs; a registry assembled by hand may still hold one
        problems = pass_problems(spec)
        if problems:
            raise CompileError(f"pass from pack {spec.pack!r}: {'; '.join(problems)}")
    run: list[tuple[str, Callable[[Graph, CompileContext], Graph]]] = []

    def add_plugins(anchor: str, where: str) -> None:
        for spec in plugin:
            if getattr(spec, where) == anchor and ctx.opt_level >= spec.min_level and spec.name not in disable:
                record = ctx.registry.packs.get(spec.pack or "")
                name = f"{spec.name} (pack {spec.pack})"
                scoped = _in_scope(spec.fn, record.namespace if record else None)
                tested = record is not None and record.distribution in _TESTED_HERE
                run.append((name, scoped if tested else _pure(name, scoped)))

    for stage in stages():
        add_plugins(stage.name, "before")
        if ctx.opt_level >= stage.min_level and stage.name not in disable:
            run.append((stage.name, stage.fn))
        add_plugins(stage.name, "after")
    add_plugins("plan_memory", "before")
    return run


def _in_scope(fn: Callable[[Graph, CompileContext], Graph],
              namespace: str | None) -> Callable[[Graph, CompileContext], Graph]:
    """``fn`` run with its pack's op scope: short names it builds nodes with mean its own ops first."""
    def scoped(graph: Graph, ctx: CompileContext) -> Graph:
        with op_scope(namespace):
            return fn(graph, ctx)
    return scoped


def _pure(name: str, fn: Callable[[Graph, CompileContext], Graph]) -> Callable[[Graph, CompileContext], Graph]:
    """``fn``, a pack's pass, refused if it edits the caller's graph (the pass contract: it returns a new graph).

    The graph a pass is given may be the caller's own: a pass that reorders, adds or drops its nodes, or rewires
    one of the caller's nodes (its op, inputs, outputs or attributes), would break the user's graph for every
    later use, and make ``lower`` fail with a raw ``KeyError``. The caller's lists and nodes are restored, and the
    compile is a ``CompileError`` naming the pass. Nodes this compile made are the pipeline's to rewire in place
    (``Rewriter``), so they are not looked at. The check is linear in the graph (references and attribute items
    compared); the passes of the packs this repository ships and tests (``_TESTED_HERE``) skip it, so a default
    install pays nothing for it (it cost 0.7 s of a 100k-node compile when every pass was wrapped).
    """
    def guarded(graph: Graph, ctx: CompileContext) -> Graph:
        protected = ctx.protected or frozenset()
        lists = (graph.nodes[:], graph.inputs[:], graph.outputs[:]) if graph is ctx.source else None
        mine = lists[0] if lists is not None else [n for n in graph.nodes if n in protected]
        fields = list(map(_FIELDS, mine))
        items = [tuple(attrs.items()) for _, _, _, attrs in fields]
        try:
            return fn(graph, ctx)
        finally:
            edited = (lists is not None and (graph.nodes != lists[0] or graph.inputs != lists[1]
                                             or graph.outputs != lists[2])) or list(map(_FIELDS, mine)) != fields \
                or any(len(attrs) != len(kept) or any(attrs.get(k, _MISSING) is not v for k, v in kept)
                       for (_, _, _, attrs), kept in zip(fields, items))
            if edited:
                if lists is not None:
                    graph.nodes[:], graph.inputs[:], graph.outputs[:] = lists
                for n, (op, ins, outs, attrs), kept in zip(mine, fields, items):
                    n.op, n.inputs, n.outputs, n.attrs = op, ins, outs, attrs
                    attrs.clear()
                    attrs.update(kept)
                raise CompileError(f"stage {name!r} edited the caller's graph (its node list, outputs, or a "
                                   "node's inputs or attributes) instead of returning a new one; a pass is a pure "
                                   "function (see PassSpec): build a new Graph, or return the given one unchanged. "
                                   "The graph was restored")
    return guarded


_FIELDS = attrgetter("op", "inputs", "outputs", "attrs")
_MISSING = object()
#: Distributions whose passes this repository's tests prove pure: their passes run unwrapped.
_TESTED_HERE = frozenset({"frame-core", "frame-ops-basic", "frame-ops-fft", "frame-ops-sequence", "frame-ops-nn",
                          "frame-native"})


def run_graph_stages(graph: Graph, ctx: CompileContext, disable: frozenset[str] = frozenset()) -> Graph:
    """Run stages 1-7 (and plugin passes) in order; with ``ctx.checks``, verify after each one."""
    from ..ir.verify import check_graph

    unknown = set(disable) - set(STAGES) - {p.name for p in ctx.registry.passes}
    if unknown:
        raise CompileError(f"cannot disable unknown stage(s) {sorted(unknown)}; stages: {', '.join(STAGES)}")
    required = set(disable) & {"verify", "infer_types", "decompose", "lower"}
    if required:
        raise CompileError(f"stage(s) {sorted(required)} are needed for a correct program and cannot be disabled")
    if ctx.checks:  # the caller's graph first, in full: a mistake there is a VerifyError, not a stage's fault
        problems = check_graph(graph, ctx.registry)
        if problems:
            raise VerifyError(problems)
    # The caller's nodes are never released (see _release); stages share unchanged nodes with their
    # input, so the caller's nodes can sit inside any later graph.
    protected = ctx.protected = set(graph.nodes)
    ctx.source = graph
    for name, fn in _ordered(ctx, frozenset(disable)):
        ctx.dropped = None
        try:
            result = fn(graph, ctx)
        except FrameError:
            raise
        except (Exception, SystemExit) as exc:  # a pack's pass may even call exit(): the caller's process goes on
            raise CompileError(f"stage {name!r} failed with {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, Graph):
            raise CompileError(f"stage {name!r} returned {type(result).__name__}, expected a Graph")
        if ctx.checks:
            problems = check_graph(result, ctx.registry)
            if problems:
                listing = "\n  ".join(str(p) for p in problems[:10])
                raise CompileError(f"stage {name!r} produced an invalid graph (FRAME_CHECKS):\n  {listing}")
        if result is not graph:
            _check_interface(name, graph, result)
        if result is not graph:
            reported = ctx.dropped
            if reported is not None and ctx.checks:  # a stage's own account, checked against the graphs
                kept = set(result.nodes)
                wrong = [n.op for n in reported if n in kept]
                if wrong:
                    raise CompileError(f"stage {name!r} reported as dropped {len(wrong)} node(s) its result "
                                       f"still holds ({', '.join(wrong[:5])}) (FRAME_CHECKS)")
            _release(graph, result, protected, reported)
        graph = result
    return graph


def _check_interface(name: str, old: Graph, new: Graph) -> None:
    """A stage keeps the graph's input and output types (the pass contract): otherwise ``run`` would refuse the
    caller's arrays, or take other ones, and return other types, with nothing naming the stage. Cheap: two lists."""
    for what, before, after in (("input", old.input_types, new.input_types),
                                ("output", old.output_types, new.output_types)):
        if before != after:
            raise CompileError(f"stage {name!r} changed the graph's {what} types from "
                               f"[{', '.join(map(str, before))}] to [{', '.join(map(str, after))}]; a pass must keep "
                               "the graph's inputs and the type of each output")


def _release(old: Graph, new: Graph, protected: set[Any], reported: list[Any] | None = None) -> None:
    """Break the node/value cycles of ``old``'s nodes that ``new`` dropped and this compile created.

    Passes keep no reference to nodes after they return (the pass contract,
    see ``PassSpec``), so such nodes are garbage; without their ``outputs``
    links reference counting frees them at once, instead of leaving a hundred
    thousand objects (on a 10k-node training graph) to the cyclic collector.
    A stage that rewires this compile's nodes in place (``Rewriter(graph,
    ctx)``) may say which nodes it dropped (``ctx.dropped``): then only those
    are looked at, instead of every node of both graphs.
    """
    if reported is not None:
        dropped: Any = [n for n in reported if n not in protected]
    else:
        dropped = set(old.nodes)  # nodes hash and compare by identity: set algebra in C
        dropped.difference_update(new.nodes)
        dropped = dropped.difference(protected)  # (walks the few dropped nodes, not every protected one)
    for node in dropped:
        node.outputs = ()


def describe() -> list[dict[str, Any]]:
    """The built-in stages with their contracts (for docs and ``frame`` tooling)."""
    out = [{"name": s.name, "min_level": s.min_level, "doc": s.doc} for s in stages()]
    out.append({"name": "plan_memory", "min_level": 2, "doc": "intermediates share buffers; peak bytes known"})
    out.append({"name": "lower", "min_level": 0, "doc": "a flat list of prebound instructions"})
    return out
