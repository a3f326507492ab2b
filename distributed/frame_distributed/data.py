"""Splitting a data set by rank: contiguous blocks whose sizes differ by at most one."""

from __future__ import annotations

from typing import Any

import numpy as np

from .communicator import Communicator, default_communicator, require_communicator
from .errors import DistributedError

__all__ = ["shard_range", "split_by_rank"]


def shard_range(n: int, rank: int, size: int) -> range:
    """The indices ``0 <= i < n`` that rank ``rank`` of ``size`` owns.

    Blocks are contiguous and in rank order, so concatenating them in rank
    order gives ``range(n)`` back; the first ``n % size`` ranks get one item
    more than the others (a rank gets none when ``n < size``).
    """
    for name, value in (("n", n), ("rank", rank), ("size", size)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise DistributedError(f"shard_range: {name} must be an int, got {value!r}")
    if size < 1 or not 0 <= rank < size or n < 0:
        raise DistributedError(f"shard_range needs n >= 0, size >= 1 and 0 <= rank < size, got n={n}, rank={rank}, "
                               f"size={size}")
    base, extra = divmod(int(n), int(size))
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def split_by_rank(*arrays: Any, comm: Communicator | None = None) -> tuple[np.ndarray, ...]:
    """This rank's rows of each array: ``arrays[k][shard_range(len, rank, size)]`` (views, no copy).

    All arrays must have the same length along axis 0 (samples and their
    targets). ``comm`` defaults to ``default_communicator()``.
    """
    if not arrays:
        raise DistributedError("split_by_rank needs at least one array (for example split_by_rank(x, t))")
    comm = default_communicator() if comm is None else require_communicator(comm, "split_by_rank")
    lengths = []
    for k, a in enumerate(arrays):
        if not isinstance(a, np.ndarray) or a.ndim == 0:
            got = f"a 0-d array" if isinstance(a, np.ndarray) else type(a).__name__
            raise DistributedError(f"split_by_rank: argument {k} must be a numpy array with a leading sample axis, "
                                   f"got {got}")
        lengths.append(a.shape[0])
    if len(set(lengths)) != 1:
        raise DistributedError(f"split_by_rank: the arrays must have the same number of rows (axis 0), got {lengths}")
    rows = shard_range(lengths[0], comm.rank, comm.size)
    return tuple(a[rows.start:rows.stop] for a in arrays)
