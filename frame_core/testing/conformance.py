"""The conformance kit: every op of a named pack against its own declarations (SPEC §4).

The analogue of ``torch.library.opcheck``, plus the gradient mathematics.
For each op of the pack, ``conformance_cases(pack)`` lists one case per
(op, check, example); ``case.run()`` returns a ``CheckResult``. The checks
(``CHECKS`` says the same in one line each):

schema             ``OpSchema.check_definition()`` finds nothing (kernels, traits, a
                   GradientFn or a reason, examples...).
examples           the op has examples and its shape inference accepts each of them.
kernel             the cpu kernel's outputs are ndarrays of exactly the dtype and shape
                   ``shape_infer`` gives, for the example's dtypes and for float16/bfloat16
                   where shape inference accepts them; it leaves its inputs unchanged and
                   (unless ``view``) returns fresh arrays.
gradient_contract  the GradientFn micro-graph takes ``[x.., y.., gy..]``, returns one
                   gradient per input of its type, passes verify, uses registered ops,
                   fills non-differentiable slots with zero constants, and runs.
gradient_order{k}  analytic gradients against central differences in float64, for
                   k = 1 .. order (``check_op_example``); an order past the op's closure order is
                   reported, not checked: an xfail naming the chain that stops it.
gradient_f16/bf16  first-order gradients in float16/bfloat16 against float32
                   (skipped, with the reason, when shape inference refuses the dtype).
elementwise        outputs have the broadcast shape of the inputs, and evaluating the op
                   on the flattened, permuted, strided inputs gives the permuted outputs.
broadcasting       outputs have the broadcast shape of the inputs.
accepts_out        ``kernel(*xs, out)`` writes into ``out`` and returns it; for an
                   elementwise op also when ``out`` is one of the inputs.
view               outputs alias no input but the first, and equal a fresh evaluation.
commutative        swapping the two inputs gives the same outputs.
has_side_effect    the op has no GradientFn (ARCH-062).
decomposition      for an op with a DecomposeFn: the op compiled with ``decompose=[op]`` gives
                   outputs of the kernel's types and values (within 64 units in the last place).
jvp_transpose      forward mode and reverse mode of the op are transposes of each other:
                   ``<J v, u> == <v, J^T u>`` for random ``v``, ``u`` (the dot-product test), to the
                   example dtype's tolerance; the JVP is the op's JvpFn or the one derived from its GradientFn.
jvp_direct         for an op with a JvpFn: it agrees with the JVP derived from the GradientFn, or, for
                   an internal op with a JvpFn and no GradientFn, with central differences of its
                   kernel along the same tangents, in float64.
any_shape_gradient for an op with that trait: its VJP traced at the example, re-specialised for another batch
                   size (the leading axis of the inputs of rank >= 2 that share the first such input's, + 2 and
                   1), equals a VJP traced at that size (a refusal or a difference fails, naming the sizes); so
                   it does for every other size the inputs hold (each axis of that size, + 2 and 1: a length,
                   a vector's size), where a refusal is allowed and a difference fails.

``conformance_tests(pack)`` turns the cases into a parametrised pytest test
(ids such as ``relu-gradient_order2-ex1``); assign it to a module-level name.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, FrameError, KernelError, ShapeError, suggest
from ..ir.dtypes import as_dtype
from ..ir.types import TensorType
from ..ops_registry.entrypoints import normalize
from ..ops_registry.registry import PackRecord, Registry, op_scope, registry as current_registry, use_registry
from ..ops_registry.schema import OpSchema
from .opcheck import (LOW_PRECISION_DTYPES, check_op_example, check_op_low_precision, checked_order, example_rng,
                      kit_arguments)
from .results import CheckResult, OpReport, gradient_check_name
from .retype import retype_attrs, retype_type

__all__ = ["CHECKS", "ConformanceCase", "conformance_cases", "run_conformance", "conformance_tests"]

CHECKS = {
    "pack": "the named pack is loaded and registers ops",
    "schema": "OpSchema.check_definition() finds no problem",
    "examples": "the op has examples and its shape inference accepts each",
    "kernel": "kernel outputs match shape_infer (ndarray, dtype, shape), inputs untouched, no aliasing",
    "gradient_contract": "GradientFn micro-graph: [x.., y.., gy..] -> [gx..] of the inputs' types, verifies, runs",
    "gradient_order1": "first-order gradients against central differences (float64)",
    "gradient_order2": "second-order gradients against central differences of the first order (float64)",
    "gradient_f16": "float16 gradients against a float32 reference",
    "gradient_bf16": "bfloat16 gradients against a float32 reference",
    "elementwise": "broadcast output shape; permuted/strided evaluation gives permuted outputs",
    "broadcasting": "output shape is the numpy broadcast of the input shapes",
    "accepts_out": "kernel(*xs, out) writes into out and returns it (also when out is an input, if elementwise)",
    "view": "outputs alias no input but the first and equal a fresh evaluation",
    "commutative": "swapping the two inputs gives the same outputs",
    "has_side_effect": "an op with side effects has no GradientFn",
    "decomposition": "compile(decompose=[op]) gives the kernel's outputs (types, and values within rounding)",
    "jvp_transpose": "forward and reverse mode are transposes: <J v, u> == <v, J^T u> (dot-product test)",
    "jvp_direct": "a declared JvpFn agrees with the JVP derived from the GradientFn (or central differences)",
    "any_shape_gradient": "the VJP traced at the example and run at another batch size equals one traced there",
}

#: Traits whose behaviour has a check of its own, run per example (``has_side_effect`` is per op).
_TRAIT_CHECKS = ("elementwise", "broadcasting", "accepts_out", "view", "commutative")
#: How a gradient_order case past the op's closure order begins its detail (the pytest factory makes it an xfail).
BEYOND_CLOSURE = "not differentiable to order"

#: The random stream of the kit's non-gradient checks (``opcheck`` uses 0-2 for inputs, weights, low precision).
_STREAM = 3
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


@dataclass(frozen=True)
class ConformanceCase:
    """One (op, check, example) of a pack's conformance suite; ``run()`` gives its ``CheckResult``."""

    pack: str
    op: str
    check: str
    example_index: int | None = None
    seed: int = 0
    problem: str = ""  # set for "pack" cases: why the pack cannot be checked

    @property
    def id(self) -> str:
        op = self.op.replace("::", ".")  # `::` separates parts of a pytest node id
        return f"{op}-{self.check}" + ("" if self.example_index is None else f"-ex{self.example_index}")

    def run(self, registry: Registry | None = None, seed: int | None = None) -> CheckResult:
        """Run the check (with ``seed`` instead of the case's own if given); never raises for the op's faults."""
        reg = registry if registry is not None else current_registry()
        seed = self.seed if seed is None else seed
        if self.check == "pack":
            return CheckResult(self.op, "pack", None, not self.problem, None, self.problem or "loaded")
        schema = reg.schemas.get(self.op)
        if schema is None:
            return CheckResult(self.op, self.check, self.example_index, False, None,
                               f"op {self.op!r} is no longer in the registry")
        with use_registry(reg):
            return _run_check(schema, self.check, self.example_index, seed, reg)

    def assert_ok(self, registry: Registry | None = None, seed: int | None = None) -> CheckResult:
        """``run()`` and raise ``AssertionError`` with the detail if the check failed."""
        result = self.run(registry, seed)
        if not result.ok:
            raise AssertionError(str(result))
        return result


# -- which cases -----------------------------------------------------------------------------------
def _find_pack(reg: Registry, pack: str) -> tuple[PackRecord | None, str]:
    for record in reg.packs.values():
        if normalize(pack) in (normalize(record.name), normalize(record.distribution)):
            if record.status != "loaded":
                return None, f"pack {pack!r} ({record.distribution} {record.version}) is {record.status}: {record.error}"
            return record, ""
    names = sorted({r.name for r in reg.packs.values()})
    close = suggest(pack, names)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return None, f"no pack named {pack!r} is installed (packs: {', '.join(names) or 'none'}){hint}"


def conformance_cases(pack: str, *, order: int = 2, seed: int = 0, registry: Registry | None = None,
                      low_precision: Sequence[str] = LOW_PRECISION_DTYPES) -> list[ConformanceCase]:
    """Every (op, check, example) case of ``pack`` (entry-point or distribution name), in a stable order.

    A pack that is not installed, failed to load or registers no op gives a
    single failing ``pack`` case saying why, so a test suite never passes
    by collecting nothing.
    """
    _, order, reg, low_precision = kit_arguments(None, order, seed, registry, low_precision, "conformance_cases")
    if not isinstance(pack, str):
        raise ArgumentError(f"conformance_cases takes a pack's name (its entry point or distribution), got "
                            f"{type(pack).__name__}")
    record, problem = _find_pack(reg, pack)
    if record is not None and not reg.ops_of(record.name):
        problem = f"pack {pack!r} is loaded but registers no ops"
    if problem or record is None:
        return [ConformanceCase(pack, pack, "pack", None, seed, problem or f"pack {pack!r} is not loaded")]
    cases = []
    for schema in reg.ops_of(record.name):
        cases += _op_cases(record.name, schema, order, seed, reg, low_precision)
    return cases


def _op_cases(pack: str, schema: OpSchema, order: int, seed: int, reg: Registry,
              low_precision: Sequence[str]) -> list[ConformanceCase]:
    def case(check: str, index: int | None = None) -> ConformanceCase:
        return ConformanceCase(pack, reg.key_of(schema), check, index, seed)

    cases = [case("schema"), case("examples")]
    if schema.has_side_effect:
        cases.append(case("has_side_effect"))
    depth = checked_order(schema, order, reg)[0] if schema.gradient is not None else 0
    for i, example in enumerate(schema.examples):
        cases.append(case("kernel", i))
        cases += [case(trait, i) for trait in _TRAIT_CHECKS if trait in schema.traits]
        if schema.decomposition is not None:
            cases.append(case("decomposition", i))
        floating = any(t.dtype.is_float for k, t in enumerate(example.inputs) if k not in schema.nondiff_inputs)
        if schema.gradient is None:
            if schema.jvp is not None and floating:  # a forward-only op: its JvpFn is checked numerically
                cases.append(case("jvp_direct", i))
            continue
        cases.append(case("gradient_contract", i))
        if "any_shape_gradient" in schema.traits:
            cases.append(case("any_shape_gradient", i))
        # every order up to the requested one gets a case: those past the op's closure order report it (xfail with
        # the chain that stops it) instead of vanishing, so a suite is never green in silence (issue 17)
        cases += [case(gradient_check_name(k), i) for k in range(1, order + 1)]
        if floating:
            cases.append(case("jvp_transpose", i))
            if schema.jvp is not None:
                cases.append(case("jvp_direct", i))
        if any(t.dtype.is_float for t in example.inputs):
            cases += [case(f"gradient_{as_dtype(d).short}", i) for d in low_precision]
    return cases


def run_conformance(pack: str, *, order: int = 2, seed: int = 0, registry: Registry | None = None,
                    low_precision: Sequence[str] = LOW_PRECISION_DTYPES) -> list[OpReport]:
    """Run every case of ``pack``; one ``OpReport`` per op (or one for the pack when it cannot be checked)."""
    reg = registry if registry is not None else current_registry()
    reports: dict[str, OpReport] = {}
    for c in conformance_cases(pack, order=order, seed=seed, registry=reg, low_precision=low_precision):
        reports.setdefault(c.op, OpReport(c.op)).results.append(c.run(reg))
    return list(reports.values())


def conformance_tests(pack: str, *, order: int = 2, seed: int = 0, registry: Registry | None = None,
                      low_precision: Sequence[str] = LOW_PRECISION_DTYPES) -> Callable[..., None]:
    """A pytest test function parametrised over ``conformance_cases(pack)``; assign it in a test module::

        test_conformance = conformance_tests("my_pack")

    The cases are listed when the module is collected (this loads the
    registry). With the kit's pytest plugin enabled, ``--frame-seed N``
    changes the random data.
    """
    import pytest

    reg = registry if registry is not None else current_registry()
    cases = conformance_cases(pack, order=order, seed=seed, registry=reg, low_precision=low_precision)

    @pytest.mark.parametrize("case", cases, ids=[c.id for c in cases])
    def test_conformance(case: ConformanceCase, request: Any) -> None:
        option = request.config.getoption("frame_seed", default=None)
        result = case.run(reg, seed if option is None else int(option))
        if not result.ok:
            pytest.fail(str(result), pytrace=False)
        if result.skipped and result.detail.startswith(BEYOND_CLOSURE):  # past the op's closure order: visible
            pytest.xfail(result.detail)

    test_conformance.__doc__ = f"Conformance of pack {pack!r}: one case per (op, check, example)."
    test_conformance.cases = cases
    return test_conformance


# -- running one check -----------------------------------------------------------------------------
def _run_check(schema: OpSchema, check: str, index: int | None, seed: int, reg: Registry) -> CheckResult:
    if check.startswith("gradient_") and check != "gradient_contract":
        if index is None:
            raise FrameError(f"conformance check {check!r} of {schema.name!r} needs an example index")
        if check.startswith("gradient_order"):
            order = int(check[len("gradient_order"):])
            reachable, why = checked_order(schema, order, reg)
            if reachable < order:
                return CheckResult(schema.name, check, index, True, None,
                                   f"{BEYOND_CLOSURE} {order}: {why}; `frame audit gradients --order "
                                   f"{order}` reports it (close the chain to check this order)", skipped=True)
            return check_op_example(schema, index, order, seed=seed, registry=reg)
        return check_op_low_precision(schema, index, check[len("gradient_"):], seed=seed, registry=reg)
    fn = _CHECK_FUNCTIONS[check]
    try:
        problems, note = fn(schema, index, example_rng(seed, schema.name, index or 0, _STREAM), reg)
    except (Exception, SystemExit) as exc:  # the op's code under test raised (even exit()): report it against the op
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f" at {frame.filename}:{frame.lineno}"
        kind = "" if isinstance(exc, FrameError) else " (not a FrameError: a bug in the op's code?)"
        return CheckResult(schema.name, check, index, False, None, f"{type(exc).__name__}: {exc}{kind}{where}")
    if problems:
        return CheckResult(schema.name, check, index, False, None, "; ".join(problems))
    return CheckResult(schema.name, check, index, True, None, note)


Outcome = tuple[list[str], str]


def _check_schema(schema: OpSchema, index: None, rng: np.random.Generator, reg: Registry) -> Outcome:
    return schema.check_definition(), "check_definition() found no problem"


def _check_examples(schema: OpSchema, index: None, rng: np.random.Generator, reg: Registry) -> Outcome:
    if not schema.examples:
        return ["no examples: the closure audit, the CLI and this kit need at least one (OpSchema(examples=[...]))"], ""
    problems = []
    for i, example in enumerate(schema.examples):
        try:
            schema.context(example.inputs, example.attrs).output_types
        except FrameError as exc:
            problems.append(f"example {i} {example!r} is rejected by the op itself: {exc}")
    return problems, f"{len(schema.examples)} example(s), all accepted by shape inference"


def _check_side_effect(schema: OpSchema, index: None, rng: np.random.Generator, reg: Registry) -> Outcome:
    if schema.gradient is not None:
        return ["declares has_side_effect but registers a GradientFn: remove one of them"], ""
    return [], "no GradientFn, as a side-effect op must"


def _outputs(result: Any) -> list[Any]:
    """A kernel's result as a list (a single output comes bare, several as a tuple)."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _describe(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"ndarray {a.dtype}{list(a.shape)}"
    return f"{type(a).__name__} {getattr(a, 'dtype', '')}".strip()


def _evaluate(schema: OpSchema, types: Sequence[TensorType], attrs: dict[str, Any], arrays: Sequence[np.ndarray],
              *extra: np.ndarray, checked: bool = True) -> tuple[list[TensorType], list[Any]]:
    """The kernel's inferred output types and its results on ``arrays``. ``checked``: a result that is not one
    ndarray of its inferred type per output is a ``KernelError`` naming the op and its pack, so that a check built
    on the results (the gradient contract feeds them to the micro-graph) blames the kernel, not what it fed."""
    ctx = schema.context(types, attrs)
    want = list(ctx.output_types)
    with op_scope(schema.namespace):
        kernel = schema.kernels["cpu"](ctx)
    result = kernel(*arrays, *extra)
    got = [result] if len(want) == 1 else _outputs(result)  # one output comes bare: a list is no several outputs
    if checked:
        label = "[" + ", ".join(map(str, types)) + "]"
        if len(got) != len(want) or not isinstance(result, (tuple, list) if len(want) > 1 else np.ndarray):
            raise KernelError(f"the cpu kernel of op {schema.name!r} (pack {schema.pack}) returned {_describe(result)} "
                              f"on {label}, expected {'a tuple of ' if len(want) > 1 else ''}{len(want)} ndarray(s) "
                              f"({', '.join(map(str, want))}); the 'kernel' check of this kit says more")
        for j, (t, out) in enumerate(zip(want, got)):
            if not isinstance(out, np.ndarray) or out.dtype != t.dtype.np or out.shape != t.shape:
                raise KernelError(f"the cpu kernel of op {schema.name!r} (pack {schema.pack}) returned "
                                  f"{_describe(out)} for output {j} on {label}, but shape inference says {t}; the "
                                  "'kernel' check of this kit says more")
    return want, got


def _check_kernel(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    example = schema.examples[index]
    problems, checked = [], []
    # every dtype the kit runs the op at: the example's, float64 (the gradient checks), float32 (the reference of
    # the reduced-precision checks) and the reduced precisions themselves
    for dtype in (None, "f64", "f32", *LOW_PRECISION_DTYPES):
        types = list(example.inputs)
        attrs = example.attrs
        if dtype is not None:
            if not any(t.dtype.is_float for t in types) or all(t.dtype is as_dtype(dtype) for t in types if t.dtype.is_float):
                continue
            types = [retype_type(t, dtype) for t in types]
            try:
                attrs = retype_attrs(schema.name, example.attrs, dtype, registry=reg)  # bodies follow the inputs
                schema.context(types, attrs).output_types
            except ShapeError:
                continue  # the op does not take this dtype: nothing to compare
        label = "[" + ", ".join(map(str, types)) + "]"
        arrays = example.sample(rng, None if dtype is None else as_dtype(dtype))
        before = [a.copy() for a in arrays]
        want, got = _evaluate(schema, types, attrs, arrays, checked=False)  # the problems are this check's
        checked.append(label)
        if len(got) != len(want):
            problems.append(f"on {label} the kernel returned {len(got)} outputs, shape inference says {len(want)}")
            continue
        for j, (t, out) in enumerate(zip(want, got)):
            if not isinstance(out, np.ndarray):
                problems.append(f"on {label} output {j} is a {_describe(out)}, expected an ndarray {t} "
                                "(wrap numpy scalars with np.asarray)")
            elif out.dtype != t.dtype.np or out.shape != t.shape:
                problems.append(f"on {label} output {j} is {_describe(out)}, shape inference says {t}")
            else:
                for k, x in enumerate(arrays):
                    if np.shares_memory(out, x) and not ("view" in schema.traits and k == 0):
                        problems.append(f"on {label} output {j} aliases input {k}; return a fresh array "
                                        "(or declare the 'view' trait if it is a view of the first input)")
                for k, other in enumerate(got[:j]):  # as the runtime's first-run check: outputs never share memory
                    if isinstance(other, np.ndarray) and np.shares_memory(out, other):
                        problems.append(f"on {label} output {j} shares memory with output {k}; each output needs "
                                        "an array of its own")
        for k, (x, x0) in enumerate(zip(arrays, before)):
            if x.tobytes() != x0.tobytes():
                problems.append(f"on {label} the kernel modified its input {k}; kernels must not write their inputs")
    return problems, "outputs match shape inference on " + ", ".join(checked)


def _close(got: Any, want: Any, ulps: int = 16) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if not as_dtype(want.dtype).is_float:
        return bool(np.array_equal(got, want))
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(g) == np.isnan(w)
    eps = ulps * _EPS[as_dtype(want.dtype).name]
    with np.errstate(invalid="ignore"):
        near = np.isnan(w) | (g == w) | (np.abs(g - w) <= eps * (1.0 + np.abs(w)))
    return bool(np.all(same_nan & near))


def _broadcast_problems(types: Sequence[TensorType], want: Sequence[TensorType]) -> list[str]:
    try:
        shape = np.broadcast_shapes(*[t.shape for t in types]) if types else ()
    except ValueError:
        return [f"inputs [{', '.join(map(str, types))}] do not broadcast, yet the op accepts them"]
    return [f"output {j} has shape {list(t.shape)}, the broadcast of the inputs is {list(shape)}"
            for j, t in enumerate(want) if t.shape != tuple(shape)]


def _check_broadcasting(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    example = schema.examples[index]
    want = list(schema.context(example.inputs, example.attrs).output_types)
    return _broadcast_problems(example.inputs, want), "output shape is the broadcast of the input shapes"


def _check_elementwise(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    example = schema.examples[index]
    arrays = example.sample(rng)
    want, got = _evaluate(schema, example.inputs, example.attrs, arrays)
    problems = _broadcast_problems(example.inputs, want)
    if problems or not want:
        return problems, ""
    shape = want[0].shape
    n = int(np.prod(shape))
    if n == 0:
        return [], "empty output: shapes only"
    perm = rng.permutation(n)
    strided = []
    for a in arrays:
        flat = np.broadcast_to(a, shape).reshape(-1)[perm]
        buffer = np.empty(2 * n, flat.dtype)
        buffer[::2] = flat
        strided.append(buffer[::2])  # a non-contiguous view: kernels must honour strides
    flat_types = [TensorType(t.dtype, (n,)) for t in example.inputs]
    try:
        _, got_flat = _evaluate(schema, flat_types, example.attrs, strided)
    except ShapeError as exc:
        return [f"an elementwise op must accept its inputs flattened to [{n}]: {exc}"], ""
    for j, (full, flat) in enumerate(zip(got, got_flat)):
        if not _close(flat, np.asarray(full).reshape(-1)[perm]):
            problems.append(f"output {j}: evaluating on permuted, strided, flattened inputs does not give the "
                            "permuted outputs (output[i] must depend on input[i] only)")
    return problems, f"{n} elements permuted and strided"


def _check_accepts_out(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    example = schema.examples[index]
    arrays = example.sample(rng)
    want, reference = _evaluate(schema, example.inputs, example.attrs, [a.copy() for a in arrays])
    if len(want) != 1:
        return [f"accepts_out needs exactly one output, the op has {len(want)}"], ""
    t = want[0]
    out = np.full(t.shape, np.nan if t.dtype.is_float else 7, t.dtype.np)
    _, (result,) = _evaluate(schema, example.inputs, example.attrs, [a.copy() for a in arrays], out)
    problems = []
    if result is not out:
        problems.append(f"kernel(*xs, out) returned {_describe(result)} that is not `out`; write into out and return it")
    if not _close(out, reference[0]):
        problems.append("the values written into `out` differ from the result without out")
    note = "writes into out"
    if "elementwise" in schema.traits:
        for k, x_type in enumerate(example.inputs):
            if x_type != t:
                continue
            copies = [a.copy() for a in arrays]
            _, (aliased,) = _evaluate(schema, example.inputs, example.attrs, copies, copies[k])
            if not _close(aliased, reference[0]):
                problems.append(f"wrong result when out is input {k} (an elementwise op must allow it)")
        note += ", also when out is an input of its type"
    return problems, note


def _check_view(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    example = schema.examples[index]
    arrays = example.sample(rng)
    _, got = _evaluate(schema, example.inputs, example.attrs, arrays)
    _, fresh = _evaluate(schema, example.inputs, example.attrs, [a.copy() for a in arrays])
    problems = []
    for j, out in enumerate(got):
        for k, x in enumerate(arrays[1:], 1):
            if np.shares_memory(out, x):
                problems.append(f"output {j} aliases input {k}; a view op may only return a view of its first input")
        if not _close(out, fresh[j]):
            problems.append(f"output {j} differs from an evaluation on copies of the inputs")
    return problems, "views only of the first input"


def _check_commutative(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    example = schema.examples[index]
    if len(example.inputs) != 2:
        return [f"commutative needs two inputs, the example has {len(example.inputs)}"], ""
    a, b = example.sample(rng)
    _, got = _evaluate(schema, example.inputs, example.attrs, [a, b])
    ta, tb = example.inputs
    _, swapped = _evaluate(schema, [tb, ta], example.attrs, [b.copy(), a.copy()])
    problems = [f"output {j} changes when the inputs are swapped" for j, (x, y) in enumerate(zip(got, swapped))
                if not _close(y, x)]
    return problems, "op(a, b) == op(b, a)"


def _check_gradient_contract(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    from ..compiler.api import compile
    from ..ops_registry.closure import check_gradient_contract

    example = schema.examples[index]
    ctx = schema.context(example.inputs, example.attrs)
    if schema.gradient is None:
        return [], "no GradientFn"
    with op_scope(schema.namespace):
        micro = schema.gradient(ctx)
    problems, unknown = check_gradient_contract(schema, ctx, micro, reg)
    if unknown:
        problems.append(f"the micro-graph uses ops no loaded pack provides: {', '.join(sorted(unknown))}")
    if problems:  # check_gradient_contract includes the zero slots of inputs that carry no gradient
        return problems, ""
    n = len(ctx.input_types)
    xs = example.sample(rng)
    _, ys = _evaluate(schema, example.inputs, example.attrs, [x.copy() for x in xs])
    gys = [rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np) for t in ctx.output_types]
    outs = compile(micro, opt_level=0, cache=False, registry=reg).run([*xs, *ys, *gys])
    for i, (g, t) in enumerate(zip(outs, ctx.input_types)):
        if np.asarray(g).dtype != t.dtype.np or np.shape(g) != t.shape:
            problems.append(f"run on the example, gradient {i} is {_describe(g)}, expected {t}")
        elif t.dtype.is_float and not np.all(np.isfinite(np.asarray(g, np.float64))):
            problems.append(f"run on the example, gradient {i} is not finite")
    return problems, f"micro-graph of {len(micro.nodes)} nodes for {n} inputs verifies and runs"


def _check_decomposition(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    """The op through its DecomposeFn against its kernel: a backend without a kernel, and every
    ``compile(..., decompose=[op])``, runs the decomposition instead, so it must compute the same thing."""
    from ..compiler.api import compile
    from ..ir.graph import Graph

    example = schema.examples[index]
    graph = Graph(f"{schema.name}_decomposition_check")
    inputs = [graph.add_input(t, f"x{i}") for i, t in enumerate(example.inputs)]
    with use_registry(reg):
        node = graph.add_node(reg.key_of(schema), inputs, example.attrs, registry=reg)
    for v in node.outputs:
        graph.mark_output(v)
    arrays = example.sample(rng)
    want = compile(graph, opt_level=0, cache=False, registry=reg).run([a.copy() for a in arrays])
    got = compile(graph, opt_level=0, cache=False, registry=reg, decompose=[reg.key_of(schema)]).run(arrays)
    problems = []
    for j, (g, w) in enumerate(zip(got, want)):
        if not _close(g, w, ulps=64):
            diff = (f"; largest difference {np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))):.3g}"
                    if g.shape == w.shape and g.dtype.kind in "fiu" and w.dtype.kind in "fiu" and g.size else "")
            problems.append(f"output {j}: the decomposition gives {_describe(g)} that differs from the kernel's "
                            f"{_describe(w)}{diff}")
    return problems, f"decomposition agrees with the kernel on {len(want)} output(s)"


def _single_node(schema: OpSchema, example: Any, reg: Registry) -> Any:
    from ..ir.graph import Graph

    graph = Graph(f"{schema.name}_jvp_check")
    inputs = [graph.add_input(t, f"x{i}") for i, t in enumerate(example.inputs)]
    with use_registry(reg):
        node = graph.add_node(reg.key_of(schema), inputs, example.attrs, registry=reg)
    for v in node.outputs:
        graph.mark_output(v)
    return graph


def _jvp_tolerance(example: Any, dtypes: Sequence[Any]) -> float:
    eps = max(_EPS.get(as_dtype(d).name, 2.0 ** -23) for d in dtypes)
    return max(1e3 * eps, example.tolerance or 0.0)


def _check_jvp_transpose(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    from ..autodiff.jvp import build_jvp_graph
    from ..autodiff.vjp import build_vjp_graph
    from ..compiler.api import compile

    example = schema.examples[index]
    graph = _single_node(schema, example, reg)
    wrt = [k for k, t in enumerate(example.inputs) if t.dtype.is_float and k not in schema.nondiff_inputs]
    with use_registry(reg):
        forward = build_jvp_graph(graph, wrt, registry=reg)
        reverse = build_vjp_graph(graph, wrt, registry=reg)
    xs = example.sample(rng)
    vs = [rng.uniform(-1.0, 1.0, example.inputs[k].shape).astype(example.inputs[k].dtype.np) for k in wrt]
    outs = graph.output_types
    us = [rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np) for t in outs]
    n = len(outs)
    jv = compile(forward, opt_level=0, cache=False, registry=reg).run([*xs, *vs])[n:]
    jtu = compile(reverse, opt_level=0, cache=False, registry=reg).run([*xs, *us])
    terms_f = [np.asarray(a, np.float64) * np.asarray(b, np.float64) for a, b, t in zip(jv, us, outs) if t.dtype.is_float]
    terms_r = [np.asarray(a, np.float64) * np.asarray(b, np.float64) for a, b in zip(vs, jtu)]
    left, right = sum(float(np.sum(t)) for t in terms_f), sum(float(np.sum(t)) for t in terms_r)
    scale = sum(float(np.sum(np.abs(t))) for t in terms_f) + sum(float(np.sum(np.abs(t))) for t in terms_r)
    tol = _jvp_tolerance(example, [t.dtype for t in example.inputs if t.dtype.is_float])
    if not (np.isfinite(left) and np.isfinite(right)):
        return [f"<J v, u> = {left:.6g} and <v, J^T u> = {right:.6g} are not both finite"], ""
    if abs(left - right) > tol * max(scale, 1e-30):
        return [f"<J v, u> = {left:.10g} but <v, J^T u> = {right:.10g} (difference {abs(left - right):.3g}, allowed "
                f"{tol * scale:.3g}): the forward rule ({'JvpFn' if schema.jvp else 'derived'}) and the GradientFn "
                "disagree"], ""
    return [], f"<J v, u> == <v, J^T u> = {left:.6g} ({'JvpFn' if schema.jvp else 'derived from the GradientFn'})"


def _check_jvp_direct(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    from ..autodiff.jvp import derived_jvp_graph, direct_jvp_graph
    from ..compiler.api import compile

    example = schema.examples[index]
    if schema.jvp is None:
        return [], "no JvpFn"
    if schema.gradient is None:
        return _check_jvp_numeric(schema, index, rng, reg)
    ctx = schema.context(example.inputs, example.attrs)
    with use_registry(reg):
        direct = direct_jvp_graph(schema, ctx)
        with op_scope(schema.namespace):
            micro = schema.gradient(ctx)
        derived = derived_jvp_graph(micro, ctx, reg)
    xs = example.sample(rng)
    _, ys = _evaluate(schema, example.inputs, example.attrs, [x.copy() for x in xs])
    dxs = [rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np) if t.dtype.is_float and k not in schema.nondiff_inputs
           else np.zeros(t.shape, t.dtype.np) for k, t in enumerate(ctx.input_types)]
    a = compile(direct, opt_level=0, cache=False, registry=reg).run([*xs, *ys, *dxs])
    b = compile(derived, opt_level=0, cache=False, registry=reg).run([*xs, *ys, *dxs])
    tol = _jvp_tolerance(example, [t.dtype for t in ctx.output_types if t.dtype.is_float] or ["float32"])
    problems = []
    for j, (p, q, t) in enumerate(zip(a, b, ctx.output_types)):
        if not t.dtype.is_float:
            continue
        p64, q64 = np.asarray(p, np.float64), np.asarray(q, np.float64)
        scale = max(float(np.max(np.abs(q64), initial=0.0)), 1.0)
        err = float(np.max(np.abs(p64 - q64), initial=0.0))
        if not err <= tol * scale:
            problems.append(f"output {j}: the JvpFn and the derived JVP differ by {err:.3g} (allowed {tol * scale:.3g})")
    return problems, f"JvpFn agrees with the derived JVP on {len(a)} output(s)"


def _check_jvp_numeric(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    """A JvpFn with no GradientFn to compare with: the tangents it gives against central differences of the
    kernel along the same tangents, in float64 (the example's dtype if the op refuses float64)."""
    from ..autodiff.jvp import direct_jvp_graph
    from ..compiler.api import compile
    from .numeric import STEP, TOLERANCE

    example = schema.examples[index]
    types = [retype_type(t, "f64") for t in example.inputs]
    try:
        ctx = schema.context(types, example.attrs)
        ctx.output_types
    except FrameError:
        types = list(example.inputs)
        ctx = schema.context(types, example.attrs)
    xs = example.sample(rng, dtype_override=as_dtype("f64") if types != list(example.inputs) else None)
    xs = [x.astype(t.dtype.np) for x, t in zip(xs, types)]
    active = [k for k, t in enumerate(types) if t.dtype.is_float and k not in schema.nondiff_inputs]
    dxs = [rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np) if k in active else np.zeros(t.shape, t.dtype.np)
           for k, t in enumerate(types)]
    with use_registry(reg):
        direct = direct_jvp_graph(schema, ctx)
    _, ys = _evaluate(schema, types, example.attrs, [x.copy() for x in xs])
    got = compile(direct, opt_level=0, cache=False, registry=reg).run([*xs, *ys, *dxs])
    h = STEP * max([1.0, *(float(np.max(np.abs(xs[k]), initial=0.0)) for k in active)])
    moved = [[x + sign * h * d if k in active else x.copy() for k, (x, d) in enumerate(zip(xs, dxs))]
             for sign in (1.0, -1.0)]
    plus, minus = (_evaluate(schema, types, example.attrs, m)[1] for m in moved)
    low = any(t.dtype is not as_dtype("f64") for k, t in enumerate(types) if k in active)
    tol = max(_jvp_tolerance(example, [t.dtype for t in types if t.dtype.is_float]) if low else TOLERANCE[1],
              example.tolerance or 0.0)
    problems = []
    for j, (t, a, p, m) in enumerate(zip(ctx.output_types, got, plus, minus)):
        if not t.dtype.is_float:
            continue
        numeric = (np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2.0 * h)
        scale = max(float(np.max(np.abs(numeric), initial=0.0)), 1.0)
        err = float(np.max(np.abs(np.asarray(a, np.float64) - numeric), initial=0.0))
        if not err <= tol * scale:
            problems.append(f"output {j}: the JvpFn and central differences of the kernel differ by {err:.3g} "
                            f"(allowed {tol * scale:.3g}); with no GradientFn, nothing else checks the JvpFn")
    return problems, f"JvpFn agrees with central differences on {len(got)} output(s) (no GradientFn)"


def _check_any_shape_gradient(schema: OpSchema, index: int, rng: np.random.Generator, reg: Registry) -> Outcome:
    """The promise of ``any_shape_gradient``: the op's VJP traced at the example's shapes and re-specialised for
    another batch size (the leading axis of every input of rank 2 or more whose leading size is the first such
    input's) gives what a VJP
    traced at that size gives. A GradientFn that writes a traced size down (a shape attribute, a 1/N constant)
    computes at the old size: refused, or a wrong gradient."""
    from ..autodiff.vjp import build_vjp_graph
    from ..compiler.api import compile
    from ..compiler.specialize import specialize
    from ..ir.graph import is_zero_constant
    from ..ops_registry.schema import Example
    from .opcheck import op_graph

    example = schema.examples[index]
    types = list(example.inputs)
    lead = next((t.shape[0] for t in types if t.rank > 1), 0)  # (a vector's one axis may be no batch: [re, im])
    wrt = [k for k, t in enumerate(types) if t.dtype.is_float and k not in schema.nondiff_inputs]
    # the batch first (the leading axis of the inputs of rank >= 2 that share it), then every other size the
    # inputs hold (each axis of that size, in every input, at once): a sequence length, a vector's length
    others = sorted({d for t in types for d in t.shape} - {0})
    if example.values is not None or not others or not wrt:
        return [], "nothing to resize (fixed values, no axis or no floating input)"

    def vjp(ts: list[TensorType]) -> tuple[Any, Any]:
        with use_registry(reg):
            forward = op_graph(schema, ts, example.attrs, registry=reg)
            graph = build_vjp_graph(forward, wrt, registry=reg)
        return forward, graph

    traced_forward, traced = vjp(types)
    # an input whose gradient is zero everywhere gets zeros of its traced shape (refused at any other): left out
    live = [k for k, g in zip(wrt, traced.outputs)
            if not (g.producer is not None and g.producer.op.endswith("constant") and is_zero_constant(g))]
    if not live:
        return [], "the gradient is zero everywhere (a constant of the traced shape): nothing to check"
    if live != wrt:
        wrt = live
        traced_forward, traced = vjp(types)

    def batch(size: int) -> list[TensorType]:
        return [t.with_shape((size, *t.shape[1:])) if t.rank > 1 and t.shape[0] == lead else t for t in types]

    def every(old: int) -> Callable[[int], list[TensorType]]:
        return lambda size: [t.with_shape(tuple(size if d == old else d for d in t.shape)) for t in types]

    resizes: list[tuple[str, int, Callable[[int], list[TensorType]]]] = [(f"batch {lead}", lead, batch)] if lead else []
    resizes += [(f"size {d}", d, every(d)) for d in others if not (d == lead and all(
        t.rank > 1 or d not in t.shape for t in types))]
    problems, checked = [], []
    for label, old, resize in resizes:
        for size in [old + 2] + ([1] if old > 1 else []):
            resized = resize(size)
            try:
                forward, fresh = vjp(resized)
            except FrameError:
                continue  # the op takes no inputs of these shapes: nothing to compare
            cotangents = [v.type for v in forward.outputs]
            if [t.rank for t in cotangents] != [v.type.rank for v in traced_forward.outputs]:
                continue
            where = f"{label} -> {size} (inputs {', '.join(map(str, resized))})"
            try:
                specialised = specialize(traced, [*resized, *cotangents], registry=reg)
            except ShapeError as exc:  # safe at another size (a refusal names it), but the batch must run
                if resize is batch:
                    problems.append(f"{where}: the gradient traced at {label} is refused: "
                                    f"{str(exc).splitlines()[0]}")
                continue
            arrays = Example(resized, example.attrs, low=example.low, high=example.high,
                             min_abs=example.min_abs).sample(rng)
            arrays += [rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np) for t in cotangents]
            try:
                want = compile(fresh, cache=False, registry=reg).run([a.copy() for a in arrays])
            except FrameError:
                continue  # (indices drawn out of range of a resized table, say)
            got = compile(specialised, cache=False, registry=reg).run(arrays)
            for k, (g, w) in zip(wrt, zip(got, want)):
                if not _close(g, w):
                    problems.append(f"{where}: the gradient for input {k} traced at {label} gives {_describe(g)}, "
                                    f"traced at {size} {_describe(w)}" + (
                                        f"; largest difference {np.max(np.abs(g.astype(np.float64) - w)):.3g}"
                                        if g.shape == w.shape else ""))
            checked.append(f"{label} -> {size}")
    if problems:
        problems.append("the GradientFn holds a traced size: read it from an operand (a *_like_internal op, "
                        "docs/pack-author-guide.md) or remove the any_shape_gradient trait")
    sizes = ", ".join(checked) or "no other size"
    return problems, f"the gradient traced at the example equals one traced at {sizes}"


_CHECK_FUNCTIONS: dict[str, Callable[..., Outcome]] = {
    "schema": _check_schema,
    "examples": _check_examples,
    "has_side_effect": _check_side_effect,
    "kernel": _check_kernel,
    "gradient_contract": _check_gradient_contract,
    "elementwise": _check_elementwise,
    "broadcasting": _check_broadcasting,
    "accepts_out": _check_accepts_out,
    "view": _check_view,
    "commutative": _check_commutative,
    "decomposition": _check_decomposition,
    "jvp_transpose": _check_jvp_transpose,
    "jvp_direct": _check_jvp_direct,
    "any_shape_gradient": _check_any_shape_gradient,
}
