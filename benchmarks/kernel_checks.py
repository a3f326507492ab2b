"""Cost of the kernel-result checks (issue 8 §2) on one MLP training step (benchmarks/mlp_step.py's model).

Every executable checks each kernel's results against the inferred types on its first run, then runs the
unchecked program; ``FRAME_CHECKS=1`` (``compile(..., checks=True)``) checks every run. This prints, per
batch size, the median step time unchecked (what every run after the first costs), checked on every run,
and the first run of freshly compiled executables, with the ratios to the unchecked step; variants are
interleaved so a busy machine slows them alike. The first run is compared with the first run of fresh
executables whose check is switched off (cold caches and first-touch buffers cost both the same).
Also prints the BLAS thread count.

    MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=67108864 MALLOC_MMAP_THRESHOLD_=67108864 \
        python benchmarks/kernel_checks.py [--batches 16 128] [--steps 200]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import frame_core as fc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlp_step import LR, SIZES, init, mlp_loss  # noqa: E402


def blas_threads() -> str:
    """The OpenBLAS thread count of numpy's BLAS (read from the loaded library), or why it is unknown."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "openblas" in line.lower() and line.strip().endswith(".so")
                    or "openblas" in line.lower() and ".so" in line}
    except OSError:
        return "unknown"
    for path in sorted(libs):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                return str(fn())
    return "unknown"


def executables(batch: int, checks: bool):
    types = [f"f32[{batch}, {SIZES[0]}]", f"f32[{batch}, {SIZES[-1]}]"]
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        types += [f"f32[{fan_in}, {fan_out}]", f"f32[{fan_out}]"]
    forward = fc.trace(mlp_loss, *types)
    train = fc.compile(fc.build_backward_graph(forward, 0, list(range(2, 8))), cache=False, checks=checks)
    update = fc.compile(fc.build_sgd_update_graph(types[2:], LR), cache=False, checks=checks)
    return train, update


def step(train, update, x, t, params):
    loss, *grads = train.run([x, t, *params])
    return update.run([*params, *grads])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--first-runs", type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"BLAS threads: {blas_threads()}")
    print(f"{'batch':>6} {'unchecked ms':>13} {'checked ms':>11} {'ratio':>7} "
          f"{'1st run ms':>11} {'1st unchecked':>14} {'ratio':>7}")
    for batch in args.batches:
        x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
        t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
        params = init(rng)
        fast, checked = executables(batch, False), executables(batch, True)
        for exes in (fast, checked):
            for _ in range(3):
                step(*exes, x, t, params)
        assert fast[0]._fn is fast[0]._fast and checked[0]._fn is not checked[0]._fast
        times: dict[str, list[float]] = {"fast": [], "checked": [], "first": [], "first_off": []}
        for _ in range(args.steps):  # interleaved
            for name, exes in (("fast", fast), ("checked", checked)):
                t0 = time.perf_counter()
                step(*exes, x, t, params)
                times[name].append(time.perf_counter() - t0)
        for _ in range(args.first_runs):
            for name in ("first", "first_off"):
                exes = executables(batch, False)
                if name == "first_off":
                    for exe in exes:
                        exe._fn = exe._fast  # the first run without its check
                t0 = time.perf_counter()
                step(*exes, x, t, params)
                times[name].append(time.perf_counter() - t0)
        f, c, r, r0 = (statistics.median(times[k]) for k in ("fast", "checked", "first", "first_off"))
        print(f"{batch:6d} {f * 1e3:13.3f} {c * 1e3:11.3f} {c / f:6.2f}x {r * 1e3:11.3f} {r0 * 1e3:14.3f} "
              f"{r / r0:6.2f}x")


if __name__ == "__main__":
    main()
