"""ir.tensors.zeros: one read-only array per type, shared by every graph that holds it (the closure audit makes
zero gradients by the thousand), which nobody can write through."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core.ir import tensors
from frame_core.ir.graph import Graph, is_zero_constant
from frame_core.ir.types import as_type


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
    monkeypatch.setattr(tensors, "_ZEROS_LIMIT", 3)
    for n in range(1, 8):
        tensors.zeros(as_type(f"f32[{n}]"))
    assert len(tensors._ZEROS) <= 3
