"""Trace + grad + compile + first run of chains of 10k and 100k nodes (issue 21: all four under 4 s at 100k).

The chain is ``backward_scaling.py``'s. Each stage is timed in CPU seconds of this process (on a shared
machine wall time mostly measures the neighbours), in a fresh graph per size; the first run checks every
kernel's results (issue 8), later runs do not, so the second run is printed too. Prints the growth exponent
log(t2/t1)/log(n2/n1) between sizes (1.0 is linear), the load average and the BLAS threads.

    python benchmarks/first_run_scaling.py [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import math
import time

from _env import describe_environment  # sets the malloc thresholds (see _env.py)

import numpy as np

import frame_core as fc
from backward_scaling import chain_graph

CLOCK = time.process_time


def stages(n: int) -> dict[str, float]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    args = parser.parse_args()
    print(describe_environment())
    fc.registry()
    previous = None
    for n in args.sizes:
        times = stages(n)
        total = times["trace"] + times["grad"] + times["compile"] + times["first run"]
        line = f"{n:7d} nodes: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()) + f"; four together {total:.2f} s"
        if previous is not None:
            p_n, p_times, p_total = previous
            growth = {k: math.log(times[k] / p_times[k]) / math.log(n / p_n) for k in ("trace", "grad", "compile",
                                                                                    "first run")}
            growth["four"] = math.log(total / p_total) / math.log(n / p_n)
            line += "\n               growth exponent: " + ", ".join(f"{k} {v:.2f}" for k, v in growth.items())
        print(line)
        previous = (n, times, total)


if __name__ == "__main__":
    main()
