"""The packs' geometry records behave as the frozen dataclasses they replace (written out to keep start-up cheap,
issue 21): each is compared with a ``@dataclass(frozen=True)`` built from the same fields."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import numpy as np
import pytest

from frame_core import TensorType
from frame_ops_nn.conv import Geometry
from frame_ops_nn.pool import PoolGeometry as PoolGeometry2d
from frame_ops_sequence._pooling import PoolGeometry as PoolGeometry1d
from frame_ops_sequence._selective import Layout
from frame_ops_sequence.conv import ConvGeometry

CASES = [
    (ConvGeometry, (2, 4, 6, 10, 3, 1, 2, 2, 1, 1, 8)),
    (PoolGeometry1d, (10, 2, 2, 0, 0, 5)),
    (Layout, (TensorType.parse("f32[2, 4, 7]"), 2, 4, 7, 3, 1, "variable", "constant", ("D",))),
    (Layout, (TensorType.parse("f32[2, 4, 7]"), 2, 4, 7, 3, 2, "grouped", "grouped", (), 2, 1)),
    (PoolGeometry2d, ((5, 6), (2, 2), (2, 2), (0, 0), (1, 0), (3, 3))),
    (Geometry, (2, 3, 4, 1, (5, 6), (3, 3), (1, 2), (1, 1), (1, 0), (1, 0), (5, 3))),
]


def reference(cls: type) -> type:
    """A frozen dataclass with ``cls``'s name, fields and defaults."""
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params] == list(cls.__match_args__)
    fields = [(p.name, object) if p.default is p.empty else (p.name, object, dataclasses.field(default=p.default))
              for p in params]
    ref = dataclasses.make_dataclass(cls.__name__, fields, frozen=True)
    ref.__qualname__ = cls.__qualname__
    return ref


@pytest.mark.parametrize("cls, values", CASES, ids=lambda c: getattr(c, "__module__", ""))
def test_record_behaves_as_a_frozen_dataclass(cls, values):
    ref = reference(cls)
    record, expected = cls(*values), ref(*values)
    assert repr(record) == repr(expected)
    assert hash(record) == hash(expected)
    assert record.__match_args__ == expected.__match_args__
    keywords = {name: getattr(expected, name) for name in cls.__match_args__}
    assert cls(**keywords) == record and not (cls(**keywords) != record)
    assert [getattr(record, name) for name in cls.__match_args__] == list(values) + [
        getattr(expected, name) for name in cls.__match_args__[len(values):]]
    assert record != expected and record != values and (record == values) is False  # other classes: never equal
    first = cls.__match_args__[0]
    for change in (1, 10**6):
        other = record.replace(**{first: change})
        assert other == cls(**{**keywords, first: change}) and other != record
        assert repr(other) == repr(dataclasses.replace(expected, **{first: change}))
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        record.replace(nope=1)
    with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{first}'"):
        setattr(record, first, 0)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'new'"):
        record.new = 0
    with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{first}'"):
        delattr(record, first)
    for twin in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
        assert twin == record and hash(twin) == hash(record) and twin is not record
    assert len({record, cls(*values)}) == 1
    with pytest.raises(TypeError):
        cls(*values[:1])


def test_equal_values_of_other_types_still_compare_as_tuples_do():
    # the dataclass compares field tuples: 2 == 2.0 and np.int64(2) == 2, and so do the records
    ints = ConvGeometry(2, 4, 6, 10, 3, 1, 2, 2, 1, 1, 8)
    mixed = ConvGeometry(2.0, np.int64(4), 6, 10, 3, 1, 2, 2, 1, 1, 8)
    assert ints == mixed and hash(ints) == hash(mixed)
    assert ints != ConvGeometry(2, 4, 6, 10, 3, 1, 2, 2, 1, 1, 9)
