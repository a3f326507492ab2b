"""The floor under the 100k-chain pipeline (issue 21): what one pass of plain Python costs per node here.

Builds ``first_run_scaling.py``'s chain at ``--size`` forward nodes and its training graph, then times, in CPU
seconds of this process, the cheapest things a graph pass can do per node, written as tightly as Python allows:

* ``read``: visit every node and look each input up in a dict (what any analysis must do at least);
* ``read + write``: the same, plus one dict entry per output (a pass that computes something per value);
* ``copy``: make a new ``Node`` and ``Value`` per node with frame's own IR classes, inputs remapped through a
  dict (what any pass that rewrites the graph must do at least);

The three run with the cyclic collector paused, as frame's transforms do (``frame_core._gc``).

and frame's own stages (trace, grad, compile at ``opt_level`` 0 and 2, first run). Each figure is the median of
``--rounds`` runs. The point is arithmetic: with N training nodes, 4 s allows ``4 / N`` seconds per node for
trace, grad, compile and first run together; the script prints how many of the cheapest passes that budget buys.

    python benchmarks/python_floor.py [--size 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from _env import describe_environment  # sets the malloc thresholds (see _env.py)

import numpy as np

import frame_core as fc
from backward_scaling import chain_graph
from frame_core._gc import gc_paused
from frame_core.ir.graph import Node, Value

CLOCK = time.process_time


def timed(fn, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        gc.collect()
        t = CLOCK()
        result = fn()
        times.append(CLOCK() - t)
    return statistics.median(times), result


def read_walk(graph: fc.Graph) -> int:
    """Every node visited, every input looked up: the least an analysis does."""
    known = dict.fromkeys(graph.inputs, 0)
    for node in graph.nodes:
        for v in node.inputs:
            known.get(v)
    return len(known)


def read_write_walk(graph: fc.Graph) -> int:
    """As ``read_walk``, plus one entry per output: the least a per-value analysis does."""
    depth = dict.fromkeys(graph.inputs, 0)
    get = depth.get
    for node in graph.nodes:
        d = 0
        for v in node.inputs:
            d = max(d, get(v, 0))
        for out in node.outputs:
            depth[out] = d + 1
    return len(depth)


def copy_walk(graph: fc.Graph) -> int:
    """A new Node and new Values per node, inputs remapped: the least a rewriting pass does."""
    new = {v: Value(v.type, None, -1, v.name) for v in graph.inputs}
    nodes = []
    for node in graph.nodes:
        copy = Node(node.op, tuple([new.get(v, v) for v in node.inputs]), node.attrs)
        copy.outputs = tuple([Value(v.type, copy, i, v.name) for i, v in enumerate(node.outputs)])
        for old, out in zip(node.outputs, copy.outputs):
            new[old] = out
        nodes.append(copy)
    return len(nodes)


def paused(fn, graph: fc.Graph) -> int:
    """``fn(graph)`` with the cyclic collector paused, as frame's own transforms run."""
    with gc_paused():
        return fn(graph)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe_environment())
    fc.registry()
    t_trace, graph = timed(lambda: chain_graph(args.size), args.rounds)
    t_grad, training = timed(lambda: fc.build_backward_graph(graph, 0, [0, 1]), args.rounds)
    n = len(training.nodes)
    floors = {name: timed(lambda fn=fn: paused(fn, training), args.rounds)[0]
              for name, fn in (("read", read_walk), ("read + write", read_write_walk), ("copy", copy_walk))}
    x = np.full((4, 8), 0.1, np.float32)
    w = np.eye(8, dtype=np.float32) * 0.5
    stages = {"trace": t_trace, "grad": t_grad}
    for level in (0, 2):
        gc.collect()
        t = CLOCK()
        exe = fc.compile(training, cache=False, opt_level=level)
        stages[f"compile (opt_level {level})"] = CLOCK() - t
        t = CLOCK()
        exe.run([x, w])
        stages[f"first run (opt_level {level})"] = CLOCK() - t
    budget = 4.0 / n * 1e6
    print(f"{args.size} forward nodes, {n} training nodes; 4 s is {budget:.2f} us per training node in all")
    print(f"{'the cheapest pass':<28} {'s':>7} {'us/node':>8} {'passes in 4 s':>14}")
    for name, t in floors.items():
        print(f"{name:<28} {t:7.3f} {t / n * 1e6:8.3f} {4.0 / t:14.1f}")
    print(f"{'frame stage':<28} {'s':>7} {'us/node':>8} {'x copy pass':>14}")
    for name, t in stages.items():
        print(f"{name:<28} {t:7.3f} {t / n * 1e6:8.3f} {t / floors['copy']:14.1f}")


if __name__ == "__main__":
    main()
