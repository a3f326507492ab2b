"""Train the MLP of train_mlp.py data-parallel: each rank takes a shard of the batch (frame-distributed).

    mpiexec -n 2 python examples/train_mlp_mpi.py [--steps 600] [--lr 0.02] [--checkpoint mlp.npz --every 100]
    python examples/train_mlp_mpi.py            # the same script in one process, without MPI

The model, data and initial parameters are those of train_mlp.py (same seed).
Every rank runs the compiled training graph on its shard, the gradients are
summed with one allreduce (weighted by shard size, so the result is the
full-batch gradient) and every rank applies the same SGD update. Rank 0
prints the loss and the throughput. With --checkpoint, rank 0 saves every
--every steps and a restarted run resumes from the last checkpoint.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from frame_core import ops
from frame_distributed import DataParallelTrainer, default_communicator, split_by_rank
from train_mlp import POINTS as BATCH, SIZES


def mlp_loss(x, t, w1, b1, w2, b2, w3, b3):  # noqa: ANN001, ANN201 - train_mlp.py's model, by position
    h = ops.relu(x @ w1 + b1)
    h = ops.relu(h @ w2 + b2)
    return ops.mse_loss(h @ w3 + b3, t)


def make_problem(seed: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The data and initial parameters of train_mlp.py."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (BATCH, SIZES[0])).astype(np.float32)
    t = np.sin(x @ rng.standard_normal((SIZES[0], 1))).astype(np.float32)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params += [(rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32),
                   np.zeros(fan_out, np.float32)]
    return x, t, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="a .npz file to save to and resume from")
    parser.add_argument("--every", type=int, default=100, help="checkpoint every this many steps")
    args = parser.parse_args()
    if args.steps < 0 or args.every < 1:
        parser.error(f"--steps must be >= 0 and --every >= 1, got {args.steps} and {args.every}")

    comm = default_communicator()  # MPI under mpiexec/srun, a single process otherwise
    x, t, params = make_problem(args.seed)  # every rank makes the same; the trainer starts all from rank 0's
    x_shard, t_shard = split_by_rank(x, t, comm=comm)
    trainer = DataParallelTrainer(mlp_loss, params, args.lr, comm=comm)
    if args.checkpoint and trainer.resume(args.checkpoint) and comm.rank == 0:
        print(f"resumed from {args.checkpoint} at step {trainer.step}")
    if comm.rank == 0:
        threads = os.environ.get("OMP_NUM_THREADS", "unset")
        print(f"{comm.size} rank(s) ({type(comm).__name__}), {BATCH} samples per step, {len(x_shard)} on rank 0; "
              f"OMP_NUM_THREADS={threads}")

    losses = []
    start_step, start = trainer.step, time.perf_counter()
    while trainer.step < args.steps:
        losses.append(trainer.train_step(x_shard, t_shard))
        step = trainer.step - 1
        if comm.rank == 0 and (step % max(1, args.steps // 10) == 0 or trainer.step == args.steps):
            ratio = losses[-1] / losses[0] if losses[0] > 0 else 1.0
            bar = "#" * max(1, int(30 * min(ratio, 1.0))) if np.isfinite(ratio) else "(not finite)"
            print(f"step {step:5d}  loss {losses[-1]:.6f}  {bar}", flush=True)
        if args.checkpoint and trainer.step % args.every == 0:
            trainer.save_checkpoint(args.checkpoint)
    elapsed = time.perf_counter() - start
    steps = trainer.step - start_step
    if comm.rank == 0 and steps:
        stats = trainer.stats
        print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} in {steps} steps: {steps * BATCH / elapsed:,.0f} samples/s "
              f"({elapsed / steps * 1e3:.3f} ms/step); allreduce {stats.allreduce_s / stats.steps * 1e3:.3f} ms/step "
              f"({stats.allreduce_share:.1%} of the step, {trainer.allreduce_bytes} bytes per rank)")


if __name__ == "__main__":
    main()
