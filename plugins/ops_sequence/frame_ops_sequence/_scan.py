"""numpy kernels of the recurrences: the linear scan and Mamba's selective scan (forward).

Both loop over time in Python and do one vectorised multiply-add per step over
every other axis, which on CPU beats log-depth "doubling" in numpy by about 6x
(research note §4.3: 4.4 ms against 27.5 ms on a (2, 16, 1024, 16) float32 scan).
"""

from __future__ import annotations

import numpy as np


def linear_scan(a: np.ndarray, b: np.ndarray, axis: int, reverse: bool, dtype: np.dtype) -> np.ndarray:
    """``h_t = a_t * h_{t-1} + b_t`` along ``axis`` with ``h_{-1} = 0`` (walking backwards if ``reverse``).

    Computed in ``dtype`` on time-major C-contiguous copies, so every step is one
    contiguous block whatever the inputs' strides (a transposed view would make
    each step a strided gather, several times slower); returns a (possibly
    non-contiguous) view of a fresh array. Steps are slices ``t:t+1`` so that a
    rank-1 scan works on views, not numpy scalars.
    """
    am = np.ascontiguousarray(np.moveaxis(a, axis, 0), dtype)
    h = np.array(np.moveaxis(b, axis, 0), dtype, order="C")  # h_t starts as b_t
    n = h.shape[0]
    scratch = np.empty_like(h[:1])
    steps = range(n - 2, -1, -1) if reverse else range(1, n)
    for t in steps:
        prev = t + 1 if reverse else t - 1
        np.multiply(am[t:t + 1], h[prev:prev + 1], out=scratch)
        h[t:t + 1] += scratch
    return np.moveaxis(h, 0, axis)


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow."""
    return np.logaddexp(x.dtype.type(0), x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow (through tanh)."""
    half = x.dtype.type(0.5)
    return half * np.tanh(half * x) + half


def selective_scan_forward(u: np.ndarray, delta: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray,
                           D: np.ndarray | None, z: np.ndarray | None, delta_bias: np.ndarray | None,
                           delta_softplus: bool, groups: int, dtype: np.dtype) -> np.ndarray:
    """Mamba's ``selective_scan_ref`` for real ``A``, computed in ``dtype``; returns ``out`` of shape (batch, D, L).

    The state runs time-major, ``(L, batch, groups, D / groups, N)``, so each
    step of the recurrence touches one contiguous block.
    """
    batch, dim, length = u.shape
    n = A.shape[1]
    per = dim // groups
    u, delta, A = (np.asarray(x, dtype) for x in (u, delta, A))
    dt = delta if delta_bias is None else delta + np.asarray(delta_bias, dtype)[:, None]
    if delta_softplus:
        dt = softplus(dt)
    dt_t = np.ascontiguousarray(dt.transpose(2, 0, 1)).reshape(length, batch, groups, per, 1)
    a = np.exp(dt_t * A.reshape(groups, per, n))                                  # exp(delta_t A)
    du = np.ascontiguousarray((dt * u).transpose(2, 0, 1)).reshape(length, batch, groups, per, 1)
    h = linear_scan(a, du * time_major(B, dtype, groups, per), 0, False, dtype)  # h_t = a_t h_{t-1} + delta_t B_t u_t
    c = time_major(C, dtype, groups, per)
    # y_t = C_t h_t: a contraction over N by einsum (a batched matmul here is thousands of tiny calls)
    if c.ndim == 3:
        y = np.einsum("lbgdn,gdn->lbgd", h, c)
    elif c.shape[2] == groups:
        y = np.einsum("lbgdn,lbgn->lbgd", h, c[:, :, :, 0, :])
    else:  # variable C, shared by every group
        y = np.einsum("lbgdn,lbn->lbgd", h, c[:, :, 0, 0, :])
    out = y.reshape(length, batch, dim).transpose(1, 2, 0)
    if D is not None:
        out = out + u * np.asarray(D, dtype)[:, None]
    if z is not None:
        z = np.asarray(z, dtype)
        out = out * (z * sigmoid(z))
    return out


def time_major(m: np.ndarray, dtype: np.dtype, groups: int, per: int) -> np.ndarray:
    """B or C in the state's time-major layout, broadcastable to (L, batch, groups, D / groups, N).

    Variable (batch, N, L) -> (L, batch, 1, 1, N); grouped (batch, G', N, L) -> (L, batch, G, 1, N), each of
    its G' groups repeated G / G' times (the state's G is a multiple of G'); constant (D, N) -> (G, D / G, N).
    """
    m = np.asarray(m, dtype)
    if m.ndim == 2:
        return m.reshape(groups, per, m.shape[1])
    if m.ndim == 3:
        return m.transpose(2, 0, 1)[:, :, None, None, :]
    m = m.transpose(3, 0, 1, 2)
    if m.shape[2] != groups:
        m = np.repeat(m, groups // m.shape[2], axis=2)
    return m[:, :, :, None, :]
