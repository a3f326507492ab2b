"""Data-parallel MLP training step over MPI: 1 rank against 2 ranks, and a paper extrapolation to 64 ranks.

The 784-256-256-10 ReLU MLP of mlp_step.py, float32, mse loss, one global
batch of 1024 samples split over the ranks; BLAS limited to one thread per
rank (OMP/OPENBLAS/MKL_NUM_THREADS=1). Runs ``mpiexec -n 1`` and ``-n 2`` of
this script in turns (interleaved, ``--rounds`` each) and prints per
configuration the median step time, samples per second, the time the step
spends in ``allreduce_`` (waiting for the slower rank included) and its share,
the compute part of rank 0's step (training graph and packing the gradients),
plus the median of a bare ``allreduce_`` of the same buffer; then the 2/1
ratio of samples per second (target >= 1.6x), the same ratio estimated from CPU time per
step for when every rank has a core of its own (a loaded machine does not give it), and the hand-written numpy step
in one process for reference. Ends with the ring all-reduce model for 64
ranks on 10 Gb/s.

    python benchmarks/distributed_mlp.py [--rounds 3] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "67108864", "MALLOC_MMAP_THRESHOLD_": "67108864"}
os.environ.update(ENV)  # before numpy loads BLAS: the numpy reference in this process runs on one thread too

import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mlp_step import SIZES, init, mlp_loss, numpy_step  # noqa: E402 - the same model as mlp_step.py

BATCH = 1024
LR = 0.01


def worker(steps: int, batch: int) -> None:
    """Under mpiexec: time ``steps`` training steps; rank 0 prints one JSON line."""
    from frame_distributed import DataParallelTrainer, default_communicator, split_by_rank

    comm = default_communicator()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
    x_shard, t_shard = split_by_rank(x, t, comm=comm)
    trainer = DataParallelTrainer(mlp_loss, init(rng), LR, comm=comm)
    for _ in range(5):  # compile, warm caches
        trainer.train_step(x_shard, t_shard)
    step_s, reduce_s, compute_s, cpu_s = [], [], [], []
    for _ in range(steps):
        before = (trainer.stats.allreduce_s, trainer.stats.compute_s)
        c0, t0 = time.process_time(), time.perf_counter()
        trainer.train_step(x_shard, t_shard)
        step_s.append(time.perf_counter() - t0)
        cpu_s.append(time.process_time() - c0)
        reduce_s.append(trainer.stats.allreduce_s - before[0])
        compute_s.append(trainer.stats.compute_s - before[1])
    cpu = np.array([statistics.median(cpu_s)])
    comm.allreduce_(cpu)  # the ranks' mean CPU time per step
    buffer = np.zeros(trainer.allreduce_bytes // 4, np.float32)
    bare = []
    for _ in range(50):
        comm.barrier()
        t0 = time.perf_counter()
        comm.allreduce_(buffer)
        bare.append(time.perf_counter() - t0)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "step_s": statistics.median(step_s),
                          "allreduce_s": statistics.median(reduce_s), "compute_s": statistics.median(compute_s), "cpu_s": float(cpu[0]) / comm.size, "bare_allreduce_s": statistics.median(bare),
                          "bytes": trainer.allreduce_bytes, "shard": len(x_shard)}), flush=True)


def run(ranks: int, steps: int, batch: int) -> dict:
    mpiexec = pathlib.Path(sys.executable).parent / "mpiexec"
    command = [str(mpiexec), "-n", str(ranks), sys.executable, __file__, "--worker", "--steps", str(steps),
               "--batch", str(batch)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def numpy_reference(steps: int, batch: int) -> float:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
    params = init(rng)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        _, params = numpy_step(x, t, params)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine_ceiling(steps: int, batch: int) -> float:
    """What two processes on this machine can do at best: the hand-written numpy step on half the batch in two
    processes at once (no MPI, no frame) against the whole batch in one; the samples-per-second ratio.

    On a machine whose cores do not run two BLAS processes at full speed each (shared or throttled virtual
    CPUs), no data-parallel scheme can beat this ratio, so it is the bar the 2-rank result is read against."""
    command = [sys.executable, __file__, "--numpy-worker", "--steps", str(steps)]
    one = subprocess.run([*command, "--batch", str(batch)], capture_output=True, text=True, timeout=300, check=True)
    pair = [subprocess.Popen([*command, "--batch", str(batch // 2)], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    halves = [float(p.communicate(timeout=300)[0]) for p in pair]
    return float(one.stdout) / max(halves)


def ring_model(params: int, ranks: int, gbit_s: float, latency_s: float) -> tuple[float, float, float]:
    """Ring all-reduce of ``params`` float32 values: (bytes, bandwidth term, latency term) in seconds.

    A ring moves 2(p-1)/p of the buffer in and out of every rank (reduce-scatter then all-gather) in
    2(p-1) messages, each paying the per-message latency."""
    nbytes = 4 * params
    return nbytes, 2 * (ranks - 1) / ranks * nbytes / (gbit_s * 1e9 / 8), 2 * (ranks - 1) * latency_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--numpy-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.batch)
        return
    if args.numpy_worker:
        print(numpy_reference(args.steps, args.batch))
        return

    print(f"784-256-256-10 MLP, float32, global batch {args.batch}; BLAS threads per rank: 1 (OMP/OPENBLAS/MKL); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    results: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.rounds):  # interleaved: a busy spell hurts both configurations alike
        for ranks in (1, 2):
            results[ranks].append(run(ranks, args.steps, args.batch))
    print(f"{'ranks':>5} {'shard':>6} {'step ms':>8} {'samples/s':>10} {'compute ms':>11} {'allreduce ms':>13} "
          f"{'share':>6} {'bare allreduce ms':>18}")
    summary, cpu, bares = {}, {}, {}
    for ranks, rows in results.items():
        step = statistics.median(r["step_s"] for r in rows)
        reduce = statistics.median(r["allreduce_s"] for r in rows)
        compute = statistics.median(r["compute_s"] for r in rows)
        bare = statistics.median(r["bare_allreduce_s"] for r in rows)
        summary[ranks] = args.batch / step
        cpu[ranks] = statistics.median(r["cpu_s"] for r in rows)
        bares[ranks] = bare
        print(f"{ranks:5d} {rows[0]['shard']:6d} {step * 1e3:8.2f} {args.batch / step:10,.0f} {compute * 1e3:11.2f} "
              f"{reduce * 1e3:13.3f} {reduce / step:6.1%} {bare * 1e3:18.3f}")
    print(f"2 ranks / 1 rank, samples per second: {summary[2] / summary[1]:.2f}x (target >= 1.6x); "
          f"medians of {args.rounds} interleaved runs of {args.steps} steps; load average now "
          f"{os.getloadavg()[0]:.2f}")
    # On a loaded machine the ranks do not get a core each and wall times mix in the other work. CPU time per
    # step does not: a rank that had its own core would take its CPU time plus the all-reduce's transfer.
    estimate = cpu[1] / (cpu[2] + bares[2])
    print(f"CPU time per step (mean over ranks): {cpu[1] * 1e3:.2f} ms on 1 rank, {cpu[2] * 1e3:.2f} ms on 2 ranks; "
          f"with a core per rank: {cpu[1] * 1e3:.2f} / ({cpu[2] * 1e3:.2f} + {bares[2] * 1e3:.2f} bare all-reduce) "
          f"= {estimate:.2f}x")
    reference = numpy_reference(args.steps, args.batch)
    print(f"hand-written numpy step, 1 process, batch {args.batch}: {reference * 1e3:.2f} ms "
          f"({args.batch / reference:,.0f} samples/s); frame on 1 rank is {args.batch / summary[1] / reference:.2f}x "
          "its time")
    ceilings = [machine_ceiling(args.steps, args.batch) for _ in range(args.rounds)]
    print(f"this machine's ceiling: the numpy step on half the batch in 2 processes at once (no MPI, no frame) gives "
          f"{statistics.median(ceilings):.2f}x the samples per second of 1 process (runs: "
          f"{', '.join(f'{c:.2f}' for c in ceilings)}); 2 ranks can do no better than that here")

    params = sum(a * b + b for a, b in zip(SIZES[:-1], SIZES[1:]))
    print(f"\npaper model: ring all-reduce of the {params:,} float32 gradients on 64 ranks over 10 Gb/s")
    for latency in (5e-6, 50e-6):
        nbytes, bandwidth, lat = ring_model(params, 64, 10.0, latency)
        print(f"  {nbytes / 1e6:.3f} MB per step; 2(p-1)/p * bytes / bandwidth = {bandwidth * 1e3:.2f} ms, "
              f"+ 2(p-1) * {latency * 1e6:.0f} us latency = {lat * 1e3:.2f} ms -> {(bandwidth + lat) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
