"""``TensorType``: dtype, static shape and device of one value."""

from __future__ import annotations

import math
import re
from typing import Any

from .._args import is_traced_tensor
from .._text import short_repr
from ..errors import IRError
from .dtypes import DType, as_dtype

__all__ = ["TensorType", "as_type", "MAX_DIM"]

# (DType, shape, device) -> the one TensorType with those fields.
_INTERNED: dict[tuple, "TensorType"] = {}
#: Dimensions, element counts and byte counts must stay below this (numpy's index type, int64).
MAX_DIM = 2**63

# A device name: what ``str`` writes after "@" and ``parse`` reads back ("cpu", "gpu0", "cuda:0").
_DEVICE = r"\w[\w.:\-]*"
_DEVICE_NAME = re.compile(_DEVICE)
# dtype, then a bracketed list of dims (comma separated, no empty slots), then an optional @device.
_SHORTHAND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[\s*(\d+(?:\s*,\s*\d+)*)?\s*\]\s*(?:@\s*(" + _DEVICE
                        + r"))?\s*$")


class TensorType:
    """An immutable tensor type such as ``f32[128, 784]``.

    ``shape`` is a tuple of non-negative ints (``()`` is a scalar).
    ``TensorType.parse`` reads the shorthand that ``str`` writes.

    Types are interned: constructing the same dtype, shape and device twice
    gives the same object, so equality and hashing are identity (done in C)
    while meaning value equality. Compilers compare and hash types constantly;
    this keeps that cheap.
    """

    __slots__ = ("dtype", "shape", "device", "size", "nbytes", "__weakref__")

    dtype: DType
    shape: tuple[int, ...]
    device: str
    size: int  # number of elements
    nbytes: int

    def __new__(cls, dtype: DType | str, shape: Any = (), device: str = "cpu") -> "TensorType":
        if type(shape) is tuple:
            try:
                hit = _INTERNED.get((dtype, shape, device))
            except TypeError:  # an unhashable dtype or dim (an array): as_dtype and the checks below say what
                hit = None
            if hit is not None:
                return hit
        dtype = as_dtype(dtype)
        try:
            if is_traced_tensor(shape):
                raise TypeError
            shape = tuple(shape)
        except TypeError:
            raise IRError(f"a shape must be a sequence of ints, got {short_repr(shape)}") from None
        for dim in shape:
            if type(dim) is not int:
                if hasattr(dim, "__index__") and not isinstance(dim, bool):
                    shape = tuple(int(d) for d in shape)
                    break
                raise IRError(f"a shape must hold non-negative ints, got {short_repr(shape)}")
        if any(d < 0 for d in shape):
            raise IRError(f"a shape must hold non-negative ints, got {short_repr(shape)}")
        if not isinstance(device, str) or not device:
            raise IRError(f"a device is a non-empty name such as 'cpu', got {device!r}")
        key = (dtype, shape, device)
        hit = _INTERNED.get(key)
        if hit is None:
            if _DEVICE_NAME.fullmatch(device) is None:  # str() would write a type parse (and load_graph) cannot read
                raise IRError(f"a device name holds letters, digits and '_', '.', ':', '-' (not first), such as "
                              f"'cpu', 'gpu0' or 'cuda:0', got {short_repr(device)}")
            size = math.prod(shape)
            if size * dtype.itemsize >= MAX_DIM or any(d >= MAX_DIM for d in shape):
                raise IRError(f"a tensor of shape {short_repr(shape)} and dtype {dtype.short} would need more bytes "
                              "than any machine addresses (2**63); check the shape")
            hit = object.__new__(cls)
            for name, value in (("dtype", dtype), ("shape", shape), ("device", device), ("size", size),
                                ("nbytes", size * dtype.itemsize)):
                object.__setattr__(hit, name, value)
            hit = _INTERNED.setdefault(key, hit)
        return hit

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TensorType is immutable")

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        """Read the shorthand ``"f32[2, 3]"`` (``"f32[]"`` is a scalar; ``"@dev"`` names a device)."""
        m = _SHORTHAND.match(text) if isinstance(text, str) else None
        if m is None:
            raise IRError(f"cannot read the type {short_repr(text)}; expected a shorthand such as 'f32[128, 784]' or "
                          "'i64[]'")
        digits = m.group(2).split(",") if m.group(2) else []
        if any(len(d.strip()) > 19 for d in digits):  # 2**63 has 19 digits: no larger dimension exists
            raise IRError(f"cannot read the type {short_repr(text)}: a dimension has more digits than any shape "
                          "numpy supports (below 2**63)")
        dims = tuple(int(d) for d in digits)
        try:
            dtype = as_dtype(m.group(1))
        except IRError as exc:
            raise IRError(f"cannot read the type {short_repr(text)}: {exc}") from None
        return cls(dtype, dims, m.group(3) or "cpu")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def with_shape(self, shape: Any) -> "TensorType":
        return TensorType(self.dtype, shape, self.device)

    def with_dtype(self, dtype: DType | str) -> "TensorType":
        return TensorType(dtype, self.shape, self.device)

    def __str__(self) -> str:
        text = f"{self.dtype.short}[{', '.join(map(str, self.shape))}]"
        return text if self.device == "cpu" else f"{text}@{self.device}"

    def __repr__(self) -> str:
        return f"TensorType({str(self)!r})"

    def __reduce__(self) -> tuple:
        return (TensorType, (self.dtype.name, self.shape, self.device))


#: Shorthands read before (types are interned and immutable, so a string always reads as the same one): loading
#: the packs reads each example's types, a few hundred strings, most of them many times.
_READ: dict[str, TensorType] = {}
_READ_LIMIT = 4096


def as_type(value: Any) -> TensorType:
    """Coerce a TensorType or a shorthand string to a :class:`TensorType`."""
    if isinstance(value, TensorType):
        return value
    if type(value) is str:
        hit = _READ.get(value)
        if hit is None:
            hit = TensorType.parse(value)  # raises for a bad string, which is never stored
            if len(_READ) < _READ_LIMIT:
                _READ[value] = hit
        return hit
    if isinstance(value, str):
        return TensorType.parse(value)
    raise IRError(f"expected a TensorType or a shorthand such as 'f32[2, 3]', got {short_repr(value)}")
