"""float32 tanh: the error of ``compile(fast_math=True)``'s approximation over every float32, and its speed.

Error: distance in float32 steps (ulp) from float64 tanh rounded to float32, for
every non-negative float32 below inf (``--stride 1``, the default; tanh and the
approximation are both exactly odd, so this covers every float32) and for the
specials; side by side with numpy's float32 tanh and jax.jit's (when installed).
Speed: nanoseconds per element on a [256, 64] array (the PINN's layer), medians
of interleaved runs: numpy's tanh, frame's compiled ``tanh(x * 1 + 0)`` group
with and without ``fast_math`` (the default leaves tanh to numpy), jax.jit.

    python benchmarks/tanh_accuracy.py [--stride 1] [--only-fast] [--rounds 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# One thread (BLAS through _env, XLA's pool) as in the other benchmarks
sys.argv += [] if any(a.startswith("--blas-threads") for a in sys.argv) else ["--blas-threads", "1"]
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
from _env import describe_environment  # noqa: E402 - BLAS settings before numpy loads

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402

CHUNK = 1 << 24


def _ordered(a: np.ndarray) -> np.ndarray:
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def sweep(functions: dict, stride: int) -> dict[str, np.ndarray]:
    """Histogram of the ulp error (index = ulps, the last bin everything above) of each function."""
    hist = {name: np.zeros(64, np.int64) for name in functions}
    worst = {name: (0, 0.0) for name in functions}
    for start in range(0, 0x7F800000, CHUNK * stride):
        x = np.arange(start, min(start + CHUNK * stride, 0x7F800000), stride, dtype=np.int64).astype(np.uint32)
        x = x.view(np.float32)
        want = _ordered(np.tanh(x.astype(np.float64)).astype(np.float32))
        for name, fn in functions.items():
            err = np.abs(_ordered(np.asarray(fn(x), np.float32)) - want)
            hist[name] += np.bincount(np.minimum(err, 63), minlength=64)
            k = int(err.argmax())
            if err[k] > worst[name][0]:
                worst[name] = (int(err[k]), float(x[k]))
    return {name: (hist[name], worst[name]) for name in functions}


def interleaved(fns: dict, rounds: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(10):
                fn()
            samples[name].append((time.perf_counter() - t0) / 10)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stride", type=int, default=1, help="test every stride-th float32 (1: all of them)")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--only-fast", action="store_true", help="sweep only the approximation (a third of the time)")
    parser.add_argument("--blas-threads", type=int, default=None, help="(read by _env before numpy loads)")
    args = parser.parse_args()
    print(describe_environment())
    from frame_native.approx import tanh_f32

    functions = {"fast_math (frame-native)": tanh_f32, "numpy float32": np.tanh}
    try:
        import jax
        import jax.numpy as jnp

        jtanh = jax.jit(jnp.tanh)
        functions["jax.jit"] = lambda x: np.asarray(jtanh(x))
    except ImportError:
        jax = None
    t0 = time.perf_counter()
    result = sweep({"fast_math (frame-native)": tanh_f32} if args.only_fast else functions, args.stride)
    tested = (0x7F800000 + args.stride - 1) // args.stride
    print(f"ulp error against float64 tanh rounded to float32, {tested} non-negative float32 values "
          f"(every {args.stride}{'st' if args.stride == 1 else 'th'}; {time.perf_counter() - t0:.0f} s):")
    for name, (hist, (worst, at)) in result.items():
        shares = ", ".join(f"{k} ulp {hist[k] / tested:.2e}" for k in range(1, 8) if hist[k])
        print(f"  {name:26s} max {worst} ulp (at {at!r}); exact {hist[0] / tested:.4f}; {shares}")
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
    print(f"  fast_math at 0, -0, inf, -inf, nan, 1e30: {tanh_f32(specials).tolist()}")

    x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32) * 2
    one, zero = np.float32(1.0), np.float32(0.0)
    graph = fc.trace(lambda a, b, c: ops.tanh(a * b + c), "f32[256, 64]", "f32[]", "f32[]")
    default, fast = fc.compile(graph, cache=False), fc.compile(graph, cache=False, fast_math=True)
    try:
        import frame_native

        for _ in range(3):
            default.run([x, one, zero]), fast.run([x, one, zero])
        frame_native.wait(60)
        print(f"frame-native tiers: default {frame_native.tier_of(default)}, fast_math {frame_native.tier_of(fast)}")
    except ImportError:
        pass
    out = np.empty_like(x)
    fns = {"numpy tanh (out=)": lambda: np.tanh(x, out=out), "frame default": lambda: default.run([x, one, zero]),
           "frame fast_math": lambda: fast.run([x, one, zero])}
    if jax is not None:
        jx = jnp.asarray(x)
        jf = jax.jit(lambda a, b, c: jnp.tanh(a * b + c))
        fns["jax.jit"] = lambda: jax.block_until_ready(jf(jx, one, zero))
    times = interleaved(fns, args.rounds)
    print(f"tanh(x * 1 + 0) on [256, 64] float32, median of {args.rounds} interleaved rounds, load avg "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}:")
    for name, t in times.items():
        print(f"  {name:20s} {t * 1e6:8.1f} us  {t / x.size * 1e9:6.2f} ns/element")


if __name__ == "__main__":
    main()
