"""Errors of frame-distributed; all subclass ``frame_core.FrameError`` so one ``except`` catches every frame error."""

from __future__ import annotations

from frame_core import CheckpointError as _CoreCheckpointError, FrameError

__all__ = ["DistributedError", "MPIUnavailableError", "CheckpointError", "CheckpointWriteError"]


class DistributedError(FrameError):
    """A distributed run was set up or called in a way that cannot work (the message says what to change)."""


class MPIUnavailableError(DistributedError, ImportError):
    """MPI was asked for (``MPICommunicator`` or a run under ``mpiexec``) but ``mpi4py`` cannot be imported."""


class CheckpointError(DistributedError, _CoreCheckpointError):
    """A checkpoint file is missing a field or does not match the parameters it should restore (also the core's
    ``frame_core.CheckpointError``: the file format is the core's)."""


class CheckpointWriteError(CheckpointError, OSError):
    """The file system refused a checkpoint write (an unwritable or missing folder, a full disk); the previous
    checkpoint is unchanged. Also an ``OSError`` (with the original ``errno``), so either ``except`` catches it."""
