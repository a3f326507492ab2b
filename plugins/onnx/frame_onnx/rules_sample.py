"""Import rule of ``GridSample`` (torch's ``F.grid_sample``: spatial transformers, flow warping), written with
frame ops: the sampling positions are computed from the grid as ONNX and torch define them, and each corner's
values are a ``gather`` from the flattened input at flat positions built from them.

It differentiates as those ops do: with respect to the input like a ``gather`` (a scatter of the weighted
cotangent), with respect to the grid through the bilinear weights (the corner positions come from ``floor`` and
``round``, whose gradient is 0), which is torch's gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from frame_core import ops

from ._import import NodeContext, Unsupported, rule
from .rules_ops import invalid, like, rank_of, shape_of

__all__: list[str] = []

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest"}  # opset 16 names, then opset 20's


def _reflected(x: Any, low: float, high: float) -> Any:
    """``x`` folded back into ``[low, high]`` by reflecting at its ends, as often as needed (torch's
    ``reflect_coordinates``)."""
    span = high - low
    if span <= 0:
        return ops.zeros_like(x)
    distance = ops.abs(x - like(low, x))
    flips = ops.floor(distance / like(span, x))
    extra = distance - flips * like(span, x)
    even = ops.equal(flips - ops.floor(flips * like(0.5, x)) * like(2, x), like(0, x))
    return ops.where(even, extra + like(low, x), like(high, x) - extra)


def _source(g: Any, size: int, align_corners: bool, padding: str) -> Any:
    """Pixel coordinates of the normalised grid coordinates ``g`` (-1 and 1 the outer pixels' centres with
    ``align_corners``, their outer edges without), with the padding mode's border or reflection applied."""
    if align_corners:
        x = (g + like(1, g)) * like((size - 1) / 2, g)
    else:
        x = ((g + like(1, g)) * like(size, g) - like(1, g)) * like(0.5, g)
    if padding == "border":
        return ops.clip(x, min=0.0, max=float(size - 1))
    if padding == "reflection":
        x = _reflected(x, 0.0, size - 1.0) if align_corners else _reflected(x, -0.5, size - 0.5)
        return ops.clip(x, min=0.0, max=float(size - 1))
    return x


@rule("GridSample")
def _grid_sample(cx: NodeContext) -> Any:
    """``X [N, C, H, W]`` sampled at ``grid [N, Ho, Wo, 2]`` (x then y, normalised to [-1, 1]) into
    ``[N, C, Ho, Wo]``: bilinear (the four neighbours weighted) or nearest (halves to even), with zeros, border
    or reflection padding. Cubic sampling and inputs of other ranks are refused."""
    x, grid = cx.input(0), cx.input(1)
    mode = cx.attr("mode", "string", "bilinear")
    if mode not in _MODES:
        raise Unsupported(f"GridSample mode {mode!r} (frame imports bilinear/linear and nearest)")
    mode = _MODES[mode]
    padding = cx.attr("padding_mode", "string", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise invalid(cx, f"padding_mode {padding!r} is not one of zeros, border, reflection")
    align = bool(cx.attr("align_corners", "int", 0))
    if rank_of(x) != 4:
        raise Unsupported(f"GridSample of a rank-{rank_of(x)} input (frame imports 2-D sampling of [N, C, H, W])")
    n, c, h, w = shape_of(x)
    if rank_of(grid) != 4 or shape_of(grid)[0] != n or shape_of(grid)[3] != 2:
        raise invalid(cx, f"grid of shape {list(shape_of(grid))} must be [N, H_out, W_out, 2] with N = {n}")
    if np.dtype(grid.dtype.np) != np.dtype(x.dtype.np):
        grid = ops.cast(grid, to=str(x.dtype))
    gx = ops.squeeze(ops.slice(grid, starts=[0], stops=[1], axes=[3]), axes=[3])
    gy = ops.squeeze(ops.slice(grid, starts=[1], stops=[2], axes=[3]), axes=[3])
    sx, sy = _source(gx, w, align, padding), _source(gy, h, align, padding)
    flat_x = ops.reshape(x, shape=[-1])
    # the offset of each (sample, channel) plane in the flattened input
    planes = (np.arange(n, dtype=np.int64)[:, None] * (c * h * w) + np.arange(c, dtype=np.int64) * (h * w))[:, :, None, None]

    def corner(px: Any, py: Any, weight: Any) -> Any:
        """The input at integer-valued positions ``(px, py)`` (out-of-range ones read as 0) times ``weight``."""
        kx, ky = ops.clip(px, min=0.0, max=float(w - 1)), ops.clip(py, min=0.0, max=float(h - 1))
        zero = ops.zeros_like(weight)
        weight = ops.where(ops.equal(kx, px), ops.where(ops.equal(ky, py), weight, zero), zero)
        at = ops.expand_dims(ops.cast(ky, to="i64") * np.int64(w) + ops.cast(kx, to="i64"), axes=[1]) + planes
        return ops.gather(flat_x, at, axis=0) * ops.expand_dims(weight, axes=[1])

    if mode == "nearest":
        return corner(ops.round(sx), ops.round(sy), ops.ones_like(sx))
    x0, y0 = ops.floor(sx), ops.floor(sy)
    x1, y1 = x0 + like(1, x0), y0 + like(1, y0)
    ex, ey = sx - x0, sy - y0          # the weights of the right and lower neighbours
    fx, fy = like(1, ex) - ex, like(1, ey) - ey
    return (corner(x0, y0, fx * fy) + corner(x1, y0, ex * fy)) + (corner(x0, y1, fx * ey) + corner(x1, y1, ex * ey))
