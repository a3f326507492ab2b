"""shard_range and split_by_rank: contiguous blocks in rank order that cover the data exactly once."""

from __future__ import annotations

import numpy as np
import pytest

from frame_distributed import DistributedError, LocalCommunicator, shard_range, split_by_rank


@pytest.mark.parametrize("n", [0, 1, 2, 5, 36, 37, 1000])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_blocks_cover_every_index_once_in_rank_order(n, size):
    blocks = [shard_range(n, r, size) for r in range(size)]
    assert [i for b in blocks for i in b] == list(range(n))
    lengths = [len(b) for b in blocks]
    assert max(lengths) - min(lengths) <= 1
    assert lengths == sorted(lengths, reverse=True)  # the larger blocks come first


def test_bad_arguments_to_shard_range():
    for args in [(-1, 0, 2), (4, 2, 2), (4, 0, 0), (4, -1, 2)]:
        with pytest.raises(DistributedError, match="needs n >= 0, size >= 1 and 0 <= rank < size"):
            shard_range(*args)
    with pytest.raises(DistributedError, match="rank must be an int"):
        shard_range(4, 0.5, 2)


def test_split_by_rank_returns_views_of_this_ranks_rows(run_ranks):
    x, t = np.arange(22.0).reshape(11, 2), np.arange(11.0)
    shards = run_ranks(3, lambda comm: split_by_rank(x, t, comm=comm))
    assert [len(xs) for xs, _ in shards] == [4, 4, 3]
    np.testing.assert_array_equal(np.concatenate([xs for xs, _ in shards]), x)
    np.testing.assert_array_equal(np.concatenate([ts for _, ts in shards]), t)
    assert all(np.shares_memory(xs, x) for xs, _ in shards)  # views, not copies


def test_split_by_rank_refuses_misaligned_data():
    local = LocalCommunicator()
    with pytest.raises(DistributedError, match=r"same number of rows \(axis 0\), got \[4, 3\]"):
        split_by_rank(np.zeros((4, 2)), np.zeros(3), comm=local)
    with pytest.raises(DistributedError, match="needs at least one array"):
        split_by_rank(comm=local)
    with pytest.raises(DistributedError, match="argument 1 must be a numpy array with a leading sample axis"):
        split_by_rank(np.zeros(3), [1, 2, 3], comm=local)
