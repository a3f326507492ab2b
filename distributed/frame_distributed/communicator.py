"""The ``Communicator`` protocol and its two implementations: MPI (mpi4py) and a single process.

Everything frame-distributed sends between ranks goes through five members:
``rank``, ``size``, ``allreduce_`` (sum a flat float buffer in place),
``broadcast_`` (copy one rank's array into everyone's, in place) and
``barrier``. Another engine (Ray, torch.distributed, ...) plugs in by
implementing them; nothing else in this package knows about MPI.

``mpi4py`` is imported only when an ``MPICommunicator`` is created, so this
package (and ``frame_core``) import without it.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import DistributedError, MPIUnavailableError

__all__ = ["Communicator", "LocalCommunicator", "MPICommunicator", "default_communicator", "launched_by_mpi"]

#: Environment variables that MPI launchers set in every process they start: MPICH/Intel MPI/MVAPICH
#: (PMI), Open MPI, and PMIx (Open MPI 5, Slurm's ``srun --mpi=pmix``; ``srun --mpi=pmi2`` sets PMI_RANK).
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
#: ``FRAME_COMMUNICATOR=mpi`` or ``=local`` overrides what ``default_communicator`` picks.
OVERRIDE_VARIABLE = "FRAME_COMMUNICATOR"
#: Seconds between printing why a rank aborts and calling MPI_Abort.
ABORT_GRACE_S = 0.3
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
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < size:
        raise DistributedError(f"broadcast_ root must be a rank in 0..{size - 1}, got {root!r}")


class LocalCommunicator:
    """One process, no MPI: rank 0 of 1. Reductions and broadcasts leave the buffer as it is."""

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


def import_mpi() -> Any:
    """``mpi4py.MPI`` (initialising MPI), or ``MPIUnavailableError`` saying what to install."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MPIUnavailableError(
            f"MPICommunicator needs mpi4py, which cannot be imported ({type(exc).__name__}: {exc}); install it with "
            f"{INSTALL_HINT}, or use LocalCommunicator() to run in a single process") from exc
    return MPI


class MPICommunicator:
    """The ranks of an MPI communicator (default ``COMM_WORLD``) through mpi4py.

    ``allreduce_`` is one ``Allreduce(IN_PLACE, SUM)`` and ``broadcast_`` one
    ``Bcast``, both straight on the numpy buffer (no copy, no pickling).

    Failure behaviour (so that a failing rank never leaves the others waiting
    forever in a collective):

    - ``abort_on_error`` (default): an exception that ends the program on any
      rank prints its traceback and ``rank R of N failed: Type: message``,
      then calls ``MPI_Abort``, which ends every rank with a non-zero status.
    - ``exit_timeout_s``: a rank that reaches the end of the program waits at
      most this long for the others to reach it too, then aborts the job (a
      rank that left through ``sys.exit`` or skipped a collective).
    - ``timeout_s`` (default ``None``: wait as long as it takes): the longest a
      collective may wait for the other ranks before the job is aborted (for
      a rank that hangs without raising). Waiting then polls the request.
    """

    def __init__(self, comm: Any = None, *, abort_on_error: bool = True, timeout_s: float | None = None,
                 exit_timeout_s: float | None = 60.0) -> None:
        for name, value in (("timeout_s", timeout_s), ("exit_timeout_s", exit_timeout_s)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise DistributedError(f"{name} must be a positive number of seconds or None, got {value!r}")
        MPI = import_mpi()
        self._MPI = MPI
        # A duplicate keeps frame's messages apart from any MPI traffic of the user's own on the same ranks.
        self._comm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self._rank: int = self._comm.Get_rank()
        self._size: int = self._comm.Get_size()
        self.timeout_s = timeout_s
        self.exit_timeout_s = exit_timeout_s
        if abort_on_error:
            _abort_on_uncaught_exception(self)
        if exit_timeout_s is not None:
            atexit.register(self._wait_for_everyone_at_exit)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def mpi_comm(self) -> Any:
        """The underlying ``mpi4py.MPI.Comm`` (a duplicate of the one given)."""
        return self._comm

    def allreduce_(self, buffer: np.ndarray) -> None:
        check_reduce_buffer(buffer)
        if self.timeout_s is None:
            self._comm.Allreduce(self._MPI.IN_PLACE, buffer, op=self._MPI.SUM)
        else:
            self._wait(self._comm.Iallreduce(self._MPI.IN_PLACE, buffer, op=self._MPI.SUM), "allreduce_")

    def broadcast_(self, buffer: np.ndarray, root: int = 0) -> None:
        check_broadcast_buffer(buffer, root, self._size)
        raw = [buffer.reshape(-1).view(np.uint8), self._MPI.BYTE]  # any dtype (bool, bfloat16) travels as bytes
        if self.timeout_s is None:
            self._comm.Bcast(raw, root=root)
        else:
            self._wait(self._comm.Ibcast(raw, root=root), "broadcast_")

    def barrier(self) -> None:
        if self.timeout_s is None:
            self._comm.Barrier()
        else:
            self._wait(self._comm.Ibarrier(), "barrier")

    def abort(self, reason: str, code: int = 1) -> None:
        """Print ``rank R of N <reason>`` on stderr and end every rank of the job with status ``code``."""
        sys.stdout.flush()
        print(f"frame-distributed: rank {self._rank} of {self._size} {reason}; aborting all ranks (MPI_Abort)",
              file=sys.stderr, flush=True)
        # The launcher tears the job down as soon as it hears of the abort, and can drop output it has not
        # forwarded yet: give it a moment to pass this message (and the traceback before it) on.
        time.sleep(ABORT_GRACE_S)
        self._MPI.COMM_WORLD.Abort(code)

    def _wait(self, request: Any, what: str) -> None:
        timeout_s = self.timeout_s or 0.0
        self._wait_or_abort(request, timeout_s, f"waited {timeout_s:g} s in {what} for the other ranks (one is "
                                                "stuck, has died or skipped the call)")

    def _wait_or_abort(self, request: Any, timeout_s: float, reason: str) -> None:
        deadline = time.monotonic() + timeout_s
        pause = 0.0
        while not request.Test():
            if time.monotonic() > deadline:
                self.abort(reason)
            time.sleep(pause)
            pause = min(2 * pause or 1e-5, 1e-2)  # spin first (a step's collective is short), then back off

    def _wait_for_everyone_at_exit(self) -> None:
        if self._MPI.Is_finalized() or self._size == 1:
            return
        timeout_s = self.exit_timeout_s or 0.0
        self._wait_or_abort(self._comm.Ibarrier(), timeout_s,
                            f"reached the end of the program, but the other ranks did not within {timeout_s:g} s "
                            "(a rank left early, e.g. through sys.exit, or waits in a collective this rank skipped)")

    def __repr__(self) -> str:
        return f"<MPICommunicator rank {self._rank} of {self._size}>"


_hooked: list[MPICommunicator] = []


def _abort_on_uncaught_exception(comm: MPICommunicator) -> None:
    """Make an uncaught exception abort the whole MPI job (once per process)."""
    if _hooked:
        return
    _hooked.append(comm)
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        previous(exc_type, exc, tb)
        comm.abort(f"failed with {exc_type.__name__}: {exc}")

    sys.excepthook = hook


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
        try:
            comm = MPICommunicator()
        except MPIUnavailableError as exc:
            started = "an MPI launcher started this process" if launched_by_mpi() else f"{OVERRIDE_VARIABLE}=mpi"
            raise MPIUnavailableError(f"{started}, but mpi4py cannot be imported, so every process would run alone "
                                      f"on its own copy of the data; install it with {INSTALL_HINT}") from exc
    _default.append(comm)
    return comm
