"""Start-up cost: `import frame_core`, and import + registry load + closure audit, against `import numpy`.

Each figure is the median wall time of fresh interpreter processes (the
interpreter's own start-up included, as a user sees it). Targets (issue 2):
import within 1.2x of numpy's, import + registry + audit within 1.5x.
Also times `frame ops list` and `frame audit gradients` (issue 21: within 2.0x and 2.5x; the audit always
audits afresh).

    python benchmarks/startup.py [--runs N] [--instructions] [--phases]

``--instructions`` also counts the instructions each case executes (valgrind's cachegrind, one run each,
PYTHONHASHSEED=0): unlike times, the count does not move with the load of a shared machine, so it tells
whether a change made start-up cheaper when two-core machines shared by several people make wall and CPU
times swing by 20%. It counts work, not waiting (file reads, page faults): a ratio of counts is larger than
the ratio of times for Python-heavy cases such as the audit. ``--phases`` splits the audit command's CPU time
into its phases (imports, packs, the deep audit, the report).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time


# Byte-code caching on, as on a user's machine (some sandboxes set PYTHONDONTWRITEBYTECODE, which
# would make every run recompile frame's sources while numpy's caches came with its wheel).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def interleaved(cases: dict[str, list[str]], runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU seconds (user + system of the child) of each command, the cases run round-robin so
    that the machine's load hits all alike. On a machine with more runnable processes than cores the wall
    time also counts the waits for a core; the CPU time does not."""
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            c0, t0 = children_cpu(), time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(children_cpu() - c0)
    return ({k: statistics.median(v) for k, v in walls.items()}, {k: statistics.median(v) for k, v in cpus.items()})


def instructions(argv: list[str]) -> int | None:
    """Instructions executed by ``argv`` under cachegrind (None without valgrind or when it fails)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    env = {**ENV, "PYTHONHASHSEED": "0"}  # set and dict orders, and with them the work, are then the same each run
    done = subprocess.run([valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           *argv], capture_output=True, text=True, env=env)
    for line in done.stderr.splitlines():
        if "I" in line and "refs:" in line:
            return int(line.split("refs:")[1].replace(",", "").split()[0])
    return None


#: What `frame audit gradients` does, phase by phase, in one fresh process: the CPU seconds after each.
PHASES = """
import sys, time, gc
marks = [("interpreter", time.process_time())]
import numpy
marks.append(("import numpy", time.process_time()))
import frame_core
from frame_core.cli import audit, _common
marks.append(("import frame_core + CLI", time.process_time()))
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.closure import run_closure_audit
reg = load_registry(strict=False, audit=False)
marks.append(("packs: discover, import, register", time.process_time()))
run_closure_audit(reg, deep=True, collect=False)
marks.append(("deep closure audit", time.process_time()))
report = audit.collect_audit(reg, order=1, numeric=False, pack=None, strict=False)
text = audit._render_text(report)
marks.append(("report and its text", time.process_time()))
gc.freeze()
print(";".join(f"{name}={t}" for name, t in marks))
"""


def phases(py: str, runs: int, cpu_base: float) -> None:
    """Median CPU milliseconds of each phase of the audit (process start-up up to the first mark included)."""
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        out = subprocess.run([py, "-c", PHASES], check=True, capture_output=True, text=True, env=ENV).stdout
        marks = [(name, float(t)) for name, t in (item.split("=") for item in out.strip().split(";"))]
        for (name, t), (_, before) in zip(marks, [("", 0.0), *marks]):
            samples.setdefault(name, []).append(t - before)
    print(f"{'frame audit gradients, by phase':36} {'cpu ms':>8} {'x numpy':>8}   (medians of {runs} processes; "
          "exit not included)")
    for name, values in samples.items():
        ms = statistics.median(values)
        print(f"  {name:34} {ms * 1e3:8.1f} {ms / cpu_base:7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    parser.add_argument("--phases", action="store_true",
                        help="also split `frame audit gradients` into its phases (CPU ms, medians of --runs processes)")
    args = parser.parse_args()
    py = sys.executable
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "import numpy": [py, "-c", "import numpy"],
        "import frame_core": [py, "-c", "import frame_core"],
        "import + registry + audit": [py, "-c", "import frame_core; frame_core.registry()"],
    }
    frame = shutil.which("frame", path=os.path.dirname(py))
    if frame and subprocess.run([frame, "--version"], capture_output=True).returncode == 0:
        cases["frame ops list"] = [frame, "ops", "list"]
        cases["frame audit gradients"] = [frame, "audit", "gradients"]
    for argv in cases.values():  # warm the file cache and write byte-code caches
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    results, cpu = interleaved(cases, args.runs)
    base, cpu_base = results["import numpy"], cpu["import numpy"]
    load = " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"load average {load}; the start-up audit store (FRAME_AUDIT_CACHE) is "
          f"{'off' if os.environ.get('FRAME_AUDIT_CACHE', '1') == '0' else 'on'}")
    print(f"{'case':28} {'wall ms':>9} {'vs numpy':>9} {'cpu ms':>9} {'vs numpy':>9}   (medians of {args.runs} "
          "interleaved fresh processes)")
    for name, t in results.items():
        print(f"{name:28} {t * 1e3:9.1f} {t / base:8.2f}x {cpu[name] * 1e3:9.1f} {cpu[name] / cpu_base:8.2f}x")
    if args.phases:
        phases(py, args.runs, cpu_base)
    if args.instructions:
        counts = {name: instructions(argv) for name, argv in cases.items()}
        if counts["import numpy"] is None:
            print("instruction counts: valgrind is not installed (or failed)")
            return
        print(f"{'case':28} {'instr. (M)':>10} {'vs numpy':>9}   (cachegrind, one run each)")
        for name, n in counts.items():
            if n is not None:
                print(f"{name:28} {n / 1e6:10.0f} {n / counts['import numpy']:8.2f}x")


if __name__ == "__main__":
    main()
