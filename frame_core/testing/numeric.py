"""Numerical gradient checks: analytic gradients against central differences (ARCH-066, ARCH-069).

First order: ``build_backward_graph`` of the scalar ``L(x) = sum(w * y)``
(``add_scalar_contraction`` with fixed random weights ``w``, so the check is
not only the all-ones vector-Jacobian product) against the central
difference ``(L(x + h e_i) - L(x - h e_i)) / 2h`` of every element ``i``.

Order ``k + 1``: contract the order-``k`` gradients with new random weights
``v`` (``S = sum(v * g_k)``), apply ``build_backward_graph`` again (ARCH-067),
and compare against central differences of ``S`` evaluated by running the
order-``k`` graph, i.e. of the analytic lower-order gradient.

Everything runs in float64: the graph is re-typed (``retype_graph``) and the
inputs cast. The step for element ``x_i`` is ``STEP * max(1, |x_i|)``; the
denominator is the step actually taken after rounding. Inputs with more than
``MAX_FULL_ELEMENTS`` elements are checked along ``DIRECTIONS`` random
directions ``v`` instead (``g . v`` against the directional difference).

The error of a comparison is ``max_i |a_i - n_i| / (1 + |n_i|)``: relative
for entries above 1, absolute below (``relative_error``). Tolerances are
module constants; change them here for a whole session, or pass
``tolerance=`` to a check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._args import positive_int, refuse_unordered
from ..autodiff.backward import input_position
from ..errors import ArgumentError, FrameError, GradientError, ShapeError, UnknownOpError
from ..ir.dtypes import DType, as_dtype, float32, float64
from ..ir.graph import Graph
from ..ir.types import TensorType
from ..ops_registry.registry import Registry, registry as current_registry, use_registry
from .results import CheckResult, OpReport, gradient_check_name
from .retype import retype_array, retype_graph

__all__ = [
    "STEP",
    "SECOND_DIFFERENCE_STEP",
    "TOLERANCE",
    "HIGHER_ORDER_TOLERANCE",
    "FLOAT32_STEP",
    "FLOAT32_TOLERANCE",
    "LOW_PRECISION_TOLERANCE",
    "MAX_FULL_ELEMENTS",
    "DIRECTIONS",
    "central_difference",
    "directional_difference",
    "central_second_difference",
    "relative_error",
    "tolerance_for",
    "check_gradients",
    "check_random_direction",
    "check_low_precision",
]

#: Central-difference step in float64, relative to ``max(1, |x|)``: truncation ~h^2, rounding ~1e-16/h.
STEP = 1e-6
#: Step of ``central_second_difference`` (rounding error grows as 1e-16/h^2, so h ~ eps^(1/4)).
SECOND_DIFFERENCE_STEP = 1e-4
#: Bound on ``relative_error`` by derivative order, in float64 (observed errors are ~1e-9).
TOLERANCE = {1: 1e-6, 2: 1e-5}
#: Bound for orders above those in ``TOLERANCE``.
HIGHER_ORDER_TOLERANCE = 1e-4
#: Step and bounds used when an op refuses float64 and is checked in float32 instead.
FLOAT32_STEP = 1e-3
FLOAT32_TOLERANCE = {1: 2e-2, 2: 5e-2}
#: Bound on ``relative_error`` of a low-precision gradient against its float32 reference.
LOW_PRECISION_TOLERANCE = {"float16": 5e-3, "bfloat16": 3e-2}
#: Inputs with more elements than this are checked along random directions, not element by element.
MAX_FULL_ELEMENTS = 512
#: Number of random directions per input in a random-direction check.
DIRECTIONS = 3


# -- finite differences -------------------------------------------------------------------------
def central_difference(f: Callable[[np.ndarray], float], x: np.ndarray, step: float | None = None) -> np.ndarray:
    """The gradient of the scalar function ``f`` at ``x`` by central differences, element by element.

    ``f`` receives an array of ``x``'s shape and dtype (the same buffer,
    perturbed in place and restored; do not keep it). The step for
    element ``i`` is ``step * max(1, |x_i|)`` (``step`` defaults to ``STEP``).
    """
    step = STEP if step is None else step
    x = np.array(x, copy=True)
    grad = np.empty(x.shape, np.float64)
    flat, g = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        original = flat[i]
        h = step * max(1.0, abs(float(original)))
        flat[i] = original + h
        plus_x = float(flat[i])
        f_plus = f(x)
        flat[i] = original - h
        minus_x = float(flat[i])
        f_minus = f(x)
        flat[i] = original
        g[i] = (float(f_plus) - float(f_minus)) / (plus_x - minus_x)
    return grad


def directional_difference(f: Callable[[np.ndarray], float], x: np.ndarray, v: np.ndarray,
                           step: float | None = None) -> float:
    """``(f(x + h v) - f(x - h v)) / 2h``, the derivative of ``f`` at ``x`` along ``v``.

    ``h = step * max(1, max|x|) / max|v|``, so the largest move is the element step.
    """
    step = STEP if step is None else step
    x = np.asarray(x)
    v = np.asarray(v, np.float64)
    scale = float(np.max(np.abs(v))) if v.size else 0.0
    if scale == 0.0:
        return 0.0
    h = step * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0) / scale
    plus = (x + h * v).astype(x.dtype)
    minus = (x - h * v).astype(x.dtype)
    return (float(f(plus)) - float(f(minus))) / (2.0 * h)


def central_second_difference(f: Callable[[float], float], x: float, step: float | None = None) -> float:
    """``(f(x + h) - 2 f(x) + f(x - h)) / h^2``: the second derivative of a scalar function of a scalar.

    ``h = step * max(1, |x|)``. Its error is about ``h^2 |f''''| / 12 + 4 eps |f| / h^2``
    (~1e-8 with the default step ``SECOND_DIFFERENCE_STEP``): compare with a tolerance near 1e-6 relative.
    """
    step = SECOND_DIFFERENCE_STEP if step is None else step
    x = float(x)
    h = step * max(1.0, abs(x))
    return (float(f(x + h)) - 2.0 * float(f(x)) + float(f(x - h))) / (h * h)


def relative_error(analytic: Any, reference: Any) -> float:
    """``max_i |a_i - r_i| / (1 + |r_i|)`` (0 for empty arrays; ``inf`` if either holds a NaN or an infinity)."""
    a = np.asarray(analytic, np.float64)
    r = np.asarray(reference, np.float64)
    if a.shape != r.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(r))):
        return float("inf")
    return float(np.max(np.abs(a - r) / (1.0 + np.abs(r))))


def tolerance_for(order: int, dtype: DType | str = float64) -> float:
    """The default bound for an order-``order`` check computed in ``dtype`` (float64 or the float32 fallback)."""
    if as_dtype(dtype) is float32:
        return FLOAT32_TOLERANCE.get(order, max(FLOAT32_TOLERANCE.values()) * 2)
    return TOLERANCE.get(order, HIGHER_ORDER_TOLERANCE)


def _worst_element(analytic: np.ndarray, numeric: np.ndarray, reference: str = "finite difference") -> str:
    a = np.asarray(analytic, np.float64)
    n = np.asarray(numeric, np.float64)
    if a.size == 0 or a.shape != n.shape:
        return f"shapes {list(a.shape)} and {list(n.shape)}"
    with np.errstate(invalid="ignore"):
        err = np.abs(a - n) / (1.0 + np.abs(n))
    err = np.where(np.isfinite(err), err, np.inf)
    i = np.unravel_index(int(np.argmax(err)), a.shape)
    where = f"[{', '.join(map(str, i))}]" if a.ndim else "[]"
    return f"worst at {where}: analytic {a[i]:.9g}, {reference} {n[i]:.9g}"


# -- the ladder of derivative graphs ----------------------------------------------------------------
Target = tuple[int, "np.ndarray | None"]


class GradientLadder:
    """Graphs ``G_0`` (the graph checked), ``G_1``, ``G_2``, ...: ``G_k`` = ``build_backward_graph`` of a
    weighted scalar contraction of ``G_{k-1}`` (ARCH-067). The last ``len(wrt)`` outputs of ``G_k`` are
    the analytic order-``k`` gradients; ``objective(k, xs)`` is the contraction of ``G_k`` evaluated by
    running it and contracting in numpy, whose central differences the order-``k + 1`` gradients must match.

    ``targets`` are ``(output index, weights or None)`` pairs of ``G_0``; ``None`` uses a scalar output
    as it is. ``objective0`` replaces the level-0 objective (the ARCH-066 surrogate).
    """

    def __init__(self, graph: Graph, wrt: Sequence[int], targets: Sequence[Target], rng: np.random.Generator,
                 reg: Registry, *, objective0: Callable[[list[np.ndarray]], float] | None = None) -> None:
        self.wrt = list(wrt)
        self.graphs = [graph]
        self.targets: list[list[Target]] = [list(targets)]
        self.rng = rng
        self.reg = reg
        self.objective0 = objective0
        self._exes: dict[int, Any] = {}

    def graph(self, k: int) -> Graph:
        from ..autodiff.backward import build_backward_graph

        while len(self.graphs) <= k:
            level = len(self.graphs) - 1
            contracted, index = contract(self.graphs[level], self.targets[level], self.reg)
            nxt = build_backward_graph(contracted, index, self.wrt, registry=self.reg)
            nxt.name = f"{self.graphs[0].name}_d{level + 1}"
            n, m = len(nxt.outputs), len(self.wrt)
            self.graphs.append(nxt)
            self.targets.append([(n - m + j, random_weights(nxt.outputs[n - m + j].type, self.rng)) for j in range(m)])
        return self.graphs[k]

    def run(self, k: int, xs: list[np.ndarray]) -> list[np.ndarray]:
        exe = self._exes.get(k)
        if exe is None:
            from ..compiler.api import compile

            exe = self._exes[k] = compile(self.graph(k), opt_level=0, cache=False, registry=self.reg)
        return exe.run(xs)

    def objective(self, k: int, xs: list[np.ndarray]) -> float:
        if k == 0 and self.objective0 is not None:
            return float(self.objective0(xs))
        outs = self.run(k, xs)
        return contract_values(outs, self.targets[k])

    def gradients(self, k: int, xs: list[np.ndarray]) -> list[np.ndarray]:
        outs = self.run(k, xs)
        return outs[len(outs) - len(self.wrt):]

    def check(self, order: int, xs: list[np.ndarray], *, step: float, tolerance: float, directions: int | None,
              labels: Sequence[str], rng: np.random.Generator) -> tuple[bool, float, str]:
        """Compare the order-``order`` gradients with central differences; return ``(ok, error, detail)``.

        ``directions=None`` checks element by element up to ``MAX_FULL_ELEMENTS`` and along
        ``DIRECTIONS`` random directions above; an int forces that many random directions.
        """
        analytic = self.gradients(order, xs)
        worst, parts = 0.0, []
        for j, i in enumerate(self.wrt):
            def f(xi: np.ndarray, i: int = i) -> float:
                return self.objective(order - 1, [*xs[:i], xi, *xs[i + 1:]])

            x = xs[i]
            if directions is None and x.size <= MAX_FULL_ELEMENTS:
                numeric = central_difference(f, x, step)
                err = relative_error(analytic[j], numeric)
                where = _worst_element(analytic[j], numeric) if err > tolerance else ""
            else:
                err, where = 0.0, ""
                for d in range(directions or DIRECTIONS):
                    v = rng.standard_normal(x.shape)
                    numeric_dd = directional_difference(f, x, v, step)
                    analytic_dd = float(np.sum(np.asarray(analytic[j], np.float64) * v))
                    e = relative_error(analytic_dd, numeric_dd)
                    if e >= err:
                        err, where = e, f"direction {d}: g.v {analytic_dd:.9g}, finite difference {numeric_dd:.9g}"
                where = where if err > tolerance else ""
            worst = max(worst, err)
            parts.append(f"{labels[j]}: {err:.3g}" + (f" ({where})" if where else ""))
        detail = "; ".join(parts) if parts else "no floating input to differentiate"
        return worst <= tolerance, worst, detail


def random_weights(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Weights for ``sum(w * y)``: uniform in [-1, 1], already rounded to ``t``'s dtype."""
    return rng.uniform(-1.0, 1.0, size=t.shape).astype(t.dtype.np)


def contract(graph: Graph, targets: Sequence[Target], reg: Registry) -> tuple[Graph, int]:
    """``graph`` plus one scalar output ``sum_t sum(w_t * y_t)`` (``add_scalar_contraction``, then
    ``accumulate_internal``); returns the new graph and that output's index."""
    from ..autodiff.backward import add_scalar_contraction

    if not targets:
        raise FrameError(f"graph {graph.name!r} has no floating output to contract into a loss")
    with use_registry(reg):
        indices = []
        for out_index, weights in targets:
            graph, index = add_scalar_contraction(graph, out_index, weights=weights)
            indices.append(index)
        if len(indices) == 1:
            return graph, indices[0]
        total = graph.outputs[indices[0]]
        for index in indices[1:]:
            total = graph.add_node("accumulate_internal", (total, graph.outputs[index]), registry=reg).outputs[0]
        return graph, graph.mark_output(total)


def contract_values(outs: Sequence[np.ndarray], targets: Sequence[Target]) -> float:
    """The same contraction in float64 numpy: ``sum_t sum(w_t * outs[t])``."""
    total = 0.0
    for out_index, weights in targets:
        y = np.asarray(outs[out_index], np.float64)
        total += float(np.sum(y if weights is None else y * np.asarray(weights, np.float64)))
    return total


# -- user graphs ------------------------------------------------------------------------------------
def _prepare(graph: Graph, inputs: Sequence[Any], wrt: Sequence[int | str] | None, loss_index: int
             ) -> tuple[list[np.ndarray], list[int]]:
    if len(inputs) != len(graph.inputs):
        raise FrameError(f"graph {graph.name!r} takes {len(graph.inputs)} inputs, {len(inputs)} were given")
    xs = [np.asarray(x) for x in inputs]
    if wrt is None:
        wrt = [i for i, v in enumerate(graph.inputs) if v.type.dtype.is_float]
    positions: list[Any] = [input_position(i, graph) if isinstance(i, str) else i for i in wrt]  # names too
    for i in positions:
        if not isinstance(i, int) or not 0 <= i < len(graph.inputs) or not graph.inputs[i].type.dtype.is_float:
            raise GradientError(f"wrt index {i!r} does not name a floating input of graph {graph.name!r} "
                                f"(inputs: {', '.join(str(v.type) for v in graph.inputs)})")
    n_out = len(graph.outputs)
    if not -n_out <= loss_index < n_out:
        raise FrameError(f"loss_index {loss_index} is out of range: graph {graph.name!r} has {n_out} outputs")
    return xs, positions


def _loss_target(graph: Graph, loss_index: int, rng: np.random.Generator) -> list[Target]:
    t = graph.outputs[loss_index].type
    return [(loss_index % len(graph.outputs), None if t.size == 1 else random_weights(t, rng))]


def _failure(op: str, check: str, exc: BaseException, example_index: int | None = None) -> CheckResult:
    return CheckResult(op, check, example_index, False, None, f"{type(exc).__name__}: {exc}")


def check_gradients(
    graph: Graph,
    inputs: Sequence[Any],
    wrt: Sequence[int | str] | None = None,
    *,
    loss_index: int = 0,
    order: int = 1,
    seed: int = 0,
    step: float | None = None,
    tolerance: float | dict[int, float] | None = None,
    directions: int | None = None,
    registry: Registry | None = None,
) -> OpReport:
    """Check the gradients of a user graph to ``order`` against central differences, in float64.

    The loss is output ``loss_index`` (a non-scalar output is contracted with
    fixed random weights). ``wrt`` lists input positions or names and defaults to every floating
    input; ``order`` and ``directions`` are ints of 1 or more (``ArgumentError`` otherwise). Returns
    an ``OpReport`` (``op`` is the graph's name) with one ``gradient_order{k}``
    result per order; call ``.assert_ok()`` in a test. See the module
    docstring for steps, tolerances and the random-direction mode.
    """
    order = positive_int(order, "check_gradients(order=)", ArgumentError)  # order 0 would pass with no check
    refuse_unordered(wrt, "check_gradients(wrt=)", GradientError, "[0, 2] or ['w']")  # a mistake, not a result
    if directions is not None:
        directions = positive_int(directions, "check_gradients(directions=)", ArgumentError)
    reg = registry if registry is not None else current_registry()
    report = OpReport(graph.name)
    rng = np.random.default_rng(seed)
    try:
        xs, wrt = _prepare(graph, inputs, wrt, loss_index)
        with use_registry(reg):
            g64 = retype_graph(graph, float64, registry=reg)
            xs64 = [retype_array(x, float64) for x in xs]
            ladder = GradientLadder(g64, wrt, _loss_target(g64, loss_index, rng), rng, reg)
    except FrameError as exc:
        report.results.append(_failure(graph.name, gradient_check_name(1), exc))
        return report
    if not wrt:
        report.results.append(CheckResult(graph.name, gradient_check_name(1), None, True, None,
                                          "not checked: no floating input to differentiate", skipped=True))
        return report
    labels = [graph.inputs[i].name or f"input {i}" for i in wrt]
    for k in range(1, order + 1):
        tol = _tolerance(tolerance, k, float64)
        try:
            with use_registry(reg):
                ok, err, detail = ladder.check(k, xs64, step=STEP if step is None else step, tolerance=tol,
                                               directions=directions, labels=labels, rng=rng)
        except FrameError as exc:
            report.results.append(_failure(graph.name, gradient_check_name(k), exc))
            break
        report.results.append(CheckResult(graph.name, gradient_check_name(k), None, ok, err, detail, tol))
    return report


def check_random_direction(
    graph: Graph,
    inputs: Sequence[Any],
    wrt: Sequence[int] | None = None,
    *,
    loss_index: int = 0,
    order: int = 1,
    directions: int | None = None,
    seed: int = 0,
    step: float | None = None,
    tolerance: float | None = None,
    registry: Registry | None = None,
) -> CheckResult:
    """First-order (or order-``order``) check along ``directions`` random directions per input.

    For large tensors: ``g . v`` against ``(L(x + h v) - L(x - h v)) / 2h``,
    two graph runs per direction whatever the size of ``x``.
    """
    report = check_gradients(graph, inputs, wrt, loss_index=loss_index, order=order, seed=seed, step=step,
                             tolerance=tolerance, directions=DIRECTIONS if directions is None else directions,
                             registry=registry)
    errors = [r.error for r in report.results if r.error is not None]
    return CheckResult(report.op, "random_direction", None, report.ok, max(errors) if errors else None,
                       "; ".join(f"order {i + 1}: {r.detail}" for i, r in enumerate(report.results)),
                       report.results[-1].tolerance)


def _unknown_op_in(exc: BaseException) -> str | None:
    """The message of an ``UnknownOpError`` that caused ``exc`` (itself, or along its cause/context chain)."""
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, UnknownOpError):
            return str(link).split(" (")[0]
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def check_low_precision(
    graph: Graph,
    inputs: Sequence[Any],
    wrt: Sequence[int] | None = None,
    *,
    dtype: DType | str = "float16",
    loss_index: int = 0,
    seed: int = 0,
    tolerance: float | None = None,
    registry: Registry | None = None,
    op: str | None = None,
    example_index: int | None = None,
) -> CheckResult:
    """First-order gradients computed in ``dtype`` (float16, bfloat16) against a float32 reference.

    Both graphs are ``retype_graph`` copies run on the same values (the
    inputs and loss weights rounded to ``dtype`` first), so the difference
    is the arithmetic's alone. A graph that ``dtype`` is not accepted by
    (shape inference refuses it) gives a skipped result saying why.
    """
    refuse_unordered(wrt, "check_low_precision(wrt=)", GradientError, "[0, 2] or ['w']")  # a mistake, not a result
    low = as_dtype(dtype)
    name = op or graph.name
    check = f"gradient_{low.short}"
    reg = registry if registry is not None else current_registry()
    tol = tolerance if tolerance is not None else LOW_PRECISION_TOLERANCE.get(low.name, 1e-2)
    rng = np.random.default_rng(seed)
    try:
        xs, wrt = _prepare(graph, inputs, wrt, loss_index)
        with use_registry(reg):
            try:
                g_low = retype_graph(graph, low, registry=reg)
            except ShapeError as exc:
                return CheckResult(name, check, example_index, True, None, f"not checked: {exc}", tol, skipped=True)
            g_ref = retype_graph(graph, float32, registry=reg)
            xs_low = [retype_array(x, low) for x in xs]
            xs_ref = [retype_array(x, float32) for x in xs_low]
            targets_low = _loss_target(g_low, loss_index, rng)
            targets_ref = [(i, None if w is None else w.astype(np.float32)) for i, w in targets_low]
            got = GradientLadder(g_low, wrt, targets_low, rng, reg).gradients(1, xs_low)
            want = GradientLadder(g_ref, wrt, targets_ref, rng, reg).gradients(1, xs_ref)
    except FrameError as exc:
        missing = _unknown_op_in(exc)
        if missing is not None:  # an op may differentiate half precision along another path, one that needs an op
            # of a pack that is not loaded: nothing to measure (the closure audit reports the chain), not a failure
            return CheckResult(name, check, example_index, True, None, f"not checked: the {low} gradient needs "
                               f"{missing} (is the pack that provides it disabled?)", tol, skipped=True)
        return _failure(name, check, exc, example_index)
    labels = [graph.inputs[i].name or f"input {i}" for i in wrt]
    worst, parts = 0.0, []
    for j, (a, r) in enumerate(zip(got, want)):
        if np.asarray(a).dtype != low.np:
            return CheckResult(name, check, example_index, False, None,
                               f"the gradient for {labels[j]} has dtype {np.asarray(a).dtype}, expected {low}")
        err = relative_error(a, r)
        worst = max(worst, err)
        where = f" ({_worst_element(a, r, 'float32')})" if err > tol else ""
        parts.append(f"{labels[j]}: {err:.3g}{where}")
    detail = f"{low} against float32: " + ("; ".join(parts) if parts else "no floating input to differentiate")
    return CheckResult(name, check, example_index, worst <= tol, worst, detail, tol)


def _tolerance(tolerance: float | dict[int, float] | None, order: int, dtype: DType) -> float:
    if tolerance is None:
        return tolerance_for(order, dtype)
    if isinstance(tolerance, dict):
        return tolerance.get(order, tolerance_for(order, dtype))
    return float(tolerance)
