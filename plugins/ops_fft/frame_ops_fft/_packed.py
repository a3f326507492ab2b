"""The packed complex layout shared by the pack's ops: complex values as real tensors whose last axis is
(re, im). Shape checks for it, and the zero-copy moves between it and numpy complex arrays.

An ``axis`` attribute of a packed op counts the axes of the complex tensor (the packed axis excluded), so
``axis=-1`` is the last complex axis and a transform's axis has the same index in its input and output.
Kernels compute float32/float64 natively; float16/bfloat16 are computed in float32 and rounded once.
"""

from __future__ import annotations

import numpy as np

from frame_core import NodeContext, TensorType, ops

NORMS = ("backward", "ortho", "forward")
#: The norm whose scale on one transform is the other's on its inverse: s(a) = t(swap(a)).
SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def require_float(ctx: NodeContext, t: TensorType, position: int) -> None:
    if not t.dtype.is_float:
        raise ctx.error(f"got {t} for input {position} ({_name(ctx, position)}), expected a floating tensor "
                        "(float16, bfloat16, float32 or float64); cast it first")


def require_packed(ctx: NodeContext, t: TensorType, position: int, complex_axes: int = 1) -> None:
    """A floating tensor whose last axis has size 2 (re, im), after at least ``complex_axes`` complex axes.

    A transform needs an axis to transform (1); elementwise complex ops take a complex scalar ``[2]`` (0).
    """
    require_float(ctx, t, position)
    if t.rank < 1 + complex_axes or t.shape[-1] != 2:
        after = f" after at least {complex_axes} complex axis" if complex_axes else ""
        raise ctx.error(f"input {position} ({_name(ctx, position)}) must be packed complex, a real tensor whose last "
                        f"axis is (re, im) of size 2{after}, got {t}; ops.stack(re, im, axis=-1) packs two real "
                        "tensors")


def _name(ctx: NodeContext, position: int) -> str:
    names = ctx.schema.inputs
    return names[position] if position < len(names) else f"#{position}"


def complex_axis(ctx: NodeContext, rank: int) -> int:
    """The ``axis`` attribute, non-negative, for a (complex or real) tensor of ``rank`` axes."""
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank:
        packed = rank < ctx.input_types[0].rank
        raise ctx.error(f"axis {axis} is out of range: got {ctx.input_types[0]}, which has {rank} "
                        f"{'complex ' if packed else ''}ax{'i' if rank == 1 else 'e'}s, so expected an axis in "
                        f"{-rank}..{rank - 1}"
                        + (" (the packed (re, im) axis does not count)" if packed else ""))
    return axis % rank


def norm_of(ctx: NodeContext) -> str:
    norm = ctx.attrs["norm"]
    if norm not in NORMS:
        raise ctx.error(f"unknown norm: got {norm!r}, expected one of {', '.join(map(repr, NORMS))} (numpy's meanings)")
    return norm


def compute_dtype(t: TensorType) -> np.dtype:
    """float32 for 2-byte floats, else the type's own."""
    return np.dtype(np.float32) if t.dtype.itemsize == 2 else t.dtype.np


def as_complex(p: np.ndarray, real: np.dtype) -> np.ndarray:
    """The complex array a packed ``p`` holds, as a view when its (re, im) pairs are adjacent in memory."""
    if p.dtype != real:
        p = p.astype(real)
    if p.strides[-1] != p.itemsize or p.shape[-1] != 2:
        p = np.ascontiguousarray(p)
    return p.view(np.complex64 if real == np.float32 else np.complex128)[..., 0]


def as_packed(c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The packed real array of complex ``c`` in ``dtype`` (a view of ``c`` when the dtypes agree)."""
    shape = c.shape + (2,)
    if c.ndim == 0:  # a complex scalar: numpy changes the dtype of a view only with an axis to change
        c = c.reshape(1)
    if c.strides[-1] != c.itemsize:
        c = np.ascontiguousarray(c)
    packed = c.view(c.real.dtype).reshape(shape)
    return packed if packed.dtype == dtype else packed.astype(dtype)


def unbroadcast(g, operand):  # noqa: ANN001, ANN201 - traced Tensors
    """``g`` summed back to ``operand``'s shape over broadcast axes, the shape read from the operand (so a gradient
    re-specialised at other sizes sums over what broadcasting stretches there; compiled, the identity when nothing
    was broadcast, else reduce_to_shape_internal)."""
    return ops.reduce_like_internal(g, operand)
