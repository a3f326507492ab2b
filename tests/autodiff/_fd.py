"""Central differences in float64 for the autodiff acceptance tests (an independent reference, ARCH-066)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Step of the central differences. Truncation error ~ h^2 f''' and rounding error ~ eps / h balance near 1e-5.
H = 1e-5


def gradient(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = H) -> np.ndarray:
    """(f(x + h e_i) - f(x - h e_i)) / 2h for every element i."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def second_difference(f: Callable[[float], float], x: float, h: float = 1e-4) -> float:
    """(f(x + h) - 2 f(x) + f(x - h)) / h^2: the central second difference of a scalar function."""
    return (f(x + h) - 2.0 * f(x) + f(x - h)) / (h * h)


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))
