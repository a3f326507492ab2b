"""Settings of the FFT kernels that a user may change at run time.

``WORKERS`` is the number of threads scipy.fft splits a batched transform
over. Its default is the number of cores this process may use
(``os.sched_getaffinity``, else ``os.cpu_count()``). Kernels read it on every
call, so ``frame_ops_fft.config.WORKERS = 1`` takes effect at once, also in
executables compiled before the change. Transforms smaller than
``PARALLEL_MIN_ELEMENTS`` elements run on one thread: starting threads costs
more than it saves there.
"""

from __future__ import annotations

import os

__all__ = ["WORKERS", "PARALLEL_MIN_ELEMENTS", "usable_cores", "workers_for"]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


#: Threads per transform (scipy.fft ``workers=``); change it at any time.
WORKERS: int = usable_cores()

#: Below this many elements a transform runs on one thread.
PARALLEL_MIN_ELEMENTS: int = 1 << 16


def workers_for(size: int) -> int:
    """The ``workers=`` to pass for a transform over ``size`` elements; a ``KernelError`` naming the setting
    when ``WORKERS`` is not a non-zero int (scipy's own complaint would not say where the value came from)."""
    if isinstance(WORKERS, bool) or not isinstance(WORKERS, int) or WORKERS == 0:
        from frame_core import KernelError

        raise KernelError(f"frame_ops_fft.config.WORKERS must be a non-zero int (threads per transform; a negative "
                          f"value counts back from the cores, as scipy.fft's workers=), got {WORKERS!r}; "
                          "config.usable_cores() is the default")
    return WORKERS if size >= PARALLEL_MIN_ELEMENTS else 1
