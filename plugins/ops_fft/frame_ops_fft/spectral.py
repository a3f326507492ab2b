"""Library functions built from the pack's ops (no new forward op, ARCH-067): n-dimensional real FFTs,
spectral derivatives on periodic grids, and the spectral convolutions of Fourier neural operators.

Call them inside ``frame_core.trace`` on traced tensors; they add ordinary nodes (rfft, fft, mul,
complex_mul, complex_matmul, slice, pad, transpose, ...), so the graphs they build differentiate to any
order like any other. Shapes are static, so every constant (wavenumbers, masks) is fixed when the graph is
traced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from frame_core import IRError, ShapeError, Tensor as _Traced, constant, ops

__all__ = ["wavenumbers", "rfftn", "irfftn", "spectral_derivative", "spectral_conv1d", "spectral_conv2d"]

Tensor = Any  # a frame_core.Tensor being traced


def wavenumbers(n: int, length: float = 2 * math.pi) -> np.ndarray:
    """The angular wavenumbers of rfft's bins for n points on a periodic interval of ``length``:
    ``k_j = 2 pi j / length``, j = 0 .. n // 2 (float64)."""
    if not _is_int(n) or n < 1 or not 0 < length < math.inf:
        raise ShapeError(f"wavenumbers needs n >= 1 points (an int) and a positive length (finite), got n={n!r}, "
                         f"length={length!r}")
    return 2 * math.pi / length * np.arange(n // 2 + 1, dtype=np.float64)


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _ints(values: object, what: str, name: str) -> list[int]:
    """``values`` as a list of ints; a ShapeError when it is not a sequence of ints (a bare int included)."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        values = values.tolist()
    if not isinstance(values, Sequence) or isinstance(values, str) or not all(_is_int(v) for v in values):
        raise ShapeError(f"{what}: {name} must be a list of ints, got {values!r}")
    return [int(v) for v in values]


def _tensor(x: object, what: str, name: str = "x") -> Tensor:
    """A traced tensor: ``x`` itself, or a numpy array (or number) as a constant, as the ops take them."""
    if isinstance(x, _Traced):
        return x
    if isinstance(x, (np.ndarray, np.generic, int, float)) and not isinstance(x, (bool, np.bool_)):
        return constant(np.asarray(x))
    raise IRError(f"{what}: {name} must be a traced tensor or a numpy array, got {type(x).__name__}")


def _axes(x: Tensor, axes: Sequence[int], what: str) -> list[int]:
    out = []
    for a in _ints(axes, what, "axes"):
        if not -x.ndim <= a < x.ndim:
            valid = f"valid: {-x.ndim}..{x.ndim - 1}" if x.ndim else "a rank-0 tensor has no axes"
            raise ShapeError(f"{what}: axis {a} is out of range for {x.type} ({valid})")
        out.append(a % x.ndim)
    if not out or len(set(out)) != len(out):
        raise ShapeError(f"{what}: axes {list(axes)} must name at least one axis, each once")
    return out


def rfftn(x: Tensor, axes: Sequence[int] = (-2, -1), norm: str = "backward") -> Tensor:
    """numpy.fft.rfftn over ``axes``, packed: rfft along the last of them, then fft along the others.

    The norm of each one-dimensional transform composes to the norm of the whole (their scales multiply).
    """
    x = _tensor(x, "rfftn")
    first, *rest = reversed(_axes(x, axes, "rfftn"))
    z = ops.rfft(x, axis=first, norm=norm)
    for a in rest:
        z = ops.fft(z, axis=a, norm=norm)
    return z


def irfftn(z: Tensor, s: Sequence[int], axes: Sequence[int] = (-2, -1), norm: str = "backward") -> Tensor:
    """numpy.fft.irfftn of packed ``z`` to sizes ``s`` along ``axes``: ifft along all but the last, then irfft.

    ``s`` is required: the last size decides between an even and an odd real length.
    """
    z = _tensor(z, "irfftn", "z")
    axes = _ints(axes, "irfftn", "axes")
    if isinstance(s, np.ndarray) and s.ndim == 1:
        s = s.tolist()
    if not isinstance(s, Sequence) or not all(_is_int(size) and size >= 1 for size in s):
        raise ShapeError(f"irfftn: s must be a list of sizes (ints >= 1), one per axis, got {s!r}")
    complex_rank = len(z.shape) - 1
    normalised = [a % complex_rank if -complex_rank <= a < complex_rank else None for a in axes]
    if None in normalised or len(set(normalised)) != len(normalised) or len(s) != len(axes):
        raise ShapeError(f"irfftn: axes {list(axes)} must be distinct axes of the {complex_rank} complex axes of "
                         f"{z.type}, and s {list(s)} must give one size per axis")
    *rest, last = normalised
    for a, size in zip(rest, s):
        if z.shape[a] != size:
            raise ShapeError(f"irfftn: axis {a} of {z.type} has {z.shape[a]} points but s asks for {size}; "
                             "slice or pad the spectrum first")
        z = ops.ifft(z, axis=a, norm=norm)
    return ops.irfft(z, n=s[-1], axis=last, norm=norm)


def _along(values: np.ndarray, axis: int, rank: int, packed: int) -> np.ndarray:
    """``values`` (one per bin; complex ones packed) shaped to broadcast along ``axis`` of a packed tensor of
    ``rank`` complex axes: real ones get a last axis of 1, which complex_mul reads as a real multiplier."""
    return values.reshape(values.shape[:1] + (1,) * (rank - 1 - axis) + values.shape[1:] + (1,) * (1 - packed))


def spectral_derivative(x: Tensor, order: int = 1, length: float = 2 * math.pi, axis: int = -1) -> Tensor:
    """The ``order``-th derivative of real, periodic ``x`` along ``axis`` (``length`` is the period).

    rfft -> multiply bin k by (i k)^order -> irfft. An even order is a real multiplier ((-1)^(p/2) k^p, so
    the second derivative multiplies by -k^2); an odd one multiplies by i times a real and, for even n,
    zeroes the Nyquist bin (the derivative of the Nyquist cosine vanishes on the grid). Exact, to
    round-off, for band-limited x. float16/bfloat16 x is computed in float32 and rounded once.
    """
    x = _tensor(x, "spectral_derivative")
    if not _is_int(order) or order < 0:
        raise ShapeError(f"spectral_derivative: order must be a non-negative int, got {order!r}")
    if not _is_int(axis):
        raise ShapeError(f"spectral_derivative: axis must be an int, got {axis!r}")
    (a,) = _axes(x, [axis], "spectral_derivative")
    n = x.shape[a]
    if n == 0:
        raise ShapeError(f"spectral_derivative: axis {axis} of {x.type} is empty; expected at least one point")
    if not 0 < length < math.inf:
        raise ShapeError(f"spectral_derivative: length (the period) must be positive and finite, got {length!r}")
    if order == 0:
        return x
    half = x.dtype.itemsize == 2  # k^order overflows float16 (and inf * 0 is nan): compute in float32, round once
    real = np.float32 if half else x.dtype.np
    k = wavenumbers(n, length)
    _check_multiplier(k[:-1] if order % 2 and n % 2 == 0 else k, order, real, n, length)
    z = ops.rfft(ops.cast(x, to="f32") if half else x, axis=a)
    k = k ** order * (-1.0) ** (order // 2)
    if order % 2 == 0:
        z = ops.complex_mul(z, _along(k, a, x.ndim, packed=0).astype(real))  # a real multiplier [m, .., 1]
    else:
        if n % 2 == 0:
            k[-1] = 0.0
        times_i = np.stack([np.zeros_like(k), k], axis=-1)  # i * k: (0, k)
        z = ops.complex_mul(z, _along(times_i, a, x.ndim, packed=1).astype(real))
    y = ops.irfft(z, n=n, axis=a)
    return ops.cast(y, to=x.dtype) if half else y


def _check_multiplier(k: np.ndarray, order: int, real: type, n: int, length: float) -> None:
    """Refuse an order whose multiplier k^order overflows ``real``: the bins' round-off times infinity would come
    back as inf and nan where the derivative is finite (found in QA: spectral_derivative(x, 1000))."""
    top = float(k.max()) if k.size else 0.0
    if top <= 1.0:
        return  # |k|^order never grows past 1
    limit = math.log(float(np.finfo(real).max))
    if order * math.log(top) <= limit:
        return
    highest = int(limit / math.log(top))
    name = np.dtype(real).name
    raise ShapeError(f"spectral_derivative: order {order} multiplies the highest frequency bin by {top:.4g}**{order} "
                     f"= 10**{order * math.log10(top):.0f}, past {name}'s largest number "
                     f"({float(np.finfo(real).max):.3g}), so the result would be inf and nan; with {n} points over a "
                     f"period of {length:.4g} the highest order {name} holds is {highest} (a larger period lowers "
                     "the wavenumbers; float64 holds higher orders)")


def _mix(corner: Tensor, weights: Tensor, n_modes: int) -> Tensor:
    """Per-mode channel mixing: corner [B, C_in, *modes, 2] with weights [*modes, C_in, C_out, 2]."""
    lead = corner.ndim - 1 - 2  # the mode axes
    batch, c_in = corner.shape[:2]
    c_out = weights.shape[-2]
    modes = corner.shape[2:2 + lead]
    perm = list(range(2, 2 + lead)) + [0, 1, corner.ndim - 1]  # [*modes, B, C_in, 2]
    stacked = ops.reshape(ops.transpose(corner, perm=perm), shape=[n_modes, batch, c_in, 2])
    mixed = ops.complex_matmul(stacked, ops.reshape(weights, shape=[n_modes, c_in, c_out, 2]))
    back = ops.reshape(mixed, shape=[*modes, batch, c_out, 2])
    return ops.transpose(back, perm=[lead, lead + 1, *range(lead), lead + 2])  # [B, C_out, *modes, 2]


def spectral_conv1d(x: Tensor, weights: Tensor, norm: str = "backward") -> Tensor:
    """The spectral convolution of a 1-D Fourier neural operator layer (Li et al., FNO).

    ``x`` is [batch, C_in, N]; ``weights`` packed complex [modes, C_in, C_out, 2]. rfft along N, keep the
    lowest ``modes`` bins, mix channels per mode (out_k = x_k @ W_k, one complex_matmul over the modes),
    zero the other bins, irfft back to N points: [batch, C_out, N].
    """
    x, weights = _tensor(x, "spectral_conv1d"), _tensor(weights, "spectral_conv1d", "weights")
    if x.ndim != 3:
        raise ShapeError(f"spectral_conv1d: x must be [batch, channels_in, N], got {x.type}")
    if weights.ndim != 4 or weights.shape[-1] != 2 or weights.shape[1] != x.shape[1] or weights.dtype is not x.dtype:
        raise ShapeError(f"spectral_conv1d: weights must be packed complex [modes, {x.shape[1]}, channels_out, 2] "
                         f"of {x.dtype}, got {weights.type}")
    n = x.shape[-1]
    modes, m = weights.shape[0], n // 2 + 1
    if modes > m:
        raise ShapeError(f"spectral_conv1d: {modes} modes, but N = {n} points have only {m} bins")
    low = ops.slice(ops.rfft(x, axis=-1, norm=norm), starts=[0], stops=[modes], axes=[2])
    mixed = _mix(low, weights, modes)
    return ops.irfft(ops.pad(mixed, before=[0], after=[m - modes], axes=[2]), n=n, axis=-1, norm=norm)


def spectral_conv2d(x: Tensor, weights_low: Tensor, weights_high: Tensor, norm: str = "backward") -> Tensor:
    """The spectral convolution of a 2-D Fourier neural operator layer.

    ``x`` is [batch, C_in, H, W]; each weight is packed complex [modes_h, modes_w, C_in, C_out, 2]. The kept
    modes are the lowest ``modes_w`` bins along W (rfft) and, along H, the first ``modes_h`` (non-negative
    frequencies: ``weights_low``) and the last ``modes_h`` (negative frequencies: ``weights_high``) of
    the full fft. Other bins are zeroed; the result is [batch, C_out, H, W].
    """
    x = _tensor(x, "spectral_conv2d")
    weights_low = _tensor(weights_low, "spectral_conv2d", "weights_low")
    weights_high = _tensor(weights_high, "spectral_conv2d", "weights_high")
    if x.ndim != 4:
        raise ShapeError(f"spectral_conv2d: x must be [batch, channels_in, H, W], got {x.type}")
    for w in (weights_low, weights_high):
        if w.ndim != 5 or w.shape[-1] != 2 or w.shape[2] != x.shape[1] or w.dtype is not x.dtype:
            raise ShapeError(f"spectral_conv2d: weights must be packed complex [modes_h, modes_w, {x.shape[1]}, "
                             f"channels_out, 2] of {x.dtype}, got {w.type}")
    if weights_low.shape != weights_high.shape:
        raise ShapeError(f"spectral_conv2d: the two weights differ in shape: {weights_low.type} and {weights_high.type}")
    h, w_len = x.shape[2:]
    mh, mw = weights_low.shape[:2]
    m = w_len // 2 + 1
    if 2 * mh > h or mw > m:
        raise ShapeError(f"spectral_conv2d: {mh} x {mw} modes do not fit H = {h} (needs 2 * modes_h <= H) and "
                         f"W = {w_len} ({m} bins)")
    z = rfftn(x, axes=(2, 3), norm=norm)
    low = _mix(ops.slice(z, starts=[0, 0], stops=[mh, mw], axes=[2, 3]), weights_low, mh * mw)
    high = _mix(ops.slice(z, starts=[h - mh, 0], stops=[h, mw], axes=[2, 3]), weights_high, mh * mw)
    full = (ops.pad(low, before=[0, 0], after=[h - mh, m - mw], axes=[2, 3])
            + ops.pad(high, before=[h - mh, 0], after=[0, m - mw], axes=[2, 3]))
    return irfftn(full, s=(h, w_len), axes=(2, 3), norm=norm)
