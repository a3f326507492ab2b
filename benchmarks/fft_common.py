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
        if threads == 1:  # jax (XLA's CPU backend) on one thread too
            env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    if all(os.environ.get(k) == v for k, v in env.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **env})


def apply_threads() -> None:
    """Make scipy.fft and torch use ``--threads`` too (numpy's BLAS got it through the environment); ``--backend
    NAME`` sets frame's FFT library (frame_ops_fft.config.BACKEND)."""
    if "--backend" in sys.argv:
        from frame_ops_fft import config

        config.BACKEND = sys.argv[sys.argv.index("--backend") + 1]
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
    line = (f"cores usable {config.usable_cores()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, numpy BLAS "
            f"threads {blas_threads()}, frame FFT backend {config.backend_name()}, workers {config.WORKERS} "
            f"(transforms >= {config.PARALLEL_MIN_ELEMENTS} elements)")
    try:
        import torch

        line += f", torch threads {torch.get_num_threads()}"
    except ImportError:
        pass
    return line


def interleaved(variants: dict[str, Callable[[], object]], repeats: int, warmup: int = 3,
                cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Median seconds per call of each variant, timed round-robin so that machine noise hits all alike.

    With a dict ``cpu``, also fills it with the median CPU seconds of this process per call (``process_time``):
    on a machine shared by more runnable processes than cores, wall time also counts the waits for a core,
    CPU time does not (with one thread per library it is the work itself).
    """
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            c0 = time.process_time()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
            cpus[name].append(time.process_time() - c0)
    if cpu is not None:
        cpu.update({name: statistics.median(t) for name, t in cpus.items()})
    return {name: statistics.median(t) for name, t in times.items()}


def print_table(medians: dict[str, float], cpu: dict[str, float], base: str) -> None:
    """One line per variant: wall ms, CPU ms, and both as ratios to ``base``."""
    print(f"  {'':8s} {'wall ms':>9s} {'cpu ms':>9s} {'wall x':>7s} {'cpu x':>7s}   (x = time / {base})")
    for name, t in medians.items():
        print(f"  {name:8s} {t * 1e3:9.3f} {cpu[name] * 1e3:9.3f} {t / medians[base]:6.2f}x {cpu[name] / cpu[base]:6.2f}x")
