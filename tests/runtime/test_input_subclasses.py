"""ndarray subclasses as run() inputs (found in QA): a masked array ran with its mask kept by elementwise kernels
and dropped by reductions, and came back as a masked array; a subclass such as np.matrix came back as that subclass."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import InputError, ops


@pytest.mark.parametrize("codegen", [True, False], ids=["first-run", "later-runs"])
def test_a_masked_array_is_refused_saying_what_to_pass(codegen):
    exe = fc.compile(fc.trace(lambda x: ops.relu(x) * 2.0, "f32[3]"), cache=False)
    if not codegen:
        exe.run([np.ones(3, np.float32)])  # the generated code's input check, not the first run's
    x = np.ma.masked_array(np.array([1.0, -2.0, 3.0], np.float32), mask=[0, 1, 0])
    with pytest.raises(InputError, match=r"is a masked array.*x\.filled\(value\)"):
        exe.run([x])
    np.testing.assert_array_equal(exe.run([x.filled(0.0)])[0], [2.0, 0.0, 6.0])


class Tagged(np.ndarray):
    """An ndarray subclass of a user's (as np.matrix or a memmap): ufuncs hand back their own class."""


def test_other_subclasses_run_as_plain_arrays_and_give_plain_arrays():
    exe = fc.compile(fc.trace(lambda x: ops.relu(x), "f32[1, 3]"), cache=False)
    for _ in range(2):
        (y,) = exe.run([np.array([[1.0, -2.0, 3.0]], np.float32).view(Tagged)])
        assert type(y) is np.ndarray
        np.testing.assert_array_equal(y, [[1.0, 0.0, 3.0]])
