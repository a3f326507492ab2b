"""The core's named-parameter spine, as frame-train uses it: trees, tracing over a tree, any-batch compiles.

Everything frame-train needs from ``frame_core.params`` and ``frame_core.runtime.dynamic`` goes through
these functions, so the rest of the package never depends on where they live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import frame_core as fc
from frame_core import Graph, TensorType, as_dtype, as_type
from frame_core.params import flatten, trace_params, unflatten

from .errors import ParameterError

__all__ = ["flatten", "unflatten", "trace_params", "type_of", "compile_rebuilt", "respecialized"]


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


def compile_rebuilt(graph: Graph, rebuild: Callable[[list[TensorType]], Graph]) -> Any:
    """An executable of ``graph`` for any input dimensions, compiling one program per new shape signature.

    A training graph whose gradients read every size from an operand (each op on its chain declares
    ``any_shape_gradient``, so ``build_backward_graph`` left it unmarked) is re-specialised as it is: the
    compile's ``bind_shapes`` gives the program a trace at the new sizes gives, bit for bit, with no backward
    pass derived again. A graph that holds traced sizes (or whose re-specialisation an op refuses: a
    cross-entropy at another class count, say) compiles ``rebuild(types)`` instead, where the caller
    re-specialises the forward graph and derives the rest again, as ``value_and_grad`` does; its errors are
    the per-shape path's. One compile per new signature, in the core's bounded cache.
    """
    from frame_core import DynamicExecutable

    return DynamicExecutable(fc.compile(graph), lambda types: respecialized(graph, types, rebuild), {"cache": True})


def respecialized(graph: Graph, types: list[TensorType], rebuild: Callable[[list[TensorType]], Graph]) -> Graph:
    """``graph`` specialised to ``types`` when it allows it, else ``rebuild(types)`` (see ``compile_rebuilt``)."""
    try:
        return fc.specialize(graph, types)
    except fc.ShapeError:
        return rebuild(types)
