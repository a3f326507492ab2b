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
    assert "against the gradient surrogate" in _by_check(report, "gradient_order1")[0].detail
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


# -- per-example tolerance and opting out of the reduced-precision checks ----------------------------------
def _one_percent_off_in_float16(example):
    """``fx_nudged(x) = x``; its gradient is ``gy * 1.03`` in float16 only: right in float64 and bfloat16
    (where the factor is 1), a few times the default float16 bound (5e-3) off in float16."""
    import numpy as np

    from frame_core.ops_registry.schema import OpSchema

    def gradient(ctx):
        factor = 1.03 if ctx.input_types[0].dtype.name == "float16" else 1.0
        return ctx.grad_graph(lambda x, y, gy: gy * factor)
    return OpSchema("fx_nudged", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                    kernels={"cpu": lambda ctx: lambda x: np.array(x, copy=True)}, gradient=gradient,
                    examples=[example])


@pytest.mark.parametrize("example_kwargs, f16_ok, f16_skipped", [
    ({}, False, False),
    ({"tolerance": 0.05}, True, False),
    ({"low_precision": False, "note": "float16 cannot hold the nudge"}, True, True),
    ({"low_precision": ["bfloat16"]}, True, True),
    ({"low_precision": ["float16"]}, False, False),
])
def test_an_example_loosens_or_opts_out_of_the_reduced_precision_checks(kit, example_kwargs, f16_ok, f16_skipped):
    from frame_core.ops_registry.schema import Example

    schema = _one_percent_off_in_float16(Example(["f32[6]"], **example_kwargs))
    kit.schemas["fx_nudged"] = schema
    try:
        report = check_op(schema, registry=kit)
    finally:
        del kit.schemas["fx_nudged"]
    (f16,) = _by_check(report, "gradient_f16")
    assert (f16.ok, f16.skipped) == (f16_ok, f16_skipped), f16
    if f16_skipped:
        assert "opts out" in f16.detail and example_kwargs.get("note", "opts out") in f16.detail
    assert all(r.ok for r in _by_check(report, "gradient_order1") + _by_check(report, "gradient_bf16"))


@pytest.mark.parametrize("kwargs, words", [
    ({"tolerance": 0}, "positive number"), ({"tolerance": "1e-3"}, "positive number"),
    ({"low_precision": "float16"}, "low_precision must be a list"), ({"low_precision": ["f99"]}, "unsupported dtype"),
    ({"note": 3}, "note is a string"),
])
def test_example_arguments_are_checked(kwargs, words):
    from frame_core.errors import RegistrationError
    from frame_core.ops_registry.schema import Example

    with pytest.raises(RegistrationError, match=words):
        Example(["f32[3]"], **kwargs)


def test_example_inputs_must_be_a_list():
    from frame_core.errors import RegistrationError
    from frame_core.ops_registry.schema import Example

    with pytest.raises(RegistrationError, match=r"for one input write \['f32\[3\]'\]"):
        Example("f32[3]")
