"""Tensor constants held in graphs: read-only, and never sharing memory the caller can write.

A graph's tensor attributes are part of its identity (the compile cache keys
on their bytes) and of its meaning, so a constant must not change after it
enters a graph: ``frozen`` copies an array unless it is already read-only all
the way down to memory nobody can write, and marks the copy read-only.
"""

from __future__ import annotations

import numpy as np

from .types import TensorType

__all__ = ["frozen", "shared_zeros", "zeros"]


def _immutable(array: np.ndarray) -> bool:
    """Whether ``array`` and every array it views are read-only, over memory no one can write."""
    node: object = array
    while isinstance(node, np.ndarray):
        if node.flags.writeable:
            return False
        node = node.base
    return node is None or isinstance(node, bytes)


def frozen(array: np.ndarray) -> np.ndarray:
    """``array`` itself if it is immutable, else a read-only copy of it."""
    if _immutable(array):
        return array
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy


#: The arrays ``zeros`` made, by type: immutable all the way down, so every graph may hold the same one (a
#: GradientFn's zero gradients are made by the thousand while the closure audit runs).
_ZEROS: dict[TensorType, np.ndarray] = {}
_ZEROS_LIMIT = 1024
#: One read-only zero scalar per numpy dtype, the memory every ``zeros`` array of that dtype views.
_SCALARS: dict[np.dtype, np.ndarray] = {}
#: id of each array in ``_ZEROS`` -> (the array, its type): ``shared_zeros`` tells one of them from any other array
#: by identity, in one look-up (the array kept here, so its id is not reused meanwhile).
_SHARED: dict[int, tuple[np.ndarray, TensorType]] = {}


def zeros(t: TensorType) -> np.ndarray:
    """A read-only array of zeros of type ``t`` that costs one element of memory (a broadcast view)."""
    array = _ZEROS.get(t)
    if array is None:
        dtype = t.dtype.np
        scalar = _SCALARS.get(dtype)
        if scalar is None:
            scalar = np.zeros((), dtype)
            scalar.flags.writeable = False
            scalar = _SCALARS.setdefault(dtype, scalar)
        # what np.broadcast_to(scalar, t.shape) gives (a read-only view of the scalar, every stride 0), made
        # without its Python-level iterator set-up, which cost more than the rest of a zero constant
        array = np.ndarray(t.shape, dtype, buffer=scalar, strides=(0,) * len(t.shape))
        if len(_ZEROS) >= _ZEROS_LIMIT:
            _ZEROS.clear()
            _SHARED.clear()
        _ZEROS[t] = array
        _SHARED[id(array)] = (array, t)
    return array


def shared_zeros(array: object) -> TensorType | None:
    """The type ``array`` was made for when it is one that ``zeros`` made (all zeros, read-only over a read-only
    scalar: its contents are known without reading it), else ``None``."""
    hit = _SHARED.get(id(array))
    return hit[1] if hit is not None and hit[0] is array else None
