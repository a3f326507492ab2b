"""Tracing front end: write Python, get a ``Graph``.

``trace(fn, *input_types)`` calls ``fn`` with one :class:`Tensor` per input;
arithmetic on tensors (``x @ w + b``, ``-x``, ``x * 2.0``, ``x ** 3``, ``abs(x)``),
ordering comparisons (``x < y`` gives a boolean tensor; ``==`` and ``!=`` stay
identity comparisons, so tensors remain usable as dict keys: use
``ops.equal``) and calls into the ``ops`` namespace (``ops.relu(x)``) append
nodes to the graph being traced.
The same front end writes GradientFns (``NodeContext.grad_graph``) and
DecomposeFns.

Python numbers are *weakly typed*, as in numpy 2 and JAX: a Python scalar
takes the dtype of the tensor (or numpy array) it meets (``x * 2.0`` keeps
``x``'s float16): the first tensor input the op does not list in
``nondiff_inputs`` (``where``'s boolean condition, ``cross_entropy``'s labels
carry no value a scalar is combined with). An op whose inputs are all Python
numbers (or results of such ops), ``ops.add(0.5, 0.25)``, gives a weak
tensor: traced at the default dtype (float64 for floats, as Python's float is
a double; int64 for ints; bool), and traced again in the other operand's
dtype when it meets a tensor of another dtype, so ``x + ops.add(0.5, 0.25)``
works for any floating ``x``. A bare Python number returned by the traced
function, at a ``nondiff_inputs`` position, or a weak tensor that never met
another operand, becomes a constant of the default dtype: ``1.0`` is a
float64 output. Numpy arrays and scalars (``np.float32(1)``) keep their own
dtype.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._gc import gc_paused, made
from ..errors import FrameError, IRError, RegistrationError, UnsizedTensorError, ValuelessTensorError
from .._text import short_repr
from ..ir.dtypes import as_dtype
from ..ir.graph import Graph, Node, Value, mark_traced_sizes, traced_sizes
from .. import _current_registry as _package_source
from ..ir import schemas as _schemas
from ..ir.schemas import default_source
from ..ir.types import TensorType, as_type
from .numpy_protocol import array_function, array_ufunc

__all__ = ["Tensor", "trace", "trace_gradient", "apply", "constant", "current_graph", "prune_weak"]

_current: contextvars.ContextVar[Graph | None] = contextvars.ContextVar("frame_trace_graph", default=None)


def current_graph() -> Graph:
    """The graph being traced; ``IRError`` outside ``trace``."""
    graph = _current.get()
    if graph is None:
        raise IRError("no graph is being traced here; build graphs inside frame_core.trace(fn, ...)")
    return graph


# Graphs whose traced function read a tensor's shape, size or length: the traced sizes may be baked in as
# numbers (``x.sum() / x.shape[0]``), so ``specialize`` refuses them (docs/design-parameters-and-shapes.md).
# The marks live beside the IR (``ir.graph.mark_traced_sizes``), so that copies and inlinings carry them.
_READ = ("the function traced into it read a tensor's shape, size or len()")


def shape_was_read(graph: Graph, depth: int = 2) -> None:
    """Record that the function traced into ``graph`` read a traced size.

    Reads from frame's own modules (``frame_core``, the bundled ``frame_*`` packs) do not count: their
    front ends read shapes to type bodies and gradients, which the ops' shape functions check again
    whenever the graph is re-specialised. A third-party pack's read counts (re-specialising is then
    refused, never wrong).
    """
    caller = sys._getframe(depth).f_globals.get("__name__", "")
    if not caller.startswith("frame_"):
        mark_traced_sizes(graph, _READ)


def holds_traced_sizes(graph: Graph, reason: str | None = None) -> None:
    """Record that ``graph`` holds traced sizes as numbers whoever built it (an importer that baked a size into
    an attribute, say): ``specialize`` then refuses it, as it does a trace that read a shape. ``reason`` says
    why, for the refusal's message."""
    mark_traced_sizes(graph, reason or "the tool that built it marked it as holding traced sizes")


def reads_traced_shapes(graph: Graph) -> bool:
    """Whether ``graph`` may hold traced sizes as numbers (its trace read a tensor's shape, size or length, or
    ``holds_traced_sizes`` marked it); ``traced_sizes(graph)`` says why."""
    return traced_sizes(graph) is not None


class Tensor:
    """A value of the graph being traced, with operator overloading.

    It has a type but no data: use it to describe computation, then compile
    the traced graph and run it on arrays.
    """

    __slots__ = ("value", "graph", "weak")
    __array_priority__ = 1000  # make numpy defer to our reflected operators
    _frame_traced_tensor = True  # (_args.is_traced_tensor: refused where a list is expected, before iterating)

    def __init__(self, value: Value, graph: Graph, weak: "_Weak | None" = None) -> None:
        self.value = value
        self.graph = graph
        self.weak = weak  # how to trace it again in another dtype, for a tensor made only of Python numbers

    @property
    def type(self) -> TensorType:
        return self.value.type

    @property
    def shape(self) -> tuple[int, ...]:
        """The traced shape. Reading it (or ``size``, ``len()``) marks the graph as depending on its traced
        sizes, which ``specialize`` then refuses to re-specialise (the sizes may be baked in as numbers)."""
        shape_was_read(self.graph)
        return self.value.type.shape

    @property
    def dtype(self):  # noqa: ANN201
        return self.value.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.value.type.shape)

    @property
    def size(self) -> int:
        """The number of elements, as numpy's ``ndarray.size``."""
        shape_was_read(self.graph)
        return self.value.type.size

    def __repr__(self) -> str:
        return f"<Tensor {self.value.type} in {self.graph.name!r}>"

    def __add__(self, other: Any) -> "Tensor":
        return apply("add", self, other)

    def __radd__(self, other: Any) -> "Tensor":
        return apply("add", other, self)

    def __sub__(self, other: Any) -> "Tensor":
        return apply("sub", self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        return apply("sub", other, self)

    def __mul__(self, other: Any) -> "Tensor":
        return apply("mul", self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        return apply("mul", other, self)

    def __truediv__(self, other: Any) -> "Tensor":
        return apply("div", self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return apply("div", other, self)

    def __matmul__(self, other: Any) -> "Tensor":
        return apply("matmul", self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        return apply("matmul", other, self)

    def __neg__(self) -> "Tensor":
        return apply("neg", self)

    def __pos__(self) -> "Tensor":
        return self

    def __pow__(self, exponent: Any) -> "Tensor":
        if isinstance(exponent, (int, float, np.integer, np.floating)) and not isinstance(exponent, (bool, np.bool_)):
            if exponent == 2:
                return apply("square", self)
            if exponent == 1:
                return self
            if exponent == 0.5:
                return apply("sqrt", self)
            exponent = exponent.item() if isinstance(exponent, np.generic) else exponent  # a Python number takes
            # the tensor's dtype (a numpy scalar would keep its own); an int stays an int, so an integer tensor
            # hears pow's own refusal, not about a float it was never given
        return apply("pow", self, exponent)

    def __rpow__(self, base: Any) -> "Tensor":
        return apply("pow", base, self)

    def __abs__(self) -> "Tensor":
        return apply("abs", self)

    # Ordering comparisons build boolean tensors. `==` and `!=` deliberately stay identity comparisons
    # between tensors: a Tensor is hashable and used as a dict key and in `x in list`, which need a bool
    # answer; compare values with ops.equal(a, b) and ops.not_equal(a, b). Against a number or an array,
    # identity is never what was meant (`ops.where(x == 0, ...)` was always False, in silence): refused.
    def __eq__(self, other: object) -> bool:
        if _is_number(other) or isinstance(other, (np.ndarray, np.generic)):
            raise _compared(other, "==", "ops.equal")
        return other is self if isinstance(other, Tensor) else NotImplemented

    def __ne__(self, other: object) -> bool:
        if _is_number(other) or isinstance(other, (np.ndarray, np.generic)):
            raise _compared(other, "!=", "ops.not_equal")
        return other is not self if isinstance(other, Tensor) else NotImplemented

    def __lt__(self, other: Any) -> "Tensor":
        return apply("less", self, other)

    def __le__(self, other: Any) -> "Tensor":
        return apply("less_equal", self, other)

    def __gt__(self, other: Any) -> "Tensor":
        return apply("greater", self, other)

    def __ge__(self, other: Any) -> "Tensor":
        return apply("greater_equal", self, other)

    # The reductions also take numpy's spelling (``axis=``), which is how np.sum(x), np.mean(x), np.max(x) and
    # np.min(x) call them: numpy hands a non-array to its method with axis, dtype and out keywords.
    def sum(self, axes: Any = None, keepdims: bool = False, *, axis: Any = None, dtype: Any = None,
            out: Any = None) -> "Tensor":
        return self._reduce("sum", axes, keepdims, axis, dtype, out)

    def mean(self, axes: Any = None, keepdims: bool = False, *, axis: Any = None, dtype: Any = None,
             out: Any = None) -> "Tensor":
        return self._reduce("mean", axes, keepdims, axis, dtype, out)

    def max(self, axes: Any = None, keepdims: bool = False, *, axis: Any = None, out: Any = None) -> "Tensor":
        return self._reduce("max", axes, keepdims, axis, None, out)

    def min(self, axes: Any = None, keepdims: bool = False, *, axis: Any = None, out: Any = None) -> "Tensor":
        return self._reduce("min", axes, keepdims, axis, None, out)

    def _reduce(self, op: str, axes: Any, keepdims: bool, axis: Any, dtype: Any, out: Any) -> "Tensor":
        if axis is not None:
            if axes is not None:
                raise IRError(f"{op}: give the axes once, as axes= (or numpy's axis=), got axes={short_repr(axes)} "
                              f"and axis={short_repr(axis)}")
            axes = axis
        if dtype is not None:
            try:
                shown = repr(as_dtype(dtype).short)
            except IRError:
                shown = short_repr(dtype)
            raise IRError(f"{op} of a traced Tensor takes no dtype (got {shown}): it reduces in the input's dtype; "
                          f"cast first: x.astype({shown}).{op}()")
        if out is not None:
            raise IRError(f"{op} of a traced Tensor takes no out= array: a traced graph writes no arrays given "
                          "to it; use the result")
        return apply(op, self, axes=axes, keepdims=keepdims)

    def astype(self, dtype: Any) -> "Tensor":
        return apply("cast", self, to=dtype)

    def reshape(self, *shape: Any) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return apply("reshape", self, shape=shape)

    def transpose(self, *perm: Any) -> "Tensor":
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = tuple(perm[0])
        return apply("transpose", self, perm=perm or None)

    @property
    def T(self) -> "Tensor":  # noqa: N802 - numpy's name
        return self.transpose()

    def __getitem__(self, key: Any) -> "Tensor":
        """numpy's basic indexing: ints, slices, ``None`` and ``...`` become ``slice``, ``squeeze`` and
        ``expand_dims`` ops (frame-ops-basic); an index array is refused (``ops.gather`` says what it does)."""
        return _index(self, key)

    def __len__(self) -> int:
        shape = self.value.type.shape
        if not shape:
            raise UnsizedTensorError(f"len() of a rank-0 tensor ({self.type}): it has no first axis; its size is "
                                     "x.size (1)")
        shape_was_read(self.graph)
        return shape[0]

    def __iter__(self) -> Any:  # without it, Python would iterate through __getitem__ until an IRError
        shape = self.value.type.shape
        if not shape:
            raise UnsizedTensorError(f"iteration over a rank-0 tensor ({self.type}): it has no first axis to "
                                     "iterate over; use it as a whole, or ops.reshape(x, shape=[1]) for one element")
        shape_was_read(self.graph)
        return (self[i] for i in range(shape[0]))

    def __bool__(self) -> bool:
        raise ValuelessTensorError(
            "a traced Tensor has no value, so it cannot be used in `if`, `and`, `or` or `bool()`; "
            "express the choice with ops inside the graph"
        )

    def __float__(self) -> float:
        raise ValuelessTensorError("a traced Tensor has no value, so float() or int() cannot read it; compile the "
                                   "traced graph and run it to get arrays")

    __int__ = __float__

    def __complex__(self) -> complex:
        raise ValuelessTensorError("a traced Tensor has no value, so complex() cannot read it; compile the traced "
                                   "graph and run it to get arrays")

    def __index__(self) -> int:
        raise ValuelessTensorError("a traced Tensor has no value, so it cannot be an index, a size or a range "
                                   "bound; for positions held in a tensor use ops.gather(x, indices, axis=...), "
                                   "and read sizes from x.shape")

    def __trunc__(self) -> "Tensor":
        raise ValuelessTensorError("math.trunc() needs a value, which a traced Tensor does not have; for "
                                   "rounding toward zero inside the graph use ops.where(x < 0, ops.ceil(x), "
                                   "ops.floor(x))")

    def __round__(self, ndigits: int | None = None) -> "Tensor":
        """``round(x)``: the ``round`` op (half to even, as Python and numpy round)."""
        if ndigits is not None:
            raise ValuelessTensorError(f"round(x, {ndigits!r}) on a traced Tensor: only round(x) (to whole "
                                       "numbers) is an op; for digits, scale first: ops.round(x * 10**d) / 10**d")
        return apply("round", self)

    def __floor__(self) -> "Tensor":
        return apply("floor", self)

    def __ceil__(self) -> "Tensor":
        return apply("ceil", self)

    def __format__(self, spec: str) -> str:
        if spec:
            raise ValuelessTensorError(f"format spec {spec!r} on a traced Tensor ({self.type}): it has no value "
                                       "to format until the graph runs; format the arrays run() returns")
        return str(self)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise IRError("a traced Tensor has no data, so numpy cannot convert it to an array; compile the traced "
                      "graph and run it to get arrays. numpy functions that frame maps to ops (np.tanh(x), "
                      "np.sum(x, axis=0), ...) trace instead: pass the Tensor itself, not a list holding it")

    # numpy's dispatch protocols: np.tanh(x), np.sum(x), array @ x append frame ops (numpy_protocol.py)
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return array_function(func, types, args, kwargs)

    __hash__ = object.__hash__


def _index(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` for numpy's basic indexing (see ``Tensor.__getitem__``)."""
    items = list(key) if isinstance(key, tuple) else [key]
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, slice) or _is_position(item)):
            hint = ("; for an index tensor or array use ops.gather(x, indices, axis=...), for a mask ops.where"
                    if isinstance(item, (Tensor, np.ndarray, list)) else "")
            raise IRError(f"a Tensor takes ints, slices, None and ... as indices (numpy's basic indexing), got "
                          f"{type(item).__name__} {short_repr(item, 40)}{hint}")
    if sum(item is Ellipsis for item in items) > 1:
        raise IRError(f"an index holds at most one ..., got {short_repr(key, 60)}")
    used = sum(1 for item in items if item is not None and item is not Ellipsis)
    shape = x.value.type.shape  # the rank and index checks only: no size enters the graph
    if used > len(shape):
        raise IRError(f"too many indices for {x.type}: {used} given for {len(shape)} axes")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - used)
    starts: list[int] = []
    stops: list[int] = []
    steps: list[int] = []
    axes: list[int] = []
    dropped: list[int] = []
    new: list[int] = []
    axis = out = 0
    for item in items:
        if item is None:
            new.append(out)
            out += 1
            continue
        size = shape[axis]
        if isinstance(item, slice):
            step = 1 if item.step is None else _checked_position(item.step, "a step")
            if step == 0:
                raise IRError("a slice step must not be zero")
            # Bounds are kept as written (the slice op clamps them as numpy does) and an open end is the
            # int64 extreme, never the traced size: the graph then means the same at any batch size.
            step = max(-_INT64_MAX, min(step, _INT64_MAX))
            start = (0 if step > 0 else -1) if item.start is None else _clamped(item.start, "a start")
            stop = (_INT64_MAX if step > 0 else _INT64_MIN) if item.stop is None else _clamped(item.stop, "a stop")
            if not (start == 0 and stop == _INT64_MAX and step == 1):
                for column, entry in ((starts, start), (stops, stop), (steps, step), (axes, axis)):
                    column.append(entry)
            out += 1
        else:
            i = int(item)
            if not -size <= i < size:
                raise IRError(f"index {i} is out of range for axis {axis} of {x.type} (size {size})")
            for column, entry in ((starts, i), (stops, i + 1 if i != -1 else _INT64_MAX), (steps, 1), (axes, axis),
                                  (dropped, axis)):
                column.append(entry)
        axis += 1
    result = x
    if axes:
        result = apply("slice", result, starts=starts, stops=stops, steps=steps, axes=axes)
    if dropped:
        result = apply("squeeze", result, axes=dropped)
    if new:
        result = apply("expand_dims", result, axes=new)
    return result


def _is_position(item: Any) -> bool:
    return isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))


_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def _clamped(value: Any, what: str) -> int:
    """A slice bound as an int64 (numpy clamps bounds past either end, so the extremes mean the same)."""
    return max(_INT64_MIN, min(_checked_position(value, what), _INT64_MAX))


def _checked_position(value: Any, what: str) -> int:
    if not _is_position(value):
        raise IRError(f"{what} of a slice must be an int or None, got {type(value).__name__} {short_repr(value, 40)}")
    return int(value)


def _compared(other: Any, symbol: str, op: str) -> IRError:
    return IRError(f"`x {symbol} {short_repr(other)}` on a traced Tensor x: `{symbol}` between tensors asks whether "
                   "they are the same object (as dict keys and `x in list` need), so against a number or an array "
                   f"it would always say {symbol == '!='}; compare the elements with {op}(x, {short_repr(other)})")


def _graph_of(args: Sequence[Any], op: str) -> Graph:
    """The graph ``op`` is appended to: the one being traced, else the graph of its first tensor argument.

    Tensors of other graphs are resolved (captured into a body, or refused) by ``_lift``.
    """
    graph = _current.get()
    if graph is None:
        graph = next((a.graph for a in args if isinstance(a, Tensor)), None) or current_graph()
    return graph


class _Scope:
    """A body being traced inside an enclosing graph's trace (control flow; see ``frontend.subgraph``).

    ``captured`` maps values of ``outer`` that the body reads to the body inputs standing for them,
    in the order they were first read.
    """

    __slots__ = ("graph", "outer", "captured")

    def __init__(self, graph: Graph, outer: Graph | None) -> None:
        self.graph = graph
        self.outer = outer
        self.captured: dict[Value, Value] = {}


# bodies being traced, outermost first; each one's `outer` is the graph of the scope before it
_scopes: contextvars.ContextVar[tuple[_Scope, ...]] = contextvars.ContextVar("frame_trace_scopes", default=())


def _capture(x: Tensor, graph: Graph) -> Value | None:
    """``x`` (a tensor of an enclosing graph) seen from ``graph``, the body being traced: a body input
    standing for it, added through every body between the two (closure conversion); ``None`` when
    ``x``'s graph does not enclose ``graph``."""
    scopes = _scopes.get()
    if not scopes or scopes[-1].graph is not graph:
        return None
    start = next((j for j in range(len(scopes) - 1, -1, -1) if scopes[j].outer is x.graph), None)
    if start is None:
        return None
    value = x.value
    for scope in scopes[start:]:
        inner = scope.captured.get(value)
        if inner is None:
            inner = scope.captured[value] = scope.graph.add_input(value.type, value.name)
        value = inner
    return value


def _foreign(x: Tensor, graph: Graph, op: str, position: int) -> Value:
    """The value of a tensor of another graph: captured when that graph encloses ``graph``, else refused."""
    value = _capture(x, graph)
    if value is None:
        theirs = (f"another graph that is also named {x.graph.name!r} (a tensor captured from an earlier trace, or "
                  "from another call of the traced function?)" if x.graph.name == graph.name
                  else f"graph {x.graph.name!r}")
        raise IRError(
            f"{op}: input {position} ({x.type}) is a tensor of {theirs}, but this op is being added to graph "
            f"{graph.name!r}; tensors from two different graphs cannot meet in one op, and a tensor belongs to the "
            "one trace that made it: pass the value in as an input of the traced function (or as a constant "
            "array) instead of capturing it"
        )
    return value


def _is_number(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, (np.ndarray, np.generic))


class _Weak:
    """Output ``index`` of ``op`` over Python numbers and other weak values: a tensor that can be traced again
    in another dtype (weak typing). ``args`` holds Python numbers and other ``_Weak`` values."""

    __slots__ = ("op", "args", "attrs", "index")

    def __init__(self, op: str, args: tuple[Any, ...], attrs: dict[str, Any], index: int) -> None:
        self.op, self.args, self.attrs, self.index = op, args, attrs, index

    def kind(self) -> type:
        """``float`` if any number under it is a float, else ``int`` if any is an int, else ``bool`` (values at
        positions apart from the dtype rule, such as where's condition, have no say)."""
        kinds = {type(a) if _is_number(a) else a.kind() for a in self.args if not isinstance(a, Value)}
        return float if float in kinds else int if int in kinds else bool


_DEFAULT = {float: np.float64, int: np.int64, bool: np.bool_}  # what a Python number is when nothing else decides

# nodes traced for weak tensors, per graph: the ones a later retrace left unused are removed when tracing ends
_weak_nodes: "weakref.WeakKeyDictionary[Graph, list[Node]]" = weakref.WeakKeyDictionary()
_weak_lock = threading.Lock()


def _number(x: Any, graph: Graph, dtype: Any, op: str, position: int, other: str = "") -> Value:
    """A Python number as a constant of ``dtype`` (a DType; ``None``: its default dtype); ``other`` describes the
    operand whose dtype it takes, for messages."""
    if dtype is None:
        try:
            return graph.constant(np.asarray(x, _DEFAULT[type(x)]))
        except OverflowError:
            raise IRError(f"{op}: input {position} is the Python int {x:.3g}, which does not fit in int64 (a Python "
                          "int that meets no tensor is an int64); use a float, or a numpy array of another "
                          "dtype") from None
    if isinstance(x, float) and not dtype.is_float and not isinstance(x, bool):
        raise IRError(f"{op}: input {position} is the Python float {x!r} but the other operand is "
                      f"{other or dtype.name}; cast the tensor to a floating dtype first")
    if isinstance(x, bool) and dtype.name != "bool" and not dtype.is_float and not dtype.is_int:
        return graph.constant(np.asarray(x, np.bool_))
    try:
        return graph.constant(np.asarray(x, dtype.np))
    except (OverflowError, ValueError):
        raise IRError(f"{op}: input {position} is the Python number {x!r}, which does not fit in the other "
                      f"operand's dtype ({other or dtype.name}); use a wider dtype") from None


def _retrace(weak: _Weak, graph: Graph, dtype: Any, op: str, position: int, memo: dict[int, Any]) -> Value:
    """``weak`` traced again with its numbers in ``dtype`` (bools stay bools; values at positions apart from the
    dtype rule are reused as they are); shared parts are traced once."""
    made = memo.get(id(weak))
    if made is None:
        args = [(a if isinstance(a, Value) else _retrace(a, graph, dtype, op, position, memo) if isinstance(a, _Weak)
                 else _weak_number(a, graph, dtype if not isinstance(a, bool) else None, op, position))
                for a in weak.args]
        made = memo[id(weak)] = graph.add_node(weak.op, args, weak.attrs)
        _remember(graph, made)
    return made.outputs[weak.index]


def _weak_number(x: Any, graph: Graph, dtype: Any, op: str, position: int) -> Value:
    value = _number(x, graph, dtype, op, position)
    if value.producer is not None:
        _remember(graph, value.producer)
    return value


def _remember(graph: Graph, node: Node) -> None:
    with _weak_lock:
        _weak_nodes.setdefault(graph, []).append(node)


def prune_weak(graph: Graph) -> None:
    """Remove the nodes traced for weak tensors that nothing uses any more (a retrace in another dtype replaced
    them); called when tracing ``graph`` ends."""
    if not _weak_nodes:  # (the usual case: no weak tensor traced anywhere; entries of this thread's graph are seen)
        return
    with _weak_lock:
        made = _weak_nodes.pop(graph, None)
    if not made:
        return
    candidates = set(map(id, made))
    while True:
        used = {v for n in graph.nodes for v in n.inputs} | set(graph.outputs)
        dead = {id(n) for n in graph.nodes if id(n) in candidates and not any(v in used for v in n.outputs)}
        if not dead:
            return
        graph.nodes[:] = [n for n in graph.nodes if id(n) not in dead]
        candidates -= dead


def _lift(x: Any, graph: Graph, like: Any, op: str, position: int, other: str = "") -> Value:
    """``x`` as a value of ``graph``; Python numbers and weak tensors take the DType ``like`` (the other operand's,
    described by ``other`` in messages) when it is given."""
    if isinstance(x, Tensor):
        if x.graph is not graph:
            return _foreign(x, graph, op, position)
        weak = x.weak
        if weak is None or like is None or x.dtype is like or x.dtype.name == "bool" or \
                not (like.is_float or like.is_int):
            return x.value
        if weak.kind() is float and not like.is_float:
            raise IRError(f"{op}: input {position} is made of Python floats but the other operand is {like.name}; "
                          "cast the tensor to a floating dtype first")
        return _retrace(weak, graph, like, op, position, {})
    if isinstance(x, Value):
        return x
    if _is_number(x):
        return _number(x, graph, like, op, position, other)
    if isinstance(x, (np.ndarray, np.generic)):
        return graph.constant(np.asarray(x))
    raise IRError(f"{op}: input {position} must be a Tensor, a Python number or a numpy array, got "
                  f"{type(x).__name__} {short_repr(x, 60)}{_positional_hint(x, op)}")


def _positional_hint(x: Any, op: str) -> str:
    """What a user passing a list of tensors, or an attribute by position, most likely meant (for ``_lift``)."""
    try:
        schema = default_source().get(op)
    except FrameError:
        return ""
    if schema is None:
        return ""
    if isinstance(x, (list, tuple)) and all(isinstance(t, Tensor) for t in x):
        if getattr(schema, "variadic", False):
            return f"; pass the tensors as separate arguments: ops.{schema.name}(*tensors, ...)"
        if x:
            return f"; {schema.name} takes its inputs ({', '.join(schema.inputs)}) as separate arguments"
    if getattr(schema, "frontend", None) is not None:  # its front end takes callables, not attribute keywords
        from ..ops import frontend_call

        return f"; call it as {frontend_call(schema.name, schema.frontend)}"
    names = list(getattr(schema, "attrs", {}) or {})
    if names:
        return (f"; attributes are keywords: ops.{schema.name}({', '.join(schema.inputs)}, "
                f"{', '.join(f'{n}=...' for n in names)})")
    return ""


def _strong_dtype(inputs: Sequence[Any]) -> Any:
    """The dtype Python numbers and weak tensors take here: the first tensor's that is not weak, else the first
    numpy array's or scalar's; ``None`` when every input is a Python number or weak."""
    for a in inputs:
        if isinstance(a, Tensor) and a.weak is None:
            return a.dtype
    for a in inputs:
        if isinstance(a, (np.ndarray, np.generic)):
            try:
                return as_dtype(a.dtype)
            except IRError:
                return None  # an unsupported dtype: the constant itself will say so
    return None


#: (id of a schema, id of its shape function, input types) -> (schema, shape function, attributes with their
#: defaults, output types): what an attribute-less call infers, memoised (a chain of 10k ops repeats a handful
#: of signatures). Keyed by the function too, so a schema given another shape function is inferred afresh.
_SIGNATURES: dict[tuple, tuple] = {}
_SIGNATURES_LIMIT = 4096


def _registry_now() -> Any:
    """The current registry: what the IR's default schema source gives when ``frame_core`` installed it
    (``ir.schemas``), without that hook's import on every call."""
    global _registry_now
    from ..ops_registry.registry import registry

    _registry_now = registry  # (bound on first use: tracing loads it anyway)
    return registry()


def append_node(graph: Graph, op: str, values: Sequence[Value], attrs: dict[str, Any] | None = None,
                source: Any = None) -> Node:
    """``graph.add_node(op, values, attrs, registry=source)`` for values of ``graph``; a call without attributes
    whose signature was inferred before reuses that inference (the op is resolved every time: scope and
    registry apply as in ``add_node``). Used by tracing and by the backward transform's accumulations."""
    if attrs:
        return graph.add_node(op, values, attrs, registry=source)
    if source is None:
        source = _registry_now() if _schemas._default is _package_source else default_source()
    key, schema = source.resolve(op)
    return _append_plain(graph, key, schema, values)


def _append_plain(graph: Graph, key: str, schema: Any, values: Sequence[Value]) -> Node:
    """The node of op ``key`` (``schema``) without attributes over ``values``: ``append_node``'s memoised path."""
    fn = schema.shape_infer
    types = tuple([v.type for v in values])
    sig = (id(schema), id(fn), types)
    known = _SIGNATURES.get(sig)
    if known is None or known[0] is not schema or known[1] is not fn:
        norm = schema.normalize_attrs({})
        out_types = tuple(schema.infer(types, norm))  # raises as add_node does; nothing is memoised then
        if len(_SIGNATURES) >= _SIGNATURES_LIMIT:
            _SIGNATURES.clear()
        known = _SIGNATURES[sig] = (schema, fn, norm, out_types)
    norm, out_types = known[2], known[3]
    node = Node(key, tuple(values), dict(norm) if norm else {})
    if len(out_types) == 1:
        node.outputs = (Value(out_types[0], node, 0),)
    else:
        node.outputs = tuple([Value(t, node, i) for i, t in enumerate(out_types)])
    graph.nodes.append(node)
    return node


def apply_resolved(op: str, key: str, schema: Any, inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
    """``apply(op, *inputs, **attrs)`` for an ``op`` that the current registry, in the current scope, resolves to
    ``(key, schema)`` (``ops.<name>`` has just asked it): a call over tensors of the graph being traced, none of
    them weak, builds its node without resolving the name a second time; any other call is ``apply``'s."""
    graph = _current.get()
    if graph is not None and _schemas._default is _package_source and hasattr(schema, "infer_node"):
        # (the registry ops.<name> asked; an OpSchema)
        values = []
        for x in inputs:
            if x.__class__ is not Tensor or x.graph is not graph or x.weak is not None:
                break
            values.append(x.value)
        else:
            if attrs:  # what add_node records, as add_node asks it
                norm, types = schema.infer_node(tuple([v.type for v in values]), attrs)
                node = Node(key, tuple(values), norm)
                node.outputs = tuple([Value(t, node, i) for i, t in enumerate(types)])
                graph.nodes.append(node)
            else:
                node = _append_plain(graph, key, schema, values)
            outs = node.outputs
            if len(outs) == 1:
                return Tensor(outs[0], graph)
            return tuple(Tensor(v, graph) for v in outs)
    return apply(op, *inputs, **attrs)


def apply(op: str, *inputs: Any, **attrs: Any) -> Any:
    """Append ``op(*inputs; attrs)`` to the traced graph; return a ``Tensor`` (a tuple for several outputs)."""
    graph = _current.get()
    if graph is not None:  # the common case first: tensors of the graph being traced, none of them weak
        values = []
        for x in inputs:
            if x.__class__ is not Tensor or x.graph is not graph or x.weak is not None:
                break
            values.append(x.value)
        else:
            if attrs:
                outs = graph.add_node(op, values, attrs).outputs
            else:  # (append_node's memoised path, without its call: Tensor operators land here)
                source = _registry_now() if _schemas._default is _package_source else default_source()
                key, schema = source.resolve(op)
                outs = _append_plain(graph, key, schema, values).outputs
            if len(outs) == 1:
                return Tensor(outs[0], graph)
            return tuple(Tensor(v, graph) for v in outs)
    graph = _graph_of(inputs, op)
    plain = all(type(x) is Value or (isinstance(x, Tensor) and x.weak is None) for x in inputs)
    apart = frozenset() if plain else _nondiff_positions(op)
    data = [x for i, x in enumerate(inputs) if i not in apart]
    like = _strong_dtype(data)
    if like is None and data and all(_is_number(a) or (isinstance(a, Tensor) and a.weak is not None and
                                                      a.graph is graph) for a in data):
        return _apply_weak(op, inputs, attrs, graph, apart)
    other = next((str(a.type) for a in data if isinstance(a, Tensor) and a.weak is None), "")
    values = [_lift(x, graph, None if i in apart else like, op, i, other) for i, x in enumerate(inputs)]
    node = append_node(graph, op, values, attrs)
    outs = node.outputs
    if len(outs) == 1:
        return Tensor(outs[0], graph)
    return tuple(Tensor(v, graph) for v in outs)


def _apply_weak(op: str, inputs: Sequence[Any], attrs: dict[str, Any], graph: Graph,
                apart: frozenset[int] = frozenset()) -> Any:
    """``op`` over Python numbers and weak tensors: a weak result, traced in the inputs' common default dtype.
    Inputs at ``apart`` positions (where's condition, gather's indices) take no part: they keep their own dtype
    (a Python int index stays an integer) and are reused as they are when the result is traced again."""
    fixed = {i: _lift(a, graph, None, op, i) for i, a in enumerate(inputs) if i in apart}
    args = tuple(fixed[i] if i in fixed else a.weak if isinstance(a, Tensor) else a for i, a in enumerate(inputs))
    probe = _Weak(op, args, attrs, 0)
    dtype = as_dtype(_DEFAULT[probe.kind()])
    memo: dict[int, Any] = {}
    # weak inputs already traced in that dtype are reused; the others (ints meeting a float) are traced again
    for i, a in enumerate(inputs):
        if i not in fixed and isinstance(a, Tensor) and a.dtype is dtype:
            memo[id(a.weak)] = a.value.producer
    values = [(fixed[i] if i in fixed else _retrace(a.weak, graph, dtype, op, i, memo)
               if isinstance(a, Tensor) and a.weak is not None
               else _weak_number(a, graph, None if isinstance(a, bool) else dtype, op, i)) for i, a in enumerate(inputs)]
    node = graph.add_node(op, values, attrs)
    _remember(graph, node)
    outs = [Tensor(v, graph, _Weak(op, args, attrs, j)) for j, v in enumerate(node.outputs)]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _nondiff_positions(op: str) -> frozenset[int]:
    """The inputs of ``op`` whose dtype is not the data's (a condition, labels): a scalar there neither
    follows nor sets the dtype of the other operands. Empty for an unknown op (``add_node`` reports it)."""
    try:
        return frozenset(getattr(default_source().get(op), "nondiff_inputs", ()))
    except FrameError:
        return frozenset()


def constant(value: Any, dtype: Any = None) -> Tensor:
    """A constant tensor in the graph being traced."""
    graph = current_graph()
    return Tensor(graph.constant(value, dtype), graph)


def _param_names(fn: Callable[..., Any], count: int) -> list[str | None]:
    code = getattr(fn, "__code__", None)
    if code is None or code.co_flags & 0x04:  # *args
        return [None] * count
    names = list(code.co_varnames[: code.co_argcount])
    if names and names[0] == "self":
        names = names[1:]
    return (names + [None] * count)[:count]


def refused_signature(fn: Callable[..., Any], count: int) -> Any:
    """``fn``'s signature when it cannot be called with ``count`` positional arguments, else ``None`` (also for
    builtins without a signature: the call decides). Callers raise an ``IRError`` saying how ``fn`` is called,
    rather than leave a ``TypeError`` from inside the call."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return signature
    return None


def _check_arity(fn: Callable[..., Any], count: int) -> None:
    signature = refused_signature(fn, count)
    if signature is not None:
        name = getattr(fn, "__name__", repr(fn))
        raise IRError(f"trace: {name}{signature} cannot take {count} tensor argument{'s' if count != 1 else ''} "
                      f"(one per input type given); pass as many input types as it has parameters")


def trace(fn: Callable[..., Any], *input_types: TensorType | str, name: str | None = None) -> Graph:
    """Trace ``fn`` over inputs of ``input_types`` and return the graph.

    ``fn`` returns a tensor or a sequence of tensors, which become the graph's
    outputs in order (Python numbers become constants).
    """
    if not callable(fn):
        raise IRError(f"trace(fn, *input_types) takes a function first, got {type(fn).__name__}")
    if name is not None and not isinstance(name, str):
        raise IRError(f"trace(..., name=) takes a string, got {type(name).__name__}")
    graph = Graph(name or str(getattr(fn, "__name__", "graph")).replace("<lambda>", "graph"))
    types = [as_type(t) for t in input_types]
    names = _param_names(fn, len(types))
    args = [Tensor(graph.add_input(t, n), graph) for t, n in zip(types, names)]
    call_and_mark(graph, fn, args)
    return graph


def call_and_mark(graph: Graph, fn: Callable[..., Any], args: Sequence[Tensor]) -> list[int]:
    """Call ``fn(*args)`` with ``graph`` being traced; mark what it returns (a tensor, a number or a
    sequence of them) as new outputs and return their indices. Shared by ``trace`` and ``extend_graph``."""
    _check_arity(fn, len(args))
    token = _current.set(graph)
    try:
        with gc_paused():  # a large trace makes many long-lived objects: no collections walking them meanwhile
            result = fn(*args)
            made(len(graph.nodes))
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        indices = []
        own: set[Value] | None = None
        for i, r in enumerate(results):
            if isinstance(r, Tensor) and r.graph is not graph:
                raise IRError(f"output {i} of the traced function is a tensor of graph {r.graph.name!r}, not of the "
                              f"graph being traced ({graph.name!r}); return tensors computed from the inputs")
            if isinstance(r, Value):  # a raw Value must be one of this graph's, or the graph would be broken
                if own is None:
                    own = set(graph.inputs) | {v for n in graph.nodes for v in n.outputs}
                if r not in own:
                    raise IRError(f"output {i} of the traced function is a Value of another graph, not of the graph "
                                  f"being traced ({graph.name!r}); return tensors computed from the inputs")
            elif not (isinstance(r, Tensor) or _is_number(r) or isinstance(r, (np.ndarray, np.generic))):
                raise IRError(f"output {i} of the traced function is {short_repr(r)} ({type(r).__name__}); a traced "
                              "function returns tensors, Python numbers or numpy arrays: one, or a flat list or tuple "
                              "of them" + ("; did it forget to `return` its result?" if r is None else ""))
            indices.append(graph.mark_output(_lift(r, graph, None, "output", i)))
    finally:
        _current.reset(token)
    prune_weak(graph)
    return indices


#: (input names, output names, variadic, n, m) -> the names of a micro-graph's inputs (trace_gradient): a handful of
#: distinct answers, asked for every GradientFn instantiated (thousands while the closure audit runs).
_GRADIENT_NAMES: dict[tuple, list[str]] = {}


def _gradient_input_names(schema: Any, n: int, m: int) -> list[str]:
    """``[x.., y.., gy..]``'s names for an op of ``n`` inputs and ``m`` outputs: the schema's (``g`` before an output
    name), or ``x0``, ``y0``, ``gy0``... where it has too few (variadic inputs)."""
    key = (schema.inputs, schema.outputs, schema.variadic, n, m)
    try:
        return _GRADIENT_NAMES[key]
    except (KeyError, TypeError):  # (TypeError: names in a list, not a tuple; never remembered)
        pass
    out_names = list(schema.outputs[:m]) if len(schema.outputs) >= m else [f"y{j}" for j in range(m)]
    in_names = list(schema.inputs[:n]) if len(schema.inputs) >= n and not schema.variadic else [f"x{i}" for i in range(n)]
    names = in_names + out_names + ["g" + o for o in out_names]
    if isinstance(schema.inputs, tuple) and isinstance(schema.outputs, tuple) and len(_GRADIENT_NAMES) < 4096:
        _GRADIENT_NAMES[key] = names
    return names


def trace_gradient(fn: Callable[..., Any], ctx: Any) -> Graph:
    """Trace a GradientFn body over ``[x.., y.., gy..]`` and check the contract (ARCH-063).

    ``fn`` returns one gradient per forward input (a bare tensor when there is
    one input); ``None`` stands for a zero gradient of that input's type.
    Raises ``RegistrationError`` when the count or a type is wrong.
    """
    schema = ctx.schema
    n = len(ctx.input_types)
    graph = Graph(f"{schema.name}_grad")
    types = ctx.gradient_input_types()
    m = (len(types) - n) // 2
    inputs = graph.inputs  # (graph.add_input's values, without its call per input: the names are strings)
    args = []
    for t, nm in zip(types, _gradient_input_names(schema, n, m)):
        value = Value(as_type(t), None, -1, nm)
        inputs.append(value)
        args.append(Tensor(value, graph))
    token = _current.set(graph)
    try:
        result = fn(*args)
        # one gradient per input in a list or tuple; anything else is the one gradient of a one-input op (a numpy
        # array too, as for trace: iterating it counted its rows as gradients)
        result = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(result) != n:
            raise RegistrationError(
                f"GradientFn of {schema.name!r} returned {len(result)} gradients for {n} inputs "
                f"(it must return one per input: [{', '.join(schema.inputs)}])"
            )
        for i, (g, t) in enumerate(zip(result, ctx.input_types)):
            if isinstance(g, Tensor) and g.graph is not graph:
                raise RegistrationError(f"GradientFn of {schema.name!r} returned, for input {i}, a tensor of graph "
                                        f"{g.graph.name!r} instead of one computed in the micro-graph {graph.name!r}")
            # a Python number (or a weak tensor) for a gradient takes its input's dtype
            if g is None:
                value = graph.zeros(t)
            elif g.__class__ is Tensor and g.weak is None:  # (_lift's answer for a tensor of this graph)
                value = g.value
            else:
                value = _lift(g, graph, t.dtype, f"{schema.name} gradient", i)
            if value.type != t:
                label = schema.inputs[i] if i < len(schema.inputs) else f"#{i}"
                raise RegistrationError(
                    f"GradientFn of {schema.name!r} returned a gradient of type {value.type} for input {i} ({label}), "
                    f"which has type {t}; a gradient has its input's type (reduce broadcast axes, cast back)"
                )
            graph.mark_output(value)
    finally:
        _current.reset(token)
    prune_weak(graph)
    return graph
