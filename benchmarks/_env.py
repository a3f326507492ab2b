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
  reported with every result (``threadpoolctl`` when installed, else
  numpy's own build information and the environment); a script given
  ``--blas-threads N`` runs with that many.
"""

from __future__ import annotations

import os
import sys

MALLOC_SETTINGS = {
    "MALLOC_TRIM_THRESHOLD_": "1073741824",
    "MALLOC_TOP_PAD_": "67108864",
    "MALLOC_MMAP_THRESHOLD_": "67108864",
}


def _requested_blas_threads() -> str | None:
    """The value of a ``--blas-threads N`` (or ``=N``) argument, if the script was given one."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--blas-threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--blas-threads="):
            return arg.split("=", 1)[1]
    return None


def _ensure_malloc_settings() -> None:
    wanted = dict(MALLOC_SETTINGS)
    threads = _requested_blas_threads()
    if threads is not None:  # BLAS reads these once, when numpy loads it
        wanted.update(OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    if all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    if os.environ.get("FRAME_BENCH_REEXEC") or not os.path.isfile(sys.argv[0]):  # never loop; scripts only
        return
    env = dict(os.environ, **wanted, FRAME_BENCH_REEXEC="1")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


_ensure_malloc_settings()


def blas_threads() -> str:
    """The BLAS library and the number of threads it uses."""
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
    found = _openblas_in_numpy()
    if found:
        return found
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            return f"{var}={os.environ[var]}"
    return f"unknown library, default threads (up to {os.cpu_count()})"


def _openblas_in_numpy() -> str | None:
    """Ask the OpenBLAS that numpy's wheel bundles (numpy.libs/) for its configuration and thread count."""
    import ctypes
    import glob

    import numpy

    folder = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(folder, "libscipy_openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas_", "scipy_openblas64_"):
            for suffix in ("64_", ""):
                get = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                config = getattr(lib, f"{prefix}get_config{suffix}", None)
                if get is not None:
                    config_text = ""
                    if config is not None:
                        config.restype = ctypes.c_char_p
                        config_text = config().decode(errors="replace").strip()
                    return f"{config_text or 'OpenBLAS'}, {get()} threads"
    return None


def describe_environment() -> str:
    """One line for the top of every benchmark's output."""
    import numpy as np

    load = ""
    if hasattr(os, "getloadavg"):
        load = " load avg %.2f %.2f %.2f," % os.getloadavg()
    malloc = "set" if all(os.environ.get(k) == v for k, v in MALLOC_SETTINGS.items()) else "NOT set"
    return (f"# numpy {np.__version__}, BLAS: {blas_threads()},{load} {os.cpu_count()} cpus, "
            f"malloc trim/top-pad/mmap thresholds {malloc}")
