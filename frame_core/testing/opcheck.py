"""``check_op``: the numerical gradient checks of one op on each of its examples (ARCH-066).

For example ``e`` of op ``f`` the checked graph is the single node
``y = f(x; attrs)`` with ``e``'s input types re-typed to float64. Its inputs
are drawn by ``e.sample`` (fixed values if the example gives them); the
loss is ``sum_j sum(w_j * y_j)`` over the floating outputs with fixed random
weights ``w_j``. Orders 1..``order`` follow ``numeric.GradientLadder``,
capped at the op's closure order when the registry's audit says it is lower.

ARCH-066 exception: an op with ``schema.gradient_surrogate`` (the smooth
function its GradientFn differentiates, e.g. ``heaviside_surrogate``) is
checked at first order against central differences of
``sum_j sum(w_j * surrogate(*x, **attrs)_j)`` instead of the forward; higher
orders differentiate the surrogate micro-graph as usual.

An op whose shape inference refuses float64 is checked in float32 with
``FLOAT32_STEP`` and ``FLOAT32_TOLERANCE`` (the result says so). Each
example may loosen its bounds with ``Example(tolerance=...)``.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import FrameError, ShapeError
from ..ir.dtypes import DType, as_dtype, float32, float64
from ..ir.graph import Graph
from ..ops_registry.registry import Registry, registry as current_registry, use_registry
from ..ops_registry.schema import OpSchema
from . import numeric
from .numeric import (LOW_PRECISION_TOLERANCE, GradientLadder, check_low_precision, contract_values,
                      random_weights, tolerance_for)
from .results import CheckResult, OpReport, gradient_check_name
from .retype import retype_array, retype_attrs, retype_type

__all__ = ["check_op", "check_op_example", "check_op_low_precision", "op_graph", "checked_order",
           "LOW_PRECISION_DTYPES", "example_rng"]

#: The dtypes ``check_op`` compares against float32 by default.
LOW_PRECISION_DTYPES = ("float16", "bfloat16")

# purposes of the per-example random streams (inputs, weights, low precision; 3 is the conformance kit's;
# random directions of order k use 10 + k), so that no result depends on which checks ran before it
_INPUTS, _WEIGHTS, _LOW, _DIRECTIONS = 0, 1, 2, 10


def example_rng(seed: int, op: str, example_index: int, purpose: int = _INPUTS) -> np.random.Generator:
    """A random stream fixed by (seed, op name, example index, purpose): results do not depend on run order."""
    return np.random.default_rng([seed, zlib.crc32(op.encode()), example_index, purpose])


def op_graph(schema: OpSchema, input_types: Sequence[Any], attrs: dict[str, Any] | None = None,
             registry: Registry | None = None) -> Graph:
    """The graph of one node ``schema(inputs; attrs)`` whose outputs are the node's outputs."""
    graph = Graph(f"{schema.name}_example")
    names = list(schema.inputs) if len(schema.inputs) == len(input_types) else [f"x{i}" for i in range(len(input_types))]
    xs = [graph.add_input(t, n) for t, n in zip(input_types, names)]
    reg = registry if registry is not None else current_registry()
    # the op's own key (qualified when another pack owns its short name): never another pack's op of that name
    node = graph.add_node(reg.key_of(schema), xs, attrs or {}, registry=reg)
    for value in node.outputs:
        graph.mark_output(value)
    return graph


def checked_order(schema: OpSchema, order: int, reg: Registry) -> tuple[int, str]:
    """``(order to check, why lower)``: ``order`` capped at the closure order the registry's audit found."""
    info = reg.closure.get(reg.key_of(schema))
    if info is None or info.closed or not isinstance(info.order, int) or info.order >= order:
        return order, ""
    chain = " -> ".join(info.chain) if info.chain else schema.name
    return info.order, f"the op's closure order is {info.order} (chain: {chain})"


def _wrt(schema: OpSchema, types: Sequence[Any]) -> list[int]:
    return [i for i, t in enumerate(types) if t.dtype.is_float and i not in schema.nondiff_inputs]


class _ExampleSetup:
    """The float64 (or float32 fallback) graph, inputs and ladder of one example; built once, cached."""

    def __init__(self, schema: OpSchema, index: int, seed: int, reg: Registry) -> None:
        example = schema.examples[index]
        self.schema, self.index = schema, index
        self.dtype: DType = float64
        self.note = ""
        types = [retype_type(t, float64) for t in example.inputs]
        try:  # sub-graph attributes (control-flow bodies) are re-typed with the inputs
            graph = op_graph(schema, types, retype_attrs(schema.name, example.attrs, float64, registry=reg), reg)
        except ShapeError as exc:  # the op refuses float64: check in float32 with looser bounds
            self.dtype = float32
            self.note = f"checked in float32 (float64 refused: {exc}); "
            types = [retype_type(t, float32) for t in example.inputs]
            graph = op_graph(schema, types, retype_attrs(schema.name, example.attrs, float32, registry=reg), reg)
        self.graph = graph
        self.inputs = [retype_array(x, self.dtype) for x in example.sample(example_rng(seed, schema.name, index))]
        self.wrt = _wrt(schema, types)
        self.labels = [graph.inputs[i].name or f"input {i}" for i in self.wrt]
        wrng = example_rng(seed, schema.name, index, _WEIGHTS)
        targets = [(j, random_weights(v.type, wrng)) for j, v in enumerate(graph.outputs) if v.type.dtype.is_float]
        objective0 = None
        if schema.gradient_surrogate is not None:
            ctx = schema.context(types, example.attrs)
            objective0 = _surrogate_objective(schema.gradient_surrogate, dict(ctx.attrs), targets)
            self.note += "first order against the gradient surrogate; "
        self.ladder = GradientLadder(graph, self.wrt, targets, wrng, reg, objective0=objective0)
        self.seed = seed
        self.no_gradient = "" if targets else "no floating output (integer and boolean outputs carry no gradient)"
        if not self.wrt:
            self.no_gradient = "no floating input to differentiate"

    def result(self, order: int, example_tolerance: float | None) -> CheckResult:
        if self.no_gradient:
            return CheckResult(self.schema.name, gradient_check_name(order), self.index, True, None,
                               f"not checked: {self.no_gradient}", skipped=True)
        tol = tolerance_for(order, self.dtype)
        if example_tolerance is not None:
            tol = max(tol, float(example_tolerance))
        step = numeric.STEP if self.dtype is float64 else numeric.FLOAT32_STEP
        directions = example_rng(self.seed, self.schema.name, self.index, _DIRECTIONS + order)
        ok, err, detail = self.ladder.check(order, self.inputs, step=step, tolerance=tol, directions=None,
                                            labels=self.labels, rng=directions)
        return CheckResult(self.schema.name, gradient_check_name(order), self.index, ok, err, self.note + detail, tol)


def _surrogate_objective(surrogate: Any, attrs: dict[str, Any], targets: list) -> Any:
    """The contraction of ``surrogate``'s outputs that the first-order check differentiates (ARCH-066)."""
    def objective(xs: list[np.ndarray]) -> float:
        out = surrogate(*xs, **attrs)
        return contract_values(list(out) if isinstance(out, (tuple, list)) else [out], targets)
    return objective


# (registry, op, example, seed) -> _ExampleSetup, so that the order-1 and order-2 checks share graphs
_SETUPS: "OrderedDict[tuple, tuple[Registry, OpSchema, _ExampleSetup]]" = OrderedDict()
_MAX_SETUPS = 16


_SETUPS_LOCK = threading.Lock()  # checks may run in threads (pytest-xdist's, a user's pool): keep the LRU whole


def _setup(schema: OpSchema, index: int, seed: int, reg: Registry) -> _ExampleSetup:
    key = (id(reg), schema.qualname, index, seed)
    with _SETUPS_LOCK:
        hit = _SETUPS.get(key)
        if hit is not None and hit[0] is reg and hit[1] is schema:
            _SETUPS.move_to_end(key)
            return hit[2]
    setup = _ExampleSetup(schema, index, seed, reg)
    with _SETUPS_LOCK:
        _SETUPS[key] = (reg, schema, setup)
        while len(_SETUPS) > _MAX_SETUPS:
            _SETUPS.popitem(last=False)
    return setup


def _crash(op: str, check: str, index: int | None, exc: BaseException) -> CheckResult:
    kind = "" if isinstance(exc, FrameError) else " (an exception that is not a FrameError: a bug in the op's code?)"
    return CheckResult(op, check, index, False, None, f"{type(exc).__name__}: {exc}{kind}")


def check_op_example(schema: OpSchema, index: int, order: int, *, seed: int = 0,
                     registry: Registry | None = None) -> CheckResult:
    """The order-``order`` finite-difference check of example ``index`` of ``schema`` (one ``CheckResult``)."""
    reg = registry if registry is not None else current_registry()
    check = gradient_check_name(order)
    try:
        with use_registry(reg):
            setup = _setup(schema, index, seed, reg)
            return setup.result(order, schema.examples[index].tolerance)
    except Exception as exc:  # the op's code under test: report it against the op, never crash the caller
        return _crash(schema.name, check, index, exc)


def check_op_low_precision(schema: OpSchema, index: int, dtype: DType | str, *, seed: int = 0,
                           registry: Registry | None = None) -> CheckResult:
    """First-order gradients of example ``index`` in ``dtype`` against float32 (skipped if the op refuses ``dtype``)."""
    reg = registry if registry is not None else current_registry()
    low = as_dtype(dtype)
    example = schema.examples[index]
    check = f"gradient_{low.short}"
    try:
        with use_registry(reg):
            types = list(example.inputs)
            if not any(t.dtype.is_float for t in types):
                return CheckResult(schema.name, check, index, True, None, "not checked: no floating input",
                                   skipped=True)
            if not example.checks_low_precision(low):
                why = f" ({example.note})" if example.note else ""
                return CheckResult(schema.name, check, index, True, None,
                                   f"not checked: the example opts out of the {low.name} check{why}", skipped=True)
            graph = op_graph(schema, types, example.attrs, reg)
            if not any(v.type.dtype.is_float for v in graph.outputs):
                return CheckResult(schema.name, check, index, True, None, "not checked: no floating output "
                                   "(integer and boolean outputs carry no gradient)", skipped=True)
            inputs = example.sample(example_rng(seed, schema.name, index, _LOW), float64)
            tolerance = LOW_PRECISION_TOLERANCE.get(low.name, 1e-2)
            if example.tolerance is not None:  # the example's own bound loosens this check too
                tolerance = max(tolerance, example.tolerance)
            return check_low_precision(graph, inputs, _wrt(schema, types), dtype=low,
                                       seed=seed + zlib.crc32(schema.name.encode()) + index, registry=reg,
                                       op=schema.name, example_index=index, tolerance=tolerance)
    except Exception as exc:
        return _crash(schema.name, check, index, exc)


def kit_arguments(schema: Any, order: Any, seed: Any, registry: Any, low_precision: Any,
                  caller: str) -> tuple[Any, int, Registry, tuple[str, ...]]:
    """The check kit's common arguments, checked: ``ArgumentError`` saying what was expected otherwise."""
    from .._args import name_list, positive_int
    from ..errors import ArgumentError

    if schema is not None and not isinstance(schema, OpSchema):
        raise ArgumentError(f"{caller} takes an OpSchema such as frame_core.registry().get('tanh'), got "
                            f"{type(schema).__name__} {schema!r:.40}")
    order = positive_int(order, f"{caller}(order=)", ArgumentError)
    positive_int(seed, f"{caller}(seed=)", ArgumentError, low=0)
    if registry is not None and not isinstance(registry, Registry):
        raise ArgumentError(f"{caller}(registry=) takes a Registry, got {type(registry).__name__}")
    dtypes = name_list(low_precision, f"{caller}(low_precision=)", ArgumentError, "['float16', 'bfloat16']")
    for d in dtypes:
        try:
            as_dtype(d)
        except FrameError as exc:
            raise ArgumentError(f"{caller}(low_precision=) names {d!r}: {exc}") from None
    return schema, order, registry if registry is not None else current_registry(), dtypes


def check_op(schema: OpSchema, *, order: int = 2, seed: int = 0, registry: Registry | None = None,
             low_precision: Sequence[str] = LOW_PRECISION_DTYPES) -> OpReport:
    """Every numerical gradient check of ``schema`` on every example (ARCH-066).

    Results: ``gradient_order{k}`` for k = 1..``order`` per example (orders
    above the op's closure order are recorded as skipped, with the chain
    that limits them), then ``gradient_f16``/``gradient_bf16`` per example
    for the dtypes in ``low_precision``. An op without a GradientFn gives one
    ``gradient`` result: skipped if it declares ``not_differentiable``,
    failed if the gradient is missing. ``report.worst_error(k)`` is the worst
    order-``k`` error over the examples. Wrong argument types are an ``ArgumentError``.
    """
    schema, order, reg, low_precision = kit_arguments(schema, order, seed, registry, low_precision, "check_op")
    report = OpReport(schema.name)
    if schema.gradient is None:
        if schema.not_differentiable or schema.internal:
            why = f"declared not differentiable: {schema.not_differentiable}" if schema.not_differentiable \
                else "an internal op without a GradientFn"
            report.results.append(CheckResult(schema.name, "gradient", None, True, None, f"not checked: {why}",
                                              skipped=True))
        else:
            report.results.append(CheckResult(schema.name, "gradient", None, False, None,
                                              "a user-facing op with neither a GradientFn nor a not_differentiable "
                                              "reason: register one or the other"))
        return report
    if not schema.examples:
        report.results.append(CheckResult(schema.name, "examples", None, False, None,
                                          "no examples: the numerical checks need at least one"))
        return report
    depth, why = checked_order(schema, order, reg)
    for index in range(len(schema.examples)):
        for k in range(1, depth + 1):
            result = check_op_example(schema, index, k, seed=seed, registry=reg)
            report.results.append(result)
            if not result.ok and result.error is None:  # could not even build this order: higher ones cannot either
                break
        for k in range(depth + 1, order + 1):
            report.results.append(CheckResult(schema.name, gradient_check_name(k), index, True, None,
                                              f"not checked: {why}", skipped=True))
        for dtype in low_precision:
            if depth == 0:  # no first-order gradient to build (its GradientFn needs an unregistered op): say so
                report.results.append(CheckResult(schema.name, f"gradient_{as_dtype(dtype).short}", index, True, None,
                                                  f"not checked: {why}", skipped=True))
                continue  # once, as for the float64 orders, rather than one failure per dtype and example
            report.results.append(check_op_low_precision(schema, index, dtype, seed=seed, registry=reg))
    return report
