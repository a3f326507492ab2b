"""Learning-rate schedules: plain functions of the update count, evaluated in Python once per step.

A schedule maps ``count`` (0 for the first update, as optax counts) to a learning rate. The training step
feeds its value as the graph's runtime ``lr`` input, so a schedule never recompiles anything. Any callable
``count -> float`` is a schedule; these are the common ones (optax's and torch.optim.lr_scheduler's shapes).
``evaluate(schedule, count)`` is where a value is checked: NaN, infinite or negative is a ``ScheduleError``
naming the step.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import numpy as np

from .errors import OptimizerError, ScheduleError

__all__ = ["Schedule", "as_schedule", "evaluate", "constant", "step_decay", "exponential", "cosine",
           "warmup_cosine", "piecewise", "linear"]


class Schedule:
    """A named function of the update count (``schedule(count) -> float``)."""

    __slots__ = ("fn", "description")

    def __init__(self, fn: Callable[[int], float], description: str) -> None:
        self.fn = fn
        self.description = description

    def __call__(self, count: int) -> float:
        return self.fn(count)

    def __repr__(self) -> str:
        return self.description


def _rate(value: Any, what: str) -> float:
    # numbers.Real / numbers.Integral: numpy scalars (np.float32(1e-3), np.int64(10)) count; booleans do not
    if not _real(value) or not math.isfinite(value) or value < 0:
        raise OptimizerError(f"{what} must be a finite number >= 0, got {value!r:.40}")
    return float(value)


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _integral(value: Any) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _count(value: Any, what: str, minimum: int = 1) -> int:
    if not _integral(value) or value < minimum:
        raise OptimizerError(f"{what} must be an int >= {minimum}, got {value!r:.40}")
    return int(value)


def as_schedule(learning_rate: Any) -> Callable[[int], float]:
    """A number becomes ``constant(number)`` (refused at once when negative or not finite); a callable is kept."""
    if callable(learning_rate):
        return learning_rate
    try:
        return constant(learning_rate)
    except OptimizerError:
        raise OptimizerError(f"the learning rate is a finite number >= 0 or a schedule (a function of the update "
                             f"count, e.g. frame_train.cosine(1e-3, 1000)), got {type(learning_rate).__name__} "
                             f"{learning_rate!r:.40}") from None


def evaluate(schedule: Callable[[int], float], count: int) -> float:
    """``schedule(count)`` as a float; ``ScheduleError`` naming the step when it is not a finite number >= 0."""
    try:
        value = schedule(count)
    except Exception as exc:  # noqa: BLE001 - a user's function: say where it failed
        raise ScheduleError(f"the learning-rate schedule {schedule!r:.60} failed at step {count}: "
                            f"{type(exc).__name__}: {exc}") from exc
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ScheduleError(f"the learning-rate schedule {schedule!r:.60} returned {type(value).__name__} "
                            f"{value!r:.40} at step {count}; it must return a number") from None
    if not math.isfinite(rate) or rate < 0:
        raise ScheduleError(f"the learning-rate schedule {schedule!r:.60} returned {rate!r} at step {count}; the "
                            "learning rate must be a finite number >= 0")
    return rate


def constant(value: float) -> Schedule:
    """The same rate at every step."""
    rate = _rate(value, "constant(value)")
    return Schedule(lambda count: rate, f"constant({rate!r})")


def step_decay(init_value: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """``init_value * gamma ** (count // step_size)`` (torch's StepLR)."""
    rate = _rate(init_value, "step_decay(init_value)")
    size = _count(step_size, "step_decay(step_size)")
    factor = _rate(gamma, "step_decay(gamma)")
    return Schedule(lambda count: rate * factor ** (count // size), f"step_decay({rate!r}, {size}, gamma={factor!r})")


def exponential(init_value: float, gamma: float) -> Schedule:
    """``init_value * gamma ** count`` (torch's ExponentialLR)."""
    rate = _rate(init_value, "exponential(init_value)")
    factor = _rate(gamma, "exponential(gamma)")
    return Schedule(lambda count: rate * factor ** count, f"exponential({rate!r}, gamma={factor!r})")


def cosine(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    """Half a cosine from ``init_value`` down to ``alpha * init_value`` over ``decay_steps``, then flat
    (optax's cosine_decay_schedule; torch's CosineAnnealingLR with ``eta_min = alpha * init_value``)."""
    rate = _rate(init_value, "cosine(init_value)")
    steps = _count(decay_steps, "cosine(decay_steps)")
    floor = _rate(alpha, "cosine(alpha)")

    def fn(count: int) -> float:
        fraction = min(count, steps) / steps
        return rate * ((1 - floor) * 0.5 * (1 + math.cos(math.pi * fraction)) + floor)
    return Schedule(fn, f"cosine({rate!r}, {steps}, alpha={floor!r})")


def linear(init_value: float, end_value: float, transition_steps: int) -> Schedule:
    """From ``init_value`` to ``end_value`` in a straight line over ``transition_steps``, then flat."""
    start = _rate(init_value, "linear(init_value)")
    end = _rate(end_value, "linear(end_value)")
    steps = _count(transition_steps, "linear(transition_steps)")
    return Schedule(lambda count: start + (end - start) * min(count, steps) / steps,
                    f"linear({start!r}, {end!r}, {steps})")


def warmup_cosine(peak_value: float, warmup_steps: int, decay_steps: int, init_value: float = 0.0,
                  end_value: float = 0.0) -> Schedule:
    """Linear warm-up from ``init_value`` to ``peak_value`` over ``warmup_steps``, then a cosine down to
    ``end_value`` at ``decay_steps`` (counted from the start, as optax's warmup_cosine_decay_schedule)."""
    peak = _rate(peak_value, "warmup_cosine(peak_value)")
    warm = _count(warmup_steps, "warmup_cosine(warmup_steps)", 0)
    total = _count(decay_steps, "warmup_cosine(decay_steps)")
    if total <= warm:
        raise OptimizerError(f"warmup_cosine(decay_steps={total}) counts from the start and must exceed "
                             f"warmup_steps={warm}")
    start = _rate(init_value, "warmup_cosine(init_value)")
    end = _rate(end_value, "warmup_cosine(end_value)")

    def fn(count: int) -> float:
        if count < warm:
            return start + (peak - start) * count / warm
        fraction = min(count - warm, total - warm) / (total - warm)
        return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * fraction))
    return Schedule(fn, f"warmup_cosine({peak!r}, {warm}, {total}, init_value={start!r}, end_value={end!r})")


def piecewise(values: Sequence[float], boundaries: Sequence[int]) -> Schedule:
    """``values[i]`` for ``boundaries[i-1] <= count < boundaries[i]``: one more value than boundaries, the
    boundaries increasing (``piecewise([1e-2, 1e-3, 1e-4], [100, 200])``)."""
    rates = [_rate(v, f"piecewise(values[{i}])") for i, v in enumerate(values)]
    edges = [_count(b, f"piecewise(boundaries[{i}])", 0) for i, b in enumerate(boundaries)]
    if len(rates) != len(edges) + 1:
        raise OptimizerError(f"piecewise takes one more value than boundaries, got {len(rates)} values and "
                             f"{len(edges)} boundaries")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise OptimizerError(f"piecewise boundaries must increase, got {edges}")
    import bisect

    return Schedule(lambda count: rates[bisect.bisect_right(edges, count)], f"piecewise({rates}, {edges})")
