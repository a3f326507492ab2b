"""The ``Communicator`` protocol and its two implementations: MPI (mpi4py) and a single process.

Everything frame-distributed sends between ranks goes through five members:
``rank``, ``size``, ``allreduce_`` (sum a flat float buffer in place),
``broadcast_`` (copy one rank's array into everyone's, in place) and
``barrier``. Another engine (Ray, torch.distributed, ...) plugs in by
implementing them; nothing else in this package knows about MPI.

``MPICommunicator`` lives in ``frame_distributed.mpi``; ``mpi4py`` is imported
only when one is created, so this package (and ``frame_core``) import without it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import DistributedError, MPIUnavailableError

__all__ = ["Communicator", "LocalCommunicator", "default_communicator", "launched_by_mpi", "check_same_on_every_rank"]

#: Environment variables that MPI launchers set in every process they start: MPICH/Intel MPI/MVAPICH
#: (PMI), Open MPI, and PMIx (Open MPI 5, Slurm's ``srun --mpi=pmix``; ``srun --mpi=pmi2`` sets PMI_RANK).
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
#: ``FRAME_COMMUNICATOR=mpi`` or ``=local`` overrides what ``default_communicator`` picks.
OVERRIDE_VARIABLE = "FRAME_COMMUNICATOR"
INSTALL_HINT = "pip install 'frame-distributed[mpi]' (mpi4py and the MPICH wheel, which brings mpiexec)"


@runtime_checkable
class Communicator(Protocol):
    """What data-parallel training and parallel evaluation need from a group of ``size`` processes.

    Every member is collective except ``rank`` and ``size``: all ranks call it, in the same order,
    with buffers of the same dtype and size, or the run deadlocks (MPI) or fails.
    """

    @property
    def rank(self) -> int:
        """This process's index, ``0 <= rank < size``."""
        ...

    @property
    def size(self) -> int:
        """The number of processes in the group."""
        ...

    def allreduce_(self, buffer: np.ndarray) -> None:
        """Replace ``buffer`` (1-D, C-contiguous, float32 or float64) by its elementwise sum over all ranks."""
        ...

    def broadcast_(self, buffer: np.ndarray, root: int = 0) -> None:
        """Overwrite ``buffer`` (C-contiguous, any dtype and shape) on every rank with rank ``root``'s."""
        ...

    def barrier(self) -> None:
        """Return once every rank has called it."""
        ...


def check_reduce_buffer(buffer: Any) -> None:
    """``DistributedError`` unless ``buffer`` is what ``allreduce_`` accepts."""
    if not isinstance(buffer, np.ndarray):
        raise DistributedError(f"allreduce_ takes a numpy array, got {type(buffer).__name__}")
    if buffer.ndim != 1 or buffer.dtype not in (np.float32, np.float64) or not buffer.flags.c_contiguous:
        raise DistributedError(f"allreduce_ takes a flat contiguous float32 or float64 array, got {buffer.dtype}"
                               f"{list(buffer.shape)} (contiguous: {buffer.flags.c_contiguous}); flatten the values "
                               "into one such buffer and reduce that")
    if not buffer.flags.writeable:
        raise DistributedError("allreduce_ sums in place, but the buffer is read-only; pass a writeable copy")


def check_broadcast_buffer(buffer: Any, root: int, size: int) -> None:
    """``DistributedError`` unless ``buffer`` and ``root`` are what ``broadcast_`` accepts."""
    if not isinstance(buffer, np.ndarray) or not buffer.flags.c_contiguous or not buffer.flags.writeable:
        got = (f"{buffer.dtype}{list(buffer.shape)} (contiguous: {buffer.flags.c_contiguous}, writeable: "
               f"{buffer.flags.writeable})" if isinstance(buffer, np.ndarray) else type(buffer).__name__)
        raise DistributedError(f"broadcast_ takes a C-contiguous writeable numpy array, got {got}; "
                               "use np.ascontiguousarray(x) or x.copy()")
    if not isinstance(root, (int, np.integer)) or isinstance(root, (bool, np.bool_)) or not 0 <= root < size:
        raise DistributedError(f"broadcast_ root must be a rank in 0..{size - 1} (an int), got {root!r}")


def require_communicator(comm: Any, where: str) -> Communicator:
    """``comm`` if it implements the protocol, else a ``DistributedError`` naming ``where`` it was given."""
    if not isinstance(comm, Communicator):
        raise DistributedError(f"{where}: comm must be a Communicator (rank, size, allreduce_, broadcast_, barrier), "
                               f"got {type(comm).__name__}; pass default_communicator(), LocalCommunicator() or an "
                               "MPICommunicator")
    return comm


#: A text's fingerprint travels as 4 words of 48 bits (exact in float64), so one allreduce compares all ranks'.
_WORDS, _WORD_BYTES = 4, 6


def _fingerprint(text: str) -> np.ndarray:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return np.array([int.from_bytes(digest[i * _WORD_BYTES:(i + 1) * _WORD_BYTES], "little") for i in range(_WORDS)],
                    np.float64)


def broadcast_text(comm: Communicator, text: str, root: int = 0) -> str:
    """Rank ``root``'s ``text`` on every rank (collective: its length, then its bytes)."""
    data = text.encode("utf-8", "surrogatepass")
    length = np.array([len(data)], np.int64)
    comm.broadcast_(length, root)
    buffer = np.frombuffer(data, np.uint8).copy() if comm.rank == root else np.empty(int(length[0]), np.uint8)
    comm.broadcast_(buffer, root)
    return buffer.tobytes().decode("utf-8", "surrogatepass")


def check_same_on_every_rank(comm: Communicator, text: str, what: str, advice: str) -> None:
    """Collective: return if every rank passed the same ``text``; else raise ``DistributedError`` on every rank.

    ``text`` describes what must agree (for example the parameters' types). One
    ``allreduce_`` of every rank's fingerprint lets each rank see which ranks
    differ from rank 0; on a mismatch one more broadcast brings rank 0's
    ``text`` for the message, which names ``what`` differs, both versions and
    ``advice``. Without it, buffers of different sizes fail inside MPI with an
    opaque error, and buffers of equal size but different layout are summed
    into a silent wrong answer.
    """
    if comm.size == 1:
        return
    table = np.zeros((comm.size, _WORDS), np.float64)
    table[comm.rank] = _fingerprint(text)
    comm.allreduce_(table.reshape(-1))
    differ = [r for r in range(1, comm.size) if not np.array_equal(table[r], table[0])]
    if not differ:
        return
    first = broadcast_text(comm, text)
    mine = f"; this rank ({comm.rank}) has {text}" if comm.rank in differ else ""
    raise DistributedError(f"{what} differ across ranks: rank 0 has {first}, but rank(s) {differ} have others{mine}. "
                           f"{advice}")


#: Every communicator made in this process; while it is empty, an uncaught exception under an MPI launcher
#: aborts the job (``mpi.abort_before_a_communicator``).
communicators_made: list[bool] = []


class LocalCommunicator:
    """One process, no MPI: rank 0 of 1. Reductions and broadcasts leave the buffer as it is."""

    def __init__(self) -> None:
        communicators_made[:] = [True]

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    def allreduce_(self, buffer: np.ndarray) -> None:
        check_reduce_buffer(buffer)

    def broadcast_(self, buffer: np.ndarray, root: int = 0) -> None:
        check_broadcast_buffer(buffer, root, 1)

    def barrier(self) -> None:
        pass

    def __repr__(self) -> str:
        return "<LocalCommunicator rank 0 of 1>"


def launched_by_mpi(environ: Any = None) -> bool:
    """Whether an MPI launcher (``mpiexec``, ``mpirun``, ``srun``) started this process."""
    env = os.environ if environ is None else environ
    return any(name in env for name in LAUNCHER_VARIABLES)


_default: list[Communicator] = []


def default_communicator() -> Communicator:
    """The communicator a script should use: the same object on every call.

    ``MPICommunicator()`` when an MPI launcher started the process, else
    ``LocalCommunicator()``; ``FRAME_COMMUNICATOR=mpi`` or ``=local`` forces
    one. Under a launcher without mpi4py this raises ``MPIUnavailableError``
    rather than letting every process train alone on its own copy.
    """
    if _default:
        return _default[0]
    choice = os.environ.get(OVERRIDE_VARIABLE, "").strip().lower()
    if choice not in ("", "mpi", "local"):
        raise DistributedError(f"{OVERRIDE_VARIABLE} must be 'mpi' or 'local', got {choice!r}; unset it to choose "
                               "by how the process was started")
    comm: Communicator
    if choice == "local" or (choice == "" and not launched_by_mpi()):
        comm = LocalCommunicator()
    else:
        from .mpi import MPICommunicator

        try:
            comm = MPICommunicator()
        except MPIUnavailableError as exc:
            started = "an MPI launcher started this process" if launched_by_mpi() else f"{OVERRIDE_VARIABLE}=mpi"
            raise MPIUnavailableError(f"{started}, but mpi4py cannot be imported, so every process would run alone "
                                      f"on its own copy of the data; install it with {INSTALL_HINT}") from exc
    _default.append(comm)
    return comm
