"""``frame audit gradients``: coverage, closure orders, numeric checks, formats and exit codes (SPEC §8)."""

from __future__ import annotations

import json

import pytest

import frame_core

from .conftest import ORDER_ONE_PACK

LINEAR_PACK = '''
import numpy as np
from frame_core import Example, OpSchema, hookimpl, ops

FRAME_PLUGIN_API = "1.0"

# {prefix}_triple(x) = 3x; its GradientFn says {factor} * gy ({verdict})
TRIPLE = OpSchema(
    "{prefix}_triple", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={{"cpu": lambda ctx: lambda x: np.multiply(x, x.dtype.type(3))}},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * {factor}),
    examples=[Example(["f64[4]"]), Example(["f32[2, 3]"])],
)


@hookimpl
def frame_register_ops():
    return [TRIPLE]
'''

UNRESOLVED_PACK = '''
import numpy as np
from frame_core import Example, OpSchema, hookimpl, ops

FRAME_PLUGIN_API = "1.0"

LOST = OpSchema(
    "ur_lost", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={"cpu": lambda ctx: lambda x: x.copy()},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.op_from_a_pack_nobody_installed(gy)),
    examples=[Example(["f32[3]"])],
)


@hookimpl
def frame_register_ops():
    return [LOST]
'''

NO_REASON_PACK = '''
import numpy as np
from frame_core import Example, OpSchema, hookimpl

FRAME_PLUGIN_API = "1.0"

ARGMAX = OpSchema(
    "nr_argmax", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
    kernels={"cpu": lambda ctx: lambda x: x.copy()}, examples=[Example(["f32[3]"])],
)


@hookimpl
def frame_register_ops():
    return [ARGMAX]
'''


def audit_json(invoke, *args, env=None):
    result = invoke("audit", "gradients", "--format", "json", *args, env=env)
    return result, json.loads(result.stdout)


def test_clean_audit_exits_0_with_per_pack_counts(invoke):
    result, report = audit_json(invoke)
    assert result.exit_code == 0, result.stderr
    assert report["ok"] is True and report["findings"] == [] and report["required_order"] == 1
    reg = frame_core.load_registry()
    rows = {p["name"]: p for p in report["packs"]}
    assert "core" not in rows  # the core's own ops are frame itself, not a pack to audit
    basic = rows["ops_basic"]
    user_ops = [s for s in reg.schemas.values() if s.pack == "ops_basic" and not s.internal]
    assert basic["ops"] == len(user_ops)
    assert basic["with_gradient"] + basic["not_differentiable"] + basic["missing"] == basic["ops"]
    assert report["total"]["ops"] == sum(p["ops"] for p in report["packs"])
    assert report["total"]["packs"] == len(report["packs"])
    ops = {o["name"]: o for o in report["ops"]}
    assert ops["matmul"]["closure_order"] == "closed" and ops["matmul"]["differentiable"] == "yes"
    assert all(not o["name"].endswith("_internal") for o in report["ops"])


def test_text_report(invoke):
    result = invoke("audit", "gradients")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split()[:3] == ["PACK", "DISTRIBUTION", "VERSION"]
    assert "total" in result.stdout and result.stdout.rstrip().endswith("audit: clean")


def test_comparisons_are_counted_as_having_no_gradient_because_their_outputs_carry_none(invoke):
    result, report = audit_json(invoke, "--order", "3")
    assert result.exit_code == 0, result.stdout
    ops = {o["name"]: o for o in report["ops"]}
    for name in ("equal", "less", "greater_equal", "argmax"):
        assert ops[name]["differentiable"] == "no" and ops[name]["closure_order"] is None
        assert ops[name]["not_differentiable"] == "outputs carry no gradient"
    # ops whose gradients compare values (tie masks) are closed: the comparisons do not limit them
    assert all(ops[name]["closure_order"] == "closed" for name in ("where", "maximum", "max", "clip", "pow"))
    text = invoke("audit", "gradients").stdout
    (line,) = [line for line in text.splitlines() if line.split()[:1] == ["less"]]
    assert line.split()[1:4] == ["ops_basic", "no", "-"] and line.endswith("no gradient: outputs carry no gradient")


@pytest.mark.parametrize("value", ["0", "-1"])
def test_order_below_one_is_a_usage_error(invoke, value):
    result = invoke("audit", "gradients", "--order", value)
    assert result.exit_code == 2
    assert "--order must be 1 or more" in result.stderr and f"got {value}" in result.stderr
    assert result.stdout == ""


def test_order_that_is_not_a_number_is_a_usage_error(invoke):
    assert invoke("audit", "gradients", "--order", "two").exit_code == 2


def test_order_n_fails_an_op_of_lower_order_and_names_the_chain(invoke, site):
    site.add("orderone", ORDER_ONE_PACK.format(prefix="ao"))
    result, report = audit_json(invoke, "--pack", "orderone")
    assert result.exit_code == 0, report["findings"]  # order 1 is enough by default
    ops = {o["name"]: o for o in report["ops"]}
    assert ops["ao_ramp"]["closure_order"] == 1 and ops["ao_step"]["differentiable"] == "no"
    assert report["packs"][0]["not_differentiable"] == 1 and report["packs"][0]["with_gradient"] == 1

    result, report = audit_json(invoke, "--pack", "orderone", "--order", "2")
    assert result.exit_code == 1
    (finding,) = report["findings"]  # the declared non-differentiable op is counted, not a finding
    assert finding["kind"] == "order" and finding["op"] == "ao_ramp" and finding["pack"] == "orderone"
    assert "order 1, 2 required" in finding["message"] and "ao_ramp -> ao_step" in finding["message"]

    # the bundled packs are closed: order 5 holds for them, whatever the fake pack does
    assert invoke("audit", "gradients", "--pack", "ops_basic", "--order", "5").exit_code == 0


def test_gradient_using_an_unregistered_op_is_a_finding(invoke, site):
    site.add("unresolved", UNRESOLVED_PACK)
    result, report = audit_json(invoke, "--pack", "unresolved")
    assert result.exit_code == 1
    (finding,) = report["findings"]
    assert finding["op"] == "ur_lost" and "op_from_a_pack_nobody_installed" in finding["message"]
    assert "not registered" in finding["message"]


def test_failed_pack_is_a_finding_and_the_others_are_still_audited(invoke, broken_site):
    result, report = audit_json(invoke)
    assert result.exit_code == 1
    kinds = [(f["kind"], f["pack"]) for f in report["findings"]]
    assert kinds == [("pack-failed", "broken")]
    assert "needs libfoo" in report["findings"][0]["message"]
    rows = {p["name"]: p for p in report["packs"]}
    assert rows["broken"]["status"] == "failed" and rows["broken"]["ops"] == 0
    assert rows["ops_basic"]["ops"] > 0


def test_pack_that_breaks_the_registration_contract_is_a_finding(invoke, site):
    site.add("noreason", NO_REASON_PACK)
    result, report = audit_json(invoke)
    assert result.exit_code == 1
    (finding,) = report["findings"]
    assert finding["kind"] == "pack-failed" and "not_differentiable" in finding["message"]


def test_pack_filter_ignores_other_packs_unless_strict(invoke, broken_site):
    result, report = audit_json(invoke, "--pack", "ops_basic")
    assert result.exit_code == 0 and [p["name"] for p in report["packs"]] == ["ops_basic"]
    assert "broken" in result.stderr and "--strict" in result.stderr  # still mentioned, on stderr

    for args, env in ((("--strict",), None), ((), {"FRAME_STRICT": "1"})):
        result, report = audit_json(invoke, "--pack", "ops_basic", *args, env=env)
        assert result.exit_code == 1
        assert [f["kind"] for f in report["findings"]] == ["plugin"] and report["strict"] is True
    result = invoke("--strict", "audit", "gradients", "--pack", "ops_basic", "-f", "json")
    assert result.exit_code == 1 and json.loads(result.stdout)["strict"] is True


def test_unknown_pack_is_a_usage_error_with_suggestions(invoke):
    result = invoke("audit", "gradients", "--pack", "activation")
    assert result.exit_code == 2
    assert "unknown pack 'activation'" in result.stderr and "did you mean 'activations'" in result.stderr


def test_github_format_prints_one_error_line_per_finding(invoke, site):
    site.add("orderone", ORDER_ONE_PACK.format(prefix="gh"))
    site.add("broken", 'raise ImportError("line one\\nline two: 100% broken")\n')
    _, report = audit_json(invoke, "--order", "2")
    result = invoke("audit", "gradients", "--order", "2", "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert len(lines) == len(report["findings"]) == 2
    for line in lines:
        assert line.startswith("::error title=frame audit gradients (")
        title, message = line[len("::error "):].split("::", 1)
        assert "," not in title.partition("=")[2] and ":" not in title.partition("=")[2]
        assert message
    broken = next(line for line in lines if "pack-failed" in line)
    assert "line one%0Aline two: 100%25 broken" in broken  # workflow-command escaping
    assert "audit: 2 findings" in result.stderr  # the summary is a diagnostic


def test_github_format_clean_prints_no_error_line(invoke):
    result = invoke("audit", "gradients", "-f", "github")
    assert result.exit_code == 0 and "::error" not in result.stdout
    assert "audit: clean" in result.stderr


def test_numeric_reports_worst_errors_and_catches_a_wrong_gradient(invoke, site):
    site.add("right", LINEAR_PACK.format(prefix="nr", factor=3.0, verdict="right"))
    site.add("wrong", LINEAR_PACK.format(prefix="nw", factor=2.0, verdict="wrong"))
    result, report = audit_json(invoke, "--numeric", "--pack", "right")
    assert result.exit_code == 0, report["findings"]
    (op,) = report["ops"]
    assert report["numeric"] is True and op["numeric"]["ok"] is True
    assert op["numeric"]["worst_error_order1"] < 1e-6
    assert op["numeric"]["worst_error_order2"] is not None and op["numeric"]["worst_error_order2"] < 1e-6

    result, report = audit_json(invoke, "--numeric", "--pack", "wrong")
    assert result.exit_code == 1
    assert report["ops"][0]["numeric"]["worst_error_order1"] > 0.1
    assert {f["kind"] for f in report["findings"]} == {"numeric"}
    assert any("gradient_order1" in f["message"] for f in report["findings"])
    text = invoke("audit", "gradients", "--numeric", "--pack", "wrong").stdout
    assert "ERR ORDER 1" in text and "ERR ORDER 2" in text


def test_disabled_pack_is_not_audited_and_says_so(invoke):
    result, report = audit_json(invoke, "--pack", "ops_basic", env={"FRAME_DISABLE_PLUGINS": "ops_basic"})
    assert result.exit_code == 0 and report["ops"] == []
    assert "disabled" in result.stderr
