"""Tracing Python callables into the sub-graphs of control-flow ops, with captures.

A control-flow op (``if_else``, ``loop``, ``scan`` of frame-ops-sequence, or
any pack's own) carries its bodies as graph attributes. Its front-end builder
(``OpSchema(frontend=...)``, what ``ops.<name>(...)`` calls) turns the user's
callables into those graphs with :func:`trace_body`:

- the body is traced over inputs of the given types, so its output types are
  inferred by the ops it uses;
- a tensor of an enclosing graph that the body reads (a closed-over value)
  becomes an extra body input, appended after the declared ones, and is
  listed in ``Body.captures`` (tensors of the enclosing graph) for the
  builder to pass as extra node inputs: closure conversion, so gradients
  reach closed-over parameters. Through nested bodies, a value is captured
  by every body between its graph and the one that reads it;
- a ``Graph`` may be given instead of a callable; it is used as is (it
  captures nothing).

:func:`align_captures` gives several bodies of one node (the branches of an
``if_else``) one shared list of captures, each body taking all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import IRError, ShapeError
from ..ir.graph import Graph, Value, clone_graph
from ..ir.types import TensorType, as_type
from .trace import Tensor, _current, _lift, _param_names, _Scope, _scopes, refused_signature

__all__ = ["Body", "trace_body", "align_captures", "flatten_result", "check_arity"]


@dataclass
class Body:
    """A traced body: ``graph`` takes the declared inputs then one input per capture; ``captures`` are the
    tensors of the enclosing graph those extra inputs stand for, in order."""

    graph: Graph
    captures: list[Tensor] = field(default_factory=list)

    @property
    def n_captures(self) -> int:
        return len(self.captures)


def flatten_result(result: Any) -> list[Any]:
    """What a body returned, as a list of outputs: a tuple or list is several, anything else is one."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


def trace_body(
    fn: Callable[..., Any] | Graph,
    input_types: Sequence[TensorType | str],
    *,
    name: str = "body",
    names: Sequence[str | None] | None = None,
    call: Callable[[Callable[..., Any], list[Tensor]], list[Any]] | None = None,
    expect: Sequence[TensorType | None] | None = None,
    outer: Graph | None = None,
    role: str = "body",
    arity: int | None = None,
    called_as: str = "",
) -> Body:
    """Trace ``fn`` over inputs of ``input_types`` into a body graph named ``name``.

    ``call(fn, tensors)`` calls the function and returns its outputs as a list
    (default: ``flatten_result(fn(*tensors))``); builders with structured
    arguments (a tuple of carries) arrange the tensors there. ``expect`` gives,
    per output, the type a Python number returned there takes (its dtype).
    ``outer`` is the enclosing graph whose tensors the body may capture
    (default: the graph being traced). ``role`` names the body in errors.
    ``names`` name the inputs (default: ``fn``'s parameter names).
    ``arity`` is how many positional arguments ``call`` passes (default: one
    per input type) and ``called_as`` how, for the error when ``fn`` cannot
    take them.

    Raises ``IRError`` when ``fn`` is neither a callable nor a graph or cannot
    take the arguments, and ``ShapeError`` when a given graph does not take
    ``input_types``.
    """
    types = [as_type(t) for t in input_types]
    if isinstance(fn, Graph):
        got = [v.type for v in fn.inputs]
        if got != types:
            raise ShapeError(f"the {role} graph {fn.name!r} takes [{', '.join(map(str, got))}], but here it must take "
                             f"[{', '.join(map(str, types))}]")
        return Body(clone_graph(fn), [])
    if not callable(fn):
        raise IRError(f"the {role} must be a Python callable (or a frame Graph), got {type(fn).__name__} {fn!r:.60}")
    check_arity(fn, len(types) if arity is None else arity, role, called_as)
    enclosing = outer if outer is not None else _current.get()
    graph = Graph(name)
    labels = list(names) if names is not None else _param_names(fn, len(types))
    args = [Tensor(graph.add_input(t, n), graph) for t, n in zip(types, labels)]
    scope = _Scope(graph, enclosing)
    token = _current.set(graph)
    scope_token = _scopes.set(_scopes.get() + (scope,))
    try:
        results = call(fn, args) if call is not None else flatten_result(fn(*args))
        for i, r in enumerate(results):
            graph.mark_output(_lift_output(r, graph, None if expect is None or i >= len(expect) else expect[i],
                                           role, i))
    finally:
        _scopes.reset(scope_token)
        _current.reset(token)
    captures = [Tensor(v, enclosing) for v in scope.captured] if enclosing is not None else []
    return Body(graph, captures)


def check_arity(fn: Callable[..., Any], count: int, role: str = "body", called_as: str = "") -> None:
    """An ``IRError`` saying how the body is called, not a ``TypeError`` from inside the call."""
    signature = refused_signature(fn, count)
    if signature is not None:
        how = f" ({called_as})" if called_as else ""
        raise IRError(f"the {role} {getattr(fn, '__name__', 'function')}{signature} cannot take {count} positional "
                      f"argument{'s' if count != 1 else ''}: it is called with {count}{how}")


def _lift_output(r: Any, graph: Graph, like: TensorType | None, role: str, i: int) -> Value:
    import numpy as np

    if r is None:
        raise IRError(f"output {i} of the {role} is None; return a tensor (or a Python number)")
    if not isinstance(r, (Tensor, Value, bool, int, float, np.ndarray, np.generic)):
        nested = " (return the values as one flat tuple)" if isinstance(r, (tuple, list)) else ""
        raise IRError(f"output {i} of the {role} must be a tensor, a Python number or a numpy array, got "
                      f"{type(r).__name__}{nested}")
    if like is not None and isinstance(r, (bool, int, float)) and _fits(r, like):
        try:
            return graph.constant(np.asarray(r, like.dtype.np))
        except (OverflowError, ValueError):
            pass  # fall through: the ordinary lifting says what is wrong
    return _lift(r, graph, None, f"output of the {role}", i)


def _fits(r: bool | int | float, like: TensorType) -> bool:
    """Whether the Python number ``r`` takes ``like``'s dtype without losing anything: a bool only a bool
    (a cond), an int an integer or a float, a float a float. Otherwise it keeps its own dtype, and the
    op's check names both types (1.5 for an integer state is refused, never truncated to 1)."""
    d = like.dtype
    if isinstance(r, bool):
        return d.name == "bool"
    if isinstance(r, int):
        return d.is_int or d.is_float
    return d.is_float


def align_captures(bodies: Sequence[Body]) -> tuple[list[Body], list[Tensor]]:
    """Bodies that all take one shared list of captures (the union, in first-seen order).

    Each returned body's graph takes its declared inputs, then one input per
    shared capture (an unused input where that body did not read the value).
    """
    union: dict[Value, Tensor] = {}
    for body in bodies:
        for t in body.captures:
            union.setdefault(t.value, t)
    shared = list(union.values())
    aligned = []
    for body in bodies:
        graph = body.graph
        n_declared = len(graph.inputs) - body.n_captures
        own = dict(zip([t.value for t in body.captures], graph.inputs[n_declared:]))
        graph.inputs = graph.inputs[:n_declared] + [own.get(t.value) or Value(t.type, None, -1, t.value.name)
                                                    for t in shared]
        aligned.append(Body(graph, list(shared)))
    return aligned, shared
