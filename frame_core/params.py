"""Parameter trees: nested dicts, lists and tuples of arrays, named by their path.

The one place that knows about trees (docs/design-parameters-and-shapes.md):

- ``flatten(tree) -> (names, leaves, treedef)``: leaves in optree's order (dict keys sorted), each
  named by its path joined with ``.`` (``{"enc": [{"w": W}]}`` gives ``enc.0.w``);
- ``unflatten(treedef, leaves)``: the tree back;
- ``trace_params(fn, params, *data)``: trace ``fn(params_tree, *data)`` into a graph whose first
  inputs are the parameters, each named by its path;
- ``check_tree(expected, tree, what)``: leaves in ``expected``'s order, or a ``ParameterError``
  listing every missing, unexpected, wrongly shaped or wrongly typed name at once.

``optree`` is imported on first use, so ``import frame_core`` stays light.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import ParameterError
from .ir.graph import Graph
from .ir.types import TensorType, as_type

__all__ = ["flatten", "unflatten", "names_of", "trace_params", "check_tree", "types_of", "ParamTypes"]

#: name -> TensorType, in flattening order
ParamTypes = dict[str, TensorType]

_NAMESPACE = "frame"


def _optree() -> Any:
    import optree

    return optree


def _path_name(path: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for key in path:
        if isinstance(key, str):
            if not key:
                raise ParameterError(f"parameter tree key '' (at {'.'.join(parts) or 'the top'}) is empty; "
                                     "a parameter's name joins its path's keys with '.'")
        elif not isinstance(key, int):
            raise ParameterError(f"parameter tree keys are strings (dicts) or positions (lists), got "
                                 f"{type(key).__name__} {key!r} at {'.'.join(parts) or 'the top'}")
        parts.append(str(key))
    return ".".join(parts)


def flatten(tree: Any) -> tuple[list[str], list[Any], Any]:
    """``(names, leaves, treedef)`` of a parameter tree; a bare array is one leaf named ``''``."""
    optree = _optree()
    try:
        paths, leaves, treedef = optree.tree_flatten_with_path(tree, none_is_leaf=False, namespace=_NAMESPACE)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"a parameter tree is nested dicts (string keys), lists and tuples of arrays; "
                             f"flattening it failed: {exc}") from None
    names = [_path_name(p) for p in paths]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        twice = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
        raise ParameterError(f"two parameters would both be named {twice[0]!r} (a key holding '.' repeats a "
                             f"nested path: {{'a.b': ..}} and {{'a': {{'b': ..}}}}); rename one of them")
    return names, list(leaves), treedef


def unflatten(treedef: Any, leaves: Sequence[Any]) -> Any:
    """The tree of ``treedef`` with ``leaves`` in flattening order."""
    return _optree().tree_unflatten(treedef, list(leaves))


def names_of(tree: Any) -> list[str]:
    """The flattened names of ``tree``'s leaves, in order."""
    return flatten(tree)[0]


def _leaf_type(name: str, leaf: Any) -> TensorType:
    if isinstance(leaf, (TensorType, str)):
        try:
            return as_type(leaf)
        except Exception as exc:  # noqa: BLE001 - IRError of the type parser
            raise ParameterError(f"parameter {name!r}: {leaf!r} is not an array or a type such as 'f32[3, 4]' "
                                 f"({exc})") from None
    array = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
    # bfloat16 (ml_dtypes) is a numpy 'V' kind: it is a real dtype frame holds, not a void/struct array
    if (array.dtype.kind in "OUSV" and array.dtype.name != "bfloat16") or array.dtype.kind == "c":
        raise ParameterError(f"parameter {name!r} is {type(leaf).__name__} of dtype {array.dtype}; "
                             "parameters are real, integer or boolean arrays")
    from .ir.dtypes import as_dtype

    return TensorType(as_dtype(array.dtype), array.shape)


def types_of(tree: Any) -> ParamTypes:
    """``{name: TensorType}`` for a tree of arrays, TensorTypes or type strings (``'f32[3, 4]'``)."""
    names, leaves, _ = flatten(tree)
    return {n: _leaf_type(n, leaf) for n, leaf in zip(names, leaves)}


def check_tree(expected: Mapping[str, TensorType], tree: Any, what: str = "parameters") -> list[Any]:
    """``tree``'s leaves in ``expected``'s order; ``ParameterError`` listing every mismatch at once."""
    names, leaves, _ = flatten(tree)
    given = dict(zip(names, leaves))
    problems = []
    missing = [n for n in expected if n not in given]
    extra = [n for n in names if n not in expected]
    if missing:
        problems.append(f"missing: {', '.join(missing[:20])}" + (" ..." if len(missing) > 20 else ""))
    if extra:
        problems.append(f"not expected: {', '.join(extra[:20])}" + (" ..." if len(extra) > 20 else ""))
    for name, want in expected.items():
        if name not in given:
            continue
        leaf = given[name]
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        try:
            dtype = None if dtype is None else np.dtype(dtype)
        except TypeError:  # another library's dtype (torch.float32): read it through numpy
            try:
                dtype = np.asarray(leaf).dtype
            except Exception:  # noqa: BLE001 - a tensor that requires grad, say: reported below
                dtype = None
        if shape is None or dtype is None:
            problems.append(f"{name}: an array of {want} expected, got {type(leaf).__name__}")
        elif tuple(shape) != want.shape or np.dtype(dtype) != want.dtype.np:
            problems.append(f"{name}: {want} expected, got {np.dtype(dtype).name}{list(shape)}")
    if problems:
        raise ParameterError(f"the {what} do not match what the graph was built for ({len(problems)} "
                             f"problem{'s' if len(problems) != 1 else ''}):\n  " + "\n  ".join(problems)
                             + f"\nexpected: {', '.join(f'{n}: {t}' for n, t in list(expected.items())[:12])}"
                             + (" ..." if len(expected) > 12 else ""))
    return [given[n] for n in expected]


def _data_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[1:1 + count]]
    return names + [f"data{i}" for i in range(len(names), count)]


def trace_params(fn: Callable[..., Any], params: Any, *data: Any, data_names: Sequence[str] | None = None,
                 name: str | None = None) -> Graph:
    """Trace ``fn(params_tree, *data)``; the graph's inputs are the parameters (named by path), then the data.

    ``params`` and each of ``data`` may be arrays, ``TensorType``s or type strings; a tree's leaves give
    the parameter types. Data inputs are named after ``fn``'s parameters (``fn(params, x, y)`` gives
    ``x``, ``y``) unless ``data_names`` is given. A data name that is also a parameter name is refused.
    """
    from .frontend.trace import Tensor, call_and_mark

    if not callable(fn):
        raise ParameterError(f"trace_params(fn, params, *data) takes a function first, got {type(fn).__name__}")
    names, leaves, treedef = flatten(params)
    types = [_leaf_type(n, leaf) for n, leaf in zip(names, leaves)]
    data_types = [_leaf_type(f"data {i}", d) for i, d in enumerate(data)]
    dnames = list(data_names) if data_names is not None else _data_names(fn, len(data))
    if len(dnames) != len(data):
        raise ParameterError(f"data_names has {len(dnames)} names for {len(data)} data inputs")
    clash = sorted(set(dnames) & set(names))
    if clash:
        raise ParameterError(f"data input name(s) {clash} are also parameter names; rename the function's "
                             "arguments or pass data_names=")
    graph = Graph(name or str(getattr(fn, "__name__", "graph")).replace("<lambda>", "graph"))
    param_args = [Tensor(graph.add_input(t, n or "param"), graph) for t, n in zip(types, names)]
    data_args = [Tensor(graph.add_input(t, n), graph) for t, n in zip(data_types, dnames)]
    n_params = len(param_args)

    def call(*args: Any) -> Any:
        return fn(unflatten(treedef, args[:n_params]), *args[n_params:])

    call_and_mark(graph, call, [*param_args, *data_args])
    return graph
