"""frame has no complex dtype (complex values are packed, ARCH-067): wherever a user hands one in, the error
says how to pack it. An input error used to advise array.astype(np.float32), which drops the imaginary part
without a word."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.errors import AttributeSpecError, InputError, IRError

PACKED = "np.stack([z.real, z.imag], axis=-1)"


def test_a_complex_input_array_is_told_to_pack_not_to_astype():
    ex = fc.compile(fc.trace(lambda x: ops.sum(x), "f32[4, 2]"))
    with pytest.raises(InputError) as info:
        ex.run([np.ones(4, np.complex64)])
    assert PACKED in str(info.value) and "astype" not in str(info.value)


def test_a_real_input_of_the_wrong_dtype_still_gets_astype():
    ex = fc.compile(fc.trace(lambda x: ops.sum(x), "f32[4]"))
    with pytest.raises(InputError, match=r"astype\(np\.float32\)"):
        ex.run([np.ones(4, np.float64)])


@pytest.mark.parametrize("build, error", [
    (lambda x: x * np.array(1 + 2j, dtype=np.complex64), AttributeSpecError),
    (lambda x: ops.cast(x, to="complex64"), AttributeSpecError),
    (lambda x: ops.cast(x, to=np.complex128), AttributeSpecError),
])
def test_complex_constants_and_dtypes_are_told_to_pack(build, error):
    with pytest.raises(error) as info:
        fc.trace(build, "f32[4]")
    assert PACKED in str(info.value)


@pytest.mark.parametrize("text", ["c64[3]", "complex128[2]"])
def test_complex_type_strings_are_told_to_pack(text):
    with pytest.raises(IRError) as info:
        fc.TensorType.parse(text)
    assert PACKED in str(info.value)


def test_other_unsupported_dtypes_get_no_complex_hint():
    with pytest.raises(IRError) as info:
        fc.TensorType.parse("i8[2]")
    assert "complex" not in str(info.value)
