"""A pack whose examples carry bodies (control flow, fused kernels) stays loaded when the pack that provides
the ops inside those bodies is disabled or not installed: the audit cannot check those examples and says so,
it does not blame the pack (issue 8 §1: no pack can make another pack's ops unavailable)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("disabled", ["ops_basic", "ops_nn", "ops_basic,ops_nn", "ops_basic,ops_nn,ops_sequence,ops_fft"])
def test_disabling_the_packs_whose_ops_native_compiles_leaves_every_other_pack_loaded(invoke, disabled):
    """frame-native's compiled twins (fused groups, norm rows, column sums) stand for other packs' ops: with
    those packs disabled the twins' examples must still type, and the pack must still load."""
    result = invoke("plugins", "list", "--format", "json", env={"FRAME_DISABLE_PLUGINS": disabled})
    status = {p["name"]: (p["status"], p["error"]) for p in json.loads(result.stdout)}
    for pack in status:
        if pack in disabled.split(","):
            assert status[pack][0] == "disabled"
        elif pack in ("ops_sequence", "native", "ops_nn", "ops_fft", "ops_basic"):
            assert status[pack] == ("loaded", None), (pack, status[pack])


def test_the_audit_says_which_body_ops_are_missing_instead_of_blaming_the_pack(invoke):
    result = invoke("audit", "gradients", "--pack", "ops_sequence", "--format", "json",
                    env={"FRAME_DISABLE_PLUGINS": "ops_basic"})
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["packs"][0]["status"] == "loaded"
    ops = {op["name"]: op for op in report["ops"]}
    assert ops["gather"]["closure_order"] == "closed"  # ops without bodies are checked as usual
    loop = next(f for f in report["findings"] if f["op"] == "loop")
    assert loop["kind"] == "order" and "not checked: its examples' bodies use" in loop["message"]
    assert "'sin'" in loop["message"] and "no pack is at fault" not in loop["message"]


def test_with_every_pack_loaded_the_examples_are_checked(invoke):
    result = invoke("ops", "show", "loop", "--format", "json")
    details = json.loads(result.stdout)
    assert details["closure_order"] == "closed" and details["closure_problems"] == []


def test_an_op_of_a_disabled_pack_names_the_pack_and_why(invoke):
    # a disabled pack is never imported, so its ops are unknown; its namespace still says whose they are
    result = invoke("ops", "show", "ops_fft::rfft", env={"FRAME_DISABLE_PLUGINS": "ops_fft"})
    assert result.exit_code == 2
    assert "pack 'ops_fft' from frame-ops-fft, which is disabled: disabled by FRAME_DISABLE_PLUGINS" in result.stderr


def test_numeric_audit_skips_low_precision_checks_of_an_op_it_cannot_differentiate(invoke):
    # linear_scan's GradientFn needs slice (ops_basic): order 0. Its float64 checks were skipped, but every
    # float16/bfloat16 check of every example failed with the same unknown op, burying the one real finding
    result = invoke("audit", "gradients", "--pack", "ops_sequence", "--numeric", "--format", "json",
                    env={"FRAME_DISABLE_PLUGINS": "ops_basic"})
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    kinds = {(f["kind"], f["op"]) for f in report["findings"]}
    assert ("order", "linear_scan") in kinds and ("numeric", "linear_scan") not in kinds
    assert not [f for f in report["findings"] if f["kind"] == "numeric"]
