"""Hostile any-batch checks over the op registry (docs/design-parameters-and-shapes.md, section 2).

One case is (op, example, graph kind, compile options, new batch): the graph of one node of the op traced at the
example's batch B (kind ``forward``; ``vjp`` its vector-Jacobian product; ``vjp2`` the VJP of that VJP, order 2;
``jvp`` its forward-mode graph) is compiled once with ``dynamic_shapes=True`` and run at a batch B'. The answer
must be one of:

* ``same``: a graph built from a trace at B' gives the same outputs, bit for bit;
* ``refused``: a named ``FrameError`` (a ``ShapeError`` saying what was traced and what was given) where the
  graph may not run at B'; a forward graph is never refused where a fresh trace at B' runs;
* ``both-refuse``: B' is no shape the op takes (a fresh trace is refused too, by name), or the inputs drawn for
  B' are out of range (indices): both runs refuse with a ``FrameError``;
* ``no-graph``: there is no graph of that kind to run at any batch (the op has no floating input, or declares no
  gradient: ``build_vjp_graph`` refuses it by name at the example already). Counted, never silently dropped.

Anything else is a finding: ``wrong`` (a silent wrong answer), ``crash`` (an exception that is no
``FrameError``, a numpy traceback), ``refused-forward`` (a forward graph refused where a fresh trace runs),
``refused-declared`` (a gradient through an op declaring ``any_shape_gradient`` refused at another batch),
``runs-where-refused`` (a derivative graph runs at a B' the op itself refuses: it answers for inputs that have no
answer; ``build_vjp_graph`` keeps the forward's nodes so that ``specialize`` checks them).

The batch is the leading axis of every input of rank 2 or more whose leading size is the first such input's
(of rank 1 where the op has no input of rank 2). ``tests/autodiff/test_any_batch_registry.py`` runs a fast
subset; ``benchmarks/any_batch_sweep.py`` every case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import frame_core as fc
import frame_core.ir.graph
from frame_core.testing.opcheck import op_graph

KINDS = ("forward", "vjp", "vjp2", "jvp")
FINDINGS = ("wrong", "crash", "refused-forward", "refused-declared", "runs-where-refused")
ACCEPTED = ("same", "refused", "both-refuse", "no-graph")  # every case ends in one of these or in a finding


@dataclass
class Outcome:
    verdict: str  # same, refused, both-refuse, no-graph, or one of FINDINGS
    detail: str = ""


def batch_axis(types: Sequence[fc.TensorType]) -> tuple[int, int] | None:
    """``(B, minimum rank)`` of the example's batch, or None when no input has an axis."""
    for rank in (2, 1):
        lead = next((t.shape[0] for t in types if t.rank >= rank), None)
        if lead is not None:
            return lead, rank
    return None


def resized(types: Sequence[fc.TensorType], batch: tuple[int, int], size: int) -> list[fc.TensorType]:
    lead, rank = batch
    return [t.with_shape((size, *t.shape[1:])) if t.rank >= rank and t.shape[0] == lead else t for t in types]


def _new_types(schema: Any, types: Sequence[fc.TensorType], attrs: dict, batch: tuple[int, int],
               size: int) -> list[fc.TensorType]:
    """The inputs at batch ``size``: those of rank 2 or more first; where the op refuses them, every input of that
    leading size (labels beside logits)."""
    first = resized(types, batch, size)
    if batch[1] == 1:
        return first
    try:
        _forward(schema, first, attrs, {batch[0]: size})
        return first
    except fc.FrameError:
        every = resized(types, (batch[0], 1), size)
        try:
            _forward(schema, every, attrs, {batch[0]: size})
            return every
        except Exception:  # noqa: BLE001 - the first form's refusal is the one to report
            return first


def _differentiable(schema: Any, types: Sequence[fc.TensorType]) -> list[int]:
    return [k for k, t in enumerate(types) if t.dtype.is_float and k not in schema.nondiff_inputs]


def _forward(schema: Any, types: Sequence[fc.TensorType], attrs: dict, sizes: dict[int, int]) -> fc.Graph:
    try:
        return op_graph(schema, list(types), attrs)
    except fc.ShapeError:
        if not sizes or not any(isinstance(a, fc.Graph) for a in attrs.values()):
            raise
    # a body traced at the example's sizes (if_else's branches, a fused group): traced again at the new ones
    bodies = {k: fc.specialize(a, [t.with_shape(tuple(sizes.get(d, d) for d in t.shape)) for t in
                                   (v.type for v in a.inputs)]) if isinstance(a, fc.Graph) else a
              for k, a in attrs.items()}
    return op_graph(schema, list(types), bodies)


def build(schema: Any, kind: str, types: Sequence[fc.TensorType], attrs: dict,
          sizes: dict[int, int] | None = None, chosen: list[list[int]] | None = None,
          output: int | None = None) -> fc.Graph:
    """The graph of ``kind`` for one node of ``schema`` on inputs of ``types`` (``sizes``: old -> new batch, for
    the bodies an attribute holds). ``chosen`` receives the ``wrt`` of each VJP taken (first call) or gives them
    (a second call), so that a fresh trace differentiates with respect to the same inputs. ``output``: the graph
    returns that output of the node only (the others are unused: zero cotangents, tangents nobody reads)."""
    forward = _forward(schema, types, attrs, sizes or {})
    if output is not None:
        forward.outputs = [forward.outputs[output]]
    wrt = _differentiable(schema, types)
    if kind == "forward":
        return forward
    if not wrt:
        raise _Unsupported("no floating input")
    if kind == "jvp":
        return fc.build_jvp_graph(forward, wrt)
    given = chosen[:] if chosen else None
    vjp = _live_vjp(forward, wrt, given, chosen)
    if kind == "vjp":
        return vjp
    # order 2: through the primal inputs and the cotangents of the VJP
    return _live_vjp(vjp, [k for k, v in enumerate(vjp.inputs) if v.type.dtype.is_float], given, chosen)


def _live_vjp(graph: fc.Graph, wrt: list[int], given: list[list[int]] | None,
              chosen: list[list[int]] | None) -> fc.Graph:
    """The VJP with respect to the inputs of ``wrt`` whose gradient is not zero everywhere (a zero of the traced
    shape marks the graph, refused at any other size: right, documented, and nothing to check); with respect to
    all of ``wrt`` when every gradient is zero (the zeros then follow the batch, or the mark refuses it)."""
    if given:
        return fc.build_vjp_graph(graph, given.pop(0))
    vjp = fc.build_vjp_graph(graph, wrt)
    live = [k for k, g in zip(wrt, vjp.outputs) if not fc.ir.graph.is_zero_constant(g)] or wrt
    if chosen is not None:
        chosen.append(live)
    return vjp if live == wrt else fc.build_vjp_graph(graph, live)


class _Unsupported(Exception):
    pass


def arrays_for(example: Any, graph: fc.Graph, n_primal: int, batch: tuple[int, int], size: int,
               rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs of ``graph`` at batch ``size``: the example's (fixed values repeated along the batch, else drawn),
    then uniform cotangents or tangents."""
    primal = [v.type for v in graph.inputs[:n_primal]]
    if example.values is not None:
        lead, rank = batch
        arrays = []
        for value, t in zip(example.values, primal):
            value = np.asarray(value).astype(t.dtype.np)
            if value.shape != t.shape:  # a batch axis: rows of the example, cyclically
                value = np.take(value, np.arange(t.shape[0]) % max(lead, 1), axis=0) if lead else \
                    np.zeros(t.shape, t.dtype.np)
            arrays.append(value)
    else:
        arrays = fc.Example(primal, example.attrs, low=example.low, high=example.high,
                            min_abs=example.min_abs).sample(rng)
    for v in graph.inputs[n_primal:]:
        t = v.type
        arrays.append(rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np) if t.dtype.is_float
                      else np.zeros(t.shape, t.dtype.np))
    return arrays


def _same(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    if len(got) != len(want):
        return f"{len(got)} outputs, a fresh trace gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k} is {a.dtype}{list(a.shape)}, a fresh trace gives {b.dtype}{list(b.shape)}"
        if a.tobytes() != b.tobytes():
            diff = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))) if a.size else 0.0
            return f"output {k} differs from a fresh trace's (largest difference {diff:.3g})"
    return ""


def _named(exc: BaseException) -> bool:
    """A refusal by name; a ``KernelError`` is none: the shape function took the shapes, and the kernel failed."""
    return isinstance(exc, fc.FrameError) and not isinstance(exc, fc.KernelError)


class _Specialised:
    """What ``compile(graph, dynamic_shapes=True)`` runs at new shapes, without compiling the traced ones first:
    ``specialize`` then ``compile`` (the fast test's way; the sweep goes through the ``DynamicExecutable``)."""

    def __init__(self, graph: fc.Graph, options: dict) -> None:
        self.graph, self.options = graph, options

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        types = [fc.TensorType(fc.as_dtype(a.dtype), a.shape) for a in arrays]
        return fc.compile(fc.specialize(self.graph, types), **self.options).run(arrays)


def check(op: str, index: int, kind: str, size: int, *, options: dict | None = None, seed: int = 0,
          compile_fn: Callable[..., Any] | None = None, executable: bool = True,
          output: int | None = None) -> Outcome:
    """One case; ``options`` go to ``compile`` (``opt_level``, ``backend``); ``executable=False`` specialises and
    compiles the traced graph for the new shapes directly rather than through a ``DynamicExecutable``."""
    reg = fc.registry()
    schema = reg.schemas[op]
    example = schema.examples[index]
    types = [fc.as_type(t) for t in example.inputs]
    batch = batch_axis(types)
    if batch is None:
        return Outcome("no-graph", "no input has an axis")
    options = dict(options or {}, cache=False)
    compile_fn = compile_fn or fc.compile
    chosen: list[list[int]] = []
    try:
        traced = build(schema, kind, types, example.attrs, chosen=chosen, output=output)
    except _Unsupported as why:
        return Outcome("no-graph", str(why))
    except fc.FrameError as exc:
        return Outcome("no-graph", f"no {kind} graph at the example: {type(exc).__name__}")
    new_types = _new_types(schema, types, example.attrs, batch, size)
    rng = np.random.default_rng(seed)
    try:
        fresh = build(schema, kind, new_types, example.attrs, {batch[0]: size}, chosen, output)
    except Exception as exc:  # noqa: BLE001 - the point is to see what it raises
        if not _named(exc):
            return Outcome("crash", f"a trace at batch {size}: {type(exc).__name__}: {exc}")
        fresh = None
        why_fresh = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    graph_types = [v.type for v in fresh.inputs] if fresh is not None else None
    if graph_types is None:  # the new batch is no shape the op takes: the dynamic run must refuse by name
        graph_types = [*new_types, *(v.type for v in traced.inputs[len(types):])]
    try:
        dynamic = compile_fn(traced, dynamic_shapes=True, **options) if executable else _Specialised(traced, options)
    except Exception as exc:  # noqa: BLE001
        return Outcome("crash", f"compile at the traced batch: {type(exc).__name__}: {exc}")  # (built, so it compiles)
    if fresh is None:
        arrays = [np.zeros(t.shape, t.dtype.np) for t in graph_types]
    else:
        arrays = arrays_for(example, fresh, len(types), batch, size, rng)
    want = None
    if fresh is not None:
        try:
            want = compile_fn(fresh, **options).run([a.copy() for a in arrays])
        except Exception as exc:  # noqa: BLE001
            if not _named(exc):
                return Outcome("crash", f"a fresh trace at batch {size} runs into {type(exc).__name__}: {exc}")
            why_fresh = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    try:
        got = dynamic.run([a.copy() for a in arrays])
    except Exception as exc:  # noqa: BLE001
        message = f"{type(exc).__name__}: {str(exc)[:600]}"
        if not _named(exc):
            return Outcome("crash", message)
        if want is None:
            return Outcome("both-refuse", f"fresh: {why_fresh}; dynamic: {message[:200]}")
        if kind == "forward":
            return Outcome("refused-forward", message)
        if isinstance(exc, fc.InputError) and [v.type.rank for v in fresh.inputs] != [v.type.rank for v in
                                                                                    traced.inputs]:
            # at B' the op's output has another rank (squeeze() of axes that are no longer 1): so has the
            # cotangent, and the executable refuses an input of another rank, by position
            return Outcome("refused", f"[another rank] {message}")
        if not isinstance(exc, fc.ShapeError) or "traced as" not in str(exc):
            return Outcome("crash", f"refused without naming the shapes: {message}")
        reason = refusal(str(exc))
        # the trait promises the VJP (the conformance kit's check); cross_entropy's gradient refuses another class
        # count by design, and a vector example's one axis is its class axis
        if "any_shape_gradient" in schema.traits and kind == "vjp" and reason.startswith(
                ("no trait", "node refuses", "other")) and not (op == "cross_entropy" and batch[1] == 1):
            return Outcome("refused-declared", f"[{reason}] {message}")
        return Outcome("refused", f"[{reason}] {message}")
    if want is None:
        if kind != "forward":  # no answer is right for inputs the op refuses
            return Outcome("runs-where-refused", f"runs at batch {size} where a fresh trace refuses ({why_fresh})")
        return Outcome("wrong", f"the dynamic graph runs at batch {size} where a fresh trace refuses ({why_fresh})")
    problem = _same(got, want)
    return Outcome("wrong", problem) if problem else Outcome("same")


REFUSALS = [  # (pattern in a ShapeError, the class of refusal)
    (r"gets zeros of its traced shape", "zero gradient of the traced shape"),
    (r"tangent of output .* is zeros of its traced shape", "zero tangent of the traced shape"),
    (r"forward(?:-mode)? rule of (\w+) may hold", "no trait (forward rule): {0}"),
    (r"unused output of (\w+)", "unused output of {0}"),
    (r"gradient of (\w+) may hold the traced sizes", "no trait: {0}"),
    (r"Node \d+ \((\w+)\) refuses them", "node refuses: {0}"),
    (r"read a tensor's shape", "read a size"),
]


def refusal(message: str) -> str:
    """The class of a re-specialisation refusal, for the sweep's summary."""
    for pattern, label in REFUSALS:
        found = re.search(pattern, message)
        if found:
            return label.format(*found.groups())
    return "other: " + message.splitlines()[0][:120]


def cases(ops: Sequence[str] | None = None, kinds: Sequence[str] = KINDS, first_only: bool = False):
    """(op, example index, kind, new batch) for every example with a batch axis, at B' = 1, B+3, 2B and 0."""
    reg = fc.registry()
    for op in sorted(ops if ops is not None else reg.schemas):
        schema = reg.schemas[op]
        for index, example in enumerate(schema.examples[:1] if first_only else schema.examples):
            batch = batch_axis([fc.as_type(t) for t in example.inputs])
            if batch is None:
                continue
            lead = batch[0]
            for kind in kinds:
                for size in sorted({1, lead + 3, 2 * lead, 0} - {lead}):
                    yield op, index, kind, size
