"""parallel_evaluate in one process: LocalCommunicator and thread-faked ranks against serial runs."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_distributed import DistributedError, LocalCommunicator, parallel_evaluate


def serial(scenarios, inputs):
    exe = fc.compile(scenarios.eval_graph())
    return [exe.run(case) for case in inputs]


def assert_same(results, expected):
    assert len(results) == len(expected)
    for got, want in zip(results, expected):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def test_local_evaluation_equals_serial(scenarios):
    inputs = scenarios.eval_inputs()
    assert_same(parallel_evaluate(scenarios.eval_graph(), inputs, comm=LocalCommunicator()), serial(scenarios, inputs))


@pytest.mark.parametrize("size,count", [(2, 7), (3, 7), (4, 2), (3, 0)], ids=["2x7", "3x7", "more-ranks-than-inputs",
                                                                            "no-inputs"])
def test_every_rank_gets_all_results_in_input_order(scenarios, run_ranks, size, count):
    inputs = (scenarios.eval_inputs() * 2)[:count]
    exe = fc.compile(scenarios.eval_graph())

    expected = serial(scenarios, inputs)
    for results in run_ranks(size, lambda comm: parallel_evaluate(exe, inputs, comm=comm)):
        assert_same(results, expected)


def test_each_rank_evaluates_only_its_own_block(scenarios, run_ranks):
    inputs = scenarios.eval_inputs()

    class Recording(list):
        def __getitem__(self, i):
            self.seen.append(i)
            return super().__getitem__(i)

    def rank_fn(comm):
        mine = Recording(inputs)
        mine.seen = []
        parallel_evaluate(scenarios.eval_graph(), mine, comm=comm)
        return mine.seen

    assert run_ranks(3, rank_fn) == [[0, 1, 2], [3, 4], [5, 6]]


def test_stacked_results(scenarios, run_ranks):
    inputs = scenarios.eval_inputs()
    expected = serial(scenarios, inputs)
    for y, norm in run_ranks(2, lambda comm: parallel_evaluate(scenarios.eval_graph(), inputs, comm=comm, stacked=True)):
        np.testing.assert_array_equal(y, np.stack([e[0] for e in expected]))
        np.testing.assert_array_equal(norm, np.stack([e[1] for e in expected]))


def test_ranks_with_different_input_counts_all_fail(scenarios, run_ranks):
    inputs = scenarios.eval_inputs()

    def rank_fn(comm):
        try:
            parallel_evaluate(scenarios.eval_graph(), inputs[: 5 + comm.rank], comm=comm)
        except DistributedError as exc:
            return str(exc)
        return None

    messages = run_ranks(3, rank_fn)
    assert all(m is not None and "different numbers of inputs" in m for m in messages), messages


def test_bad_arguments(scenarios):
    local = LocalCommunicator()
    with pytest.raises(DistributedError, match="takes a frame Graph or Executable"):
        parallel_evaluate(lambda x: x, [[np.ones(2)]], comm=local)
    with pytest.raises(DistributedError, match="sequence of input lists"):
        parallel_evaluate(scenarios.eval_graph(), np.ones((3, 2)), comm=local)
    inputs = scenarios.eval_inputs()
    inputs[2] = [inputs[2][0].astype(np.float32), *inputs[2][1:]]
    with pytest.raises(fc.InputError, match=r"inputs\[2\]: input 0 \('x'\) must have dtype float64"):
        parallel_evaluate(scenarios.eval_graph(), inputs, comm=local)


def test_ranks_evaluating_graphs_of_different_outputs_all_fail(scenarios, run_ranks):
    # Blocks travel as raw bytes of arrays laid out from the output types: other types on one rank failed inside
    # the communicator (an opaque MPI error) or, with equal sizes, mixed layouts silently.
    inputs = scenarios.eval_inputs()
    other = fc.trace(lambda x, *p: [ops.sum(x, axes=[1]), ops.sum(x)], *[v.type for v in scenarios.eval_graph().inputs])

    def rank_fn(comm):
        try:
            parallel_evaluate(scenarios.eval_graph() if comm.rank != 1 else other, inputs, comm=comm)
        except DistributedError as exc:
            return str(exc)
        return None

    messages = run_ranks(3, rank_fn)
    assert all(m is not None and "the graphs' output types differ across ranks: rank 0 has (f64[3, 2], f64[])" in m
               and "[1]" in m for m in messages), messages


def test_a_communicator_of_the_wrong_kind_is_named(scenarios):
    from frame_distributed import split_by_rank

    with pytest.raises(DistributedError, match="parallel_evaluate: comm must be a Communicator"):
        parallel_evaluate(scenarios.eval_graph(), scenarios.eval_inputs(), comm=object())
    with pytest.raises(DistributedError, match="split_by_rank: comm must be a Communicator"):
        split_by_rank(np.ones(3), comm="local")


def test_an_input_that_fails_on_one_rank_fails_on_every_rank(scenarios, run_ranks):
    # Before: the rank owning the bad input raised alone while the others waited in the broadcasts of the
    # results; a job that caught the error was out of step in its next collective.
    good = scenarios.eval_inputs()[:5]
    bad = [*good[:4], [good[4][0][:2], *good[4][1:]]]  # inputs[4] (rank 2's block of 3 ranks) has 2 rows, not 3

    def rank_fn(comm):
        try:
            parallel_evaluate(scenarios.eval_graph(), bad, comm=comm)
        except fc.FrameError as exc:
            caught = (type(exc).__name__, str(exc))
        return caught, parallel_evaluate(scenarios.eval_graph(), good, comm=comm, stacked=True)  # still in step

    ranks = run_ranks(3, rank_fn)
    assert [caught[0] for caught, _ in ranks] == ["DistributedError", "DistributedError", "InputError"]
    assert "inputs[4]" in ranks[2][0][1] and "1 other rank(s) failed on their inputs" in ranks[0][0][1]
    serial = fc.compile(scenarios.eval_graph())
    for _, (y, norm) in ranks:
        np.testing.assert_array_equal(y[4], serial.run(good[4])[0])
