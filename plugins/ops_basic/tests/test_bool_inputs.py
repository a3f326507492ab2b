"""Arithmetic ops and reductions refuse bool inputs at shape inference; integers stay allowed.

numpy refuses boolean ``negative``/``subtract`` only at run time, and
``sum(dtype=bool)`` computes a logical any instead of a count, so the error
belongs in shape inference, where it can say what to do (cast first).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

# (op, function, input types)
REFUSED = [
    ("neg", lambda x: -x, ["bool[3]"]),
    ("relu", lambda x: ops.relu(x), ["bool[3]"]),
    ("sum", lambda x: x.sum(), ["bool[3]"]),
    ("mean", lambda x: x.mean(), ["bool[3]"]),
    ("add", lambda a, b: a + b, ["bool[3]", "bool[3]"]),
    ("sub", lambda a, b: a - b, ["bool[2, 3]", "bool[3]"]),
    ("mul", lambda a, b: a * b, ["bool[3]", "bool[]"]),
    ("reduce_to_shape_internal", lambda x: ops.reduce_to_shape_internal(x, shape=[3]), ["bool[2, 3]"]),
]


@pytest.mark.parametrize("op, fn, types", REFUSED, ids=[r[0] for r in REFUSED])
def test_bool_inputs_are_refused_with_what_to_do(op, fn, types):
    with pytest.raises(fc.ShapeError) as info:
        fc.trace(fn, *types)
    message = str(info.value)
    assert message.startswith(f"{op}:"), message
    assert "bool[" in message and "numeric" in message and "cast" in message, message


# integer arithmetic and sums keep working (and keep their dtype)
ALLOWED = [
    ("neg", lambda x: -x, lambda x: -x),
    ("relu", lambda x: ops.relu(x), lambda x: np.maximum(x, 0)),
    ("sum", lambda x: x.sum(), lambda x: x.sum(dtype=np.int32)),
    ("add", lambda x: x + x, lambda x: x + x),
    ("sub", lambda x: x - x * x, lambda x: x - x * x),
]


@pytest.mark.parametrize("op, fn, reference", ALLOWED, ids=[r[0] for r in ALLOWED])
def test_integer_inputs_are_still_accepted(op, fn, reference):
    x = np.array([-3, 0, 2, 7], np.int32)
    (got,) = fc.compile(fc.trace(fn, "i32[4]"), cache=False).run([x])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, reference(x))
