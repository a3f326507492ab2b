"""The FFT libraries the transform kernels call: scipy.fft (always installed) and ducc0 (the ``fast`` extra).

Each backend is four functions on numpy complex/real arrays, with numpy's ``norm`` names and scipy's
``workers`` meaning (threads; a negative count counts back from the usable cores). The kernels pick one at
every call through :func:`frame_ops_fft.config.backend`, so a change of ``config.BACKEND`` reaches compiled
executables at once. Both compute float32 in float32 and float64 in float64; a backend gives the same bits on
every call for the same input and thread count (both split a batch over threads, never one transform), but
the two backends differ from each other in the last bits (docs/fft.md gives the measured tolerance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .config import usable_cores

#: ducc0's ``inorm`` for a forward transform under numpy's norm: divide by 1, sqrt(n) or n.
_FORWARD_INORM = {"backward": 0, "ortho": 1, "forward": 2}
#: ... and for an inverse transform.
_INVERSE_INORM = {"backward": 2, "ortho": 1, "forward": 0}


class Backend(NamedTuple):
    name: str
    rfft: Callable[[np.ndarray, int, str, int], np.ndarray]              # (x, axis, norm, workers) -> complex
    irfft: Callable[[np.ndarray, int, int, str, int], np.ndarray]        # (z, n, axis, norm, workers) -> real
    fft: Callable[[np.ndarray, int, str, int, bool], np.ndarray]         # (z, axis, norm, workers, forward)


def _scipy() -> Backend:
    import scipy.fft

    def c2c(z: np.ndarray, axis: int, norm: str, workers: int, forward: bool) -> np.ndarray:
        return (scipy.fft.fft if forward else scipy.fft.ifft)(z, axis=axis, norm=norm, workers=workers)

    return Backend(
        "scipy",
        lambda x, axis, norm, workers: scipy.fft.rfft(x, axis=axis, norm=norm, workers=workers),
        lambda z, n, axis, norm, workers: scipy.fft.irfft(z, n=n, axis=axis, norm=norm, workers=workers),
        c2c,
    )


def _threads(workers: int) -> int:
    """scipy's ``workers`` (negative: count back from the cores) as ducc0's ``nthreads`` (0 would mean all)."""
    return workers if workers > 0 else max(1, usable_cores() + 1 + workers)


def _ducc0() -> Backend:
    import ducc0.fft

    empty = _scipy()  # ducc0 refuses arrays of no elements (an empty batch axis); scipy returns an empty result

    def rfft(x: np.ndarray, axis: int, norm: str, workers: int) -> np.ndarray:
        if not x.size:
            return empty.rfft(x, axis, norm, workers)
        return ducc0.fft.r2c(x, axes=(axis,), forward=True, inorm=_FORWARD_INORM[norm], nthreads=_threads(workers))

    def irfft(z: np.ndarray, n: int, axis: int, norm: str, workers: int) -> np.ndarray:
        if not z.size:
            return empty.irfft(z, n, axis, norm, workers)
        # c2r reads only Re of the DC and (even n) Nyquist bins, as numpy's irfft does
        return ducc0.fft.c2r(z, axes=(axis,), lastsize=n, forward=False, inorm=_INVERSE_INORM[norm],
                             nthreads=_threads(workers))

    def c2c(z: np.ndarray, axis: int, norm: str, workers: int, forward: bool) -> np.ndarray:
        if not z.size:
            return empty.fft(z, axis, norm, workers, forward)
        inorm = (_FORWARD_INORM if forward else _INVERSE_INORM)[norm]
        return ducc0.fft.c2c(z, axes=(axis,), forward=forward, inorm=inorm, nthreads=_threads(workers))

    return Backend("ducc0", rfft, irfft, c2c)


#: name -> a function making the backend (it imports its library).
FACTORIES: dict[str, Callable[[], Backend]] = {"scipy": _scipy, "ducc0": _ducc0}
_made: dict[str, Backend] = {}


def get(name: str) -> Backend:
    """The backend called ``name``, imported once."""
    backend = _made.get(name)
    if backend is None:
        backend = _made[name] = FACTORIES[name]()
    return backend
