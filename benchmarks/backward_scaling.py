"""Time of ``build_backward_graph`` and of ``compile`` on chains of 1k, 10k and 100k nodes.

The chain alternates elementwise ops with matmuls against a shared weight (so
values fan out and gradients accumulate). Prints median times, time per node,
and the growth factor per 10x more nodes: about 10 means linear, 10·log(10n)/log(n)
(about 13 from 1k to 10k) would be n log n.

    python benchmarks/backward_scaling.py [--sizes 1000 10000 100000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _env import describe_environment  # sets the malloc thresholds (see _env.py)

import frame_core as fc
from frame_core import ops


def chain_graph(n: int) -> fc.Graph:
    def fn(x, w):
        h = x
        for i in range(n // 2):
            h = ops.tanh(h @ w) if i % 2 else ops.sin(h) + h
        return ops.sum(h)
    return fc.trace(fn, "f32[4, 8]", "f32[8, 8]")


def median(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    args = parser.parse_args()
    print(describe_environment())
    print(f"{'forward nodes':>13} {'backward s':>11} {'us/node':>8} {'compile s':>10} {'us/node':>8} "
          f"{'bwd+compile s':>14} {'training nodes':>15}")
    previous = None
    for n in args.sizes:
        graph = chain_graph(n)
        repeat = 3 if n <= 10000 else 1
        t_bwd, training = median(lambda: fc.build_backward_graph(graph, 0, [0, 1]), repeat)
        t_cmp, _ = median(lambda: fc.compile(training, cache=False), repeat)
        nodes = len(graph.nodes)
        line = (f"{nodes:13d} {t_bwd:11.3f} {t_bwd / nodes * 1e6:8.1f} {t_cmp:10.3f} {t_cmp / nodes * 1e6:8.1f} "
                f"{t_bwd + t_cmp:14.3f} {len(training.nodes):15d}")
        if previous is not None:
            p_nodes, p_bwd, p_cmp = previous
            line += f"   growth x{nodes / p_nodes:.0f} nodes: backward x{t_bwd / p_bwd:.1f}, compile x{t_cmp / p_cmp:.1f}"
        print(line)
        previous = (nodes, t_bwd, t_cmp)


if __name__ == "__main__":
    main()
