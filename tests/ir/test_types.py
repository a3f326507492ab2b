"""TensorType (shorthand parse/print) and DType."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest

from frame_core import IRError, TensorType
from frame_core.ir import dtypes
from frame_core.ir.dtypes import DTYPES, as_dtype
from frame_core.ir.types import as_type

# (shorthand, dtype, shape, device) -- str() of the parsed type gives the shorthand back
ROUND_TRIP = [
    ("f32[2, 3]", dtypes.float32, (2, 3), "cpu"),
    ("f16[]", dtypes.float16, (), "cpu"),
    ("bf16[1]", dtypes.bfloat16, (1,), "cpu"),
    ("f64[0, 4]", dtypes.float64, (0, 4), "cpu"),
    ("i32[7]", dtypes.int32, (7,), "cpu"),
    ("i64[2, 2, 2]", dtypes.int64, (2, 2, 2), "cpu"),
    ("bool[3]", dtypes.bool_, (3,), "cpu"),
    ("f32[128, 784]@gpu0", dtypes.float32, (128, 784), "gpu0"),
    ("f32[2]@cuda:0", dtypes.float32, (2,), "cuda:0"),
    ("bf16[]@xpu.1-a", dtypes.bfloat16, (), "xpu.1-a"),
]


@pytest.mark.parametrize("device", ["cuda:0", "gpu-1.x"])
def test_a_graph_with_a_device_name_loads_back(device):
    from frame_core import Graph, dumps, loads
    graph = Graph("on_device")
    graph.mark_output(graph.add_input(TensorType("f32", (2,), device=device), "x"))
    assert loads(dumps(graph)).inputs[0].type.device == device


@pytest.mark.parametrize("device", ["gpu 0", "a]b", "-x", ":0", "gpu\n"])
def test_a_device_name_str_could_not_write_readably_is_refused(device):
    # str() writes "f32[2]@<device>", which save_graph stores and load_graph parses: it must read back
    with pytest.raises(IRError, match="a device name holds letters, digits"):
        TensorType("f32", (2,), device=device)


@pytest.mark.parametrize("text, dtype, shape, device", ROUND_TRIP)
def test_shorthand_parses_and_prints_back(text, dtype, shape, device):
    t = TensorType.parse(text)
    assert (t.dtype, t.shape, t.device) == (dtype, shape, device)
    assert str(t) == text
    assert TensorType.parse(str(t)) == t


@pytest.mark.parametrize("text, expected", [
    (" f64 [ 2 , 3 ] ", "f64[2, 3]"),
    ("float32[4]", "f32[4]"),
    ("int64[]", "i64[]"),
    ("f32[ ]", "f32[]"),
    ("f32[2] @ dev", "f32[2]@dev"),
])
def test_shorthand_accepts_spacing_and_long_dtype_names(text, expected):
    assert str(TensorType.parse(text)) == expected


@pytest.mark.parametrize("text", [
    "", "f32", "f32[2", "f32 2, 3]", "[2, 3]", "f33[2]", "f32[-1]", "f32[1 2]", "f32[2,,3]", "f32[,]",
    "f32[2,]", "f32[a]", "f32[2.5]", "f32[2]@", "f32[2] extra", "complex64[2]",
])
def test_bad_shorthand_raises_irerror_quoting_the_text(text):
    with pytest.raises(IRError) as info:
        TensorType.parse(text)
    assert repr(text) in str(info.value)
    assert "expected" in str(info.value)


def test_parse_of_a_non_string_is_an_irerror():
    with pytest.raises(IRError):
        TensorType.parse(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(-1,), (2.0,), ("3",), (True,), 5, None])
def test_constructor_rejects_bad_shapes(shape):
    with pytest.raises(IRError, match="shape"):
        TensorType("f32", shape)


def test_constructor_accepts_numpy_ints_and_lists():
    t = TensorType("f32", [np.int64(2), np.int32(3)])
    assert t.shape == (2, 3) and all(type(d) is int for d in t.shape)


def test_type_facts_equality_hash_and_immutability():
    t = TensorType("f32", (2, 3))
    assert (t.rank, t.size, t.nbytes) == (2, 6, 24)
    assert TensorType.parse("f32[]").size == 1 and TensorType.parse("f32[0, 3]").size == 0
    assert t == TensorType.parse("f32[2, 3]") and hash(t) == hash(TensorType.parse("f32[2, 3]"))
    assert t != TensorType("f64", (2, 3)) and t != TensorType("f32", (3, 2)) and t != TensorType("f32", (2, 3), "gpu")
    assert t.with_shape((6,)) == TensorType.parse("f32[6]") and t.with_dtype("i32") == TensorType.parse("i32[2, 3]")
    with pytest.raises(AttributeError):
        t.shape = (1,)  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(t)) == t


def test_as_type_accepts_types_and_shorthands_only():
    t = TensorType.parse("f32[2]")
    assert as_type(t) is t and as_type("f32[2]") == t
    with pytest.raises(IRError, match="TensorType"):
        as_type(3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_every_dtype_is_found_by_name_short_name_and_numpy_dtype(dtype):
    assert as_dtype(dtype.name) is dtype
    assert as_dtype(dtype.short) is dtype
    assert as_dtype(dtype.np) is dtype
    assert as_dtype(dtype) is dtype
    assert dtype.np.itemsize == dtype.itemsize
    assert pickle.loads(pickle.dumps(dtype)) is dtype


def test_dtype_kinds():
    assert [d.short for d in DTYPES if d.is_float] == ["f16", "bf16", "f32", "f64"]
    assert [d.short for d in DTYPES if d.is_int] == ["i32", "i64"]
    assert not dtypes.bool_.is_float and not dtypes.bool_.is_int


def test_bfloat16_is_the_ml_dtypes_type():
    assert dtypes.bfloat16.np == np.dtype(ml_dtypes.bfloat16)
    assert as_dtype(np.zeros(2, ml_dtypes.bfloat16).dtype) is dtypes.bfloat16


@pytest.mark.parametrize("value", ["float8", "f8", np.complex64, np.dtype("O"), np.uint8, object(), None])
def test_unsupported_dtype_raises_irerror_listing_the_choices(value):
    with pytest.raises(IRError) as info:
        as_dtype(value)
    assert "f16, bf16, f32, f64, i32, i64, bool" in str(info.value)
