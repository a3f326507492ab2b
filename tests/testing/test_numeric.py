"""frame_core.testing.numeric and retype: finite differences, user-graph checks, random directions, low precision."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops, trace
from frame_core.compiler.api import compile
from frame_core.errors import ShapeError
from frame_core.ir.verify import verify
from frame_core.testing import (
    MAX_FULL_ELEMENTS,
    TOLERANCE,
    central_difference,
    central_second_difference,
    check_gradients,
    check_low_precision,
    check_random_direction,
    directional_difference,
    relative_error,
    retype_graph,
)

RNG = np.random.default_rng(20260723)


# -- the finite-difference helpers ----------------------------------------------------------------
def test_central_difference_matches_the_derivative():
    x = RNG.uniform(-2, 2, (3, 4))
    numeric = central_difference(lambda a: float(np.sum(np.sin(a))), x)
    np.testing.assert_allclose(numeric, np.cos(x), rtol=0, atol=1e-9)


def test_central_difference_scales_its_step_with_large_inputs():
    # an absolute step of 1e-6 would leave ~1e-5 relative rounding error at |x| = 3e5 (eps * 9e10 / 2e-6)
    x = np.array([1e4, -3e5])
    numeric = central_difference(lambda a: float(np.sum(a ** 2)), x)
    np.testing.assert_allclose(numeric, 2 * x, rtol=1e-6)


def test_central_second_difference_of_a_polynomial():
    # f(t) = t^3 - 2 t^2 + 5: f''(t) = 6 t - 4 (ARCH-069: analytic polynomial second derivative)
    for t in (-1.5, 0.0, 0.7, 12.0):
        got = central_second_difference(lambda s: s ** 3 - 2 * s ** 2 + 5, t)
        assert got == pytest.approx(6 * t - 4, rel=1e-6, abs=1e-6)


def test_directional_difference_of_a_quadratic_form():
    a = RNG.standard_normal((5, 5))
    x, v = RNG.standard_normal(5), RNG.standard_normal(5)
    got = directional_difference(lambda z: float(z @ a @ z), x, v)
    assert got == pytest.approx(float((a + a.T) @ x @ v), rel=1e-8)


def test_relative_error_is_relative_above_one_and_absolute_below():
    assert relative_error([101.0], [100.0]) == pytest.approx(1 / 101)
    assert relative_error([1e-3], [0.0]) == pytest.approx(1e-3)
    assert relative_error(np.zeros(0), np.zeros(0)) == 0.0
    assert relative_error([np.nan], [1.0]) == float("inf")
    assert relative_error(np.zeros(2), np.zeros(3)) == float("inf")


# -- retype_graph -----------------------------------------------------------------------------------
def test_retype_graph_recomputes_in_float64(kit):
    g = trace(lambda x, w: ops.tanh(x @ w) * 0.1 + 1.0, "f32[2, 3]", "f32[3, 4]")
    g64 = retype_graph(g, "f64")
    verify(g64, kit)
    assert [str(t) for t in g64.input_types] == ["f64[2, 3]", "f64[3, 4]"]
    assert all(v.type.dtype.name == "float64" for n in g64.nodes for v in n.outputs)
    constants = [n.attrs["value"] for n in g64.nodes if n.op == "constant"]
    assert constants and all(c.dtype == np.float64 for c in constants)
    assert g.input_types[0].dtype.name == "float32"  # the original is untouched
    x, w = RNG.uniform(-1, 1, (2, 3)), RNG.uniform(-1, 1, (3, 4))
    (y,) = compile(g64, registry=kit, cache=False).run([x, w])
    np.testing.assert_allclose(y, np.tanh(x @ w) * np.float32(0.1) + 1.0, rtol=1e-12)


def test_retype_graph_keeps_integer_inputs(kit):
    g = trace(lambda x, n: ops.fx_bad_slot(x, n), "f32[3]", "i64[3]")
    assert [str(t) for t in retype_graph(g, "f64").input_types] == ["f64[3]", "i64[3]"]


def test_retype_graph_names_the_node_that_refuses_the_dtype(kit):
    g = trace(lambda x: ops.fx_f32_only(ops.sin(x)), "f32[3]")
    with pytest.raises(ShapeError, match=r"node 1 \(fx_f32_only\) rejects \[f16\[3\]\]"):
        retype_graph(g, "f16")


# -- check_gradients on user graphs -------------------------------------------------------------------
def test_check_gradients_passes_a_composed_chain_to_second_order(kit):
    g = trace(lambda x, w, b, t: ops.mse_loss(ops.relu(x @ w + b), t), "f32[4, 3]", "f32[3, 2]", "f32[2]", "f32[4, 2]")
    x, w, b, t = (RNG.uniform(-1, 1, s).astype(np.float32) for s in [(4, 3), (3, 2), (2,), (4, 2)])
    assert np.min(np.abs(x @ w + b)) > 1e-4  # away from relu's kink, where central differences are meaningless
    report = check_gradients(g, [x, w, b, t], order=2)
    report.assert_ok()
    assert [r.check for r in report.results] == ["gradient_order1", "gradient_order2"]
    assert report.worst_error(1) <= TOLERANCE[1] and report.worst_error(2) <= TOLERANCE[2]


def test_check_gradients_contracts_a_non_scalar_output_and_handles_disconnected_inputs(kit):
    g = trace(lambda x, unused: ops.tanh(x) * x, "f64[3, 2]", "f64[4]")
    report = check_gradients(g, [RNG.uniform(-1, 1, (3, 2)), RNG.uniform(-1, 1, 4)], order=2)
    report.assert_ok()
    assert "unused: 0" in report.results[0].detail


def test_check_gradients_fails_on_a_wrong_sign_and_says_where(kit):
    g = trace(lambda x, y: ops.sum(ops.fx_sin_wrong_sign(x) * y), "f64[4]", "f64[4]")
    report = check_gradients(g, [RNG.uniform(-1, 1, 4), RNG.uniform(0.5, 1, 4)])
    assert not report.ok
    (result,) = report.results
    assert result.error > 0.1
    assert "x: " in result.detail and "analytic" in result.detail and "finite difference" in result.detail
    with pytest.raises(AssertionError, match="gradient_order1"):
        report.assert_ok()


def test_check_gradients_finds_an_error_only_at_second_order(kit):
    g = trace(lambda x: ops.sum(ops.fx_cube_bad2(x)), "f64[5]")
    report = check_gradients(g, [RNG.uniform(-1, 1, 5)], order=2)
    first, second = report.results
    assert first.ok and not second.ok
    assert second.error > 0.1


# -- random directions -------------------------------------------------------------------------------
def test_random_direction_check_on_a_large_tensor(kit):
    shape = (40, 40)
    assert np.prod(shape) > MAX_FULL_ELEMENTS
    x = RNG.uniform(-1, 1, shape)
    good = trace(lambda x: ops.sum(ops.fx_sin(x) * x), "f64[40, 40]")
    result = check_random_direction(good, [x], directions=4)
    assert result.ok and result.check == "random_direction", result
    assert result.error < TOLERANCE[1]
    bad = trace(lambda x: ops.sum(ops.fx_sin_wrong_sign(x) * x), "f64[40, 40]")
    result = check_random_direction(bad, [x], directions=2)
    assert not result.ok and "g.v" in result.detail


def test_large_inputs_switch_to_random_directions_automatically(kit):
    bad = trace(lambda x: ops.sum(ops.fx_sin_wrong_sign(x)), "f64[30, 30]")
    report = check_gradients(bad, [RNG.uniform(-1, 1, (30, 30))])
    assert not report.ok and "direction" in report.results[0].detail


# -- low precision -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_low_precision_gradients_match_float32(kit, dtype):
    g = trace(lambda x, w: ops.sum(ops.tanh(x @ w) * ops.sigmoid(x @ w)), "f32[3, 4]", "f32[4, 2]")
    result = check_low_precision(g, [RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, (4, 2))], dtype=dtype)
    assert result.ok and not result.skipped, result
    assert result.check == f"gradient_{dtype}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_low_precision_check_fails_on_a_half_precision_only_bug(kit, dtype):
    g = trace(lambda x: ops.sum(ops.fx_scale(x) * x), "f32[6]")
    result = check_low_precision(g, [RNG.uniform(0.5, 1, 6)], dtype=dtype)
    assert not result.ok and result.error > 0.1, result
    assert check_gradients(g, [RNG.uniform(0.5, 1, 6)]).ok  # the same graph is right in float64


def test_low_precision_check_skips_a_graph_that_refuses_the_dtype(kit):
    g = trace(lambda x: ops.sum(ops.fx_f32_only(x)), "f32[3]")
    result = check_low_precision(g, [RNG.uniform(-1, 1, 3)], dtype="f16")
    assert result.ok and result.skipped
    assert "fx_f32_only" in result.detail and "f16" in result.detail


def test_check_gradients_reports_bad_arguments_as_failures(kit):
    g = trace(lambda x, n: ops.fx_bad_slot(x, n), "f64[3]", "i64[3]")
    report = check_gradients(g, [RNG.uniform(-1, 1, 3), np.ones(3, np.int64)], wrt=[1])
    assert not report.ok and "does not name a floating input" in report.results[0].detail
    report = check_gradients(g, [RNG.uniform(-1, 1, 3)])
    assert not report.ok and "takes 2 inputs, 1 were given" in report.results[0].detail


def _mlp_loss():
    graph = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f64[3, 2]", "f64[2, 2]")
    rng = np.random.default_rng(0)
    return graph, [rng.standard_normal((3, 2)), rng.standard_normal((2, 2))]


def test_check_gradients_takes_input_names_in_wrt_as_build_backward_graph_does():
    graph, inputs = _mlp_loss()
    report = check_gradients(graph, inputs, wrt=["w"])
    assert report.ok and "w:" in report.results[0].detail and "x:" not in report.results[0].detail


@pytest.mark.parametrize("kwargs", [{"order": 0}, {"order": 1.0}, {"directions": 0}, {"directions": -2}])
def test_an_order_or_direction_count_below_one_is_refused_not_a_check_that_passes_empty(kwargs):
    graph, inputs = _mlp_loss()
    with pytest.raises(fc.ArgumentError, match=r"must be an int of 1 or more"):
        check_gradients(graph, inputs, **kwargs)
    if "directions" in kwargs:  # 0 was read as "the default, 3"
        with pytest.raises(fc.ArgumentError, match=r"directions=\) must be an int of 1 or more"):
            check_random_direction(graph, inputs, directions=kwargs["directions"])
