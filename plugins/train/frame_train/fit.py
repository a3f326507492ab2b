"""``fit``: the training loop users expect, over a ``TrainStep``.

Batches come from arrays sliced along axis 0 (shuffled with a seeded numpy ``Generator`` when given, the
short last batch kept unless ``drop_last``) or from any iterable of batches. Every step's loss is recorded;
``metrics_path`` receives one JSON object per step (``{"epoch", "step", "loss", "lr", "time"}``) and one per
epoch (``{"epoch", "loss" (mean), "steps", "seconds"}``), which ``frame plot`` draws. The progress bar
(rich) is redrawn at most ``refresh_per_second`` times, from a counter the step only increments, so it costs
the step nothing measurable. ``stop_on_nan`` raises ``NonFiniteLossError`` naming the step and epoch at the
first NaN or infinite loss.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import NonFiniteLossError, OptimizerError
from .schedules import _integral
from .step import TrainStep

__all__ = ["fit", "History", "batches"]


@dataclass
class History:
    """What ``fit`` ran: every step's loss, each epoch's mean loss and the wall time."""

    losses: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.losses)


def batches(data: Sequence[np.ndarray], batch_size: int, shuffle: np.random.Generator | None = None,
            drop_last: bool = False) -> Iterable[tuple[np.ndarray, ...]]:
    """One epoch of batches of the arrays ``data`` (same length along axis 0)."""
    n = len(data[0])
    order = shuffle.permutation(n) if shuffle is not None else None
    stop = n - n % batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        if order is None:
            yield tuple(a[start:start + batch_size] for a in data)
        else:
            index = order[start:start + batch_size]
            yield tuple(a[index] for a in data)


def _arrays(data: Any) -> list[np.ndarray] | None:
    """``data`` as a list of arrays of one length along axis 0, or ``None`` for an iterable of batches."""
    if isinstance(data, np.ndarray):
        return [data]
    if isinstance(data, (tuple, list)) and data and all(isinstance(a, np.ndarray) for a in data):
        lengths = {len(a) if a.ndim else -1 for a in data}
        if len(lengths) != 1 or -1 in lengths:
            raise OptimizerError(f"fit(data=...) arrays must share their length along axis 0 (one row per "
                                 f"example), got shapes {[list(a.shape) for a in data]}")
        return list(data)
    return None


class _Progress:
    """A rich progress bar refreshed by its own thread (at most ``rate`` times a second), or nothing."""

    def __init__(self, enabled: bool, total: int | None, epochs: int, rate: float) -> None:
        self.bar: Any = None
        self.next, self.interval = 0.0, 1.0 / rate
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("epoch {task.fields[epoch]}/" + str(epochs)), BarColumn(), MofNCompleteColumn(),
                            TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn(),
                            refresh_per_second=rate, transient=False)
        self.task = self.bar.add_task("fit", total=total, epoch=1, loss="-")

    def __enter__(self) -> "_Progress":
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def show(self, steps: int, epoch: int, loss: float, now: float) -> None:
        """Hand the numbers to rich at most ``rate`` times a second (its refresh thread draws them)."""
        if now >= self.next:
            self.next = now + self.interval
            self.bar.update(self.task, completed=steps, epoch=epoch, loss=f"{loss:.4g}")

    def close(self, steps: int, epoch: int, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=steps, epoch=epoch, loss=f"{loss:.4g}")


def fit(step: TrainStep, data: Any, epochs: int = 1, batch_size: int | None = None, *,
        shuffle: np.random.Generator | None = None, drop_last: bool = False,
        metrics_path: str | Path | None = None, progress: bool = True, stop_on_nan: bool = True,
        callback: Callable[[int, float], Any] | None = None, refresh_per_second: float = 10.0) -> History:
    """Train ``step`` for ``epochs`` passes over ``data``; return the ``History``.

    ``data`` is an array or a tuple of arrays (sliced into batches of ``batch_size`` along axis 0, shuffled by
    ``shuffle``, the short last batch kept unless ``drop_last``), or a function ``epoch -> iterable of batches``
    (each a tuple of arrays, passed to ``step(*batch)``). ``callback(step_number, loss)`` runs after every step.
    """
    if not isinstance(step, TrainStep):
        raise OptimizerError(f"fit(step, ...) takes a frame_train.TrainStep, got {type(step).__name__}")
    if not _integral(epochs) or epochs < 0:
        raise OptimizerError(f"fit(epochs=) is an int >= 0, got {epochs!r:.30}")
    epochs = int(epochs)
    if shuffle is not None and not isinstance(shuffle, np.random.Generator):
        raise OptimizerError(f"fit(shuffle=) takes a seeded numpy Generator (np.random.default_rng(0)) or None, got "
                             f"{type(shuffle).__name__}: a seed makes the batches reproducible")
    arrays = _arrays(data)
    if arrays is not None:
        if not _integral(batch_size) or batch_size < 1:
            raise OptimizerError(f"fit(batch_size=) is an int >= 1 when data are arrays, got {batch_size!r:.30}")
        batch_size = int(batch_size)
        n = len(arrays[0])
        per_epoch: int | None = n // batch_size if drop_last else -(-n // batch_size)
        if per_epoch == 0 and epochs:  # silently training nothing is never what was meant
            raise OptimizerError(f"fit(data=...) gives no batch: {n} example{'s' if n != 1 else ''}"
                                 + (f", fewer than batch_size={batch_size} with drop_last=True" if n else "")
                                 + "; pass more data" + (", a smaller batch_size or drop_last=False" if n else ""))

        def epoch_batches(epoch: int) -> Iterable[tuple[np.ndarray, ...]]:
            return batches(arrays, batch_size, shuffle, drop_last)
    elif callable(data):
        per_epoch, epoch_batches = None, data
    else:
        raise OptimizerError(f"fit(data=) is an array, a tuple of arrays or a function epoch -> iterable of batches, "
                             f"got {type(data).__name__}")
    history = History()
    try:
        sink = open(metrics_path, "w", encoding="utf-8") if metrics_path is not None else None  # noqa: SIM115
    except OSError as exc:  # before any step: a typo in the folder must not cost a training run
        raise OptimizerError(f"fit(metrics_path={str(metrics_path)!r}) cannot be written: "
                             f"{exc.strerror or exc}; give a file in an existing folder") from None
    start = time.perf_counter()
    try:
        with _Progress(progress, per_epoch * epochs if per_epoch is not None else None, epochs,
                       refresh_per_second) as bar:
            for epoch in range(1, epochs + 1):
                epoch_start, first = time.perf_counter(), len(history.losses)
                for batch in epoch_batches(epoch):
                    lr = step.optimizer.learning_rate(step.count) if step.optimizer.schedule is not None else None
                    loss = step(*batch) if isinstance(batch, (tuple, list)) else step(batch)
                    history.losses.append(loss)
                    number = len(history.losses)
                    if stop_on_nan and not math.isfinite(loss):
                        raise NonFiniteLossError(f"the loss is {loss} at step {number} (epoch {epoch}); training "
                                                 "stopped (fit(stop_on_nan=False) carries on). Lower the learning "
                                                 "rate, clip the gradients (clip_by_global_norm) or check the data",
                                                 number, epoch, loss)
                    now = time.perf_counter()
                    if sink is not None:
                        sink.write(json.dumps({"epoch": epoch, "step": number, "loss": loss, "lr": lr,
                                               "time": round(now - start, 6)}) + "\n")
                    if bar.bar is not None:
                        bar.show(number, epoch, loss, now)
                    if callback is not None:
                        callback(number, loss)
                done = history.losses[first:]
                mean = float(np.mean(done)) if done else math.nan
                history.epoch_losses.append(mean)
                if sink is not None:
                    sink.write(json.dumps({"epoch": epoch, "loss": mean, "steps": len(done),
                                           "seconds": round(time.perf_counter() - epoch_start, 6)}) + "\n")
                    sink.flush()
            if history.losses:
                bar.close(len(history.losses), epochs, history.losses[-1])
    finally:
        history.seconds = time.perf_counter() - start
        if sink is not None:
            sink.close()
    return history
