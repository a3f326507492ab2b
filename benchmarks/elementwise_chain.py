"""A chain of 1,000 small elementwise nodes: frame against the same numpy ufuncs called one by one.

Forward: x -> sin -> tanh -> neg -> cos -> sin -> ... (1,000 ops on a small
float32 vector). Backward: the gradient of sum(chain(x)), by
``build_backward_graph``; the numpy reference is the same chain rule written
by hand, one ufunc call (and one allocation) per operation. frame is timed
without fusion (opt_level=1: one kernel call per node) and with fusion
(opt_level=2: the chain runs as fused_elementwise_internal nodes writing into
reused buffers). Prints median times per node and ratios.

    python benchmarks/elementwise_chain.py [--nodes 1000] [--size 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _env import describe_environment  # sets the malloc thresholds before numpy loads (see _env.py)

import numpy as np

import frame_core as fc
from frame_core import ops

PATTERN = ("sin", "tanh", "neg", "cos")
UFUNC = {"sin": np.sin, "tanh": np.tanh, "neg": np.negative, "cos": np.cos}


def chain(x, n: int):
    for i in range(n):
        x = getattr(ops, PATTERN[i % 4])(x)
    return x


def numpy_forward(x: np.ndarray, ufuncs: list) -> np.ndarray:
    for f in ufuncs:
        x = f(x)
    return x


def numpy_backward(x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    xs = [x]  # every intermediate is kept, as reverse mode needs
    for i in range(n):
        xs.append(UFUNC[PATTERN[i % 4]](xs[-1]))
    loss = np.sum(xs[-1])
    g = np.ones_like(x)
    for i in reversed(range(n)):
        op, xi = PATTERN[i % 4], xs[i]
        if op == "sin":
            g = g * np.cos(xi)
        elif op == "tanh":
            y = xs[i + 1]  # tanh's output, not recomputed
            g = g * (1.0 - y * y)
        elif op == "neg":
            g = np.negative(g)
        else:
            g = np.negative(g * np.sin(xi))
    return loss, g


def median_time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=101)
    args = parser.parse_args()
    print(describe_environment())
    n = args.nodes
    x = np.random.default_rng(0).uniform(-1, 1, args.size).astype(np.float32)
    t = f"f32[{args.size}]"
    forward = fc.trace(lambda v: chain(v, n), t)
    loss_graph = fc.trace(lambda v: ops.sum(chain(v, n)), t)
    backward = fc.build_backward_graph(loss_graph, 0, [0])
    ufuncs = [UFUNC[PATTERN[i % 4]] for i in range(n)]

    rows = []
    ref = median_time(lambda: numpy_forward(x, ufuncs), args.repeat)
    for label, level in (("unfused", 1), ("fused", 2)):
        exe = fc.compile(forward, opt_level=level)
        assert np.allclose(exe.run([x])[0], numpy_forward(x, ufuncs), rtol=1e-5, atol=1e-6)
        rows.append((f"forward, {label}", median_time(lambda: exe.run([x]), args.repeat), ref))
    ref = median_time(lambda: numpy_backward(x, n), args.repeat)
    for label, level in (("unfused", 1), ("fused", 2)):
        exe = fc.compile(backward, opt_level=level)
        _, g = exe.run([x])
        assert np.allclose(g, numpy_backward(x, n)[1], rtol=1e-4, atol=1e-5)
        rows.append((f"forward+backward, {label}", median_time(lambda: exe.run([x]), args.repeat), ref))

    print(f"{n} elementwise nodes on f32[{args.size}], median of {args.repeat} runs")
    print(f"{'case':28} {'numpy us/node':>14} {'frame us/node':>14} {'frame/numpy':>12}")
    for label, t_frame, t_ref in rows:
        print(f"{label:28} {t_ref / n * 1e6:14.3f} {t_frame / n * 1e6:14.3f} {t_frame / t_ref:11.2f}x")


if __name__ == "__main__":
    main()
