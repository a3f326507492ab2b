"""Fixtures: the scenario module (loaded by path) and ``run_ranks``, an in-process fake of several ranks.

``run_ranks(size, fn)`` runs ``fn(comm)`` in ``size`` threads, each with a
``ThreadCommunicator`` that implements the ``Communicator`` protocol with a
shared slot table and a barrier: a second engine written against the
protocol, which also lets the unit tests try 3 or 4 ranks without MPI.
"""

from __future__ import annotations

import importlib.util
import pathlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent


def _load_scenarios() -> Any:
    spec = importlib.util.spec_from_file_location("frame_distributed_mpi_scenarios", HERE / "mpi_scenarios.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCENARIOS = _load_scenarios()


@pytest.fixture(scope="session")
def scenarios() -> Any:
    return SCENARIOS


class ThreadCommunicator:
    """Rank ``rank`` of a group of threads (the fake engine)."""

    def __init__(self, group: "_Group", rank: int) -> None:
        self._group, self._rank = group, rank

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._group.size

    def allreduce_(self, buffer: np.ndarray) -> None:
        from frame_distributed.communicator import check_reduce_buffer

        check_reduce_buffer(buffer)
        g = self._group
        g.slots[self._rank] = buffer.copy()
        g.barrier.wait()
        total = g.slots[0].copy()
        for other in g.slots[1:]:
            total += other  # rank order, as a deterministic MPI reduction would
        g.barrier.wait()
        buffer[...] = total
        g.calls[self._rank].append("allreduce_")

    def broadcast_(self, buffer: np.ndarray, root: int = 0) -> None:
        from frame_distributed.communicator import check_broadcast_buffer

        check_broadcast_buffer(buffer, root, self.size)
        g = self._group
        if self._rank == root:
            g.slots[root] = buffer.copy()
        g.barrier.wait()
        if self._rank != root:
            buffer[...] = g.slots[root]
        g.barrier.wait()
        g.calls[self._rank].append("broadcast_")

    def barrier(self) -> None:
        self._group.barrier.wait()


class _Group:
    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: list[Any] = [None] * size
        self.barrier = threading.Barrier(size, timeout=30)
        self.calls: list[list[str]] = [[] for _ in range(size)]


def run_ranks_in_threads(size: int, fn: Callable[[ThreadCommunicator], Any]) -> list[Any]:
    """``[fn(comm_0), ..., fn(comm_{size-1})]`` run concurrently; re-raises the first rank's exception."""
    group = _Group(size)
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def body(rank: int) -> None:
        try:
            results[rank] = fn(ThreadCommunicator(group, rank))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            errors[rank] = exc
            group.barrier.abort()  # the other ranks stop waiting instead of hanging

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    first = next((e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)), None)
    if first is None:
        first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return results


@pytest.fixture
def run_ranks() -> Callable[..., list[Any]]:
    return run_ranks_in_threads
