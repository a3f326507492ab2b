"""ir.tensors.zeros: one read-only array per type, shared by every graph that holds it (the closure audit makes
zero gradients by the thousand), which nobody can write through."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core.ir import tensors
from frame_core.ir.dtypes import DTYPES
from frame_core.ir.graph import Graph, is_zero_constant
from frame_core.ir.keys import plain_attrs_key
from frame_core.ir.types import TensorType, as_type


def test_one_array_per_type_immutable_all_the_way_down():
    a, b = tensors.zeros(as_type("f32[2, 3]")), tensors.zeros(as_type("f32[2, 3]"))
    assert a is b and a.shape == (2, 3) and a.dtype == np.float32 and not a.any()
    assert tensors.zeros(as_type("f64[2, 3]")) is not a and tensors.zeros(as_type("f32[3, 2]")).shape == (3, 2)
    assert tensors.frozen(a) is a  # read-only down to its memory: graphs keep it without a copy
    with pytest.raises(ValueError):
        a[0, 0] = 1.0
    with pytest.raises(ValueError):
        a.flags.writeable = True  # a broadcast view of a read-only scalar cannot be made writeable


def test_graphs_holding_the_shared_zero_are_independent():
    g1, g2 = Graph("one"), Graph("two")
    z1, z2 = g1.zeros("f32[4]"), g2.zeros("f32[4]")
    assert is_zero_constant(z1) and is_zero_constant(z2) and z1.producer is not z2.producer


def test_the_store_is_bounded(monkeypatch):
    monkeypatch.setattr(tensors, "_ZEROS", {})
    monkeypatch.setattr(tensors, "_SHARED", {})
    monkeypatch.setattr(tensors, "_ZEROS_LIMIT", 3)
    first = tensors.zeros(as_type("f32[1]"))
    for n in range(2, 8):
        tensors.zeros(as_type(f"f32[{n}]"))
    assert len(tensors._ZEROS) <= 3 and len(tensors._SHARED) == len(tensors._ZEROS)
    assert tensors.shared_zeros(first) is None  # evicted: an ordinary array again (keyed by its bytes)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3), (4, 1, 3)])
def test_each_array_is_what_broadcast_to_gave(shape):
    """zeros builds its view directly; every property broadcast_to gave it is kept (dtypes of every width)."""
    for dtype in DTYPES:
        made = tensors.zeros(TensorType(dtype, shape))
        scalar = np.zeros((), dtype.np)
        scalar.flags.writeable = False
        expected = np.broadcast_to(scalar, shape)
        assert (made.dtype, made.shape, made.strides) == (expected.dtype, expected.shape, expected.strides)
        assert made.tobytes() == expected.tobytes() and not made.any()
        for flag in ("writeable", "owndata", "c_contiguous", "f_contiguous", "aligned"):
            assert getattr(made.flags, flag) == getattr(expected.flags, flag), (dtype, shape, flag)
        assert made.base.shape == () and not made.base.flags.writeable


def test_shared_zeros_are_known_by_identity_only():
    t = as_type("f32[2, 3]")
    z = tensors.zeros(t)
    assert tensors.shared_zeros(z) is t
    for other in (np.zeros((2, 3), np.float32), z.copy(), z[:1], np.broadcast_to(np.float32(0), (2, 3))):
        assert tensors.shared_zeros(other) is None


def test_attribute_keys_of_shared_zeros():
    """A shared zero array of any size has a plain key (by its type): equal for the same type, different for
    another; an ordinary array too large to key by its bytes still has none."""
    big = tensors.zeros(as_type("f32[64, 64]"))  # 16 kB: above the bytes-keyed limit
    assert plain_attrs_key({"value": big}) == plain_attrs_key({"value": tensors.zeros(as_type("f32[64, 64]"))})
    assert plain_attrs_key({"value": big}) is not None
    assert plain_attrs_key({"value": big}) != plain_attrs_key({"value": tensors.zeros(as_type("f64[64, 64]"))})
    assert plain_attrs_key({"value": big}) != plain_attrs_key({"value": tensors.zeros(as_type("f32[64, 65]"))})
    assert plain_attrs_key({"value": np.zeros((64, 64), np.float32)}) is None
    small = tensors.zeros(as_type("f32[3]"))
    assert plain_attrs_key({"value": small}) != plain_attrs_key({"value": np.ones(3, np.float32)})


def test_zero_test_of_shared_and_large_constants():
    g = Graph("g")
    assert is_zero_constant(g.zeros("f32[8, 8]"))
    assert not is_zero_constant(g.zeros("f32[512, 512]"))  # above INSPECT_LIMIT: never inspected, shared or not
    assert not is_zero_constant(g.constant(np.array([0.0, 1.0], np.float32)))
    assert is_zero_constant(g.constant(np.array([0.0, -0.0], np.float32)))
