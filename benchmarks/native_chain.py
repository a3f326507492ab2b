"""A 1,000-op chain of add, mul and relu on f32[64], with and without the compiled pack (frame-native).

x -> x * c0 -> + c1 -> relu -> x * c3 -> ... with a random constant vector
per add/mul. Forward, and forward+backward (the gradient of sum(chain(x)) by
``build_backward_graph``). The numpy reference calls the same ufuncs one by
one (and writes the backward pass by hand).

For each case it prints, as ratios to numpy:
* ``frame``: frame's own fused numpy code (``FRAME_NATIVE=0``);
* ``first call``: the first run of a freshly compiled executable with the pack
  against today's first run (``FRAME_NATIVE=0``), medians of fresh compiles;
* ``before swap``: the tiered executable while the group still runs on numpy
  and the compiler works in the background (each run timed against a numpy
  reference call made right after it);
* ``after swap``: once the compiled kernel is in, and when the swap happened
  (seconds after ``compile`` returned, and after how many runs) while the
  program kept calling it.

Medians of interleaved rounds. Needs frame-native installed (``make setup``).

    python benchmarks/native_chain.py [--ops 1000] [--size 64] [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _env import describe_environment

import numpy as np

import frame_core as fc
from frame_core import ops


def constants(n: int, size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(1 + 0.01 * rng.standard_normal(size)).astype(np.float32) if i % 3 == 0 else
            (0.01 * rng.standard_normal(size)).astype(np.float32) for i in range(n)]


def frame_chain(cs):
    def fn(x):
        for i, c in enumerate(cs):
            x = x * c if i % 3 == 0 else x + c if i % 3 == 1 else ops.relu(x)
        return x
    return fn


def numpy_forward(x, cs):
    for i, c in enumerate(cs):
        x = np.multiply(x, c) if i % 3 == 0 else np.add(x, c) if i % 3 == 1 else np.maximum(x, 0)
    return x


def numpy_forward_backward(x, cs):
    kept = []
    for i, c in enumerate(cs):
        if i % 3 == 2:
            x = np.maximum(x, 0)
            kept.append(x)
        else:
            x = np.multiply(x, c) if i % 3 == 0 else np.add(x, c)
    loss = np.sum(x)
    g = np.ones_like(x)
    for i in reversed(range(len(cs))):
        if i % 3 == 0:
            g = np.multiply(g, cs[i])
        elif i % 3 == 2:
            g = np.multiply(g, kept.pop() > 0)
    return loss, g


def per_call(fn, rounds: int, batch: float = 0.01) -> list[float]:
    fn()
    t0 = time.perf_counter()
    fn()
    k = max(1, int(batch / max(time.perf_counter() - t0, 1e-7)))
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        out.append((time.perf_counter() - t0) / k)
    return out


def interleaved(variants: dict, rounds: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            samples[k] += per_call(fn, 1)
    return {k: statistics.median(v) for k, v in samples.items()}


def first_calls(graph, x, repeat: int = 7) -> tuple[float, float]:
    """Median first-run time of freshly compiled executables: today's (FRAME_NATIVE=0) and with the pack,
    alternating. The pack's first run is frame's numpy code behind one forwarding call."""
    today, tiered = [], []
    for _ in range(repeat):
        for env, store in (("0", today), (None, tiered)):
            if env is None:
                os.environ.pop("FRAME_NATIVE", None)
            else:
                os.environ["FRAME_NATIVE"] = env
            exe = fc.compile(graph, cache=False)
            t0 = time.perf_counter()
            exe.run([x])
            store.append(time.perf_counter() - t0)
    os.environ.pop("FRAME_NATIVE", None)
    return statistics.median(today), statistics.median(tiered)


def tiered_timeline(graph, x, reference, import_native):
    """Compile with the pack and call it in a loop (one numpy reference call between runs, so the ratio is
    measured in the same moments); return (executable, before-swap ratio, seconds from compile to swap, runs
    before the swap, how the kernel was obtained)."""
    exe = fc.compile(graph, cache=False)
    t_compiled = time.perf_counter()
    exe.run([x])
    runs, ours, theirs = 1, [], []
    while "native" not in import_native.tier_of(exe):
        t0 = time.perf_counter()
        exe.run([x])
        t1 = time.perf_counter()
        reference()
        t2 = time.perf_counter()
        if "native" not in import_native.tier_of(exe):  # a run that ended on numpy
            ours.append(t1 - t0)
            theirs.append(t2 - t1)
        runs += 1
        if time.perf_counter() - t_compiled > 60:
            raise SystemExit(f"no swap within 60 s: {import_native.status()}")
    kernel = next(ins.kernel for ins in exe.instructions if hasattr(ins.kernel, "native"))
    swapped = kernel.native.swapped_at - t_compiled
    before = statistics.median(ours) / statistics.median(theirs) if ours else float("nan")
    return exe, before, swapped, runs, kernel.native.how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    print(describe_environment())
    try:
        import frame_native
    except ImportError:
        raise SystemExit("frame-native is not installed (make setup installs it)")
    cs = constants(args.ops, args.size)
    x = np.random.default_rng(1).standard_normal(args.size).astype(np.float32)
    t = f"f32[{args.size}]"
    forward = fc.trace(frame_chain(cs), t)
    backward = fc.build_backward_graph(fc.trace(lambda v: ops.sum(frame_chain(cs)(v)), t), 0, [0])
    cases = [("forward", forward, lambda: numpy_forward(x, cs)),
             ("forward+backward", backward, lambda: numpy_forward_backward(x, cs))]
    print(f"{args.ops} ops (add, mul, relu) on f32[{args.size}]; medians of {args.rounds} interleaved rounds; "
          f"ratios to numpy")
    print(f"{'case':18} {'numpy us':>9} {'frame':>7} {'before swap':>12} {'after swap':>11}   swap; first call "
          f"with the pack / today's first call")
    for label, graph, reference in cases:
        os.environ["FRAME_NATIVE"] = "0"
        plain = fc.compile(graph, cache=False)
        os.environ.pop("FRAME_NATIVE")
        # a cold cache shows the compile; a second process would load the kernel from the disk cache
        exe, before, swapped, runs, how = tiered_timeline(graph, x, reference, frame_native)
        np.testing.assert_array_equal(exe.run([x])[-1].view(np.uint32), plain.run([x])[-1].view(np.uint32))
        times = interleaved({"numpy": reference, "frame": lambda: plain.run([x]),
                             "native": lambda: exe.run([x])}, args.rounds)
        base = times["numpy"]
        first_today, first_tiered = first_calls(graph, x)
        print(f"{label:18} {base * 1e6:9.1f} {times['frame'] / base:6.2f}x "
              f"{before:11.2f}x {times['native'] / base:10.3f}x   after {swapped:.2f} s, run {runs} "
              f"({'loaded from the disk cache' if how == 'cache' else 'compiled'}); first call "
              f"{first_tiered * 1e6:.0f} us / {first_today * 1e6:.0f} us = {first_tiered / first_today:.2f}")
    print("results after the swap are bitwise those of frame's numpy code (checked above)")


if __name__ == "__main__":
    main()
