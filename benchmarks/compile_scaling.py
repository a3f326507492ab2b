"""Trace, backward and compile time of chains of 1k, 10k and 100k nodes, stage by stage.

The chain is ``backward_scaling.py``'s (elementwise ops alternating with
matmuls against a shared weight). Every round builds the graph afresh (no memo
carries over), then times ``trace``, ``build_backward_graph`` and ``compile``
(cache off, so no cache key is built: its cost, what ``compile(cache=True)``
adds, is a row of its own outside the total), and inside ``compile`` each
pipeline stage, the memory plan, the lowering and the executable's set-up. Prints the median of
the rounds and the growth exponent between sizes, log(t2/t1)/log(n2/n1):
1.0 is linear.

    python benchmarks/compile_scaling.py [--sizes 1000 10000 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
from collections import defaultdict

from _env import describe_environment  # noqa: F401  (sets the malloc variables before numpy loads)

import frame_core as fc
from frame_core import ops
from frame_core.compiler import api, pipeline
from frame_core.ir.keys import graph_key
from frame_core.compiler.passes import lower as lower_mod
from frame_core.compiler.passes import memory as memory_mod
from frame_core.runtime import executable as executable_mod

TIMES: dict[str, float] = defaultdict(float)
#: CPU time of this process: on a shared machine, wall time mostly measures the neighbours.
CLOCK = time.process_time


def chain(n: int):
    def fn(x, w):
        h = x
        for i in range(n // 2):
            h = ops.tanh(h @ w) if i % 2 else ops.sin(h) + h
        return ops.sum(h)
    return fn


_GC_START = [0.0]


def _gc_timer(phase: str, info: dict) -> None:
    """Time spent in the cyclic collector, charged to its own row (and subtracted from nothing)."""
    if phase == "start":
        _GC_START[0] = CLOCK()
    else:
        TIMES_GC[info["generation"]] += CLOCK() - _GC_START[0]


TIMES_GC: dict[int, float] = defaultdict(float)


def timed(name: str, fn):
    def wrapper(*args, **kwargs):
        t0 = CLOCK()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name] += CLOCK() - t0
    wrapper.__wrapped__ = fn
    return wrapper


def instrument() -> None:
    """Wrap every stage with a timer (a benchmark may patch; frame itself records no timings)."""
    pipeline._STAGE_CACHE = tuple(pipeline.Stage(s.name, timed(s.name, s.fn), s.min_level, s.doc)
                                  for s in pipeline.stages())
    for spec in fc.registry().passes:
        object.__setattr__(spec, "fn", timed(spec.name, spec.fn))
    pipeline._release = timed("release dropped nodes", pipeline._release)
    api.graph_key = timed("cache key", api.graph_key)
    memory_mod.plan_memory = timed("plan_memory", memory_mod.plan_memory)
    lower_mod.lower = timed("lower", lower_mod.lower)
    executable_mod.Executable.__init__ = timed("executable", executable_mod.Executable.__init__)


def one_round(n: int) -> dict[str, float]:
    gc.collect()  # each round starts from a clean heap, as a fresh process would
    TIMES.clear()
    TIMES_GC.clear()
    t0 = CLOCK()
    graph = fc.trace(chain(n), "f32[4, 8]", "f32[8, 8]")
    t1 = CLOCK()
    training = fc.build_backward_graph(graph, 0, [0, 1])
    t2 = CLOCK()
    exe = fc.compile(training, cache=False)
    t3 = CLOCK()
    gc.collect(0)  # the young collection the three left pending (they pause the collector): paid here, timed
    t4 = CLOCK()
    graph_key(training)  # what compile(cache=True) adds: the key of the graph (not part of the total)
    t5 = CLOCK()
    row = {"trace": t1 - t0, "backward": t2 - t1, "compile": t3 - t2, "pending young collection": t4 - t3}
    row["compile: other"] = row["compile"] - sum(TIMES.values())
    row.update({f"compile: {k}": v for k, v in TIMES.items()})
    row["total"] = t4 - t0
    row["  of which cyclic gc"] = sum(TIMES_GC.values())
    row["(cache=True adds: cache key)"] = t5 - t4
    row["_nodes"] = len(graph.nodes)
    row["_training"] = len(training.nodes)
    row["_instructions"] = len(exe.instructions)
    del exe, training, graph
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wall", action="store_true", help="time wall clock instead of this process's CPU time")
    args = parser.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    print(describe_environment())
    print(f"# clock: {'wall' if args.wall else 'process CPU time'}")
    instrument()
    gc.callbacks.append(_gc_timer)
    one_round(200)  # warm: imports, kernel builders
    results = {}
    for n in args.sizes:
        rounds = [one_round(n) for _ in range(args.rounds if n <= 10000 else max(1, args.rounds // 2))]
        results[n] = {k: statistics.median(r.get(k, 0.0) for r in rounds) for k in rounds[0]}
    keys = [k for k in results[args.sizes[0]] if not k.startswith("_")]
    header = "".join(f"{n:>12d}" for n in args.sizes)
    print(f"{'seconds (median)':34}{header}" + "".join(f"  exp {a // 1000}k->{b // 1000}k"
                                                     for a, b in zip(args.sizes, args.sizes[1:])))
    for k in ["_training", "_instructions"]:
        print(f"{k[1:] + ' nodes' if k == '_training' else k[1:]:34}"
              + "".join(f"{int(results[n][k]):12d}" for n in args.sizes))
    for k in keys:
        line = f"{k:34}" + "".join(f"{results[n][k]:12.3f}" for n in args.sizes)
        for a, b in zip(args.sizes, args.sizes[1:]):
            ta, tb = results[a][k], results[b][k]
            line += f"  {math.log(tb / ta) / math.log(b / a):10.2f}" if ta > 0 and tb > 0 else f"  {'-':>10}"
        print(line)


if __name__ == "__main__":
    main()
