"""Window geometry shared by conv1d and the pools: padding modes, output length, strided views.

A window of ``kernel`` taps spaced ``dilation`` apart covers ``extent =
dilation * (kernel - 1) + 1`` positions; windows start every ``stride``
positions of the input padded by ``(left, right)``, so the output length is
``(L + left + right - extent) // stride + 1``.

Padding modes (``padding`` attribute, kind ``str|ints``):

- ``"valid"``: none;
- ``"same"``: output length ``ceil(L / stride)``, the total padding split with
  the extra position on the right (TensorFlow's and torch's rule);
- ``"causal"``: ``extent - 1`` on the left, none on the right (output ``t``
  sees inputs up to ``t`` only, for stride 1);
- one int ``p``: ``p`` on both sides; two ints: ``(left, right)``.
"""

from __future__ import annotations

import numpy as np

from frame_core import NodeContext

PADDING_MODES = ("valid", "same", "causal")


def resolve_padding(ctx: NodeContext, length: int, extent: int, stride: int) -> tuple[int, int]:
    """``(left, right)`` for the node's ``padding`` attribute; a ShapeError names a bad mode or negative sizes."""
    padding = ctx.attrs["padding"]
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0
        if padding == "causal":
            return extent - 1, 0
        if padding == "same":
            total = max((-(-length // stride) - 1) * stride + extent - length, 0)
            return total // 2, total - total // 2
        raise ctx.error(f"padding {padding!r} is not a mode; use one of {', '.join(map(repr, PADDING_MODES))}, "
                        "an int (both sides) or [left, right]")
    if len(padding) == 1:
        padding = (padding[0], padding[0])
    if len(padding) != 2 or min(padding) < 0:
        raise ctx.error(f"padding {list(padding)} must be one int or [left, right], all >= 0")
    return padding[0], padding[1]


def check_positive(ctx: NodeContext, **values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ctx.error(f"{name} must be >= 1, got {value}")


def output_length(ctx: NodeContext, length: int, left: int, right: int, extent: int, stride: int,
                  what: str = "kernel") -> int:
    """Windows that fit, or a ShapeError when the window is longer than the padded input."""
    padded = length + left + right
    if padded < extent:
        raise ctx.error(f"the {what} covers {extent} positions, more than the padded input's {padded} "
                        f"(length {length} + padding {left} + {right}); "
                        + ("use a smaller kernel, dilation or more padding" if what == "kernel" else
                           f"use a smaller {what} (kernel_size), or a longer input: pools have no dilation, and "
                           "their padding stays below kernel_size"))
    return (padded - extent) // stride + 1


def padded(x: np.ndarray, left: int, right: int, dtype: np.dtype, fill: float = 0.0) -> np.ndarray:
    """``x`` in ``dtype`` with ``fill`` added along the last axis (``x`` itself when nothing changes)."""
    if not left and not right:
        return np.asarray(x, dtype)
    out = np.empty(x.shape[:-1] + (x.shape[-1] + left + right,), dtype)
    out[..., :left] = fill
    out[..., out.shape[-1] - right:] = fill
    out[..., left:left + x.shape[-1]] = x
    return out


def windows(xp: np.ndarray, kernel: int, stride: int, dilation: int, count: int) -> np.ndarray:
    """A read-only strided view ``(..., count, kernel)`` of the windows of ``xp`` (no copy)."""
    extent = dilation * (kernel - 1) + 1
    view = np.lib.stride_tricks.sliding_window_view(xp, extent, axis=-1)
    return view[..., : (count - 1) * stride + 1 : stride, ::dilation]


def tap(xp: np.ndarray, k: int, stride: int, dilation: int, count: int) -> np.ndarray:
    """Positions ``k * dilation + t * stride`` of ``xp``'s last axis for ``t < count``: tap ``k`` of every window."""
    start = k * dilation
    return xp[..., start : start + (count - 1) * stride + 1 : stride]
