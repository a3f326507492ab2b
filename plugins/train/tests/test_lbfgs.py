"""L-BFGS through scipy on a compiled value-and-gradient, and the PINN example (Adam, then L-BFGS)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from frame_core import ops
import frame_train as ft

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_pinn_lbfgs.py"


def rosenbrock(p):
    x, y = p["xy"][0], p["xy"][1]
    return ops.square(1.0 - x) + ops.square(y - ops.square(x)) * 100.0


def test_value_and_gradient_over_the_flat_vector():
    params = {"b": np.array([0.5, -1.0]), "a": np.array([[1.0, 2.0], [3.0, 4.0]])}
    fun, x0, unravel = ft.flat_value_and_grad(lambda p: ops.sum(ops.square(p["a"])) + ops.sum(p["b"] * 3.0), params)
    np.testing.assert_array_equal(x0, [1.0, 2.0, 3.0, 4.0, 0.5, -1.0])  # optree order: a, then b
    value, grad = fun(x0)
    assert value == pytest.approx(30.0 - 1.5)
    np.testing.assert_allclose(grad, [2.0, 4.0, 6.0, 8.0, 3.0, 3.0])
    np.testing.assert_array_equal(unravel(x0)["a"], params["a"])


def test_lbfgs_minimises_rosenbrock():
    params, result = ft.lbfgs(rosenbrock, {"xy": np.array([-1.2, 1.0])}, maxiter=200)
    assert result.success
    np.testing.assert_allclose(params["xy"], [1.0, 1.0], atol=1e-5)


def test_lbfgs_refuses_float32():
    with pytest.raises(ft.OptimizerError, match="L-BFGS works on float64 parameters.*xy: f32\\[2\\]"):
        ft.lbfgs(rosenbrock, {"xy": np.array([-1.2, 1.0], np.float32)})


def test_pinn_adam_then_lbfgs_reaches_the_error_bound():
    """The example, reduced (200 Adam steps, 200 L-BFGS iterations, 32 points): still below 1e-3."""
    spec = importlib.util.spec_from_file_location("train_pinn_lbfgs", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    _, error, stats = example.solve(adam_steps=200, lbfgs_iters=200, points=32, hidden=20, verbose=False)
    assert error < 1e-3
    assert stats["lbfgs_loss"] < stats["adam_loss"]  # L-BFGS improved on Adam
