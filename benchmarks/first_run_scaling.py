"""Trace + grad + compile + first run of chains of 10k, 30k and 100k nodes (issue 21: all four under 4 s at 100k).

The chain is ``backward_scaling.py``'s. Each stage is timed in CPU seconds of this process (on a shared
machine wall time mostly measures the neighbours), in a fresh graph per size and round, the sizes interleaved
within each round; the first run checks the kernels' results (issue 8), later runs do not, so the second run
is printed too. Prints the median of the rounds per stage, the growth exponent log(t2/t1)/log(n2/n1) between
consecutive sizes and the least-squares slope of log t over log n across all sizes (1.0 is linear), the load
average and the BLAS threads.

    python benchmarks/first_run_scaling.py [--sizes 10000 30000 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time

from _env import describe_environment  # sets the malloc thresholds (see _env.py)

import numpy as np

import frame_core as fc
from backward_scaling import chain_graph

CLOCK = time.process_time


def stages(n: int) -> dict[str, float]:
    gc.collect()  # each round starts from a clean heap, as a fresh process would
    times = {}
    t = CLOCK()
    graph = chain_graph(n)
    times["trace"] = CLOCK() - t
    t = CLOCK()
    training = fc.build_backward_graph(graph, 0, [0, 1])
    times["grad"] = CLOCK() - t
    t = CLOCK()
    exe = fc.compile(training, cache=False)
    times["compile"] = CLOCK() - t
    x = np.full((4, 8), 0.1, np.float32)
    w = np.eye(8, dtype=np.float32) * 0.5
    t = CLOCK()
    exe.run([x, w])
    times["first run"] = CLOCK() - t
    t = CLOCK()
    exe.run([x, w])
    times["second run"] = CLOCK() - t
    return times


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of log y over log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


PHASES = ("trace", "grad", "compile", "first run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000, 100000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe_environment())
    fc.registry()
    stages(200)  # warm: imports, kernel builders
    rounds: dict[int, list[dict[str, float]]] = {n: [] for n in args.sizes}
    for _ in range(args.rounds):
        for n in args.sizes:
            times = stages(n)
            times["four"] = sum(times[k] for k in PHASES)
            rounds[n].append(times)
    medians = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rounds.items()}
    previous = None
    for n in args.sizes:
        times = medians[n]
        line = f"{n:7d} nodes: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items() if k != "four") + \
            f"; four together {times['four']:.2f} s (median of {args.rounds})"
        if previous is not None:
            p_n, p_times = previous
            growth = {k: math.log(times[k] / p_times[k]) / math.log(n / p_n) for k in (*PHASES, "four")}
            line += "\n               growth exponent: " + ", ".join(f"{k} {v:.2f}" for k, v in growth.items())
        print(line)
        previous = (n, times)
    if len(args.sizes) > 2:
        fit = {k: slope(args.sizes, [medians[n][k] for n in args.sizes]) for k in (*PHASES, "four")}
        print("least-squares exponent over all sizes: " + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()))


if __name__ == "__main__":
    main()
