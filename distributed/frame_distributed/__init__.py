"""frame-distributed: data-parallel training and parallel evaluation of frame graphs across processes.

Communication goes through a small ``Communicator`` protocol with two
implementations: ``MPICommunicator`` (mpi4py; ``pip install
'frame-distributed[mpi]'``) and ``LocalCommunicator`` (one process, no MPI).
``default_communicator()`` picks MPI when ``mpiexec``/``srun`` started the
process, so one script runs both ways::

    comm = default_communicator()
    trainer = DataParallelTrainer(loss_fn, params, lr=0.02, comm=comm)
    x_shard, t_shard = split_by_rank(x, t, comm=comm)
    for _ in range(steps):
        loss = trainer.train_step(x_shard, t_shard)

``frame_core`` never imports this package; this package imports mpi4py only
when an ``MPICommunicator`` is created.
"""

from __future__ import annotations

import os

from .checkpoint import CHECKPOINT_FORMAT, LEGACY_FORMAT, Checkpoint, load_checkpoint, save_checkpoint
from .communicator import (OVERRIDE_VARIABLE, Communicator, LocalCommunicator, default_communicator,
                           launched_by_mpi)
from .data import shard_range, split_by_rank
from .errors import CheckpointError, CheckpointWriteError, DistributedError, MPIUnavailableError
from .evaluate import parallel_evaluate
from .mpi import MPICommunicator, abort_before_a_communicator
from .trainer import DataParallelTrainer, StepStats

__version__ = "0.1.0"

if launched_by_mpi() and os.environ.get(OVERRIDE_VARIABLE, "").strip().lower() != "local":
    # a rank failing before it makes a communicator would otherwise leave the others waiting forever
    abort_before_a_communicator()

__all__ = [
    "__version__",
    # communication
    "Communicator", "LocalCommunicator", "MPICommunicator", "default_communicator", "launched_by_mpi",
    # training and evaluation
    "DataParallelTrainer", "StepStats", "parallel_evaluate", "shard_range", "split_by_rank",
    # checkpoints
    "Checkpoint", "save_checkpoint", "load_checkpoint", "CHECKPOINT_FORMAT", "LEGACY_FORMAT",
    # errors
    "DistributedError", "MPIUnavailableError", "CheckpointError", "CheckpointWriteError",
]
