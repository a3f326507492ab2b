"""Acceptance tests under real MPI: ``mpiexec -n 2`` running mpi_scenarios.py (issue 12).

Every run has a hard timeout and its own process group: a run that outlives
its timeout is killed with its whole group and fails the test, so nothing
here can hang. ``mpiexec`` is the one installed next to this Python (the
``mpich`` wheel of ``frame-distributed[mpi]``, which ``make setup`` installs).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest

import frame_core as fc
from frame_distributed import load_checkpoint

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "train_mlp_mpi.py"
MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"
RANKS = 2
TIMEOUT_S = 60  # a run that takes this long has hung: the healthy ones take about a second
ABORT_BOUND_S = 20  # a failing run must have ended every rank within this
RANK_EXIT_S = 5  # how long ranks may take to end after mpiexec has returned


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    stragglers: list[int]  # ranks still alive RANK_EXIT_S after mpiexec returned (killed by then)


def mpiexec(*args: str, out: pathlib.Path, script: pathlib.Path = HERE / "mpi_scenarios.py") -> Run:
    """``mpiexec -n 2 python mpi_scenarios.py *args out`` (or ``python script *args``) with BLAS on one
    thread per rank.

    Hydra starts every rank in a session of its own, so a process group cannot
    catch them: the scenarios write their pids to ``out``. On timeout mpiexec
    gets SIGTERM (it ends its ranks), then everything left gets SIGKILL.
    """
    if not MPIEXEC.exists():
        pytest.fail(f"no mpiexec at {MPIEXEC}; install the MPI extra: pip install -e 'distributed[mpi,test]' "
                    "(make setup does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    tail = [*args, str(out)] if script.name == "mpi_scenarios.py" else list(args)
    command = [str(MPIEXEC), "-n", str(RANKS), sys.executable, str(script), *tail]
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        kill_ranks(out)
        pytest.fail(f"`{' '.join(command)}` hung for {TIMEOUT_S} s and was killed\nstdout:\n{stdout}\nstderr:\n{stderr}")
    # After an abort mpiexec returns as soon as it has signalled the ranks; give them a moment to end.
    deadline = time.monotonic() + RANK_EXIT_S
    while any(alive(pid) for pid in rank_pids(out)) and time.monotonic() < deadline:
        time.sleep(0.02)
    seconds = time.monotonic() - start
    return Run(proc.returncode, stdout, stderr, seconds, kill_ranks(out))


def rank_pids(out: pathlib.Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(out.glob("pid-rank*"))]


def alive(pid: int) -> bool:
    """Running (a zombie, an ended process nobody has reaped yet, does not count)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def kill_ranks(out: pathlib.Path) -> list[int]:
    """SIGKILL the run's ranks that are still alive; return their pids."""
    left = [pid for pid in rank_pids(out) if alive(pid)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def load_rank(path: pathlib.Path) -> tuple[list[np.ndarray], np.ndarray]:
    with np.load(path) as data:
        params = [data[f"arr_{i}"] for i in range(sum(k.startswith("arr_") for k in data.files))]
        return params, data["losses"]


@pytest.fixture(scope="module")
def acceptance(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi-acceptance")
    run = mpiexec("acceptance", out=out)
    assert run.returncode == 0, f"the 2-rank acceptance run failed:\n{run.stderr}"
    assert not run.stragglers
    return out


@pytest.fixture(scope="module")
def reference(scenarios):
    return scenarios.reference_training()


@pytest.mark.parametrize("split", ["even", "uneven", "empty"])
def test_two_rank_training_equals_single_process_full_batch(acceptance, reference, scenarios, split):
    """20 steps on 2 ranks (shards 18/18, 29/7, 36/0) end where full-batch training does, to 1e-10 in float64."""
    n = scenarios.SAMPLES
    sizes = [len(range(n)[scenarios.shard_rows(split, n, r, RANKS)]) for r in range(RANKS)]
    assert sizes == {"even": [18, 18], "uneven": [29, 7], "empty": [36, 0]}[split]
    ref_params, ref_losses = reference
    ranks = [load_rank(acceptance / f"train-{split}-rank{r}.npz") for r in range(RANKS)]
    for params, losses in ranks:
        assert len(params) == len(ref_params) and len(losses) == scenarios.STEPS
        for p, r in zip(params, ref_params):
            np.testing.assert_allclose(p, r, rtol=0, atol=1e-10)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
    assert max(np.abs(p - r).max() for p, r in zip(ref_params, scenarios.problem()[2])) > 1e-2  # it did train
    for p0, p1 in zip(ranks[0][0], ranks[1][0]):  # and the ranks did not drift apart
        np.testing.assert_array_equal(p0, p1)


def test_parallel_evaluation_equals_serial(acceptance, scenarios):
    exe = fc.compile(scenarios.eval_graph())
    serial = [exe.run(case) for case in scenarios.eval_inputs()]
    for r in range(RANKS):
        with np.load(acceptance / f"eval-rank{r}.npz") as data:
            y, norm = data["arr_0"], data["arr_1"]
        assert y.shape == (scenarios.EVAL_INPUTS, 3, scenarios.SIZES[-1]) and norm.shape == (scenarios.EVAL_INPUTS,)
        for i, (sy, snorm) in enumerate(serial):
            np.testing.assert_array_equal(y[i], sy, err_msg=f"rank {r}, input {i}")
            np.testing.assert_array_equal(norm[i], snorm, err_msg=f"rank {r}, input {i}")


def test_mpi_communicator_sums_and_broadcasts_any_dtype(acceptance):
    for r in range(RANKS):
        with np.load(acceptance / f"comm-rank{r}.npz") as data:
            assert str(data["kind"]) == "MPICommunicator" and int(data["size"]) == RANKS  # chosen under mpiexec
            np.testing.assert_array_equal(data["sum32"], np.arange(5, dtype=np.float32) * 3)
            assert data["sum32"].dtype == np.float32
            np.testing.assert_array_equal(data["sum64"], np.arange(5.0) * 3)
            np.testing.assert_array_equal(data["ints"], np.full(4, 1))
            np.testing.assert_array_equal(data["bools"], np.full((2, 2), True))
            np.testing.assert_array_equal(data["bf16"], np.full(3, 1.5, np.float32))


@pytest.mark.parametrize("failure,culprit,message", [
    ("raise", 1, "rank 1 of 2 failed with RuntimeError: injected failure at step 3"),
    # collectives: the parameter check and broadcast of the constructor, then one allreduce per step
    ("exit", 0, "rank 0 of 2 waits in allreduce_ (its collective 6), but rank 1 ended its program after 5 "
                "collectives and will never join it"),
    ("hang", 0, "rank 0 of 2 waited 2 s in allreduce_ for the other ranks"),
    # before: rank 1 never started MPI, the launcher ignored its exit and rank 0 waited forever
    ("early", 1, "rank 1 of 2 failed with RuntimeError: injected failure before a communicator before it made a "
                 "communicator"),
], ids=["raises", "exits-early", "hangs", "before-a-communicator"])
def test_a_failing_rank_ends_every_rank_in_bounded_time(tmp_path, failure, culprit, message):
    """Rank 1 raises, calls sys.exit(3) or sleeps at step 3 (or raises before it makes a communicator) while
    rank 0 waits in the allreduce: the whole job ends non-zero within the bound, the message names the rank and
    the error, and no rank is left."""
    run = mpiexec(failure, out=tmp_path)
    assert run.returncode != 0
    assert run.seconds < ABORT_BOUND_S, f"took {run.seconds:.1f} s"
    assert message in run.stderr, run.stderr
    assert "aborting all ranks (MPI_Abort)" in run.stderr
    if failure in ("raise", "early"):
        assert "Traceback" in run.stderr  # the failing rank's own traceback comes first
    assert len(rank_pids(tmp_path)) == RANKS and not run.stragglers  # every rank started, none is left


def test_ranks_that_chose_to_run_alone_are_not_aborted_by_one_failing(tmp_path):
    """The hook that aborts a job whose rank fails before making a communicator stands aside once a rank has made
    one: with LocalCommunicators the ranks are independent, so rank 1's error must not end rank 0."""
    run = mpiexec("alone", out=tmp_path)
    assert "rank 1 fails on its own" in run.stderr and "MPI_Abort" not in run.stderr, run.stderr
    assert (tmp_path / "alone-done").read_text() == "rank 0 finished"


def test_mistakes_raise_on_every_rank_and_leave_the_ranks_in_step(tmp_path):
    """Parameters of another shape on rank 1 (the same bytes, so MPI saw nothing) and a junk checkpoint that only
    rank 0 reads (it raised there alone and the job hung): a named error on every rank, then training goes on."""
    (tmp_path / "junk.npz").write_bytes(b"not a checkpoint")
    run = mpiexec("misuse", out=tmp_path)
    assert run.returncode == 0, run.stderr
    for r in range(RANKS):
        with np.load(tmp_path / f"misuse-rank{r}.npz") as data:
            params_error, resume_error = map(str, data["caught"])
            assert int(data["step"]) == 1
        assert "the parameters (or learning rates) differ across ranks: rank 0 has (f64[5, 8]," in params_error
        assert "is not a readable checkpoint" in resume_error
        assert ("rank 0 could not resume" in resume_error) == (r > 0)


def test_collective_calls_that_differ_across_ranks_raise_on_every_rank(tmp_path):
    """Buffers of other sizes, dtypes or roots, or another collective, on rank 1: MPI summed or copied them silently
    wrong or hung; now a DistributedError on every rank names each rank's call, and the ranks stay in step."""
    run = mpiexec("mismatch", out=tmp_path)
    assert run.returncode == 0, run.stderr
    expected = [
        ("rank 0: allreduce_ of float64[5]; rank 1: allreduce_ of float64[3]"),
        ("rank 0: allreduce_ of float64[4]; rank 1: allreduce_ of float32[8]"),
        ("rank 0: broadcast_ of float64[3] from rank 0; rank 1: broadcast_ of float64[3] from rank 1"),
        ("rank 0: allreduce_ of float64[3]; rank 1: broadcast_ of float64[3] from rank 0"),
        ("rank 0: barrier; rank 1: allreduce_ of float64[2]"),
    ]
    for r in range(RANKS):
        with np.load(tmp_path / f"mismatch-rank{r}.npz") as data:
            caught = list(map(str, data["caught"]))
            np.testing.assert_array_equal(data["total"], np.arange(4.0) * 3)
            np.testing.assert_array_equal(data["root"], np.ones(2))
            np.testing.assert_array_equal(data["reshaped"], np.arange(6.0))
        assert len(caught) == len(expected), caught
        for message, calls in zip(caught, expected):
            assert "the ranks made different collective calls" in message and calls in message, message


def test_a_rank_that_ends_first_does_not_cut_short_a_rank_still_working(tmp_path):
    """Rank 1 ends right after training, rank 0 works 2 s longer: a normal end, not an abort."""
    run = mpiexec("tail", out=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "tail-done").read_text() == "rank 0 finished its tail"
    assert "aborting" not in run.stderr and not run.stragglers


def test_killed_job_resumes_from_its_checkpoint_to_the_uninterrupted_result(acceptance, tmp_path, scenarios):
    """Checkpoint every 5 steps, SIGKILL every rank at step 13, resume: the end equals the uninterrupted run."""
    checkpoint = tmp_path / "ckpt.npz"
    killed = mpiexec("train", "--checkpoint", str(checkpoint), "--every", "5", "--kill-job-at", "13", out=tmp_path)
    assert killed.returncode != 0 and not (tmp_path / "train-even-rank0.npz").exists()
    assert not killed.stragglers
    saved = load_checkpoint(checkpoint)  # whole and loadable after the kill
    assert saved.step == 10

    resumed = mpiexec("train", "--checkpoint", str(checkpoint), "--every", "5", "--resume", out=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    uninterrupted = load_rank(acceptance / "train-even-rank0.npz")
    for r in range(RANKS):
        params, losses = load_rank(tmp_path / f"train-even-rank{r}.npz")
        assert len(losses) == scenarios.STEPS - 10  # it did start from step 10
        for p, q in zip(params, uninterrupted[0]):
            np.testing.assert_array_equal(p, q)
        np.testing.assert_array_equal(losses, uninterrupted[1][10:])
    assert load_checkpoint(checkpoint).step == scenarios.STEPS


def loss_lines(text: str) -> dict[int, float]:
    return {int(line.split()[1]): float(line.split()[3]) for line in text.splitlines() if line.startswith("step ")}


def test_the_mlp_example_under_mpiexec_matches_one_process(tmp_path):
    """examples/train_mlp_mpi.py on 2 ranks: rank 0 alone prints; the losses are those of one process."""
    run = mpiexec("--steps", "30", out=tmp_path, script=EXAMPLE)
    assert run.returncode == 0, run.stderr
    assert "2 rank(s) (MPICommunicator), 256 samples per step, 128 on rank 0" in run.stdout
    summary = [line for line in run.stdout.splitlines() if "samples/s" in line]
    assert len(summary) == 1 and "allreduce" in summary[0] and "bytes per rank" in summary[0]  # rank 0 only
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_") and k not in ("PMI_RANK", "PMI_SIZE")}
    single = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "30"], capture_output=True, text=True,
                            timeout=TIMEOUT_S, env={**env, "OMP_NUM_THREADS": "1"})
    assert single.returncode == 0, single.stderr
    assert "1 rank(s) (LocalCommunicator)" in single.stdout
    two, one = loss_lines(run.stdout), loss_lines(single.stdout)
    assert sorted(two) == sorted(one) and len(one) >= 10
    for step in one:
        assert abs(two[step] - one[step]) <= 1e-5 * one[step] + 2e-6, (step, two[step], one[step])
    assert one[29] < 0.5 * one[0]


ONE_RANK = """
import json
import numpy as np
from frame_distributed import LocalCommunicator, MPICommunicator

def calls(comm):
    found = []
    for call in (lambda: comm.allreduce_(np.arange(3.0)), lambda: comm.allreduce_(np.arange(3)),
                 lambda: comm.allreduce_(np.zeros((2, 2))), lambda: comm.allreduce_(np.zeros(0, np.float32)),
                 lambda: comm.broadcast_(np.zeros(2), 1), lambda: comm.broadcast_(np.zeros(2), np.int64(0)),
                 lambda: comm.broadcast_(np.array(3.0)), lambda: comm.broadcast_(np.zeros((2, 3)).T),
                 comm.barrier):
        try:
            call()
            found.append("ok")
        except Exception as exc:
            found.append(f"{type(exc).__name__}: {exc}")
    total = np.arange(4.0)
    comm.allreduce_(total)
    return found + [total.tolist(), comm.rank, comm.size]

print(json.dumps({"local": calls(LocalCommunicator()), "mpi": calls(MPICommunicator())}))
"""


def test_an_mpi_communicator_of_one_rank_behaves_as_the_local_one(tmp_path):
    """Under `mpiexec -n 1` the same calls give the same results and the same errors as LocalCommunicator."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")}
    done = subprocess.run([str(MPIEXEC), "-n", "1", sys.executable, "-c", ONE_RANK], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["local"] == result["mpi"]
    assert result["mpi"][-3:] == [[0.0, 1.0, 2.0, 3.0], 0, 1] and result["mpi"].count("ok") == 5
