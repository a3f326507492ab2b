"""``DataParallelTrainer``: synchronous data-parallel SGD over a ``Communicator``.

One step on every rank:

1. run the compiled training graph (``build_backward_graph`` of the loss,
   ARCH-065) on this rank's shard of ``n_r`` samples: mean loss ``L_r`` and
   its gradients ``g_r``;
2. write ``n_r * g_r``, ``n_r * L_r``, ``n_r`` and a failure flag (1 if
   step 1 raised on this rank) into one preallocated flat buffer (the same
   buffer every step);
3. one ``allreduce_`` of that buffer: every rank now holds ``sum n_r g_r``,
   ``sum n_r L_r``, ``N = sum n_r`` and the number of ranks that failed; if
   any did, every rank raises (the failing ones their own error) and none
   updates, so a job that catches the error stays in step;
4. divide by ``N`` and run the compiled SGD update graph
   (``build_sgd_update_graph``) on the parameters and those gradients.

Why step 4 gives the full-batch gradient exactly: the loss is a mean over
samples, ``L = (1/N) sum_i l_i``, so ``grad L = (1/N) sum_i grad l_i
= (1/N) sum_r n_r * [(1/n_r) sum_{i in shard r} grad l_i] = (1/N) sum_r n_r g_r``.
Weighting each shard's mean gradient by its sample count makes unequal
shards (and empty ones) exact; averaging the ``g_r`` unweighted would not be.
Carrying ``n_r`` in the same buffer means no rank needs to know the others'
shard sizes and no second collective is needed.

Every rank starts from rank 0's parameters (broadcast in the constructor and
on ``resume``) and applies the same update to the same reduced gradient, so
the ranks' parameters stay identical.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import frame_core as fc

from .checkpoint import _check_path, load_checkpoint, save_checkpoint
from .communicator import Communicator, broadcast_text, check_same_on_every_rank, default_communicator, require_communicator
from .errors import CheckpointError, DistributedError

__all__ = ["DataParallelTrainer", "StepStats"]


@dataclass
class StepStats:
    """Wall time spent in each phase of ``train_step`` since the trainer was made (or ``reset_stats``)."""

    steps: int = 0
    compute_s: float = 0.0    # training graph and packing the gradient buffer
    allreduce_s: float = 0.0  # the one collective (includes waiting for slower ranks)
    update_s: float = 0.0     # scaling and the SGD update graph

    @property
    def total_s(self) -> float:
        return self.compute_s + self.allreduce_s + self.update_s

    @property
    def allreduce_share(self) -> float:
        """Fraction of the step time spent in ``allreduce_``."""
        return self.allreduce_s / self.total_s if self.total_s else 0.0


class DataParallelTrainer:
    """Train ``params`` by SGD on a mean loss, each rank on its own shard of every batch.

    ``loss`` is a Python function ``loss(*data, *params) -> scalar tensor``
    written with ``frame_core.ops`` (a *mean* over the samples on axis 0 of
    the data, such as ``ops.mse_loss``), traced once per distinct shard shape;
    or a ``Graph`` with those inputs whose output 0 is the loss (its shapes
    are then fixed). ``params`` are numpy arrays of one float dtype (float32
    or float64); every rank passes arrays of the same shapes and the trainer
    starts from rank 0's values (copies; the caller's arrays are not changed).
    ``comm`` defaults to ``default_communicator()``.

    Constructing the trainer is collective (it broadcasts), as are
    ``train_step`` and ``resume``: every rank calls them in the same order.
    """

    def __init__(self, loss: Callable[..., Any] | fc.Graph, params: Sequence[np.ndarray], lr: float, *,
                 comm: Communicator | None = None) -> None:
        if not (callable(loss) or isinstance(loss, fc.Graph)):
            raise DistributedError(f"loss must be a function loss(*data, *params) or a frame Graph, got "
                                   f"{type(loss).__name__}")
        self.comm = default_communicator() if comm is None else require_communicator(comm, "DataParallelTrainer")
        self._loss = loss
        # Collective: every rank checks its own parameters, then all compare what they were given, so a mistake
        # on one rank, or ranks passing different shapes, raises on every rank instead of failing (or silently
        # mixing layouts) in the broadcast and the reductions.
        try:
            self._check_params(params)
        except DistributedError as exc:
            problem: DistributedError | None = exc
            layout = f"invalid parameters ({exc})"
        else:
            problem = None
            layout = "(" + ", ".join(_describe(p) for p in params) + ")"
        # the learning rate too: ranks updating by different rates would drift apart without a word
        # as a float, so that 0.1 on one rank and np.float64(0.1) on another agree
        rate = repr(float(lr)) if isinstance(lr, (int, float, np.floating, np.integer)) else repr(lr)
        check_same_on_every_rank(self.comm, f"{layout} at learning rate {rate}", "the parameters (or learning rates)",
                                 "Every rank must pass arrays of the same shapes and one dtype, in the same order "
                                 "(their gradients are summed elementwise in one buffer), and the same lr: build "
                                 "them the same way on every rank (rank 0's values are used)")
        if problem is not None:
            raise problem
        self.dtype: np.dtype = params[0].dtype
        self.param_types = [type_of(p) for p in params]
        self._update = fc.compile(fc.build_sgd_update_graph(self.param_types, lr))
        self.lr = lr
        sizes = [p.size for p in params]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        n = self._offsets[-1]
        # [ n_r * gradients... | n_r * loss | n_r | failed ]: one buffer, one collective per step
        self._buffer = np.zeros(n + 3, self.dtype)
        self._gradients = [self._buffer[a:b].reshape(p.shape) for a, b, p in zip(self._offsets, self._offsets[1:], params)]
        self._training: dict[tuple[fc.TensorType, ...], fc.Executable] = {}
        self._params = self._broadcast_params(params)
        self.step = 0
        self.stats = StepStats()

    # -- the step ------------------------------------------------------------------------------------
    def train_step(self, *data: np.ndarray) -> float:
        """One SGD step on this rank's shard ``data`` (arrays with the samples on axis 0; the shard may be
        empty); returns the mean loss over all ranks' samples, before the update."""
        buf = self._buffer
        t0 = time.perf_counter()
        failure: Exception | None = None
        try:
            n = self._shard_size(data)
            if n:
                outputs = self._training_executable(data).run([*data, *self._params])
                loss, grads = outputs[0], outputs[len(outputs) - len(self._gradients):]  # [loss, other outputs, grads]
                for view, g in zip(self._gradients, grads):
                    np.multiply(g, n, out=view)
                buf[-3] = loss * n
                buf[-2] = n
            else:
                buf.fill(0)
            buf[-1] = 0
        except Exception as exc:  # still take part in the reduction, so every rank learns of it and none waits
            failure = exc
            buf.fill(0)
            buf[-1] = 1
        t1 = time.perf_counter()
        self.comm.allreduce_(buf)
        t2 = time.perf_counter()
        if buf[-1]:
            if failure is not None:
                raise failure
            raise DistributedError(f"train_step: {int(buf[-1])} other rank(s) failed in this step (each raised its own "
                                   f"error there); no rank updated its parameters, every rank is still at step "
                                   f"{self.step}")
        total = buf[-2]
        if total == 0:
            raise DistributedError("every rank's shard of this batch is empty; a step needs at least one sample")
        np.divide(buf[:-3], total, out=buf[:-3])
        self._params = self._update.run([*self._params, *self._gradients])
        self.step += 1
        t3 = time.perf_counter()
        s = self.stats
        s.steps += 1
        s.compute_s += t1 - t0
        s.allreduce_s += t2 - t1
        s.update_s += t3 - t2
        return float(buf[-3] / total)

    def _shard_size(self, data: Sequence[Any]) -> int:
        if not data:
            raise DistributedError("train_step needs this rank's data, e.g. train_step(x_shard, t_shard)")
        for k, a in enumerate(data):
            if not isinstance(a, np.ndarray) or a.ndim == 0:
                got = "a 0-d array" if isinstance(a, np.ndarray) else type(a).__name__
                raise DistributedError(f"train_step: data argument {k} must be a numpy array with the samples on "
                                       f"axis 0, got {got}")
            try:
                type_of(a)
            except fc.FrameError as exc:
                raise DistributedError(f"train_step: data argument {k} has dtype {a.dtype}, which frame graphs do "
                                       f"not take ({exc}); convert it, e.g. x.astype(np.float32)") from exc
        rows = [a.shape[0] for a in data]
        if len(set(rows)) != 1:
            raise DistributedError(f"train_step: the data arrays must hold the same number of samples (axis 0), "
                                   f"got {rows}")
        return rows[0]

    def _training_executable(self, data: Sequence[np.ndarray]) -> fc.Executable:
        key = tuple(type_of(a) for a in data)
        exe = self._training.get(key)
        if exe is None:
            exe = fc.compile(self.training_graph(key))
            self._training[key] = exe
        return exe

    def training_graph(self, data_types: Sequence[fc.TensorType | str]) -> fc.Graph:
        """The graph ``[*data, *params] -> [loss, (other outputs of a loss graph), grad params...]`` a rank runs on
        a shard of these types."""
        types = [fc.TensorType.parse(t) if isinstance(t, str) else t for t in data_types]
        k = len(types)
        if isinstance(self._loss, fc.Graph):
            forward = self._loss
            expected = [v.type for v in forward.inputs]
            if expected != types + self.param_types:
                raise DistributedError(
                    f"the loss graph {forward.name!r} takes ({', '.join(map(str, expected))}) but this step has data "
                    f"({', '.join(map(str, types))}) and parameters ({', '.join(map(str, self.param_types))}); a graph "
                    "has fixed shapes, so pass the loss as a Python function to train on shards of any size")
        else:
            forward = fc.trace(self._loss, *types, *self.param_types)
        return fc.build_backward_graph(forward, 0, list(range(k, k + len(self.param_types))))

    # -- parameters ------------------------------------------------------------------------------------
    @property
    def params(self) -> list[np.ndarray]:
        """The current parameters (identical on every rank). Treat them as read-only."""
        return list(self._params)

    @property
    def allreduce_bytes(self) -> int:
        """Bytes every rank contributes to the one ``allreduce_`` of a step."""
        return int(self._buffer.nbytes)

    def _check_params(self, params: Sequence[Any]) -> None:
        if isinstance(params, (np.ndarray, str, bytes)) or not isinstance(params, Sequence) or not params:
            got = ("a single ndarray" if isinstance(params, np.ndarray) else
                   type(params).__name__ if not isinstance(params, Sequence) or params else "an empty list")
            raise DistributedError(f"params must be a non-empty list of numpy arrays (one per trainable parameter), "
                                   f"got {got}; wrap one array in a list: [w]")
        for i, p in enumerate(params):
            if not isinstance(p, np.ndarray):
                raise DistributedError(f"parameter {i} must be a numpy array, got {type(p).__name__}")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or params[0].dtype not in (np.float32, np.float64):
            raise DistributedError(f"the parameters must share one dtype, float32 or float64 (their gradients are "
                                   f"reduced in one buffer), got {[str(p.dtype) for p in params]}; convert them "
                                   "with p.astype(np.float32)")

    def _broadcast_params(self, params: Sequence[np.ndarray]) -> list[np.ndarray]:
        flat = np.empty(self._offsets[-1], self.dtype)
        for a, b, p in zip(self._offsets, self._offsets[1:], params):
            flat[a:b] = p.reshape(-1)
        self.comm.broadcast_(flat, 0)
        return [flat[a:b].reshape(t.shape).copy() for a, b, t in zip(self._offsets, self._offsets[1:], self.param_types)]

    # -- checkpoints -----------------------------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Rank 0 writes the parameters and the step count to ``path`` atomically; other ranks return at once."""
        _check_path(path, "save_checkpoint")  # on every rank, so a wrong argument is found on every rank
        if self.comm.rank == 0:
            save_checkpoint(path, self._params, self.step)

    def resume(self, path: str | os.PathLike[str]) -> bool:
        """Continue from the checkpoint at ``path`` if rank 0 finds one there (collective).

        Rank 0 reads it and broadcasts parameters and step to every rank, so
        only rank 0 needs to see the file. Returns whether a checkpoint was
        loaded; without one the trainer is left as it was. ``CheckpointError``
        on every rank (rank 0's reason in the message) if the file is not a
        checkpoint or does not hold parameters of this trainer's types, so a
        job that catches it stays in step.
        """
        _check_path(path, "resume")  # before the collective: on rank 0 alone it left the others waiting
        header = np.zeros(1, np.int64)  # 0: nothing to resume; -1: rank 0 could not; else step + 1
        params = self._params
        failure: CheckpointError | None = None
        if self.comm.rank == 0 and pathlib.Path(path).exists():
            try:
                checkpoint = load_checkpoint(path)
                self._check_checkpoint(checkpoint.params, path)
            except CheckpointError as exc:
                failure, header[0] = exc, -1
            else:
                params, header[0] = checkpoint.params, checkpoint.step + 1
        self.comm.broadcast_(header, 0)
        if header[0] < 0:
            reason = broadcast_text(self.comm, str(failure))
            if failure is not None:
                raise failure
            raise CheckpointError(f"rank 0 could not resume from {str(path)!r}: {reason}")
        if header[0] == 0:
            return False
        self._params = self._broadcast_params(params)
        self.step = int(header[0]) - 1
        return True

    def _check_checkpoint(self, params: list[np.ndarray], path: Any) -> None:
        found = [_describe(p) for p in params]
        expected = [str(t) for t in self.param_types]
        if found != expected:
            raise CheckpointError(f"the checkpoint {str(path)!r} holds parameters ({', '.join(found)}), but this "
                                  f"trainer trains ({', '.join(expected)}); it belongs to another model: give another "
                                  "path, or delete it to start afresh")

    def reset_stats(self) -> None:
        """Start timing afresh (for example after warm-up steps)."""
        self.stats = StepStats()

    def __repr__(self) -> str:
        return (f"<DataParallelTrainer rank {self.comm.rank} of {self.comm.size}: {len(self._params)} parameters "
                f"({self._offsets[-1]} values, {self.dtype}), step {self.step}>")


def type_of(array: np.ndarray) -> fc.TensorType:
    """The frame type of a numpy array (``IRError`` for a dtype frame does not have)."""
    return fc.TensorType(array.dtype.name, array.shape)


def _describe(array: np.ndarray) -> str:
    try:
        return str(type_of(array))
    except fc.FrameError:  # a dtype frame has no name for
        return f"{array.dtype}{list(array.shape)}"
