"""The errors frame-train raises on purpose: each a ``FrameError``, so ``except FrameError`` catches them all."""

from __future__ import annotations

from frame_core import FrameError, ParameterError  # the core's: a tree that does not match a graph

__all__ = ["OptimizerError", "ScheduleError", "NonFiniteLossError", "ParameterError"]


class OptimizerError(FrameError, ValueError):
    """An optimizer or transform built or used with a wrong argument (a negative rate, a bad mask...)."""


class ScheduleError(OptimizerError):
    """A learning-rate schedule that returned something other than a finite, non-negative number at some step."""


class NonFiniteLossError(FrameError, FloatingPointError):
    """The loss became NaN or infinite during ``fit(stop_on_nan=True)``; the message names the step."""

    def __init__(self, message: str, step: int, epoch: int, loss: float) -> None:
        super().__init__(message)
        self.step, self.epoch, self.loss = step, epoch, loss
