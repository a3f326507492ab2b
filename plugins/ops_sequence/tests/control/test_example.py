"""``examples/train_rnn.py`` (run by ``make demo``) trains: its loss falls by more than half."""

from __future__ import annotations

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[4] / "examples" / "train_rnn.py"


def test_the_rnn_example_learns_the_delayed_copy():
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps", "120"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    first, last = (float(v) for v in summary.split("loss ")[1].split(" (")[0].split(" -> "))
    assert last < 0.1 * first, summary
