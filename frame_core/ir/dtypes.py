"""Element types of the IR.

Seven dtypes, each a singleton :class:`DType`. ``bfloat16`` comes from
``ml_dtypes``, which is imported only when its numpy dtype is first needed, so
``import frame_core`` stays light.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import IRError

__all__ = [
    "DType",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int32",
    "int64",
    "bool_",
    "DTYPES",
    "as_dtype",
]


class DType:
    """One element type. Compare with ``is`` or ``==``; hashable; picklable by name.

    Attributes (read-only; the seven dtypes are singletons: ``frame_core.float32``, ...):

    - ``name``: the long name, numpy's (``"float32"``, ``"bfloat16"``, ``"bool"``).
    - ``short``: the short name used in type strings (``"f32"`` in ``"f32[3, 4]"``); also what ``str()`` gives.
    - ``itemsize``: bytes per element.
    - ``is_float``: a floating type (float16, bfloat16, float32, float64): the only dtypes that carry gradients.
    - ``is_int``: a signed integer type (int32, int64). ``bool`` is neither float nor int.
    - ``np``: the numpy dtype (``ml_dtypes.bfloat16`` for bfloat16, imported on first use).

    ``frame_core.TensorType(dtype, shape)`` and every API taking a dtype accept a ``DType``, its long or short name
    or a numpy dtype (``as_dtype``).
    """

    __slots__ = ("name", "short", "itemsize", "is_float", "is_int", "_np")

    def __init__(self, name: str, short: str, itemsize: int, is_float: bool, is_int: bool) -> None:
        self.name = name
        self.short = short
        self.itemsize = itemsize
        self.is_float = is_float
        self.is_int = is_int
        self._np: np.dtype | None = None

    @property
    def np(self) -> np.dtype:
        """The numpy dtype (``ml_dtypes.bfloat16`` for bfloat16, imported on first use)."""
        if self._np is None:
            if self.name == "bfloat16":
                import ml_dtypes

                self._np = np.dtype(ml_dtypes.bfloat16)
            else:
                self._np = np.dtype(self.name if self.name != "bool" else np.bool_)
        return self._np

    def __repr__(self) -> str:
        return f"frame_core.{self.name if self.name != 'bool' else 'bool_'}"

    def __str__(self) -> str:
        return self.short

    def __reduce__(self) -> tuple:
        return (as_dtype, (self.name,))


float16 = DType("float16", "f16", 2, True, False)
bfloat16 = DType("bfloat16", "bf16", 2, True, False)
float32 = DType("float32", "f32", 4, True, False)
float64 = DType("float64", "f64", 8, True, False)
int32 = DType("int32", "i32", 4, False, True)
int64 = DType("int64", "i64", 8, False, True)
bool_ = DType("bool", "bool", 1, False, False)

DTYPES: tuple[DType, ...] = (float16, bfloat16, float32, float64, int32, int64, bool_)

_BY_NAME: dict[str, DType] = {}
for _d in DTYPES:
    _BY_NAME[_d.name] = _d
    _BY_NAME[_d.short] = _d
_BY_NAME["bool_"] = bool_
_BY_NUMPY_DTYPE: dict[np.dtype, DType] = {}  # memo of the numpy dtypes met (a handful)
_BY_NUMPY_NAME = {"float16": float16, "bfloat16": bfloat16, "float32": float32, "float64": float64,
                  "int32": int32, "int64": int64, "bool": bool_}


def as_dtype(value: Any) -> DType:
    """Coerce a DType, a name (``"float32"``, ``"f32"``) or a numpy dtype to a :class:`DType`.

    Raises :class:`~frame_core.errors.IRError` naming the accepted spellings.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = _BY_NAME.get(value)
        if found is not None:
            return found
    elif isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, (np.generic, int, float, bool))):
        # a numpy dtype or scalar type (np.float32, float): never a spec numpy would build a record type from
        # (lists, tuples, dicts), nor None, which np.dtype reads as float64
        found = _BY_NUMPY_DTYPE.get(value) if isinstance(value, np.dtype) else None
        if found is not None:  # numpy computes dtype.name in Python: every constant's check paid for it
            return found
        try:
            found = _BY_NUMPY_NAME.get(np.dtype(value).name)
        except (TypeError, ValueError):
            found = None
        if found is not None:
            if isinstance(value, np.dtype) and len(_BY_NUMPY_DTYPE) < 64:
                _BY_NUMPY_DTYPE[value] = found
            return found
    names = ", ".join(d.short for d in DTYPES)
    from .._text import short_repr

    raise IRError(f"unsupported dtype {short_repr(value)}; expected one of {names} (or their long names such as "
                  f"'float32', a numpy dtype or scalar type such as np.float32){complex_hint(value)}")


COMPLEX_HINT = ("frame has no complex dtype: complex values are real tensors with a trailing axis of size 2 (re, im), "
                "e.g. np.stack([z.real, z.imag], axis=-1), which the FFT ops of frame-ops-fft read and write")


def complex_hint(value: Any) -> str:
    """``"; frame has no complex dtype: ..."`` when ``value`` names or is a complex dtype (or array), else ``""``:
    the one dtype users reach for that frame represents differently (packed), so say how."""
    if isinstance(value, str):
        is_complex = value.lower().startswith(("c", "complex")) and any(ch.isdigit() for ch in value) and len(value) < 16
    else:
        try:
            spec = value if isinstance(value, (type, np.dtype)) else getattr(value, "dtype", None)
            is_complex = spec is not None and np.dtype(spec).kind == "c"
        except (TypeError, ValueError):
            is_complex = False
    return f"; {COMPLEX_HINT}" if is_complex else ""
