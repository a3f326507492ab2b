"""Helpers the pack's ops share: broadcast axes, the accumulation dtype, the gradient of broadcasting."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_ops_basic import elementwise, linalg
from frame_ops_basic._shapes import accumulation_dtype, broadcast_axes


def axes_by_brute_force(src: tuple[int, ...], dst: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of ``src`` over which summing an array of shape ``src`` (keepdims) gives shape ``dst``."""
    padded = (None,) * (len(src) - len(dst)) + tuple(dst)
    return tuple(i for i, (s, d) in enumerate(zip(src, padded)) if d is None or (d == 1 and s != 1))


# (broadcast shape, operand shape)
SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 4), (3, 1)), ((2, 3), ()), ((5, 1, 4), (1, 1, 4)),
          ((6, 2, 3, 4), (2, 1, 4)), ((2, 7, 3, 5), (7, 3, 5)), ((2, 1, 3, 5), (1, 3, 5))]


@pytest.mark.parametrize("src, dst", SHAPES, ids=[f"{s}->{d}" for s, d in SHAPES])
def test_broadcast_axes_are_the_axes_broadcasting_added_or_stretched(src, dst):
    axes = broadcast_axes(src, dst)
    assert axes == axes_by_brute_force(src, dst)
    x = np.ones(src)
    assert np.sum(x, axis=axes, keepdims=True).reshape(dst).shape == dst


@pytest.mark.parametrize("dtype, want", [("f16", np.float32), ("bf16", np.float32), ("f32", np.float32),
                                         ("f64", np.float64), ("i32", np.int32), ("i64", np.int64)])
def test_half_precision_accumulates_in_float32_and_the_rest_in_their_own_dtype(dtype, want):
    assert accumulation_dtype(fc.TensorType.parse(f"{dtype}[3]")) == np.dtype(want)


def test_elementwise_and_matmul_gradients_share_one_unbroadcast():
    assert linalg.unbroadcast is elementwise.unbroadcast
    assert not hasattr(linalg, "unreduce")
