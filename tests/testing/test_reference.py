"""value_gradient_hvp against closed forms, and torch_value_gradient_hvp against it."""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import ops
from frame_core.errors import ArgumentError
from frame_core.testing import torch_value_gradient_hvp, value_gradient_hvp

RNG = np.random.default_rng(7)


def test_value_gradient_and_hvp_of_a_two_input_cubic_match_closed_forms():
    x, y = RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, (4,))
    w = RNG.uniform(-1, 1, (3, 4))
    vx, vy = RNG.uniform(-1, 1, x.shape), RNG.uniform(-1, 1, y.shape)
    # L = sum(w * x^3 * y): dL/dx = 3 w x^2 y, dL/dy = sum_rows(w x^3)
    value, (gx, gy), (hx, hy) = value_gradient_hvp(lambda a, b: a * a * a * b, [x, y], w, [vx, vy])
    np.testing.assert_allclose(value, np.sum(w * x ** 3 * y), rtol=1e-13)
    np.testing.assert_allclose(gx, 3 * w * x ** 2 * y, rtol=1e-12)
    np.testing.assert_allclose(gy, np.sum(w * x ** 3, axis=0), rtol=1e-12)
    # d/dx <vx, gx> + <vy, gy> = 6 w x y vx + 3 w x^2 vy ; d/dy = sum_rows(3 w x^2 vx)
    np.testing.assert_allclose(hx, 6 * w * x * y * vx + 3 * w * x ** 2 * vy, rtol=1e-12)
    np.testing.assert_allclose(hy, np.sum(3 * w * x ** 2 * vx, axis=0), rtol=1e-12)


def test_a_linear_function_has_zero_hvps_on_both_sides():
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    x, w, v = RNG.standard_normal((5,)), RNG.standard_normal((5,)), RNG.standard_normal((5,))
    mine = value_gradient_hvp(lambda a: a * 2.0, [x], w, [v])
    theirs = torch_value_gradient_hvp(lambda a: a * 2.0, [x], w, [v])
    assert theirs[0] == pytest.approx(mine[0], rel=1e-14)
    np.testing.assert_array_equal(mine[1][0], theirs[1][0])
    np.testing.assert_array_equal(mine[2][0], np.zeros(5))
    np.testing.assert_array_equal(theirs[2][0], np.zeros(5))


@pytest.mark.parametrize("helper", [value_gradient_hvp, torch_value_gradient_hvp])
def test_one_direction_per_input_is_required(helper):
    x = np.ones(3)
    with pytest.raises(ArgumentError, match="one direction per input: got 1 input"):
        helper(ops.tanh, [x], np.ones(3), [])
    with pytest.raises(ArgumentError, match="at least one input"):
        helper(ops.tanh, [], np.ones(3), [])
