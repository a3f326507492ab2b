"""check_op: per-op finite-difference checks fail on wrong gradients and pass on right ones (ARCH-066)."""

from __future__ import annotations

import copy

import pytest

from frame_core.testing import TOLERANCE, CheckResult, OpReport, check_op


def _by_check(report: OpReport, check: str) -> list[CheckResult]:
    return [r for r in report.results if r.check == check]


def test_a_right_gradient_passes_every_check(kit):
    report = check_op(kit.get("fx_sin"), registry=kit)
    assert report.ok, report.describe()
    n = len(kit.get("fx_sin").examples)
    for check in ("gradient_order1", "gradient_order2", "gradient_f16", "gradient_bf16"):
        assert [r.example_index for r in _by_check(report, check)] == list(range(n))
    assert 0 <= report.worst_error(1) <= TOLERANCE[1]
    assert 0 <= report.worst_error(2) <= TOLERANCE[2]
    assert report.worst_error(3) is None


def test_a_wrong_sign_fails_at_first_order(kit):
    report = check_op(kit.get("fx_sin_wrong_sign"), registry=kit)
    assert not report.ok
    assert {r.check for r in report.failures} == {"gradient_order1"}
    assert report.worst_error(1) > 0.1
    assert all("analytic" in r.detail and "finite difference" in r.detail for r in report.failures)


def test_a_gradient_wrong_only_at_second_order_fails_only_there(kit):
    report = check_op(kit.get("fx_cube_bad2"), registry=kit, low_precision=())
    assert all(r.ok for r in _by_check(report, "gradient_order1"))
    assert _by_check(report, "gradient_order2") and not any(r.ok for r in _by_check(report, "gradient_order2"))
    assert report.worst_error(1) <= TOLERANCE[1] and report.worst_error(2) > 0.1


def test_the_right_version_passes_to_third_order(kit):
    report = check_op(kit.get("fx_cube"), order=3, registry=kit, low_precision=())
    assert report.ok, report.describe()
    assert report.worst_error(3) is not None


def test_surrogate_gradient_is_checked_against_the_surrogate(kit):
    """ARCH-066: the step's gradient is the derivative of tanh, its declared surrogate."""
    report = check_op(kit.get("fx_step"), registry=kit)
    assert report.ok, report.describe()
    assert "surrogate (ARCH-066)" in _by_check(report, "gradient_order1")[0].detail
    # without the declared surrogate the same GradientFn is compared with the step's zero derivative, and fails
    plain = copy.copy(kit.get("fx_step"))
    plain.gradient_surrogate = None
    assert not check_op(plain, registry=kit, low_precision=()).ok


def test_a_gradient_that_is_not_the_surrogate_derivative_fails(kit):
    report = check_op(kit.get("fx_step_bad_surrogate"), registry=kit, low_precision=())
    assert [r.check for r in report.failures] == ["gradient_order1"]


def test_orders_above_the_closure_order_are_recorded_not_checked(kit):
    report = check_op(kit.get("fx_abs"), order=2, registry=kit, low_precision=())
    assert report.ok
    (second,) = _by_check(report, "gradient_order2")
    assert second.skipped and "closure order is 1" in second.detail and "fx_sign_internal" in second.detail
    assert report.worst_error(2) is None and report.worst_error(1) is not None


def test_ops_without_a_gradient(kit):
    declared = check_op(kit.get("fx_not_commutative"), registry=kit)
    assert declared.ok and [r.check for r in declared.results] == ["gradient"] and declared.results[0].skipped
    internal = check_op(kit.get("fx_sign_internal"), registry=kit)
    assert internal.ok and internal.results[0].skipped


def test_low_precision_only_bug_and_refused_dtype(kit):
    scale = check_op(kit.get("fx_scale"), registry=kit)
    assert {r.check for r in scale.failures} == {"gradient_f16", "gradient_bf16"}
    only32 = check_op(kit.get("fx_f32_only"), registry=kit)
    assert only32.ok
    refused = _by_check(only32, "gradient_f16") + _by_check(only32, "gradient_bf16")
    assert refused and all(r.skipped and "takes float32 or float64" in r.detail for r in refused)


def test_results_depend_on_the_seed_only(kit):
    schema = kit.get("fx_cube")
    first = [r.error for r in check_op(schema, seed=5, registry=kit).results]
    again = [r.error for r in check_op(schema, seed=5, registry=kit).results]
    other = [r.error for r in check_op(schema, seed=6, registry=kit).results]
    assert first == again and first != other


@pytest.mark.parametrize("order", [1, 2])
def test_check_results_have_readable_ids(kit, order):
    report = check_op(kit.get("fx_sin"), order=order, registry=kit, low_precision=())
    assert [r.id for r in report.results][-1] == f"fx_sin-gradient_order{order}-ex1"
    assert "ok (error" in str(report.results[0])
