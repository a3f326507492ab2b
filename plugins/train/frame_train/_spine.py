"""The core's named-parameter spine, as frame-train uses it: trees, tracing over a tree, any-batch compiles.

Everything frame-train needs from ``frame_core.params`` / ``trace_params`` / ``compile(dynamic_shapes=True)``
goes through these four functions, so the rest of the package never depends on where they live.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import frame_core as fc
from frame_core.ir.dtypes import as_dtype
from frame_core.ir.types import TensorType, as_type

from .errors import ParameterError

__all__ = ["flatten", "unflatten", "trace_params", "compile_any_batch", "type_of"]


def flatten(tree: Any) -> tuple[list[str], list[Any], Any]:
    """``(names, leaves, treedef)`` of a parameter tree (names are '.'-joined paths, optree order)."""
    try:
        from frame_core.params import flatten as core_flatten
    except ImportError:  # until the core's spine lands: the same rule (optree order, '.'-joined paths)
        import optree

        paths, leaves, treedef = optree.tree_flatten_with_path(tree, none_is_leaf=False)
        return [".".join(map(str, p)) for p in paths], leaves, treedef
    return core_flatten(tree)


def unflatten(treedef: Any, leaves: Sequence[Any]) -> Any:
    try:
        from frame_core.params import unflatten as core_unflatten
    except ImportError:
        import optree

        return optree.tree_unflatten(treedef, list(leaves))
    return core_unflatten(treedef, list(leaves))


def type_of(value: Any, what: str) -> TensorType:
    """The tensor type of an array (or of a type / type string) given as ``what``."""
    if isinstance(value, (TensorType, str)):
        return as_type(value)
    array = np.asarray(value)
    try:
        return TensorType(as_dtype(array.dtype), array.shape)
    except fc.FrameError as exc:
        raise ParameterError(f"{what} is a {array.dtype}{list(array.shape)} array, which frame cannot hold: {exc}") \
            from None


def trace_params(fn: Callable[..., Any], params: Any, *data: Any, data_names: Sequence[str] | None = None) -> fc.Graph:
    """Trace ``fn(params_tree, *data)``: graph inputs are the flattened parameter names, then the data."""
    core = getattr(fc, "trace_params", None)
    if core is not None:
        return core(fn, params, *data, data_names=data_names)
    names, leaves, treedef = flatten(params)  # until the core's spine lands
    n = len(names)
    types = [type_of(leaf, f"parameter {name!r}") for name, leaf in zip(names, leaves)]
    types += [type_of(d, f"data input {i}") for i, d in enumerate(data)]
    graph = fc.trace(lambda *tensors: fn(unflatten(treedef, tensors[:n]), *tensors[n:]), *types)
    import inspect

    if data_names is None:
        listed = list(inspect.signature(fn).parameters)[1:]
        data_names = (listed + [f"data{i}" for i in range(len(listed), len(data))])[:len(data)]
    for v, name in zip(graph.inputs, [*names, *data_names]):
        v.name = name
    return graph


def compile_any_batch(graph: fc.Graph) -> Any:
    """An executable of ``graph`` that accepts any batch size (one compile per new shape signature)."""
    try:
        return fc.compile(graph, dynamic_shapes=True)
    except TypeError:  # until the core's spine lands
        return fc.compile(graph)
