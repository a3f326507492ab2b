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

__all__ = ["flatten", "unflatten", "trace_params", "type_of", "compile_rebuilt"]


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
    """An executable of ``graph`` for any input dimensions: a new shape signature compiles ``rebuild(types)``.

    A graph holding a backward pass is re-specialised when every op on its chain declares
    ``any_shape_gradient``; otherwise (``specialize`` refuses it) the caller re-specialises the forward graph
    and derives the rest again, as ``value_and_grad`` does. One compile per new signature, in the core's
    bounded cache.
    """
    from frame_core import DynamicExecutable

    return DynamicExecutable(fc.compile(graph), rebuild, {"cache": True})
