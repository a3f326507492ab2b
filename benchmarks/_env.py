"""Benchmark hygiene shared by every script here; import it before numpy.

* glibc trims the heap top and returns memory to the OS as soon as a step's
  temporaries are freed, then faults the pages in again on the next step
  (hundreds of minor page faults per step made a numpy step 2x slower in
  one process and not in another). High ``MALLOC_TRIM_THRESHOLD_``,
  ``MALLOC_TOP_PAD_`` and ``MALLOC_MMAP_THRESHOLD_`` stop that. glibc reads
  them at start-up, so a process that lacks them re-executes itself once
  with them set.
* BLAS threads: OpenBLAS with two threads on two shared cores spins and
  makes small-matrix timings swing 3x between runs. The count in use is
  reported with every result (``threadpoolctl`` when installed, else the
  environment).
"""

from __future__ import annotations

import os
import sys

MALLOC_SETTINGS = {
    "MALLOC_TRIM_THRESHOLD_": "1073741824",
    "MALLOC_TOP_PAD_": "67108864",
    "MALLOC_MMAP_THRESHOLD_": "67108864",
}


def _ensure_malloc_settings() -> None:
    if all(os.environ.get(k) == v for k, v in MALLOC_SETTINGS.items()):
        return
    if os.environ.get("FRAME_BENCH_REEXEC"):  # never loop
        return
    env = dict(os.environ, **MALLOC_SETTINGS, FRAME_BENCH_REEXEC="1")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


_ensure_malloc_settings()


def blas_threads() -> str:
    """The BLAS library and its thread count, as far as can be told without loading anything heavy."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        import numpy  # noqa: F401  (loads the BLAS)

        pools = [f"{p.get('internal_api')} {p.get('num_threads')} threads" for p in threadpool_info()
                 if p.get("user_api") == "blas"]
        if pools:
            return ", ".join(pools)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            return f"{var}={os.environ[var]}"
    return f"default (up to {os.cpu_count()} threads)"


def describe_environment() -> str:
    """One line for the top of every benchmark's output."""
    import numpy as np

    load = ""
    if hasattr(os, "getloadavg"):
        load = " load avg %.2f %.2f %.2f," % os.getloadavg()
    malloc = "set" if all(os.environ.get(k) == v for k, v in MALLOC_SETTINGS.items()) else "NOT set"
    return (f"# numpy {np.__version__}, BLAS: {blas_threads()},{load} {os.cpu_count()} cpus, "
            f"malloc trim/top-pad/mmap thresholds {malloc}")
