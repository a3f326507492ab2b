"""The native pack's records behave as the dataclasses they replace (written out to keep start-up cheap, issue 21):
each is compared with a dataclass built from the same fields (frozen for ``Geometry``, plain for the plans and
``Tier``)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import numpy as np
import pytest

from frame_native.conv import Geometry, _Plan
from frame_native.rows import ColumnPlan, RowPlan
from frame_native.tiered import Tier

GEO = (np.dtype(np.float32), 2, 3, 8, 9, 4, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1))


def reference(cls: type, frozen: bool, unshown: tuple[str, ...] = ()) -> type:
    """A dataclass with ``cls``'s name, fields, defaults and hidden-from-repr fields."""
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params] == list(cls.__match_args__)
    fields = [(p.name, object, dataclasses.field(repr=p.name not in unshown,
                                                 **({} if p.default is p.empty else {"default": p.default})))
              for p in params]
    ref = dataclasses.make_dataclass(cls.__name__, fields, frozen=frozen)
    ref.__qualname__ = cls.__qualname__
    return ref


def test_geometry_behaves_as_a_frozen_dataclass():
    geo, expected = Geometry(*GEO), reference(Geometry, frozen=True)(*GEO)
    assert repr(geo) == repr(expected) and hash(geo) == hash(expected)
    assert geo == Geometry(*GEO) and not (geo != Geometry(*GEO)) and geo != expected and geo != GEO
    assert geo.replace(batch=7) == Geometry(*GEO[:1], 7, *GEO[2:]) and geo.batch == 2
    assert repr(geo.replace(batch=7)) == repr(dataclasses.replace(expected, batch=7))
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'batch'"):
        geo.batch = 3
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'c'"):
        del geo.c
    for twin in (pickle.loads(pickle.dumps(geo)), copy.copy(geo), copy.deepcopy(geo)):
        assert twin == geo and hash(twin) == hash(geo)


@pytest.mark.parametrize("cls, values, unshown", [
    (_Plan, ("pool", Geometry(*GEO), "bias_first"), ()),
    (RowPlan, ("layer_norm", np.dtype(np.float64), 4, 16, 1e-5, [(4, 16), (16,), (4, 16), (16,)], 2), ()),
    (ColumnPlan, ("colsum", np.dtype(np.float32), 8, 3), ()),
    (Tier, (), ("slot",)),
    (Tier, ("native", 1.5, 2.5, "cache", 12, 3, [len]), ("slot",)),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_plans_behave_as_plain_dataclasses(cls, values, unshown):
    record, expected = cls(*values), reference(cls, frozen=False, unshown=unshown)(*values)
    assert repr(record) == repr(expected)
    assert record.__hash__ is None and expected.__hash__ is None
    copied = cls(*[copy.copy(getattr(record, name)) for name in cls.__match_args__])
    assert record == copied and not (record != copied) and record != expected
    first = cls.__match_args__[0]
    setattr(copied, first, "changed")  # mutable, and the change counts in ==
    assert copied != record and getattr(copied, first) == "changed"
    assert pickle.loads(pickle.dumps(record)) == record


def test_every_tier_gets_its_own_slot_list():
    a, b = Tier(), Tier()
    a.slot.append(len)
    assert b.slot == [] and a != b and "slot" not in repr(a)
