"""Shared by the fft_* benchmarks: the allocator settings TEAM.md asks for, thread counts, interleaved timing.

Each benchmark re-executes itself once with ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` and
``MALLOC_MMAP_THRESHOLD_`` set (glibc reads them at start-up), so that large FFT buffers are reused rather
than returned to the system and faulted in again on every call.
"""

from __future__ import annotations

import ctypes
import glob
import os
import statistics
import sys
import time
from collections.abc import Callable

MALLOC_ENV = {"MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "67108864",
              "MALLOC_MMAP_THRESHOLD_": "67108864"}


def threads_option() -> int | None:
    """``--threads N`` from the command line (read before numpy loads): every library then runs N threads."""
    if "--threads" in sys.argv:
        return int(sys.argv[sys.argv.index("--threads") + 1])
    return None


def ensure_malloc_env() -> None:
    """Re-exec this script with the allocator settings (and ``--threads`` as OPENBLAS_NUM_THREADS) unless set."""
    env = dict(MALLOC_ENV)
    threads = threads_option()
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    if all(os.environ.get(k) == v for k, v in env.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **env})


def apply_threads() -> None:
    """Make scipy.fft and torch use ``--threads`` too (numpy's BLAS got it through the environment)."""
    threads = threads_option()
    if threads is None:
        return
    from frame_ops_fft import config

    config.WORKERS = threads
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


def blas_threads() -> str:
    """The thread count of the OpenBLAS numpy ships with (read through ctypes), or why it is unknown."""
    import numpy

    libs = glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs", "*openblas*.so*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                return str(fn())
    return "unknown (no bundled OpenBLAS found)"


def machine_line() -> str:
    from frame_ops_fft import config

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    line = (f"cores usable {config.usable_cores()}, load average {load[0]:.2f}, numpy BLAS threads {blas_threads()}, "
            f"scipy.fft workers {config.WORKERS} (transforms >= {config.PARALLEL_MIN_ELEMENTS} elements)")
    try:
        import torch

        line += f", torch threads {torch.get_num_threads()}"
    except ImportError:
        pass
    return line


def interleaved(variants: dict[str, Callable[[], object]], repeats: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each variant, timed round-robin so that machine noise hits all alike."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}
