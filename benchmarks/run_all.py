"""Run every benchmark script in this folder, one after the other (`make bench`).

Each script prints medians and ratios against a hand-written numpy reference
(and PyTorch where installed). Every process runs with glibc's heap trimming
held off (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``MALLOC_MMAP_THRESHOLD_``; see ``_env.py``) and prints the BLAS library and
its thread count. The PINN step runs twice: with the BLAS's default threads
and with one (small matrices on shared cores time far more steadily with
one). Machines are noisy: run twice and compare.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _env import MALLOC_SETTINGS  # noqa: E402

SCRIPTS = [["startup.py"], ["elementwise_chain.py"], ["native_chain.py"], ["mlp_step.py"], ["pinn_step.py"],
           ["pinn_step.py", "--blas-threads", "1"], ["backward_scaling.py"], ["compile_scaling.py"],
           ["classification_step.py"], ["fft_spectral.py"], ["fft_fno_step.py"], ["sequence_ops.py"],
           ["control_flow_rnn.py"], ["kernel_checks.py"], ["distributed_mlp.py"],
           ["nn_ops.py"], ["digits_cnn.py", "--epochs", "3"], ["train_step.py"]]


def main() -> int:
    status = 0
    env = {**os.environ, **MALLOC_SETTINGS}
    for argv in SCRIPTS:
        print(f"\n=== {' '.join(argv)} ===", flush=True)
        status |= subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], env=env).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
