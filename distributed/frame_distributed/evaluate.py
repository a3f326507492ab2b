"""``parallel_evaluate``: one compiled graph over many independent inputs, split across ranks.

SPMD, static blocks: every rank compiles the graph once, evaluates the
contiguous block ``shard_range(n, rank, size)`` of the inputs, tells the
others whether that failed (one small allreduce: if any rank failed, every
rank raises, so none waits forever and ranks that catch it stay in step),
and then each
rank in turn broadcasts its block of every output into preallocated arrays,
so every rank ends with all results in input order (blocks are contiguous and
in rank order). A compiled graph has static shapes, so every input costs the
same and equal blocks balance the load without a scheduler. Nothing is
pickled: results travel as raw bytes of arrays whose layout every rank
already knows from the graph's output types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import frame_core as fc

from .communicator import Communicator, check_same_on_every_rank, default_communicator, require_communicator
from .data import shard_range
from .errors import DistributedError

__all__ = ["parallel_evaluate"]


def parallel_evaluate(graph: fc.Graph | fc.Executable, inputs: Sequence[Sequence[Any]], *,
                      comm: Communicator | None = None, stacked: bool = False) -> Any:
    """Run ``graph`` on every ``inputs[i]`` (a list of arrays, one per graph input) across the ranks (collective).

    Returns, on every rank, ``results[i]`` = the outputs for ``inputs[i]``
    (a list of arrays, as ``Executable.run`` returns; they are views of one
    array per output), in input order; with ``stacked=True`` those arrays
    themselves, one per output, the inputs along axis 0.
    Every rank must pass a sequence of the same length, but a rank reads only
    its own block, so the others' items may be placeholders (for example a
    lazy sequence that loads only what is indexed). ``graph`` may be a
    ``Graph`` (compiled here) or an ``Executable``.
    """
    comm = default_communicator() if comm is None else require_communicator(comm, "parallel_evaluate")
    if isinstance(graph, fc.Graph):
        exe = fc.compile(graph)
    elif isinstance(graph, fc.Executable):
        exe = graph
    else:
        raise DistributedError(f"parallel_evaluate takes a frame Graph or Executable, got {type(graph).__name__}")
    if not isinstance(inputs, Sequence) or isinstance(inputs, (str, bytes, np.ndarray)):
        raise DistributedError(f"parallel_evaluate takes a sequence of input lists (one list of arrays per "
                               f"evaluation), got {type(inputs).__name__}")
    n = len(inputs)
    _check_same_length(comm, n)
    # the ranks exchange every output's blocks as raw bytes: their graphs must agree on the output types
    check_same_on_every_rank(comm, "(" + ", ".join(map(str, exe.output_types)) + ")", "the graphs' output types",
                             "Every rank must evaluate the same graph")
    outputs = [np.empty((n, *t.shape), t.dtype.np) for t in exe.output_types]
    failure: Exception | None = None
    try:
        for i in shard_range(n, comm.rank, comm.size):
            try:
                results = exe.run(inputs[i])
            except fc.InputError as exc:
                raise fc.InputError(f"parallel_evaluate: inputs[{i}]: {exc}") from exc
            for out, r in zip(outputs, results):
                out[i] = r
    except Exception as exc:  # tell the others before raising, or they would wait in the broadcasts below
        failure = exc
    _raise_if_any_rank_failed(comm, failure)
    for root in range(comm.size):
        rows = shard_range(n, root, comm.size)
        if len(rows):
            for out in outputs:
                comm.broadcast_(out[rows.start:rows.stop], root)
    if stacked:
        return outputs
    return [[out[i] for out in outputs] for i in range(n)]


def _check_same_length(comm: Communicator, n: int) -> None:
    """``DistributedError`` on every rank unless all ranks passed ``n`` inputs (sum n, sum n^2 pin them all equal)."""
    if comm.size == 1:
        return
    counts = np.array([n, float(n) * n], np.float64)
    comm.allreduce_(counts)
    if counts[0] != comm.size * n or counts[1] != comm.size * float(n) * n:
        raise DistributedError(f"parallel_evaluate: the ranks passed different numbers of inputs (rank {comm.rank} "
                               f"has {n}, the mean is {counts[0] / comm.size:g}); every rank must pass the same "
                               "sequence length")


def _raise_if_any_rank_failed(comm: Communicator, failure: Exception | None) -> None:
    """Collective: raise on every rank if any rank's block failed (a failing rank raises its own error)."""
    failed = np.array([0.0 if failure is None else 1.0])
    if comm.size > 1:
        comm.allreduce_(failed)
    if failure is not None:
        raise failure
    if failed[0]:
        raise DistributedError(f"parallel_evaluate: {int(failed[0])} other rank(s) failed on their inputs (each "
                               "raised its own error there); no rank has results")
