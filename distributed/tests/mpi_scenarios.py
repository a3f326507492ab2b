"""What the MPI acceptance tests run under ``mpiexec -n 2``, and the single-process reference they compare to.

    mpiexec -n 2 python mpi_scenarios.py SCENARIO OUT_DIR [options]

Scenarios: ``acceptance`` (data-parallel training with even, uneven and
empty shards, parallel evaluation, communicator round trips), ``train``
(training with checkpoints, optionally killing the whole job part-way, or
resuming), ``raise``, ``exit`` and ``hang`` (one rank fails in a different
way at step 3), ``tail`` (rank 0 works on after rank 1 has ended), ``misuse`` and ``mismatch`` (mistakes that must raise on
every rank), ``early`` (rank 1 fails before it makes a communicator), ``alone`` (ranks with LocalCommunicators). Each rank writes what it ends with to ``OUT_DIR`` as
``.npz`` files; the tests load them. The tests also import this file (by path)
for the problem and the reference, which uses no frame-distributed code.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import sys
import time

import numpy as np

import frame_core as fc
from frame_core import ops

SIZES = (5, 8, 8, 2)
SAMPLES = 36
STEPS = 20
LR = 0.05
SPLITS = ("even", "uneven", "empty")
EVAL_INPUTS = 7  # odd: the ranks' blocks differ in size


def mlp_loss(x, t, w1, b1, w2, b2, w3, b3):
    return ops.mse_loss(mlp(x, w1, b1, w2, b2, w3, b3), t)


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = ops.tanh(x @ w1 + b1)
    h = ops.tanh(h @ w2 + b2)
    return h @ w3 + b3


def problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The full data set (x, t) and the initial parameters, float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SAMPLES, SIZES[0]))
    t = np.sin(x @ rng.standard_normal((SIZES[0], SIZES[-1])))
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in), 0.1 * rng.standard_normal(fan_out)]
    return x, t, params


def param_types() -> list[str]:
    types = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        types += [f"f64[{fan_in}, {fan_out}]", f"f64[{fan_out}]"]
    return types


def shard_rows(split: str, n: int, rank: int, size: int) -> slice:
    """Rows of rank ``rank``: ``even`` as split_by_rank does; ``uneven`` 4:1 for two ranks (weights
    (size - r)^2); ``empty`` gives the last rank nothing."""
    if split == "even":
        from frame_distributed import shard_range

        rows = shard_range(n, rank, size)
        return slice(rows.start, rows.stop)
    if split == "uneven":
        weights = np.array([(size - r) ** 2 for r in range(size)], float)
        cuts = np.concatenate([[0], np.round(np.cumsum(weights) / weights.sum() * n)]).astype(int)
        return slice(cuts[rank], cuts[rank + 1])
    if split == "empty":
        if rank == size - 1:
            return slice(n, n)
        cuts = np.linspace(0, n, size).round().astype(int)
        return slice(cuts[rank], cuts[rank + 1])
    raise ValueError(f"unknown split {split!r}")


def reference_training(steps: int = STEPS) -> tuple[list[np.ndarray], list[float]]:
    """Single-process full-batch SGD on the whole data set: the training graph and the update graph, by hand."""
    x, t, params = problem()
    types = param_types()
    forward = fc.trace(mlp_loss, f"f64[{SAMPLES}, {SIZES[0]}]", f"f64[{SAMPLES}, {SIZES[-1]}]", *types)
    training = fc.compile(fc.build_backward_graph(forward, 0, list(range(2, 2 + len(types)))))
    update = fc.compile(fc.build_sgd_update_graph(types, LR))
    losses = []
    for _ in range(steps):
        loss, *grads = training.run([x, t, *params])
        params = update.run([*params, *grads])
        losses.append(float(loss))
    return params, losses


def eval_graph() -> fc.Graph:
    """One input x, the parameters; outputs the prediction and its squared norm (two outputs of two ranks)."""
    def predict(x, w1, b1, w2, b2, w3, b3):
        y = mlp(x, w1, b1, w2, b2, w3, b3)
        return y, ops.sum(y * y)
    return fc.trace(predict, f"f64[3, {SIZES[0]}]", *param_types())


def eval_inputs() -> list[list[np.ndarray]]:
    rng = np.random.default_rng(1)
    _, _, params = problem()
    return [[rng.standard_normal((3, SIZES[0])), *params] for _ in range(EVAL_INPUTS)]


# -- scenarios (under mpiexec) ------------------------------------------------------------------------------
def train(comm, split: str, steps: int, out: pathlib.Path | None = None, checkpoint: str | None = None,
          every: int = 0, resume: bool = False, kill_job_at: int | None = None, fail: str | None = None):
    from frame_distributed import DataParallelTrainer

    x, t, params = problem()
    rows = shard_rows(split, SAMPLES, comm.rank, comm.size)
    if comm.rank != 0:  # the trainer must start every rank from rank 0's parameters
        params = [p + 1.0 for p in params]
    trainer = DataParallelTrainer(mlp_loss, params, LR, comm=comm)
    if resume:
        assert trainer.resume(checkpoint), "no checkpoint to resume from"
    losses = []
    while trainer.step < steps:
        if trainer.step == kill_job_at and comm.rank == 0:
            kill_every_rank(out)
        if trainer.step == 3 and comm.rank == 1 and fail is not None:
            if fail == "raise":
                raise RuntimeError("injected failure at step 3")
            if fail == "exit":
                sys.exit(3)
            if fail == "hang":
                time.sleep(3600)
        losses.append(trainer.train_step(x[rows], t[rows]))
        if every and trainer.step % every == 0:
            trainer.save_checkpoint(checkpoint)
    if out is not None:
        np.savez(out / f"train-{split}-rank{comm.rank}.npz", *trainer.params, losses=np.array(losses),
                 step=trainer.step, start=len(losses))
    return trainer


def kill_every_rank(out: pathlib.Path) -> None:
    """SIGKILL all ranks, this one last, as a scheduler's kill or a node failure would: no rank cleans up."""
    pids = [int(p.read_text()) for p in sorted(out.glob("pid-rank*"))]
    for pid in sorted(pids, key=lambda pid: pid == os.getpid()):
        os.kill(pid, signal.SIGKILL)


def acceptance(comm, out: pathlib.Path) -> None:
    from frame_distributed import parallel_evaluate

    for split in SPLITS:
        train(comm, split, STEPS, out)
    outputs = parallel_evaluate(eval_graph(), eval_inputs(), comm=comm, stacked=True)
    np.savez(out / f"eval-rank{comm.rank}.npz", *outputs)
    # round trips through the communicator: sums in two float dtypes, a broadcast from rank 1 of other dtypes
    sums = [np.arange(5, dtype=dtype) * (comm.rank + 1) for dtype in (np.float32, np.float64)]
    for s in sums:
        comm.allreduce_(s)
    mine = [np.full(4, comm.rank, np.int64), np.full((2, 2), comm.rank == 1), np.full(3, comm.rank + 0.5, fc.bfloat16.np)]
    for b in mine:
        comm.broadcast_(b, root=1)
    np.savez(out / f"comm-rank{comm.rank}.npz", sum32=sums[0], sum64=sums[1], ints=mine[0], bools=mine[1],
             bf16=mine[2].astype(np.float32), size=comm.size, kind=type(comm).__name__)


def misuse(comm, out: pathlib.Path) -> None:
    """Rank 1 passes parameters of another shape (same bytes), then every rank resumes from a file that is not a
    checkpoint: each mistake must raise on every rank, and the ranks, having caught them, still train in step."""
    from frame_distributed import CheckpointError, DataParallelTrainer, DistributedError

    x, t, params = problem()
    caught = []
    mine = params if comm.rank == 0 else [params[0].reshape(params[0].shape[::-1]), *params[1:]]
    try:
        DataParallelTrainer(mlp_loss, mine, LR, comm=comm)
    except DistributedError as exc:
        caught.append(str(exc))
    trainer = DataParallelTrainer(mlp_loss, params, LR, comm=comm)
    try:
        trainer.resume(out / "junk.npz")  # only rank 0 reads it
    except CheckpointError as exc:
        caught.append(str(exc))
    rows = shard_rows("even", SAMPLES, comm.rank, comm.size)
    trainer.train_step(x[rows], t[rows])
    np.savez(out / f"misuse-rank{comm.rank}.npz", caught=np.array(caught), step=trainer.step)


def mismatch(comm, out: pathlib.Path) -> None:
    """The ranks make collective calls that do not match (MPI itself summed 5 values against 3 silently, summed
    float64 against float32 into garbage, and waited forever in an allreduce against a broadcast): each must raise
    on every rank, and the ranks, having caught them, still sum correctly."""
    from frame_distributed import DistributedError

    r = comm.rank
    calls = [
        lambda: comm.allreduce_(np.ones(5 if r == 0 else 3)),
        lambda: comm.allreduce_(np.ones(4) if r == 0 else np.ones(8, np.float32)),
        lambda: comm.broadcast_(np.full(3, float(r)), root=r),
        lambda: comm.allreduce_(np.ones(3)) if r == 0 else comm.broadcast_(np.ones(3)),
        lambda: comm.barrier() if r == 0 else comm.allreduce_(np.ones(2)),
    ]
    caught = []
    for call in calls:
        try:
            call()
        except DistributedError as exc:
            caught.append(str(exc))
    total = np.arange(4.0) * (r + 1)
    comm.allreduce_(total)
    root = np.full(2, float(r))
    comm.broadcast_(root, root=np.int64(1))  # a numpy integer is a rank too
    reshaped = np.arange(6.0).reshape(2, 3) if r == 0 else np.zeros(6)
    comm.broadcast_(reshaped)  # the protocol asks for the same dtype and size, not the same shape
    np.savez(out / f"mismatch-rank{r}.npz", caught=np.array(caught), total=total, root=root,
             reshaped=reshaped.reshape(-1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["acceptance", "train", "raise", "exit", "hang", "tail",
                                                     "misuse", "mismatch", "early", "alone"])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--split", default="even", choices=SPLITS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--checkpoint")
    parser.add_argument("--every", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--kill-job-at", type=int)
    args = parser.parse_args()

    from frame_distributed import MPICommunicator, default_communicator

    if args.scenario == "alone":  # LocalCommunicator under mpiexec: the ranks run alone, rank 1's failure is its own
        from frame_distributed import LocalCommunicator

        rank = int(os.environ["PMI_RANK"])
        (args.out / f"pid-rank{rank}").write_text(str(os.getpid()))
        LocalCommunicator()
        if rank == 1:
            raise RuntimeError("rank 1 fails on its own")
        time.sleep(0.5)
        (args.out / "alone-done").write_text("rank 0 finished")
    elif args.scenario == "early":  # rank 1 fails before it makes a communicator; rank 0 waits in a collective
        rank = int(os.environ["PMI_RANK"])
        (args.out / f"pid-rank{rank}").write_text(str(os.getpid()))
        if rank == 1:
            time.sleep(0.3)
            raise RuntimeError("injected failure before a communicator")
        train(MPICommunicator(), "even", STEPS)
    elif args.scenario in ("raise", "exit", "hang"):
        comm = MPICommunicator(timeout_s=2.0 if args.scenario == "hang" else None)
        (args.out / f"pid-rank{comm.rank}").write_text(str(os.getpid()))
        train(comm, "even", STEPS, fail=args.scenario)
    else:
        comm = default_communicator()
        (args.out / f"pid-rank{comm.rank}").write_text(str(os.getpid()))
        if args.scenario == "acceptance":
            acceptance(comm, args.out)
        elif args.scenario == "misuse":
            misuse(comm, args.out)
        elif args.scenario == "mismatch":
            mismatch(comm, args.out)
        elif args.scenario == "tail":  # rank 1 ends right after training; rank 0 works on for a while
            train(comm, "even", 5)
            if comm.rank == 0:
                time.sleep(2.0)
                (args.out / "tail-done").write_text("rank 0 finished its tail")
        else:
            train(comm, args.split, args.steps, args.out, args.checkpoint, args.every, args.resume, args.kill_job_at)


if __name__ == "__main__":
    main()
