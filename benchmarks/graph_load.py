"""Loading a large graph document: ``frame_core.loads`` on a ~50 MB JSON document (a chain of ops with
attributes), against ``json.loads`` alone (the parse every loader pays) and against the same load without the check
for repeated keys (``object_pairs_hook``), which is what that check costs. Prints medians of several runs and the ratios.

Run: .venv/bin/python benchmarks/graph_load.py [--mb 50] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _env import describe_environment

import frame_core as fc


def document(megabytes: float) -> str:
    g = fc.Graph("big")
    x = g.add_input("f32[8, 16]", "x")
    v = x
    per_node = 330  # bytes of JSON per node below, measured
    for i in range(int(megabytes * 1e6 / per_node)):
        v = g.add_node("transpose", [v], {"perm": (0, 1)}, ["f32[8, 16]"]).outputs[0]
    g.mark_output(v)
    return fc.dumps(g, indent=1)


def medians(contestants: dict, repeat: int) -> dict:
    """Median seconds of each callable, run in turns (one of each per round): a machine whose load drifts
    affects every contestant alike."""
    times: dict = {name: [] for name in contestants}
    for _ in range(repeat):
        for name, fn in contestants.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(describe_environment())
    text = document(args.mb)
    print(f"document: {len(text) / 1e6:.1f} MB")
    from frame_core.ir.serialize import from_document

    m = medians({"plain": lambda: json.loads(text), "hooked": lambda: json.loads(text, object_pairs_hook=dict),
                 "unchecked": lambda: from_document(json.loads(text)), "load": lambda: fc.loads(text)}, args.repeat)
    print(f"json.loads alone                     {m['plain']:8.3f} s")
    print(f"json.loads, object_pairs_hook=dict   {m['hooked']:8.3f} s  ({m['hooked'] / m['plain']:.2f}x the plain parse)")
    print(f"from_document(json.loads) (no check) {m['unchecked']:8.3f} s")
    print(f"frame_core.loads (refuses repeated)  {m['load']:8.3f} s  ({m['load'] / m['unchecked']:.2f}x the unchecked "
          "load)")


if __name__ == "__main__":
    main()
