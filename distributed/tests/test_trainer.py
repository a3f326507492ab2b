"""DataParallelTrainer in one process: with LocalCommunicator and with several ranks faked by threads.

The MPI runs of the same trainer are in test_mpi.py; these try more rank
counts and shard shapes quickly and check the argument errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_distributed import (
    CheckpointError,
    Communicator,
    DataParallelTrainer,
    DistributedError,
    LocalCommunicator,
    save_checkpoint,
)

STEPS = 6


@pytest.fixture(scope="module")
def reference(scenarios):
    return scenarios.reference_training(STEPS)


def train_on_rows(scenarios, comm, rows: slice, steps: int = STEPS):
    x, t, params = scenarios.problem()
    trainer = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=comm)
    losses = [trainer.train_step(x[rows], t[rows]) for _ in range(steps)]
    return trainer, losses


def test_local_communicator_trains_like_full_batch(scenarios, reference):
    trainer, losses = train_on_rows(scenarios, LocalCommunicator(), slice(None))
    ref_params, ref_losses = reference
    for p, r in zip(trainer.params, ref_params):
        np.testing.assert_allclose(p, r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-12)
    assert trainer.step == STEPS


@pytest.mark.parametrize("cuts", [(0, 12, 24, 36), (0, 30, 33, 36), (0, 20, 36, 36), (0, 1, 2, 3, 36)],
                         ids=["even-3", "uneven-3", "empty-last-3", "tiny-4"])
def test_weighted_reduction_gives_the_full_batch_gradient(scenarios, reference, run_ranks, cuts):
    def rank_fn(comm: Communicator):
        trainer, losses = train_on_rows(scenarios, comm, slice(cuts[comm.rank], cuts[comm.rank + 1]))
        return trainer.params, losses

    results = run_ranks(len(cuts) - 1, rank_fn)
    ref_params, ref_losses = reference
    for params, losses in results:
        for p, r in zip(params, ref_params):
            np.testing.assert_allclose(p, r, rtol=0, atol=1e-10)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
    for params, _ in results[1:]:  # the ranks never drift apart
        assert all(np.array_equal(p, q) for p, q in zip(params, results[0][0]))


def test_unweighted_averaging_would_miss_the_full_batch_gradient(scenarios):
    """The uneven shards above are a real test: averaging per-shard mean gradients differs from the full batch."""
    x, t, params = scenarios.problem()
    types = scenarios.param_types()

    def grads(rows):
        forward = fc.trace(scenarios.mlp_loss, fc.TensorType(x.dtype, x[rows].shape),
                           fc.TensorType(t.dtype, t[rows].shape), *types)
        return fc.compile(fc.build_backward_graph(forward, 0, list(range(2, 8)))).run([x[rows], t[rows], *params])[1:]

    full = grads(slice(None))
    a, b = grads(slice(0, 30)), grads(slice(30, 36))
    unweighted = [(ga + gb) / 2 for ga, gb in zip(a, b)]
    weighted = [(30 * ga + 6 * gb) / 36 for ga, gb in zip(a, b)]
    assert max(np.abs(u - f).max() for u, f in zip(unweighted, full)) > 1e-3
    assert max(np.abs(w - f).max() for w, f in zip(weighted, full)) < 1e-14


def test_parameters_start_from_rank_0(scenarios, run_ranks):
    def rank_fn(comm):
        _, _, params = scenarios.problem()
        mine = [p + comm.rank for p in params]
        trainer = DataParallelTrainer(scenarios.mlp_loss, mine, 0.1, comm=comm)
        return trainer.params, mine

    (p0, given0), (p1, given1) = run_ranks(2, rank_fn)
    assert all(np.array_equal(a, b) for a, b in zip(p0, given0))
    assert all(np.array_equal(a, b) for a, b in zip(p1, given0))
    assert not any(np.array_equal(a, b) for a, b in zip(p1, given1))


def test_one_allreduce_per_step_on_a_reused_buffer(scenarios, run_ranks):
    def rank_fn(comm):
        x, t, params = scenarios.problem()
        trainer = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=comm)
        buffer = trainer._buffer
        rows = slice(comm.rank * 18, comm.rank * 18 + 18)
        for _ in range(3):
            trainer.train_step(x[rows], t[rows])
        return trainer._buffer is buffer, trainer._gradients, buffer, comm._group.calls[comm.rank]

    for same, gradients, buffer, calls in run_ranks(2, rank_fn):
        # the constructor compares the ranks' parameter types (one allreduce) and broadcasts rank 0's values;
        # then one collective per step
        assert calls == ["allreduce_", "broadcast_"] + ["allreduce_"] * 3
        assert same and all(g.base is buffer for g in gradients)  # every gradient is a view of the one buffer


def test_float32_training_and_the_step_statistics(scenarios):
    x, t, params = scenarios.problem()
    x, t, params = x.astype(np.float32), t.astype(np.float32), [p.astype(np.float32) for p in params]
    trainer = DataParallelTrainer(scenarios.mlp_loss, params, 0.05, comm=LocalCommunicator())
    first = trainer.train_step(x, t)
    for _ in range(20):
        last = trainer.train_step(x, t)
    assert last < first
    assert all(p.dtype == np.float32 for p in trainer.params)
    assert trainer.stats.steps == 21 and trainer.stats.compute_s > 0 and 0 <= trainer.stats.allreduce_share < 1
    assert trainer.allreduce_bytes == 4 * (sum(p.size for p in params) + 3)  # + loss, count, failure flag
    trainer.reset_stats()
    assert trainer.stats.steps == 0


def test_a_loss_graph_trains_when_its_shapes_match(scenarios, reference):
    x, t, params = scenarios.problem()
    graph = fc.trace(scenarios.mlp_loss, fc.TensorType(x.dtype, x.shape), fc.TensorType(t.dtype, t.shape),
                     *scenarios.param_types())
    trainer = DataParallelTrainer(graph, params, scenarios.LR, comm=LocalCommunicator())
    for _ in range(STEPS):
        trainer.train_step(x, t)
    for p, r in zip(trainer.params, reference[0]):
        np.testing.assert_allclose(p, r, rtol=0, atol=1e-12)
    with pytest.raises(DistributedError, match="fixed shapes, so pass the loss as a Python function"):
        trainer.train_step(x[:5], t[:5])


def test_argument_errors_are_named_and_say_what_to_do(scenarios):
    x, t, params = scenarios.problem()
    local = LocalCommunicator()
    with pytest.raises(DistributedError, match="share one dtype, float32 or float64"):
        DataParallelTrainer(scenarios.mlp_loss, [params[0], params[1].astype(np.float32)], 0.1, comm=local)
    with pytest.raises(DistributedError, match="parameter 1 must be a numpy array"):
        DataParallelTrainer(scenarios.mlp_loss, [params[0], [1.0]], 0.1, comm=local)
    with pytest.raises(DistributedError, match="non-empty list"):
        DataParallelTrainer(scenarios.mlp_loss, [], 0.1, comm=local)
    with pytest.raises(DistributedError, match="loss must be a function"):
        DataParallelTrainer("mse", params, 0.1, comm=local)
    with pytest.raises(fc.GradientError, match="learning rate"):
        DataParallelTrainer(scenarios.mlp_loss, params, -1.0, comm=local)
    trainer = DataParallelTrainer(scenarios.mlp_loss, params, 0.1, comm=local)
    with pytest.raises(DistributedError, match="same number of samples"):
        trainer.train_step(x, t[:-1])
    with pytest.raises(DistributedError, match="needs this rank's data"):
        trainer.train_step()
    with pytest.raises(DistributedError, match="data argument 1 must be a numpy array"):
        trainer.train_step(x, t.tolist())
    with pytest.raises(DistributedError, match="data argument 0 has dtype uint8, which frame graphs do not take"):
        trainer.train_step(x.astype(np.uint8), t)
    with pytest.raises(DistributedError, match="every rank's shard of this batch is empty"):
        trainer.train_step(x[:0], t[:0])
    assert trainer.step == 0


def test_resume_continues_from_the_checkpoint(scenarios, reference, tmp_path):
    x, t, params = scenarios.problem()
    path = tmp_path / "ckpt.npz"
    first = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=LocalCommunicator())
    assert first.resume(path) is False and first.step == 0  # nothing there yet
    for _ in range(4):
        first.train_step(x, t)
    first.save_checkpoint(path)
    second = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=LocalCommunicator())
    assert second.resume(path) is True and second.step == 4
    while second.step < STEPS:
        second.train_step(x, t)
    for p, r in zip(second.params, reference[0]):
        np.testing.assert_allclose(p, r, rtol=0, atol=1e-12)


def test_resume_reaches_every_rank_from_rank_0(scenarios, run_ranks, tmp_path):
    x, t, params = scenarios.problem()
    path = tmp_path / "ckpt.npz"
    saved = [p * 2 for p in params]
    save_checkpoint(path, saved, 7)

    def rank_fn(comm):
        trainer = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=comm)
        return trainer.resume(path), trainer.step, trainer.params

    for resumed, step, got in run_ranks(3, rank_fn):
        assert resumed and step == 7
        assert all(np.array_equal(a, b) for a, b in zip(got, saved))


def test_resume_refuses_a_checkpoint_of_another_model(scenarios, tmp_path):
    _, _, params = scenarios.problem()
    path = tmp_path / "other.npz"
    save_checkpoint(path, [np.zeros((3, 3))], 2)
    trainer = DataParallelTrainer(scenarios.mlp_loss, params, 0.1, comm=LocalCommunicator())
    with pytest.raises(CheckpointError, match=r"holds parameters \(f64\[3, 3\]\), but this trainer trains"):
        trainer.resume(path)
    assert trainer.step == 0


def test_a_linear_model_on_unequal_shards_reaches_least_squares(run_ranks):
    """Not only the MLP: linear least squares on 2 ranks holding 8 and 3 samples converges to lstsq."""
    rng = np.random.default_rng(3)
    x, t = rng.standard_normal((11, 4)), rng.standard_normal((11, 1))

    def loss(x, t, w, b):
        return ops.mean(ops.square(x @ w + b - t))

    def rank_fn(comm):
        rows = slice(0, 8) if comm.rank == 0 else slice(8, 11)
        trainer = DataParallelTrainer(loss, [np.zeros((4, 1)), np.zeros(1)], 0.25, comm=comm)
        for _ in range(600):
            trainer.train_step(x[rows], t[rows])
        return trainer.params

    design = np.hstack([x, np.ones((11, 1))])
    solution = np.linalg.lstsq(design, t, rcond=None)[0]
    for w, b in run_ranks(2, rank_fn):
        np.testing.assert_allclose(np.vstack([w, b[:, None]]), solution, atol=1e-6)


@pytest.mark.parametrize("rank1_params", [
    lambda p: [p[0], p[1], p[2], p[3][:-1]],                 # a different size: MPI failed with "Other MPI error"
    lambda p: [p[0].T.copy(), *p[1:]],                       # the same bytes in another shape: silently accepted
    lambda p: [q.astype(np.float32) for q in p],            # another dtype
    lambda p: p[:-1],                                        # one parameter fewer
    lambda p: [p[0], [1.0], *p[2:]],                         # a mistake on rank 1 only
], ids=["size", "shape", "dtype", "count", "invalid"])
def test_parameters_that_differ_across_ranks_fail_on_every_rank_naming_both(scenarios, run_ranks, rank1_params):
    def rank_fn(comm):
        _, _, params = scenarios.problem()
        mine = params if comm.rank == 0 else rank1_params(params)
        try:
            DataParallelTrainer(scenarios.mlp_loss, mine, 0.1, comm=comm)
        except DistributedError as exc:
            return str(exc)
        return None

    messages = run_ranks(3, rank_fn)
    assert all(m is not None and "differ across ranks" in m and "rank 0 has (f64[" in m and "[1, 2]" in m
               for m in messages), messages
    assert "this rank (1) has" in messages[1]


def test_learning_rates_that_differ_across_ranks_fail_on_every_rank(scenarios, run_ranks):
    # Only the parameters' types were compared: a rank given another lr (say, scaled by a per-rank config)
    # applied its own update to the common gradient, and the ranks drifted apart silently.
    def rank_fn(comm):
        _, _, params = scenarios.problem()
        try:
            DataParallelTrainer(scenarios.mlp_loss, params, 0.1 if comm.rank == 0 else 0.2, comm=comm)
        except DistributedError as exc:
            return str(exc)
        return None

    messages = run_ranks(2, rank_fn)
    assert all(m is not None and "differ across ranks" in m and "at learning rate 0.1, but rank(s) [1]" in m
               for m in messages), messages
    assert "this rank (1) has" in messages[1] and "at learning rate 0.2" in messages[1]
    # the same rate written as a numpy scalar on one rank is the same rate
    run_ranks(2, lambda comm: DataParallelTrainer(scenarios.mlp_loss, scenarios.problem()[2],
                                                  0.1 if comm.rank == 0 else np.float64(0.1), comm=comm))


def test_a_loss_graph_with_more_outputs_trains_on_output_0(scenarios, reference):
    # The training graph's outputs are the forward outputs, then the gradients: the gradients were read from
    # position 1, so an extra forward output was taken for the first parameter's gradient.
    x, t, params = scenarios.problem()
    types = [fc.TensorType(x.dtype, x.shape), fc.TensorType(t.dtype, t.shape), *scenarios.param_types()]
    graph = fc.trace(lambda *a: [scenarios.mlp_loss(*a), a[2] * 2.0], *types)
    trainer = DataParallelTrainer(graph, params, scenarios.LR, comm=LocalCommunicator())
    for _ in range(STEPS):
        trainer.train_step(x, t)
    for p, r in zip(trainer.params, reference[0]):
        np.testing.assert_allclose(p, r, rtol=0, atol=1e-12)


def test_a_communicator_of_the_wrong_kind_is_named(scenarios):
    _, _, params = scenarios.problem()
    with pytest.raises(DistributedError, match="comm must be a Communicator .* got str"):
        DataParallelTrainer(scenarios.mlp_loss, params, 0.1, comm="mpi")


def test_a_checkpoint_rank_0_cannot_use_fails_resume_on_every_rank(scenarios, run_ranks, tmp_path):
    # Only rank 0 reads the file: it raised alone while the other ranks waited in the broadcast, so a job that
    # caught the CheckpointError (to start afresh) hung in its next collective.
    _, _, params = scenarios.problem()
    (tmp_path / "junk.npz").write_bytes(b"not a checkpoint")
    save_checkpoint(tmp_path / "other.npz", [np.zeros((3, 3))], 2)

    def rank_fn(comm):
        trainer = DataParallelTrainer(scenarios.mlp_loss, params, 0.1, comm=comm)
        found = []
        for name in ("junk.npz", "other.npz"):
            try:
                trainer.resume(tmp_path / name)
            except CheckpointError as exc:
                found.append(str(exc))
        return found, trainer.step

    for rank, (found, step) in enumerate(run_ranks(3, rank_fn)):
        assert step == 0 and len(found) == 2, found
        assert "is not a readable checkpoint" in found[0] and "belongs to another model" in found[1]
        assert all(("rank 0 could not resume" in m) == (rank > 0) for m in found)


def test_a_path_of_the_wrong_type_fails_on_every_rank(scenarios, run_ranks):
    # Only rank 0 looked at the path: resume(None) raised TypeError there alone while the others waited in the
    # broadcast; save_checkpoint(None) raised on rank 0 only.
    _, _, params = scenarios.problem()

    def rank_fn(comm):
        trainer = DataParallelTrainer(scenarios.mlp_loss, params, 0.1, comm=comm)
        found = []
        for call in (lambda: trainer.resume(None), lambda: trainer.save_checkpoint(3)):
            try:
                call()
            except CheckpointError as exc:
                found.append(str(exc))
        trainer.comm.barrier()  # still in step
        return found

    for found in run_ranks(2, rank_fn):
        assert len(found) == 2 and all("the path must be a str or os.PathLike" in m for m in found), found


@pytest.mark.parametrize("params,got", [
    ({"w": np.zeros(2)}, "got dict"),
    ((p for p in [np.zeros(2)]), "got generator"),
    (np.zeros((2, 2)), "got a single ndarray"),
    ([], "got an empty list"),
])
def test_params_that_are_not_a_list_of_arrays_are_named(params, got):
    # Before: a dict was iterated by its keys ("parameter 0 must be a numpy array, got str") and a generator was
    # used up by the checks ("must share one dtype ..., got []").
    with pytest.raises(DistributedError, match=f"params must be a non-empty list of numpy arrays .*{got}"):
        DataParallelTrainer(lambda x, w: ops.mean(x * w), params, 0.1, comm=LocalCommunicator())


def test_a_step_that_fails_on_one_rank_fails_on_every_rank_and_keeps_them_in_step(scenarios, run_ranks):
    # Before: the failing rank raised before the allreduce while the others waited in it; a job that caught the
    # error (to skip a bad batch) sent its next step's gradients into the others' current step, silently mixing
    # two steps, and the ranks' parameters and step counts parted.
    x, t, params = scenarios.problem()

    def rank_fn(comm):
        trainer = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=comm)
        rows = slice(comm.rank * 12, (comm.rank + 1) * 12)
        caught = []
        for step in range(3):
            bad = step == 1 and comm.rank == 1
            try:
                trainer.train_step(x[rows, :2] if bad else x[rows], t[rows])  # wrong feature count on rank 1
            except fc.FrameError as exc:
                caught.append((type(exc).__name__, str(exc)))
        return caught, trainer.step, trainer.params

    ranks = run_ranks(3, rank_fn)
    assert [caught[0][0] for caught, _, _ in ranks] == ["DistributedError", "ShapeError", "DistributedError"]
    assert "1 other rank(s) failed in this step" in ranks[0][0][0][1] and "still at step 1" in ranks[0][0][0][1]
    for caught, step, final in ranks:
        assert len(caught) == 1 and step == 2
        for p, q in zip(final, ranks[0][2]):
            np.testing.assert_array_equal(p, q)
    # and those two steps were the full-batch ones on the whole data
    full = DataParallelTrainer(scenarios.mlp_loss, params, scenarios.LR, comm=LocalCommunicator())
    for _ in range(2):
        full.train_step(x, t)
    for p, q in zip(ranks[0][2], full.params):
        np.testing.assert_allclose(p, q, rtol=0, atol=1e-12)
