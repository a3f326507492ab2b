"""``OpSchema``, ``AttrSpec``, ``Example`` and ``NodeContext`` (ARCH-063).

One ``OpSchema`` says everything about one operator: its inputs, outputs and
attributes, its shape inference, its kernels per backend (``cpu`` required),
its GradientFn or the reason it has none, an optional DecomposeFn, traits,
documentation and examples. There is one registry of schemas and no separate
gradient registry.

Contracts
---------
``shape_infer(ctx) -> Sequence[TensorType]``
    Output types from ``ctx.input_types`` and ``ctx.attrs``; raise
    ``ctx.error(...)`` (a ``ShapeError``) on bad input.
kernel builder ``kernels[backend](ctx) -> callable``
    Called at compile time for each distinct (input types, attributes) of the
    op. The callable it returns takes the input arrays positionally and returns
    the output array (a tuple for several outputs). It keeps no state between
    calls: nodes with the same types and attributes share one callable. With the ``accepts_out`` trait it also takes a trailing
    ``out`` array of the (single) output's type, writes the result there and
    returns it; for ``elementwise`` ops this must be correct when ``out`` is
    one of the inputs.
JvpFn ``jvp(ctx) -> Graph``
    Optional (forward mode derives one from the GradientFn otherwise): a
    micro-graph over ``[x_0..x_{n-1}, y_0..y_{m-1}, dx_0..dx_{n-1}]`` returning
    ``[dy_0..dy_{m-1}]``, each of its output's type; slots of inputs that carry
    no tangent hold zeros. ``ctx.jvp_graph(fn)`` traces ``fn`` over them.
GradientFn ``gradient(ctx) -> Graph``
    A micro-graph whose inputs are, by position, ``[x_0..x_{n-1}, y_0..y_{m-1},
    gy_0..gy_{m-1}]`` and whose outputs are ``[gx_0..gx_{n-1}]``, each of its
    input's type. Slots for inputs listed in ``nondiff_inputs`` (and for any
    non-floating input) are filled with a zero constant of the input's type;
    the backward transform never reads them. ``ctx.grad_graph(fn)`` traces
    ``fn`` over exactly these slots.
DecomposeFn ``decomposition(ctx) -> Graph``
    A graph over ``[x_0..x_{n-1}]`` returning ``[y_0..y_{m-1}]`` made of other ops.
front-end builder ``frontend(*args, **kwargs) -> Tensor | tuple``
    Optional. What ``ops.<name>(...)`` calls instead of appending the node
    directly: for ops whose Python signature differs from their node's
    (control flow takes callables, traces them into body graphs with
    ``frame_core.trace_body`` and appends the node with ``apply``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from .._text import short_repr
from ..errors import AttributeSpecError, FrameError, MissingGradientError, RegistrationError, ShapeError
from ..ir.dtypes import DType, as_dtype, complex_hint
from ..ir.graph import Graph, Node
from ..ir.keys import plain_attrs_key
from ..ir.tensors import frozen
from ..ir.types import TensorType, as_type
from .registry import _scope, op_scope

if TYPE_CHECKING:  # pragma: no cover
    from ..frontend.trace import Tensor

__all__ = [
    "REQUIRED",
    "ATTR_KINDS",
    "TRAITS",
    "AttrSpec",
    "Example",
    "NodeContext",
    "OpSchema",
    "normalize_attr",
    "node_has_side_effect",
    "carries_graphs",
]


def _items(value: Any, what: str, op: str) -> tuple[Any, ...]:
    """``value`` as a tuple; a RegistrationError when it is not a sequence (a bare string would be split)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise RegistrationError(f"{op}: {what} must be a list, got {type(value).__name__} {value!r:.40}"
                                + (f"; write [{value!r}] for one item" if isinstance(value, str) else ""))
    return tuple(value)


def _names(value: Any, what: str, op: str) -> tuple[str, ...]:
    """``value`` as a tuple of strings: ``("x", "y")``, never the characters of a bare string."""
    items = _items(value, what, op)
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise RegistrationError(f"{op}: {what} must be a list of names (strings), got {bad[0]!r} in {value!r:.60}")
    return items


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

ATTR_KINDS = ("int", "float", "bool", "str", "ints", "floats", "strs", "dtype", "shape", "tensor", "graph")

#: Traits a schema may declare, and what each promises.
TRAITS = {
    "elementwise": "output[i] depends only on input[i] (numpy broadcasting); output shape is the broadcast shape",
    "commutative": "the op gives the same result with its two inputs swapped",
    "has_side_effect": "the op must not be removed, merged or folded; it cannot have a GradientFn",
    "internal": "not user-facing (set automatically for names ending in '_internal')",
    "view": "the kernel may return a view of its first input (outputs are copied before leaving run)",
    "accepts_out": "the built kernel takes a trailing out= array (see the module docstring)",
    "broadcasting": "binary op following numpy broadcasting; gradients reduce back to each input's shape",
    "shape_operand": "the last input is read for its type only; the DecomposeFn writes that shape down as an "
                     "attribute (a control-flow body's gradient uses that form, so its forward saves nothing for it)",
    "any_shape_gradient": "the GradientFn holds no traced size (no shape attribute, no 1/N constant): a training "
                          "graph re-specialised for new input shapes differentiates correctly at them",
}


class AttrSpec:
    """Specification of one attribute: its ``kind``, default (``REQUIRED`` if none) and doc.

    ``default=None`` makes the attribute optional with value ``None``. A kind
    may join several kinds with ``|`` (``"str|ints"``: a padding mode or pad
    sizes); a value takes the first kind it fits, in the order written.

    A caller's ``None`` means the default, except when ``none_refused`` is
    given: then ``None`` is refused with that explanation. For an attribute
    where ``None`` means something else in a library users know (torch's
    ``momentum=None`` is a cumulative average), taking the default would be
    a silent wrong answer.
    """

    __slots__ = ("kind", "default", "doc", "none_refused")

    def __init__(self, kind: str, default: Any = REQUIRED, doc: str = "", none_refused: str | None = None) -> None:
        if not isinstance(kind, str) or any(k not in ATTR_KINDS for k in kind.split("|")):
            raise RegistrationError(f"unknown attribute kind {kind!r}; expected one of {', '.join(ATTR_KINDS)} "
                                    "(or several joined with '|')")
        self.kind = kind
        self.default = default if default is REQUIRED or default is None else normalize_attr(kind, default, "default")
        self.doc = doc
        self.none_refused = none_refused

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __repr__(self) -> str:
        return f"AttrSpec({self.kind!r}, default={self.default!r})"


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def normalize_attr(kind: str, value: Any, name: str = "attribute") -> Any:
    """Return ``value`` in the canonical Python form of ``kind``; raise ``AttributeSpecError`` if it does not fit.

    For a union kind (``"str|ints"``) the first kind that accepts ``value`` gives its form.
    """
    if "|" in kind:
        for part in kind.split("|"):
            try:
                return normalize_attr(part, value, name)
            except AttributeSpecError:
                continue
        kinds = " or ".join(repr(k) for k in kind.split("|"))
        raise AttributeSpecError(f"{name} must be of kind {kinds}, got {short_repr(value)} ({type(value).__name__})")

    def bad(expected: str) -> AttributeSpecError:
        return AttributeSpecError(f"{name} must be {expected}, got {short_repr(value)} ({type(value).__name__})")

    def fits(v: Any) -> bool:  # kernels hand ints to numpy, whose ints are 64-bit
        return -(2**63) <= int(v) < 2**63

    if kind == "int":
        if _is_int(value) and fits(value):
            return int(value)
        raise bad("an int (64-bit)" if _is_int(value) else "an int")
    if kind == "float":
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            return float(value)
        raise bad("a float")
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise bad("a bool")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise bad("a str")
    if kind in ("ints", "shape"):
        if isinstance(value, (list, tuple)) and all(_is_int(v) and fits(v) for v in value):
            out = tuple(int(v) for v in value)
            if kind == "shape" and any(v < 0 for v in out):
                raise bad("a shape (non-negative ints)")
            return out
        if kind == "ints" and _is_int(value) and fits(value):
            return (int(value),)
        raise bad("a list of (64-bit) ints" if kind == "ints" else "a shape (a list of non-negative 64-bit ints)")
    if kind == "floats":
        if isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in value
        ):
            return tuple(float(v) for v in value)
        raise bad("a list of floats")
    if kind == "strs":
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise bad("a list of str")
    if kind == "dtype":
        try:
            return as_dtype(value)
        except FrameError:
            refused = bad("a dtype such as 'f32'")
            raise AttributeSpecError(f"{refused}{complex_hint(value)}") from None
    if kind == "tensor":
        if isinstance(value, (int, float, bool, np.generic)):
            value = np.asarray(value)
        if isinstance(value, np.ndarray):
            try:
                dtype = as_dtype(value.dtype)  # supported dtype?
            except FrameError:
                refused = bad("a numpy array of a supported dtype (f16, bf16, f32, f64, i32, i64, bool)")
                raise AttributeSpecError(f"{refused}{complex_hint(value)}") from None
            if value.dtype != dtype.np:  # big-endian or otherwise non-native: the kernels' dtype is the native one
                value = value.astype(dtype.np)
            return frozen(value)  # a graph never sees later writes to the caller's array
        raise bad("a numpy array")
    if kind == "graph":
        if isinstance(value, Graph):
            return value
        raise bad("a Graph")
    raise AttributeSpecError(f"unknown attribute kind {kind!r}")


#: While :func:`inference_memo` is active (the closure audit), the results of shape inference and of attribute
#: normalisation. Both are pure functions of the schema, its shape function, the input types and the attributes
#: (the contracts above), and the audit asks the same questions thousands of times: most micro-graphs hold a
#: ``mul`` of the same types, and ``verify`` infers again every node that tracing has just inferred. Each
#: distinct question is still answered by the pack's own code once, and a failure is never stored (it is raised
#: again each time). Only attributes made of plain values key it (:func:`_plain_key`); others are never hashed.
#: GradientFn micro-graphs too (:func:`instantiate_gradient`): a GradientFn that differentiates a graph of its own
#: (``build_vjp_graph``: norms, scans) instantiates the GradientFns of that graph's ops, which the audit also
#: instantiates on their own, about 500 times over.
_memo: ContextVar[dict[Any, Any] | None] = ContextVar("frame_inference_memo", default=None)


@contextmanager
def inference_memo() -> Iterator[None]:
    """Remember shape inference and attribute normalisation inside the block (nested blocks share the outer
    memo); the memo goes when the outermost block ends, so a schema changed afterwards is asked afresh."""
    if _memo.get() is not None:
        yield
        return
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def instantiate_gradient(schema: "OpSchema", ctx: "NodeContext", attrs_key: tuple | None = None) -> Any:
    """``schema.gradient(ctx)`` in the scope of the op's pack (its short names mean its own ops first).

    Inside :func:`inference_memo`, each distinct node (op, GradientFn, input and output types, plain attributes)
    is instantiated once and its micro-graph handed to every later caller: callers only read a micro-graph (the
    backward transform inlines copies of it; the audit checks it), and a GradientFn is a function of its
    ``NodeContext``. A GradientFn that raises is asked again each time. ``attrs_key`` is
    ``plain_attrs_key(ctx.attrs)`` when the caller knows it (``None``: computed here)."""
    gradient = schema.gradient
    if gradient is None:  # (callers ask only ops that have one)
        raise MissingGradientError(f"op {schema.name!r} has no GradientFn", [schema.name])
    memo = _memo.get()
    key = None
    if memo is not None:
        plain = _plain_key(ctx.attrs) if attrs_key is None else attrs_key
        if plain is not None:
            key = ("gradient", schema, gradient, ctx.input_types, ctx.output_types, plain)
            hit = memo.get(key)
            if hit is not None:
                return hit
    with op_scope(schema.namespace):
        micro = gradient(ctx)
    if memo is not None and key is not None:
        memo[key] = micro
    return micro


_plain_key = plain_attrs_key  # (defined beside the other attribute keys; the audit and tests use this name)


class Example:
    """Sample inputs (types or arrays) and attributes for one op.

    Used by the closure audit (types only), the registry-driven tests, the
    conformance kit and ``frame ops show``. Values are drawn uniformly from
    ``[low, high]``; with ``min_abs`` they are pushed at least that far from
    zero (to stay away from kinks such as relu's). ``values`` fixes them
    (one array per input, used as given; give them as ``inputs`` arrays to
    take the types from them). ``tolerance`` (a positive number) loosens every
    numerical gradient check of this example, the float16/bfloat16 ones
    included: each uses the larger of its default and this. ``low_precision``
    chooses which reduced-precision gradient checks run on it: ``True`` (all
    the kit runs), ``False`` (none), or a list such as ``["float16"]``; say
    why in ``note``, which ``frame ops show`` prints and skipped checks report.
    """

    __slots__ = ("inputs", "attrs", "values", "low", "high", "min_abs", "tolerance", "note", "low_precision")

    def __init__(
        self,
        inputs: Sequence[TensorType | str | np.ndarray],
        attrs: Mapping[str, Any] | None = None,
        *,
        low: float = -1.0,
        high: float = 1.0,
        min_abs: float = 0.0,
        values: Sequence[np.ndarray] | None = None,
        tolerance: float | None = None,
        note: str = "",
        low_precision: bool | Sequence[str] = True,
    ) -> None:
        if isinstance(inputs, (str, bytes, TensorType, np.ndarray)) or not isinstance(inputs, (list, tuple)):
            raise RegistrationError(f"Example inputs are a list of types or arrays, got {type(inputs).__name__} "
                                    f"{inputs!r:.40}" + (f"; for one input write [{inputs!r}]"
                                                         if isinstance(inputs, (str, TensorType)) else ""))
        if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, np.number))
                                      or not math.isfinite(tolerance) or tolerance <= 0):
            raise RegistrationError(f"Example tolerance is a positive number (a relative error bound), got {tolerance!r}")
        if isinstance(low_precision, bool):
            chosen: bool | tuple[str, ...] = low_precision
        else:
            try:
                chosen = tuple(as_dtype(d).name for d in _items(low_precision, "low_precision", "Example"))
            except FrameError as exc:
                raise RegistrationError(f"Example low_precision is True, False or a list of dtypes such as "
                                        f"['float16']: {exc}") from None
        if not isinstance(note, str):
            raise RegistrationError(f"Example note is a string (why the example is as it is), got {type(note).__name__}")
        if attrs is not None and not isinstance(attrs, Mapping):
            raise RegistrationError(f"Example attrs map attribute names to values, such as {{'axis': 1}}, got "
                                    f"{type(attrs).__name__} {short_repr(attrs)}")
        for label, bound in (("low", low), ("high", high), ("min_abs", min_abs)):
            if isinstance(bound, bool) or not isinstance(bound, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(bound):
                raise RegistrationError(f"Example {label}= is a finite number, got {short_repr(bound)}")
        if values is not None:
            if not isinstance(values, (list, tuple)):
                raise RegistrationError(f"Example values= is a list of numpy arrays, one per input, got "
                                        f"{type(values).__name__} {short_repr(values)}"
                                        + ("; for one input write [array]" if isinstance(values, np.ndarray) else ""))
            values = [np.asarray(v) for v in values]
            if any(v.dtype.kind not in "biuf" for v in values):
                raise RegistrationError(f"Example values= holds numbers (one numpy array per input), got "
                                        f"{short_repr(values)}")
        types = []
        arrays = []
        for item in inputs:
            if isinstance(item, np.ndarray):
                types.append(TensorType(as_dtype(item.dtype), item.shape))
                arrays.append(item)
            else:
                types.append(as_type(item))
        if arrays and len(arrays) != len(types):
            raise RegistrationError("an Example gives either all inputs as arrays or none (use values=... to fix some)")
        if values is not None and not arrays:
            values = _example_values(values, types)
        self.inputs = tuple(types)
        self.attrs = dict(attrs or {})
        self.values = tuple(arrays) if arrays else (tuple(values) if values is not None else None)
        self.low, self.high, self.min_abs = float(low), float(high), float(min_abs)
        self.tolerance = None if tolerance is None else float(tolerance)
        self.note = note
        self.low_precision = chosen

    def checks_low_precision(self, dtype: DType | str) -> bool:
        """Whether the reduced-precision gradient check in ``dtype`` runs on this example."""
        if isinstance(self.low_precision, bool):
            return self.low_precision
        return as_dtype(dtype).name in self.low_precision

    def sample(self, rng: np.random.Generator, dtype_override: DType | None = None) -> list[np.ndarray]:
        """Input arrays for this example (fixed ``values`` if given, else random)."""
        if self.values is not None:
            out = [np.array(v, copy=True) for v in self.values]
            if dtype_override is not None:
                out = [v.astype(dtype_override.np) if as_dtype(v.dtype).is_float else v for v in out]
            return out
        out = []
        for t in self.inputs:
            dt = dtype_override if (dtype_override is not None and t.dtype.is_float) else t.dtype
            if dt.is_float:
                u = rng.uniform(self.low, self.high, size=t.shape)
                if self.min_abs > 0:
                    u = np.where(np.abs(u) < self.min_abs, np.copysign(self.min_abs, u) + u, u)
                out.append(np.asarray(u).astype(dt.np))
            elif dt.is_int:
                out.append(rng.integers(int(math.floor(self.low)), int(math.ceil(self.high)) + 1, size=t.shape).astype(dt.np))
            else:
                out.append(rng.integers(0, 2, size=t.shape).astype(bool))
        return out

    def __repr__(self) -> str:
        attrs = f", {self.attrs}" if self.attrs else ""
        return f"Example([{', '.join(map(str, self.inputs))}]{attrs})"


def _example_values(values: Sequence[np.ndarray], types: Sequence[TensorType]) -> list[np.ndarray]:
    """``values=`` checked against the example's input types and given their dtypes (float64 data for an f32
    input is rounded, as the reduced-precision checks round it). A mismatch is the example's mistake: caught
    here, it is not reported later as a kernel that returns the wrong dtype or aliases an input."""
    if len(values) != len(types):
        raise RegistrationError(f"Example values= gives {len(values)} arrays for {len(types)} inputs "
                                f"({', '.join(map(str, types))}); give one array per input, in order")
    fixed = []
    for k, (v, t) in enumerate(zip(values, types)):
        if v.shape != t.shape:
            raise RegistrationError(f"Example values[{k}] has shape {list(v.shape)}, but input {k} is {t}; give an "
                                    "array of the input's shape")
        fits = v.dtype.kind in ("iuf" if t.dtype.is_float else "iu" if t.dtype.is_int else "b")
        cast = v.astype(t.dtype.np) if fits else v
        if not fits or (t.dtype.is_int and not np.array_equal(cast, v)):
            raise RegistrationError(f"Example values[{k}] holds {v.dtype} values that input {k} ({t}) cannot take "
                                    "as they are; give values of the input's kind and range")
        fixed.append(cast)
    return fixed


#: ``frontend.trace.trace_gradient`` once a GradientFn has traced (NodeContext.grad_graph): an import inside a
#: function costs microseconds each time it runs, and the deep audit traces some 1,800 micro-graphs.
_trace_gradient: Callable[..., Graph] | None = None


class NodeContext:
    """What shape inference, kernel builders, GradientFns and DecomposeFns see of one node.

    ``input_types`` and ``attrs`` (normalised, defaults filled) describe the
    node; ``output_types`` is inferred on first access.
    """

    __slots__ = ("schema", "input_types", "attrs", "_output_types")

    def __init__(self, schema: "OpSchema", input_types: Sequence[TensorType], attrs: Mapping[str, Any],
                 output_types: Sequence[TensorType] | None = None) -> None:
        self.schema = schema
        self.input_types = tuple(input_types)
        self.attrs = attrs
        self._output_types = None if output_types is None else tuple(output_types)

    @property
    def op(self) -> str:
        return self.schema.name

    def attr(self, name: str) -> Any:
        try:
            return self.attrs[name]
        except KeyError:
            raise AttributeSpecError(f"op {self.op!r} has no attribute {name!r}") from None

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        if self._output_types is None:
            self._output_types = tuple(self.schema.infer(self.input_types, self.attrs))
        return self._output_types

    def error(self, message: str) -> ShapeError:
        """A ``ShapeError`` prefixed with the op name; ``raise ctx.error("...")`` in shape functions."""
        return ShapeError(f"{self.op}: {message}")

    def check_memory(self, nbytes: int, what: str, advice: str = "use smaller shapes") -> None:
        """In a kernel builder, before the kernel would allocate a temporary of ``nbytes`` (``what`` it is): a
        ``MemoryLimitError`` when it exceeds this machine's physical memory, so the graph is refused when it is
        compiled, as the memory plan's buffers are, not after minutes of swapping into a ``MemoryError``."""
        from ..errors import MemoryLimitError, human_bytes, machine_memory

        total = machine_memory()
        if total is not None and nbytes > total:
            raise MemoryLimitError(f"{self.op}: {what} would take {nbytes:,} bytes ({human_bytes(nbytes)}), more "
                                   f"than this machine's {human_bytes(total)} of memory; {advice}")

    def gradient_input_types(self) -> list[TensorType]:
        """The micro-graph input types: ``[x.., y.., gy..]`` (GradientFn contract)."""
        outs = list(self.output_types)
        return [*self.input_types, *outs, *outs]

    def grad_graph(self, fn: Callable[..., Any]) -> Graph:
        """Trace ``fn(*xs, *ys, *gys)`` into a gradient micro-graph; ``fn`` returns one gradient per input.

        Return a single tensor when the op has one input. Python scalars and
        ``None`` are accepted: ``None`` means a zero gradient of the input's type.
        """
        global _trace_gradient
        trace = _trace_gradient
        if trace is None:  # bound on first use (frontend.trace imports this module's package)
            from ..frontend.trace import trace_gradient

            trace = _trace_gradient = trace_gradient
        namespace = self.schema.namespace
        if _scope.get() == namespace:  # (instantiate_gradient has set the pack's scope already)
            return trace(fn, self)
        with op_scope(namespace):  # short names mean this pack's own ops first
            return trace(fn, self)

    def jvp_graph(self, fn: Callable[..., Any]) -> Graph:
        """Trace ``fn(*xs, *ys, *dxs)`` into a JvpFn micro-graph; ``fn`` returns one tangent per output (a bare
        tensor for one output; ``None`` for a zero tangent). See ``frame_core.autodiff.jvp``."""
        from ..autodiff.jvp import trace_jvp

        return trace_jvp(fn, self)

    def decomposition_graph(self, fn: Callable[..., Any]) -> Graph:
        """Trace ``fn(*xs)`` into a DecomposeFn graph returning the op's outputs."""
        from ..frontend.trace import trace

        with op_scope(self.schema.namespace):
            return trace(fn, *self.input_types, name=f"{self.op}_decomposition")

    def __repr__(self) -> str:
        return f"NodeContext({self.op}, [{', '.join(map(str, self.input_types))}], {dict(self.attrs)})"


GradientFn = Callable[[NodeContext], Graph]
DecomposeFn = Callable[[NodeContext], Graph]
JvpFn = Callable[[NodeContext], Graph]
ShapeFn = Callable[[NodeContext], Sequence[TensorType]]
KernelBuilder = Callable[[NodeContext], Callable[..., Any]]


class OpSchema:
    """Everything about one operator (ARCH-063). See the module docstring for the callables' contracts.

    Arguments (every one after ``name`` by keyword):

    - ``name``: the op's short name, an identifier (``"relu"``); a name ending in ``_internal`` makes the op
      internal (not user-facing, hidden from ``frame ops list``). The loader adds the pack's namespace:
      ``qualname`` is ``namespace::name``, the op's unambiguous identity (SPEC §4).
    - ``inputs``: the input names, in order (``("x", "w")``); with ``variadic=True`` the last name stands for any
      number of inputs (``concat(xs...)``).
    - ``outputs``: the output names (default ``("y",)``). Several names make a multi-output op: its kernel returns
      a tuple of arrays, ``ops.<name>(...)`` returns a tuple of tensors, and its GradientFn receives one ``y`` and
      one ``gy`` slot per output, ``[x.., y.., gy..]``. Every ``gy`` slot is there: for an output that carries no
      gradient (an integer or boolean output such as an argmax index, or one nothing downstream uses) it holds a
      zero of that output's type, which the GradientFn may ignore.
    - ``attrs``: attribute name -> ``AttrSpec(kind, default, doc)``; kinds are ``ATTR_KINDS`` (``"int"``,
      ``"floats"``, ``"dtype"``, ``"graph"``, ...), joined with ``|`` for a value of either kind.
    - ``shape_infer``: ``shape_infer(ctx) -> list of TensorType``, the output types from ``ctx.input_types`` and
      ``ctx.attrs``; raise ``ctx.error("...")`` (a ``ShapeError`` naming the op) for input it cannot take.
    - ``kernels``: backend -> kernel builder, ``{"cpu": build}`` at least; ``build(ctx)`` returns the callable that
      computes the outputs from input arrays (module docstring).
    - ``gradient``: the GradientFn, ``gradient(ctx) -> Graph`` (usually ``ctx.grad_graph(fn)``).
    - ``not_differentiable``: instead of ``gradient``, the reason the op has none (every user-facing op has one
      or the other).
    - ``nondiff_inputs``: the inputs (positions or names) that never carry a gradient (a condition, labels,
      indices): their slot in the GradientFn's result is ``None`` (a zero), and a Python number there does not
      take the other operands' dtype. Integer and boolean inputs never carry one anyway.
    - ``decomposition``: optional DecomposeFn, ``decomposition(ctx) -> Graph`` over ``[x..]`` made of other ops,
      used where a backend has no kernel and for ``compile(..., decompose=[...])``.
    - ``jvp``: optional JvpFn, ``jvp(ctx) -> Graph`` (usually ``ctx.jvp_graph(fn)``) giving the tangents of the
      outputs from ``[x.., y.., tx..]``; without it forward mode derives the JVP from ``gradient`` (the double VJP),
      and the conformance kit checks a declared one against that (see docs/forward-mode.md).
    - ``traits``: names from ``TRAITS`` (``elementwise``, ``commutative``, ``has_side_effect``, ``view``,
      ``accepts_out``, ``broadcasting``, ``internal``, ``any_shape_gradient``), each a promise the conformance kit
      checks (``any_shape_gradient``: the VJP traced at an example, run at another batch size). Without it a
      training graph through the op refuses new input shapes (its gradient may hold the traced sizes;
      docs/design-parameters-and-shapes.md).
    - ``doc``: one line or more on what the op computes, shown by ``frame ops show``.
    - ``examples``: ``Example`` inputs and attributes, used by the closure audit, the conformance kit and
      ``frame ops show``; give at least one.
    - ``variadic``: the last input name takes any number of inputs.
    - ``gradient_surrogate``: the ARCH-066 exception, a numpy function whose derivative the GradientFn is checked
      against instead of the forward's (a straight-through estimator, a clipped gradient).
    - ``frontend``: an optional front-end builder that ``ops.<name>(...)`` calls instead of appending the node
      itself (control flow takes Python callables; see the module docstring).

    ``pack``, ``distribution`` and ``namespace`` are filled in by the loader.
    """

    __slots__ = (
        "name", "inputs", "outputs", "attrs", "shape_infer", "kernels", "gradient", "not_differentiable",
        "nondiff_inputs", "decomposition", "traits", "doc", "examples", "variadic", "gradient_surrogate",
        "frontend", "pack", "distribution", "namespace", "jvp",
    )

    def __init__(
        self,
        name: str,
        *,
        inputs: Sequence[str],
        outputs: Sequence[str] = ("y",),
        attrs: Mapping[str, AttrSpec] | None = None,
        shape_infer: ShapeFn,
        kernels: Mapping[str, KernelBuilder],
        gradient: GradientFn | None = None,
        not_differentiable: str | None = None,
        nondiff_inputs: Sequence[int | str] = (),
        decomposition: DecomposeFn | None = None,
        traits: Sequence[str] = (),
        doc: str = "",
        examples: Sequence[Example] = (),
        variadic: bool = False,
        gradient_surrogate: Callable[..., np.ndarray] | None = None,
        frontend: Callable[..., Any] | None = None,
        jvp: "JvpFn | None" = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise RegistrationError(f"an op name is a non-empty string such as 'relu', got {name!r}")
        self.name = name
        self.inputs = _names(inputs, "inputs", name)
        self.outputs = _names(outputs, "outputs", name)
        if attrs is not None and not isinstance(attrs, Mapping):
            raise RegistrationError(f"{name}: attrs must map attribute names to AttrSpec, got {type(attrs).__name__}")
        self.attrs = dict(attrs or {})
        self.shape_infer = shape_infer
        if not isinstance(kernels, Mapping):
            raise RegistrationError(f"{name}: kernels must map backends to kernel builders, e.g. {{'cpu': build}}, "
                                    f"got {type(kernels).__name__}")
        self.kernels = dict(kernels)
        self.gradient = gradient
        self.not_differentiable = not_differentiable
        self.nondiff_inputs = frozenset(self.inputs.index(i) if isinstance(i, str) and i in self.inputs else i
                                        for i in _items(nondiff_inputs, "nondiff_inputs", name))
        self.decomposition = decomposition
        trait_set = set(_names(traits, "traits", name))
        if name.endswith("_internal"):
            trait_set.add("internal")
        self.traits = frozenset(trait_set)
        self.doc = doc
        self.examples = _items(examples, "examples", name)
        self.variadic = variadic
        self.gradient_surrogate = gradient_surrogate
        self.frontend = frontend
        self.jvp = jvp
        self.pack: str | None = None
        self.distribution: str | None = None
        self.namespace: str | None = None

    # -- facts -------------------------------------------------------------
    @property
    def qualname(self) -> str:
        """``namespace::name`` once a loader registered the op (just ``name`` before)."""
        return f"{self.namespace}::{self.name}" if self.namespace else self.name

    @property
    def internal(self) -> bool:
        return "internal" in self.traits

    @property
    def has_side_effect(self) -> bool:
        return "has_side_effect" in self.traits

    @property
    def differentiable(self) -> str:
        """``"yes"`` (has a GradientFn), ``"no"`` (declared not differentiable) or ``"missing"``."""
        if self.gradient is not None:
            return "yes"
        return "no" if self.not_differentiable else "missing"

    def signature(self, name: str | None = None) -> str:
        """``name(inputs..., attr: kind = default) -> (outputs)``; ``name`` defaults to the short name (a listing
        passes the name a user calls it by: the qualified one when another op owns the short name)."""
        ins = [", ".join(self.inputs) + ("..." if self.variadic else "")] if self.inputs else []
        attrs = [f"{k}: {s.kind}" + ("" if s.required else f" = {s.default!r}") for k, s in self.attrs.items()]
        return f"{name or self.name}({', '.join(ins + attrs)}) -> ({', '.join(self.outputs)})"  # no inputs: no lone comma

    # -- checking ------------------------------------------------------------
    def check_definition(self) -> list[str]:
        """Problems with the schema itself (empty when sound). Used by the loader; never raises."""
        problems = []
        name = self.name
        if not name.replace("_", "a").isalnum() or not name[0].isalpha() or not name.isascii():
            problems.append(f"op name {name!r} must be an identifier (letters, digits, '_')")
        for label, value in (("shape_infer", self.shape_infer), ("gradient", self.gradient), ("jvp", self.jvp),
                             ("decomposition", self.decomposition), ("gradient_surrogate", self.gradient_surrogate)):
            if (value is not None or label == "shape_infer") and not callable(value):
                problems.append(f"{name}: {label} must be callable, got {type(value).__name__}")
        if "cpu" not in self.kernels:
            problems.append(f"{name}: no 'cpu' kernel (every op needs one)")
        for backend, kernel in self.kernels.items():
            if not callable(kernel):
                problems.append(f"{name}: kernel for {backend!r} is not callable")
        if self.frontend is not None and not callable(self.frontend):
            problems.append(f"{name}: frontend is not callable")
        for key, spec in self.attrs.items():
            if not isinstance(key, str) or not key.isidentifier():
                problems.append(f"{name}: attribute name {key!r} must be an identifier")
            if not isinstance(spec, AttrSpec):
                problems.append(f"{name}: attribute {key!r} must be described by an AttrSpec such as "
                                f"AttrSpec('int', 0), got {type(spec).__name__} {spec!r:.40}")
        for label, text in (("not_differentiable", self.not_differentiable), ("doc", self.doc)):
            if text is not None and not isinstance(text, str):
                problems.append(f"{name}: {label} must be a string, got {type(text).__name__}")
        if self.has_side_effect and self.jvp is not None:
            problems.append(f"{name}: an op with has_side_effect cannot register a JvpFn")
        if self.jvp is not None and self.not_differentiable:
            problems.append(f"{name}: declares both a JvpFn and not_differentiable")
        if self.has_side_effect and self.gradient is not None:
            problems.append(f"{name}: an op with has_side_effect cannot register a GradientFn: the backward transform never differentiates through a side effect")
        if self.gradient is not None and self.not_differentiable:
            problems.append(f"{name}: declares both a GradientFn and not_differentiable")
        if not self.internal and self.gradient is None and not self.not_differentiable:
            problems.append(
                f"{name}: a user-facing op must register a GradientFn or say why not (not_differentiable='...')"
            )
        unknown = self.traits - set(TRAITS)
        if unknown:
            problems.append(f"{name}: unknown traits {sorted(map(str, unknown))}; known: {sorted(TRAITS)}")
        for i in sorted(self.nondiff_inputs, key=repr):
            if isinstance(i, str):
                problems.append(f"{name}: nondiff_inputs names {i!r}, which is not an input (inputs: "
                                f"{', '.join(self.inputs) or 'none'})")
            elif not _is_int(i):
                problems.append(f"{name}: nondiff_inputs holds {i!r} ({type(i).__name__}); list input positions "
                                "(ints) or input names")
            elif not self.variadic and not 0 <= i < len(self.inputs):
                problems.append(f"{name}: nondiff_inputs {i} out of range for {len(self.inputs)} inputs")
        if not self.examples:
            problems.append(f"{name}: no examples (the closure audit and the conformance kit need at least one)")
        for k, example in enumerate(self.examples):
            if not isinstance(example, Example):
                problems.append(f"{name}: example {k} is a {type(example).__name__}, expected an Example")
            elif not self.variadic and len(example.inputs) != len(self.inputs):
                problems.append(f"{name}: example {k} gives {len(example.inputs)} inputs, the op takes "
                                f"{len(self.inputs)} ({', '.join(self.inputs)})")
        return problems

    def normalize_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``attrs`` against the specs and return them canonical, with defaults filled in."""
        memo = _memo.get()
        if memo is not None:
            key = _plain_key(attrs)
            if key is not None:
                key = (self, key)
                hit = memo.get(key)
                if hit is None:
                    hit = memo[key] = self._normalize_attrs(attrs)
                return dict(hit)
        return self._normalize_attrs(attrs)

    def _normalize_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        specs = self.attrs
        for key in attrs:
            if key not in specs:
                from ..errors import suggest

                close = suggest(key, specs)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                known = ", ".join(specs) or "none"
                raise AttributeSpecError(f"{self.name}: unknown attribute {key!r} (its attributes: {known}){hint}")
        out = {}
        for key, spec in specs.items():
            if key in attrs and attrs[key] is not None:
                out[key] = normalize_attr(spec.kind, attrs[key], f"{self.name}: attribute {key!r}")
            elif spec.none_refused is not None and key in attrs:
                raise AttributeSpecError(f"{self.name}: attribute {key!r} cannot be None: {spec.none_refused}")
            elif spec.default is REQUIRED:
                raise AttributeSpecError(f"{self.name}: attribute {key!r} ({spec.kind}) is required")
            else:
                out[key] = spec.default
        return out

    def check_arity(self, n_inputs: int) -> None:
        expected = len(self.inputs)
        if self.variadic:
            if n_inputs < expected - 1:
                raise ShapeError(f"{self.name}: takes at least {expected - 1} inputs, got {n_inputs}")
        elif n_inputs != expected:
            names = ", ".join(self.inputs)
            raise ShapeError(f"{self.name}: takes {expected} input{'s' if expected != 1 else ''} ({names}), got {n_inputs}")

    def infer(self, input_types: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        """Run ``shape_infer`` with arity and result checks; bugs in it surface as ``ShapeError`` naming the pack."""
        memo = _memo.get()
        if memo is not None:
            key = _plain_key(attrs)
            if key is not None:
                key = (self, self.shape_infer, tuple(input_types), key)
                try:
                    hit = memo.get(key)
                except TypeError:  # an unhashable "type": _infer says what is wrong with it
                    return self._infer(input_types, attrs)
                if hit is None:
                    hit = memo[key] = tuple(self._infer(input_types, attrs))
                return list(hit)
        return self._infer(input_types, attrs)

    def infer_node(self, input_types: tuple[TensorType, ...],
                   attrs: Mapping[str, Any]) -> tuple[dict[str, Any], Sequence[TensorType]]:
        """``(normalize_attrs(attrs), infer(input_types, those attributes))``: what ``Graph.add_node`` records for a
        node of this op, with the same errors. While the closure audit runs (:func:`inference_memo`) the pair is
        remembered as one question, keyed by the attributes as given: a node met before costs one look-up."""
        memo = _memo.get()
        if memo is not None:
            key = _plain_key(attrs)
            if key is not None:
                key = ("node", self, self.shape_infer, input_types, key)
                try:
                    hit = memo.get(key)
                except TypeError:  # an unhashable "type": infer says what is wrong with it
                    hit = None
                    key = None
                if hit is not None:
                    return dict(hit[0]), hit[1]
                norm = self.normalize_attrs(attrs)
                types = tuple(self.infer(input_types, norm))
                if key is not None:
                    memo[key] = (norm, types)
                return dict(norm), types
        norm = self.normalize_attrs(attrs)
        return norm, self.infer(input_types, norm)

    def _infer(self, input_types: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        self.check_arity(len(input_types))
        ctx = NodeContext(self, input_types, attrs, ())
        try:
            if _scope.get() == self.namespace:  # (already in the pack's scope, as inside its GradientFns)
                result = self.shape_infer(ctx)
            else:
                with op_scope(self.namespace):
                    result = self.shape_infer(ctx)
        except FrameError:
            raise
        except (Exception, SystemExit) as exc:  # a bug in the pack's shape function, not in the caller's graph
            raise ShapeError(
                f"{self.name}: shape inference raised {type(exc).__name__}: {exc} "
                f"(a bug in pack {self.pack or '?'}; inputs were [{', '.join(map(str, input_types))}])"
            ) from exc
        if isinstance(result, TensorType) or not isinstance(result, (list, tuple)):
            raise ShapeError(f"{self.name}: shape inference returned {short_repr(result)}, expected a list of "
                             f"TensorType (one per output; a bug in pack {self.pack or '?'})")
        result = list(result)
        if not self.variadic and len(result) != len(self.outputs):
            raise ShapeError(f"{self.name}: shape inference returned {len(result)} types, expected {len(self.outputs)}")
        for t in result:
            if not isinstance(t, TensorType):
                raise ShapeError(f"{self.name}: shape inference returned {t!r}, expected TensorType values")
        return result

    def context(self, input_types: Sequence[TensorType], attrs: Mapping[str, Any] | None = None) -> NodeContext:
        """A ``NodeContext`` for these input types and (raw) attributes."""
        return NodeContext(self, [as_type(t) for t in input_types], self.normalize_attrs(attrs or {}))

    def __repr__(self) -> str:
        return f"<OpSchema {self.signature()}>"


def node_has_side_effect(node: Node, schemas: Mapping[str, OpSchema]) -> bool:
    """Whether ``node`` must run though nothing reads it, and is never merged with an equal node or folded
    at compile time: its op has the ``has_side_effect`` trait, or one of its sub-graphs (a control-flow
    body, at any depth) holds such a node. Passes ask this, not the schema, so that an op with a side
    effect inside a loop body keeps the loop (ARCH-062)."""
    schema = schemas.get(node.op)
    if schema is not None and schema.has_side_effect:
        return True
    return any(isinstance(a, Graph) and any(node_has_side_effect(n, schemas) for n in a.nodes)
               for a in node.attrs.values())


def carries_graphs(schema: OpSchema) -> bool:
    """Whether the op's nodes carry sub-graphs (an attribute of kind ``graph``: control flow, fused bodies)."""
    return any("graph" in spec.kind.split("|") for spec in schema.attrs.values())
