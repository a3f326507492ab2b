"""Import rule of ``GridSample`` (torch's ``F.grid_sample``: spatial transformers, flow warping, volume
resampling), written with frame ops: the sampling positions are computed from the grid as ONNX and torch define
them, and each tap's values are a ``gather`` from the flattened input at flat positions built from them.

- 2-D inputs ``[N, C, H, W]`` sample bilinearly, nearest or bicubically (Keys' kernel with ``a = -0.75``, a
  4x4 neighbourhood, as torch); 3-D inputs ``[N, C, D, H, W]`` trilinearly or nearest (torch and ONNX Runtime
  have no cubic 3-D sampling, so frame refuses it by name).
- Linear and nearest apply the padding mode to the sampling position, then read its neighbours (0 outside
  under ``zeros``); cubic applies it to each of the 16 taps' integer positions instead, as torch does.

It differentiates as those ops do: with respect to the input like a ``gather`` (a scatter of the weighted
cotangent), with respect to the grid through the interpolation weights (the tap positions come from ``floor``
and ``round``, whose gradient is 0), which is torch's gradient. Every op used is closed, so the import is
differentiable to any order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from frame_core import ops

from ._import import NodeContext, Unsupported, rule
from .rules_ops import invalid, like, rank_of, shape_of

__all__: list[str] = []

# opset 16 names, then opset 20's
_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
_CUBIC_A = -0.75  # Keys' kernel parameter torch and ONNX Runtime use for cubic sampling


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


def _unnormalised(g: Any, size: int, align_corners: bool) -> Any:
    """Pixel coordinates of the normalised grid coordinates ``g``: -1 and 1 are the outer pixels' centres with
    ``align_corners``, their outer edges without."""
    if align_corners:
        return (g + like(1, g)) * like((size - 1) / 2, g)
    return ((g + like(1, g)) * like(size, g) - like(1, g)) * like(0.5, g)


def _padded(x: Any, size: int, align_corners: bool, padding: str) -> Any:
    """Pixel coordinates ``x`` with the padding mode's border or reflection applied (``zeros``: as they are)."""
    if padding == "border":
        return ops.clip(x, min=0.0, max=float(size - 1))
    if padding == "reflection":
        x = _reflected(x, 0.0, size - 1.0) if align_corners else _reflected(x, -0.5, size - 0.5)
        return ops.clip(x, min=0.0, max=float(size - 1))
    return x


def _cubic_weights(t: Any) -> list[Any]:
    """Keys' weights of the taps at -1, 0, 1, 2 from the position's floor, ``t`` its distance past the floor:
    ``((a + 2) s - (a + 3)) s² + 1`` for a tap ``s <= 1`` away, ``((a s - 5a) s + 8a) s - 4a`` for ``1 < s < 2``."""
    a = _CUBIC_A

    def near(s: Any) -> Any:
        return (like(a + 2, s) * s - like(a + 3, s)) * s * s + like(1, s)

    def far(s: Any) -> Any:
        return ((like(a, s) * s - like(5 * a, s)) * s + like(8 * a, s)) * s - like(4 * a, s)

    u = like(1, t) - t
    return [far(t + like(1, t)), near(t), near(u), far(u + like(1, u))]


@rule("GridSample")
def _grid_sample(cx: NodeContext) -> Any:
    """``X [N, C, *spatial]`` sampled at ``grid [N, *out, k]`` (k = 2: x then y; k = 3: x, y then z; normalised
    to [-1, 1]) into ``[N, C, *out]``: linear (the 4 or 8 neighbours weighted), nearest (halves to even) or, in
    2-D, cubic (16 neighbours), with zeros, border or reflection padding. A NaN grid coordinate samples nothing
    (0; torch gives NaN or reads pixel 0 there, depending on the modes)."""
    x, grid = cx.input(0), cx.input(1)
    mode = cx.attr("mode", "string", "bilinear")
    if mode not in _MODES:
        raise invalid(cx, f"mode {mode!r} is not one of {', '.join(_MODES)}")
    mode = _MODES[mode]
    padding = cx.attr("padding_mode", "string", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise invalid(cx, f"padding_mode {padding!r} is not one of zeros, border, reflection")
    align = bool(cx.attr("align_corners", "int", 0))
    rank = rank_of(x)
    if rank not in (4, 5):
        raise Unsupported(f"GridSample of a rank-{rank} input (frame imports 2-D sampling of [N, C, H, W] and 3-D "
                          "sampling of [N, C, D, H, W])")
    k = rank - 2
    if mode == "cubic" and k == 3:
        raise Unsupported("GridSample mode 'cubic' of a 3-D input (torch and ONNX Runtime sample [N, C, D, H, W] "
                          "only linearly or nearest; frame imports those)")
    n, c, *spatial = shape_of(x)
    if rank_of(grid) != rank or shape_of(grid)[0] != n or shape_of(grid)[-1] != k:
        names = "H_out, W_out" if k == 2 else "D_out, H_out, W_out"
        raise invalid(cx, f"grid of shape {list(shape_of(grid))} must be [N, {names}, {k}] with N = {n}")
    if np.dtype(grid.dtype.np) != np.dtype(x.dtype.np):
        grid = ops.cast(grid, to=str(x.dtype))
    sizes = spatial[::-1]  # along the grid's coordinates: x (W), y (H), then z (D)
    coords = [_unnormalised(ops.squeeze(ops.slice(grid, starts=[i], stops=[i + 1], axes=[rank - 1]),
                                        axes=[rank - 1]), size, align) for i, size in enumerate(sizes)]
    flat_x = ops.reshape(x, shape=[-1])
    volume = int(np.prod(spatial, dtype=np.int64))
    # the offset of each (sample, channel) plane in the flattened input, and each coordinate's flat stride
    planes = (np.arange(n, dtype=np.int64)[:, None] * (c * volume)
              + np.arange(c, dtype=np.int64) * volume).reshape(n, c, *[1] * k)
    steps = [int(np.prod(sizes[:i], dtype=np.int64)) for i in range(k)]

    def tap(positions: list[Any], weight: Any) -> Any:
        """The input at integer-valued ``positions`` (x, y[, z]; out-of-range ones read as 0) times ``weight``."""
        zero = ops.zeros_like(weight)
        kept = [ops.clip(p, min=0.0, max=float(size - 1)) for p, size in zip(positions, sizes)]
        inside = ops.equal(kept[0], positions[0])  # (a NaN position equals nothing)
        for p, q in zip(positions[1:], kept[1:]):
            inside = ops.where(inside, ops.equal(q, p), np.array(False))
        weight = ops.where(inside, weight, zero)
        at = None
        for q, step in zip(kept, steps):  # NaN positions read pixel 0, weighted 0
            term = ops.cast(ops.where(inside, q, zero), to="i64") * np.int64(step)
            at = term if at is None else at + term
        at = ops.expand_dims(at, axes=[1]) + planes
        return ops.gather(flat_x, at, axis=0) * ops.expand_dims(weight, axes=[1])

    def total(terms: list[Any]) -> Any:
        """The sum of the taps, in pairs (a balanced tree, as the bilinear sum always was)."""
        while len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
        return terms[0]

    if mode == "cubic":
        floors = [ops.floor(p) for p in coords]
        weights = [_cubic_weights(p - f) for p, f in zip(coords, floors)]
        terms = []
        for j in range(4):  # rows (y), then columns (x)
            row = _padded(floors[1] + like(j - 1, floors[1]), sizes[1], align, padding)
            for i in range(4):
                col = _padded(floors[0] + like(i - 1, floors[0]), sizes[0], align, padding)
                terms.append(tap([col, row], weights[0][i] * weights[1][j]))
        return total(terms)
    coords = [_padded(p, size, align, padding) for p, size in zip(coords, sizes)]
    if mode == "nearest":
        return tap([ops.round(p) for p in coords], ops.ones_like(coords[0]))
    lows = [ops.floor(p) for p in coords]
    highs = [f + like(1, f) for f in lows]
    ups = [p - f for p, f in zip(coords, lows)]  # the weights of the upper neighbours
    downs = [like(1, e) - e for e in ups]
    terms = []
    for corner in np.ndindex(*(2,) * k):  # z, y, x bits: (0, 0) upper left first, x fastest
        bits = corner[::-1]  # along the coordinates: x, y[, z]
        weight = None
        for b, up, down in zip(bits, ups, downs):
            weight = (up if b else down) if weight is None else weight * (up if b else down)
        terms.append(tap([h if b else f for b, f, h in zip(bits, lows, highs)], weight))
    return total(terms)
