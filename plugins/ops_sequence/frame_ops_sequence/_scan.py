"""numpy kernels of the recurrences: the linear scan and Mamba's selective scan (forward).

Both loop over time in Python and do one vectorised multiply-add per step over
every other axis, which on CPU beats log-depth "doubling" in numpy by about 6x
(research note §4.3: 4.4 ms against 27.5 ms on a (2, 16, 1024, 16) float32 scan).
"""

from __future__ import annotations

import numpy as np


def linear_scan_into(h: np.ndarray, a: np.ndarray, b: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """``h_t = a_t * h_{t-1} + b_t`` along ``axis`` with ``h_{-1} = 0`` (walking backwards if ``reverse``).

    ``h`` is the output buffer (its dtype is the one computed in); it may be ``b`` itself.
    Steps are slices ``t:t+1`` so that a rank-1 scan still works on views, not numpy scalars.
    """
    n = h.shape[axis]
    if n == 0:
        return h
    hv, av, bv = (np.moveaxis(x, axis, 0) for x in (h, a, b))
    steps = range(n - 1, -1, -1) if reverse else range(n)
    first = steps[0]
    if hv is not bv:
        hv[first:first + 1] = bv[first:first + 1]
    prev = hv[first:first + 1]
    for t in steps[1:]:
        cur = hv[t:t + 1]
        if h is b:  # in place: h_t already holds b_t
            cur += av[t:t + 1] * prev
        else:
            np.multiply(av[t:t + 1], prev, out=cur)
            cur += bv[t:t + 1]
        prev = cur
    return h


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
    dt_t = dt.transpose(2, 0, 1).reshape(length, batch, groups, per, 1)
    a = np.exp(dt_t * A.reshape(groups, per, n))                                  # exp(delta_t A)
    h = (dt * u).transpose(2, 0, 1).reshape(length, batch, groups, per, 1) * time_major(B, dtype, groups, per)
    linear_scan_into(h, a, h, 0, False)                                            # h_t = a_t h_{t-1} + delta_t B_t u_t
    c = time_major(C, dtype, groups, per)
    if c.ndim == 5:  # variable C: (L, batch, G or 1, 1, N) -> one matrix-vector product per (t, b, g)
        y = np.matmul(h, np.swapaxes(c, -1, -2))[..., 0]
    else:
        y = np.einsum("lbgdn,gdn->lbgd", h, c)
    out = y.reshape(length, batch, dim).transpose(1, 2, 0)
    if D is not None:
        out = out + u * np.asarray(D, dtype)[:, None]
    if z is not None:
        z = np.asarray(z, dtype)
        out = out * (z * sigmoid(z))
    return out


def time_major(m: np.ndarray, dtype: np.dtype, groups: int, per: int) -> np.ndarray:
    """B or C in the state's time-major layout, broadcastable to (L, batch, groups, D / groups, N).

    Variable (batch, N, L) -> (L, batch, 1, 1, N); grouped (batch, G, N, L) -> (L, batch, G, 1, N);
    constant (D, N) -> (G, D / G, N).
    """
    m = np.asarray(m, dtype)
    if m.ndim == 2:
        return m.reshape(groups, per, m.shape[1])
    if m.ndim == 3:
        return m.transpose(2, 0, 1)[:, :, None, None, :]
    return m.transpose(3, 0, 1, 2)[:, :, :, None, :]
