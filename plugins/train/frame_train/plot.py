"""``frame plot metrics.jsonl -o curve.png``: the loss curve of a ``fit`` run (matplotlib, the ``plot`` extra).

Reads the JSON lines ``fit(metrics_path=...)`` writes: per-step records (``step``, ``loss``, ``lr``) become the
loss curve (log scale when it spans more than two decades), per-epoch records (``epoch``, ``loss``, no
``step``) the epoch means, and the learning rate, when recorded, a second panel.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .errors import OptimizerError

__all__ = ["read_metrics", "plot_metrics", "MISSING_MATPLOTLIB"]

MISSING_MATPLOTLIB = ("frame plot needs matplotlib, which frame-train keeps optional: "
                      "pip install 'frame-train[plot]' (or pip install matplotlib)")


def read_metrics(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(step records, epoch records)`` of a metrics file; ``OptimizerError`` naming the line of a bad one."""
    steps: list[dict[str, Any]] = []
    epochs: list[dict[str, Any]] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise OptimizerError(f"cannot read the metrics file {str(path)!r}: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise OptimizerError(f"{path}:{number}: not a JSON object ({exc.msg}); frame plot reads the JSON lines "
                                 "fit(metrics_path=...) writes") from None
        if not isinstance(record, dict) or not isinstance(record.get("loss"), (int, float, type(None))):
            raise OptimizerError(f"{path}:{number}: expected an object with a numeric 'loss', got {line[:60]!r}")
        (steps if "step" in record else epochs).append(record)
    if not steps and not epochs:
        raise OptimizerError(f"{path} holds no metrics (fit(metrics_path=...) writes one line per step)")
    return steps, epochs


def plot_metrics(path: str | Path, output: str | Path, title: str | None = None) -> Path:
    """Draw ``path``'s loss curve (and learning rate) into the image ``output``; return its path."""
    try:
        import matplotlib
    except ImportError:
        raise OptimizerError(MISSING_MATPLOTLIB) from None
    matplotlib.use("Agg")  # files only: never open a window, work without a display
    import matplotlib.pyplot as plt

    steps, epochs = read_metrics(path)
    rates = [(r["step"], r["lr"]) for r in steps if isinstance(r.get("lr"), (int, float))]
    fig, axes = plt.subplots(2 if rates else 1, 1, figsize=(7, 6 if rates else 4), sharex=True, squeeze=False)
    ax = axes[0][0]
    finite = [(r["step"], r["loss"]) for r in steps if r["loss"] is not None and math.isfinite(r["loss"])]
    if finite:
        ax.plot(*zip(*finite), lw=0.8, alpha=0.6, label="loss per step")
    if epochs and steps:
        ends, total = [], 0
        per_epoch = {r["epoch"]: r for r in steps}
        for r in epochs:
            last = per_epoch.get(r["epoch"])
            total = last["step"] if last else total
            if r["loss"] is not None and math.isfinite(r["loss"]):
                ends.append((total, r["loss"]))
        if ends:
            ax.plot(*zip(*ends), "o-", lw=1.5, label="epoch mean")
    elif epochs:
        ax.plot([r["epoch"] for r in epochs], [r["loss"] for r in epochs], "o-", label="epoch mean")
    values = [v for _, v in finite] or [r["loss"] for r in epochs if r["loss"]]
    if values and min(values) > 0 and max(values) / min(values) > 100:
        ax.set_yscale("log")
    ax.set_ylabel("loss")
    ax.legend()
    ax.set_title(title or Path(path).name)
    if rates:
        axes[1][0].plot(*zip(*rates), color="tab:green")
        axes[1][0].set_ylabel("learning rate")
    axes[-1][0].set_xlabel("step" if steps else "epoch")
    fig.tight_layout()
    target = Path(output)
    fig.savefig(target)
    plt.close(fig)
    return target
