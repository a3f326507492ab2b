"""Every registered op's graphs at batch sizes other than the traced one: the full sweep behind
``tests/autodiff/test_any_batch_registry.py`` (which runs one case per op).

For every example of every op with an axis, and every graph kind (``forward``, ``vjp``, ``vjp2``: the VJP of the
VJP, ``jvp``), the graph traced at the example's batch B is compiled once with ``dynamic_shapes=True`` and run at
B' in {1, B + 3, 2B, 0}, against a graph traced at B' compiled with the same options: bit for bit the same, or
refused with a named ``ShapeError`` (``tests/autodiff/_any_batch.py`` says what counts as a finding), or refused
by the fresh trace too. No case is dropped: one with no graph of its kind (no floating input, no gradient) is
counted as ``no-graph``, with its reason. Opt levels 0 and 2; ``--native`` also runs each executable until
frame-native's compiled kernels are swapped in (``FRAME_NATIVE_AFTER=1``) and compares their bits. Prints the count of each verdict, the classes of refusal
and every finding; exits 1 when there is one. A correctness sweep, not a timing: no ratios to print.

``--one-output`` adds, for every op with several outputs, the graphs that return one of them only (the others
unused: zero cotangents, unread tangents).

    python benchmarks/any_batch_sweep.py [--first] [--ops relu,conv2d] [--kinds forward,jvp] [--opt 0,2] [--native]
                                         [--one-output]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _tally(outcome, where: str, counts, refusals, no_graph, findings, accepted, finding_kinds) -> None:
    kind = where.split()[-4]
    counts[outcome.verdict] += 1
    if outcome.verdict == "refused":
        refusals[(kind, outcome.detail[1:].split("]")[0])] += 1
    elif outcome.verdict == "no-graph":
        no_graph[(kind, outcome.detail)] += 1
    elif outcome.verdict in finding_kinds:
        findings.append(f"{where}: {outcome.verdict}: {outcome.detail[:300]}")
    elif outcome.verdict not in accepted:  # every case ends in a known verdict: none is dropped unseen
        findings.append(f"{where}: unknown verdict {outcome.verdict!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", action="store_true", help="only each op's first example")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: every op)")
    parser.add_argument("--kinds", default="forward,vjp,vjp2,jvp")
    parser.add_argument("--opt", default="0,2", help="opt levels")
    parser.add_argument("--native", action="store_true", help="compare frame-native's compiled kernels too")
    parser.add_argument("--one-output", action="store_true", help="also each output of a multi-output op alone")
    args = parser.parse_args()
    if args.native:
        os.environ["FRAME_NATIVE_AFTER"] = "1"
    warnings.simplefilter("ignore")  # (NaN and overflow warnings of examples drawn at random)
    import frame_core as fc
    from tests.autodiff import _any_batch as harness

    compile_fn = None
    if args.native:
        try:
            import frame_native
        except ImportError:
            print("frame-native is not installed")
            return 1

        class _Tiered:  # runs until the compiled kernels are in, and answers with their results
            def __init__(self, exe):
                self.exe = exe

            def run(self, arrays):
                self.exe.run([a.copy() for a in arrays])
                frame_native.wait(30)
                return self.exe.run(arrays)

        def compile_fn(graph, **options):
            return _Tiered(fc.compile(graph, **options))

    ops = [o for o in args.ops.split(",") if o] or None
    kinds = args.kinds.split(",")
    start = time.perf_counter()
    counts: collections.Counter = collections.Counter()
    refusals: collections.Counter = collections.Counter()
    no_graph: collections.Counter = collections.Counter()
    findings: list[str] = []
    for level in [int(o) for o in args.opt.split(",")]:
        for op, index, kind, size in harness.cases(ops, kinds, first_only=args.first):
            n_out = len(fc.registry().schemas[op].outputs) if args.one_output else 1
            for output in [None, *range(n_out)] if n_out > 1 else [None]:
                outcome = harness.check(op, index, kind, size, options={"opt_level": level}, compile_fn=compile_fn,
                                        output=output)
                only = "" if output is None else f" (output {output} alone)"
                _tally(outcome, f"opt {level}: {op}{only} example {index} {kind} at batch {size}", counts, refusals,
                       no_graph, findings, harness.ACCEPTED, harness.FINDINGS)
    print(f"{sum(counts.values())} cases in {time.perf_counter() - start:.0f} s: "
          + ", ".join(f"{v} {k}" for k, v in counts.most_common()))
    print("refusals (kind, class): " + "; ".join(f"{k[0]} {k[1]}: {v}" for k, v in sorted(refusals.items())))
    print("no graph (kind, why): " + "; ".join(f"{k[0]} {k[1]}: {v}" for k, v in sorted(no_graph.items())))
    for line in findings:
        print("FINDING", line)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
