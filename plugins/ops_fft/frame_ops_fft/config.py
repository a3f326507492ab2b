"""Settings of the FFT kernels that a user may change at run time.

``WORKERS`` is the number of threads scipy.fft splits a batched transform
over. Its default is the number of cores this process may use
(``os.sched_getaffinity``, else ``os.cpu_count()``). Kernels read it on every
call, so ``frame_ops_fft.config.WORKERS = 1`` takes effect at once, also in
executables compiled before the change. Transforms smaller than
``PARALLEL_MIN_ELEMENTS`` elements run on one thread: starting threads costs
more than it saves there.

``BACKEND`` chooses the FFT library: ``"scipy"`` (scipy.fft, always installed),
``"ducc0"`` (the ``fast`` extra: ``pip install 'frame-ops-fft[fast]'``; about
twice as fast on one thread, last bits differ, docs/fft.md) or ``None`` (the
default): ducc0 when it is installed, else scipy. Kernels read it on every call
too; :func:`backend_name` says which one runs.
"""

from __future__ import annotations

import os

__all__ = ["WORKERS", "PARALLEL_MIN_ELEMENTS", "BACKEND", "BACKENDS", "usable_cores", "workers_for", "backend_name"]


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

#: The FFT library: "scipy", "ducc0", or None for ducc0 when installed, else scipy; change it at any time.
BACKEND: str | None = None
#: The names BACKEND takes.
BACKENDS = ("scipy", "ducc0")

_ducc0_installed: bool | None = None  # looked up once, at the first transform


def _ducc0_available() -> bool:
    global _ducc0_installed
    if _ducc0_installed is None:
        from importlib.util import find_spec

        _ducc0_installed = find_spec("ducc0") is not None
    return _ducc0_installed


def backend_name() -> str:
    """The FFT library the kernels call now: ``BACKEND``, or for ``None`` ducc0 when installed, else scipy.

    A ``KernelError`` naming the setting when ``BACKEND`` is not one of ``BACKENDS`` or None, or names ducc0
    while it is not installed.
    """
    name = BACKEND
    if name is None:
        return "ducc0" if _ducc0_available() else "scipy"
    if name == "scipy" or (name == "ducc0" and _ducc0_available()):
        return name
    from frame_core import KernelError

    if name == "ducc0":
        raise KernelError("frame_ops_fft.config.BACKEND is 'ducc0', but ducc0 is not installed; install it with "
                          "pip install 'frame-ops-fft[fast]', or set BACKEND = None (ducc0 when installed, else "
                          "scipy)")
    raise KernelError(f"frame_ops_fft.config.BACKEND must be one of {', '.join(map(repr, BACKENDS))} or None (ducc0 "
                      f"when installed, else scipy), got {name!r}")


def workers_for(size: int) -> int:
    """The ``workers=`` to pass for a transform over ``size`` elements; a ``KernelError`` naming the setting
    when ``WORKERS`` is not a non-zero int (scipy's own complaint would not say where the value came from)."""
    if isinstance(WORKERS, bool) or not isinstance(WORKERS, int) or WORKERS == 0:
        from frame_core import KernelError

        raise KernelError(f"frame_ops_fft.config.WORKERS must be a non-zero int (threads per transform; a negative "
                          f"value counts back from the cores, as scipy.fft's workers=), got {WORKERS!r}; "
                          "config.usable_cores() is the default")
    return WORKERS if size >= PARALLEL_MIN_ELEMENTS else 1
