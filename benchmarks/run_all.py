"""Run every benchmark script in this folder, one after the other (`make bench`).

Each script prints medians and ratios against a hand-written numpy reference
(and PyTorch where installed). Machines are noisy: run twice and compare.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SCRIPTS = ["startup.py", "elementwise_chain.py", "mlp_step.py", "backward_scaling.py", "classification_step.py",
           "fft_spectral.py", "fft_fno_step.py", "sequence_ops.py"]


def main() -> int:
    status = 0
    for name in SCRIPTS:
        print(f"\n=== {name} ===", flush=True)
        status |= subprocess.run([sys.executable, str(HERE / name)]).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
