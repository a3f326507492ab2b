"""Start-up cost: `import frame_core`, and import + registry load + closure audit, against `import numpy`.

Each figure is the median wall time of fresh interpreter processes (the
interpreter's own start-up included, as a user sees it). Targets (issue 2):
import within 1.2x of numpy's, import + registry + audit within 1.5x.
Also times `frame ops list` and `frame audit gradients` (issue 5: within 2.5x).

    python benchmarks/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


# Byte-code caching on, as on a user's machine (some sandboxes set PYTHONDONTWRITEBYTECODE, which
# would make every run recompile frame's sources while numpy's caches came with its wheel).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
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
    results = {name: wall(argv, args.runs) for name, argv in cases.items()}
    base = results["import numpy"]
    print(f"{'case':28} {'median ms':>10} {'vs numpy':>9}   (median of {args.runs} fresh processes)")
    for name, t in results.items():
        print(f"{name:28} {t * 1e3:10.1f} {t / base:8.2f}x")


if __name__ == "__main__":
    main()
