"""The conformance kit: cases per (op, check, example), trait checks, the test factory and the pytest plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from frame_core.testing import CHECKS, conformance_cases, conformance_tests, run_conformance

from .fixture_pack import PACK, RIGHT_OPS


def _results(kit, op: str):
    return [c.run(kit) for c in conformance_cases(PACK, registry=kit) if c.op == op]


def test_case_ids_are_readable_and_unique(kit):
    ids = [c.id for c in conformance_cases(PACK, registry=kit)]
    assert len(ids) == len(set(ids))
    for expected in ("fx_sin-schema", "fx_sin-kernel-ex1", "fx_sin-elementwise-ex0", "fx_sin-gradient_order2-ex1",
                     "fx_sin-gradient_bf16-ex0", "fx_add2-commutative-ex1", "fx_flatten-view-ex0"):
        assert expected in ids
    assert {c.check for c in conformance_cases(PACK, registry=kit)} <= set(CHECKS)


@pytest.mark.parametrize("op", RIGHT_OPS)
def test_right_ops_pass_every_case(kit, op):
    results = _results(kit, op)
    assert results and all(r.ok for r in results), "\n".join(str(r) for r in results if not r.ok)


# each fixture op is wrong in exactly one declared respect; the kit must name that check, and only that one
WRONG = [
    ("fx_sin_wrong_sign", {"gradient_order1"}),
    ("fx_sin_ignores_gy", {"gradient_order1", "jvp_transpose"}),  # not linear in gy: its derived JVP is no transpose
    ("fx_sin_bad_jvp", {"jvp_transpose", "jvp_direct"}),  # a third-party pack's wrong JvpFn
    ("fx_mul_bad_jvp", {"jvp_transpose", "jvp_direct"}),  # wrong in one input's tangent only
    ("fx_tanh_fwd_bad_internal", {"jvp_direct"}),  # no GradientFn: its JvpFn against central differences
    ("fx_cube_bad2", {"gradient_order2"}),
    ("fx_scale", {"gradient_f16", "gradient_bf16"}),
    ("fx_step_bad_surrogate", {"gradient_order1"}),
    ("fx_not_elementwise", {"elementwise"}),
    ("fx_ignores_out", {"accepts_out"}),
    ("fx_wrong_shape", {"kernel"}),
    ("fx_mutates", {"kernel"}),
    ("fx_not_commutative", {"commutative"}),
    ("fx_bad_view", {"view", "kernel"}),
]


@pytest.mark.parametrize(("op", "failing"), WRONG, ids=[w[0] for w in WRONG])
def test_each_wrong_op_fails_the_check_it_breaks(kit, op, failing):
    results = _results(kit, op)
    assert {r.check for r in results if not r.ok} == failing, "\n".join(map(str, results))


def test_kernel_check_explains_the_mismatch(kit):
    (wrong_shape,) = [r for r in _results(kit, "fx_wrong_shape") if r.check == "kernel"]
    assert "float64[3, 2], shape inference says f64[2, 3]" in wrong_shape.detail
    mutates = [r for r in _results(kit, "fx_mutates") if r.check == "kernel"]
    assert all("modified its input 0" in r.detail for r in mutates)


def test_gradient_contract_requires_zero_slots_for_integer_inputs(kit):
    (contract,) = [r for r in _results(kit, "fx_bad_slot") if r.check == "gradient_contract"]
    assert not contract.ok and "must be a zero constant" in contract.detail


def test_side_effect_op_with_a_gradient(kit):
    results = {c.check: c.run(kit) for c in conformance_cases("kit_side_effect", registry=kit)}
    assert not results["schema"].ok and not results["has_side_effect"].ok
    assert "registers a GradientFn" in results["has_side_effect"].detail


def test_orders_past_the_closure_order_are_reported_not_dropped(kit):
    """issue 17: an op closed only to first order got no order-2 case at all, so its pack's suite was green and
    only the audit said anything. The case is there, reports why, and the pytest factory makes it an xfail."""
    cases = {c.check: c for c in conformance_cases(PACK, registry=kit) if c.op == "fx_abs" and c.example_index == 0}
    assert "gradient_order1" in cases and "gradient_order2" in cases
    assert not cases["gradient_order1"].run(kit).skipped
    second = cases["gradient_order2"].run(kit)
    assert second.ok and second.skipped
    assert "not differentiable to order 2: the op's closure order is 1" in second.detail
    assert "frame audit gradients --order 2" in second.detail
    test_fn = conformance_tests(PACK, registry=kit)
    request = SimpleNamespace(config=SimpleNamespace(getoption=lambda name, default=None: default))
    with pytest.raises(pytest.xfail.Exception, match="closure order is 1"):
        test_fn(cases["gradient_order2"], request)
    # a check skipped for another reason (no floating input to differentiate) stays a plain pass
    basic = conformance_tests("ops_basic")
    plain = next(c for c in basic.cases if c.id == "cast-gradient_order1-ex4")  # an integer-to-integer cast
    assert plain.run().skipped and "no floating input" in plain.run().detail
    assert basic(plain, request) is None


def test_packs_that_cannot_be_checked_give_one_failing_case(kit):
    (unknown,) = conformance_cases("kit_fixtur", registry=kit)
    result = unknown.run(kit)
    assert unknown.id == "kit_fixtur-pack" and not result.ok and "did you mean 'kit_fixture'" in result.detail
    (broken,) = conformance_cases("kit_broken", registry=kit)
    assert "ImportError" in broken.run(kit).detail and not broken.run(kit).ok


def test_packs_are_found_by_distribution_name(kit):
    assert [c.id for c in conformance_cases("kit-fixture-pack", registry=kit)] == \
           [c.id for c in conformance_cases(PACK, registry=kit)]


def test_run_conformance_groups_results_per_op(kit):
    reports = {r.op: r for r in run_conformance(PACK, registry=kit)}
    assert reports["fx_sin"].ok and not reports["fx_mutates"].ok
    assert reports["fx_sin"].worst_error(2) is not None


def test_case_check_raises_with_the_detail(kit):
    case = next(c for c in conformance_cases(PACK, registry=kit) if c.id == "fx_mutates-kernel-ex0")
    with pytest.raises(AssertionError, match="fx_mutates-kernel-ex0: FAILED"):
        case.assert_ok(kit)


def test_conformance_tests_factory(kit):
    test_fn = conformance_tests(PACK, registry=kit)
    (mark,) = [m for m in test_fn.pytestmark if m.name == "parametrize"]
    assert mark.args[0] == "case" and mark.kwargs["ids"] == [c.id for c in test_fn.cases]
    request = SimpleNamespace(config=SimpleNamespace(getoption=lambda name, default=None: default))
    good = next(c for c in test_fn.cases if c.id == "fx_sin-gradient_order2-ex0")
    assert test_fn(good, request) is None
    bad = next(c for c in test_fn.cases if c.id == "fx_sin_wrong_sign-gradient_order1-ex0")
    with pytest.raises(pytest.fail.Exception, match="analytic"):
        test_fn(bad, request)


def test_factory_and_plugin_in_a_pytest_run(tmp_path):
    """The documented snippet and the opt-in plugin, in a separate pytest run over the installed packs."""
    (tmp_path / "test_snippet.py").write_text(textwrap.dedent("""
        from frame_core.testing import conformance_tests

        test_conformance = conformance_tests("ops_basic")
        test_missing = conformance_tests("no_such_pack")
    """))
    (tmp_path / "test_marker.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.frame_conformance("ops_basic")
        def test_marked(frame_case):
            frame_case.assert_ok()
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "FRAME_LOAD_PLUGINS",
                                                            "FRAME_DISABLE_PLUGINS")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "frame_core.testing.pytest_plugin", "--frame-seed", "3",
         "-p", "no:cacheprovider", "-v", "-k", "relu-kernel or missing", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_conformance[relu-kernel-ex0] PASSED" in out
    assert "test_marked[relu-kernel-ex0] PASSED" in out
    assert "test_missing[no_such_pack-pack] FAILED" in out
    assert "no pack named 'no_such_pack'" in out
    assert "1 failed" in out
