"""Every registered op's graphs at batch sizes other than the traced one: the full sweep behind
``tests/autodiff/test_any_batch_registry.py`` (which runs one case per op).

For every example of every op with an axis, and every graph kind (``forward``, ``vjp``, ``vjp2``: the VJP of the
VJP, ``jvp``), the graph traced at the example's batch B is compiled once with ``dynamic_shapes=True`` and run at
B' in {1, B + 3, 2B, 0}, against a graph traced at B' compiled with the same options: bit for bit the same, or
refused with a named ``ShapeError`` (``tests/autodiff/_any_batch.py`` says what counts as a finding), or refused
by the fresh trace too. No case is dropped: one with no graph of its kind (no floating input, no gradient) is
counted as ``no-graph``, with its reason. Opt levels 0 and 2; ``--native`` also runs each executable until frame-native's compiled kernels are swapped in
(``FRAME_NATIVE_AFTER=1``) and compares their bits. Prints the count of each verdict, the classes of refusal
and every finding; exits 1 when there is one. A correctness sweep, not a timing: no ratios to print.

    python benchmarks/any_batch_sweep.py [--first] [--ops relu,conv2d] [--kinds forward,jvp] [--opt 0,2] [--native]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", action="store_true", help="only each op's first example")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: every op)")
    parser.add_argument("--kinds", default="forward,vjp,vjp2,jvp")
    parser.add_argument("--opt", default="0,2", help="opt levels")
    parser.add_argument("--native", action="store_true", help="compare frame-native's compiled kernels too")
    args = parser.parse_args()
    if args.native:
        os.environ["FRAME_NATIVE_AFTER"] = "1"
    warnings.simplefilter("ignore")  # (NaN and overflow warnings of examples drawn at random)
    from tests.autodiff import _any_batch as harness

    compile_fn = None
    if args.native:
        import frame_core as fc

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
    findings = []
    for level in [int(o) for o in args.opt.split(",")]:
        for op, index, kind, size in harness.cases(ops, kinds, first_only=args.first):
            outcome = harness.check(op, index, kind, size, options={"opt_level": level}, compile_fn=compile_fn)
            counts[outcome.verdict] += 1
            if outcome.verdict == "refused":
                refusals[(kind, outcome.detail[1:].split("]")[0])] += 1
            elif outcome.verdict == "no-graph":
                no_graph[(kind, outcome.detail)] += 1
            elif outcome.verdict not in harness.ACCEPTED + harness.FINDINGS:
                findings.append(f"opt {level}: {op} example {index} {kind} at batch {size}: unknown verdict "
                                f"{outcome.verdict!r}")
            if outcome.verdict in harness.FINDINGS:
                findings.append(f"opt {level}: {op} example {index} {kind} at batch {size}: {outcome.verdict}: "
                                f"{outcome.detail[:300]}")
    print(f"{sum(counts.values())} cases in {time.perf_counter() - start:.0f} s: "
          + ", ".join(f"{v} {k}" for k, v in counts.most_common()))
    print("refusals (kind, class): " + "; ".join(f"{k[0]} {k[1]}: {v}" for k, v in sorted(refusals.items())))
    print("no graph (kind, why): " + "; ".join(f"{k[0]} {k[1]}: {v}" for k, v in sorted(no_graph.items())))
    for line in findings:
        print("FINDING", line)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
