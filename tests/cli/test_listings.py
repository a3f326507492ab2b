"""``frame --version``, ``frame plugins list`` and ``frame ops list`` (SPEC §8, issue 2 §8, issue 5 §1)."""

from __future__ import annotations

import json

import pytest

import frame_core

from .conftest import ORDER_ONE_PACK

PLUGIN_KEYS = {"name": str, "distribution": str, "version": str, "status": str, "ops": int}
OP_KEYS = {"name": str, "pack": str, "internal": bool, "kernels": list, "differentiable": str}


def check_plugin_row(row):
    for key, kind in PLUGIN_KEYS.items():
        assert isinstance(row[key], kind), (key, row)
    assert row["status"] in ("loaded", "failed", "disabled")
    assert row["error"] is None if row["status"] == "loaded" else isinstance(row["error"], str)


def check_op_row(row):
    for key, kind in OP_KEYS.items():
        assert isinstance(row[key], kind), (key, row)
    assert row["differentiable"] in ("yes", "no", "missing")
    assert all(isinstance(k, str) for k in row["kernels"]) and "cpu" in row["kernels"]
    order = row["closure_order"]
    if row["differentiable"] == "yes":
        assert order == "closed" or (isinstance(order, int) and not isinstance(order, bool) and order >= 0), row
    else:
        assert order is None, row


# -- --version --------------------------------------------------------------------------------
def test_version_names_the_core_and_every_pack(invoke):
    result = invoke("--version")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"frame-core {frame_core.__version__} (plugin API {frame_core.PLUGIN_API_VERSION})"
    reg = frame_core.load_registry()
    for record in reg.packs.values():
        if record.name != "core":
            assert f"{record.distribution} {record.version} (pack {record.name})" in lines


def test_version_lists_a_pack_that_fails_to_import(invoke, broken_site):
    result = invoke("--version")
    assert result.exit_code == 0
    assert "frame-broken-pack 0.1 (pack broken)" in result.stdout


# -- plugins list -----------------------------------------------------------------------------
def test_plugins_list_json_schema(invoke):
    result = invoke("plugins", "list", "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert rows and all(check_plugin_row(r) is None for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert by_name["core"]["distribution"] == "frame-core"
    assert by_name["ops_basic"]["status"] == "loaded" and by_name["ops_basic"]["ops"] > 0
    assert by_name["ops_basic"]["ops"] == len(by_name["ops_basic"]["op_names"])


def test_plugins_list_shows_a_failed_pack_with_its_reason(invoke, broken_site):
    result = invoke("plugins", "list", "--format", "json")
    assert result.exit_code == 0  # a listing; --strict makes problems fail it
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    broken = rows["broken"]
    check_plugin_row(broken)
    assert broken["status"] == "failed" and broken["distribution"] == "frame-broken-pack"
    assert "needs libfoo" in broken["error"] and broken["ops"] == 0
    assert rows["ops_basic"]["status"] == "loaded"  # the others still work

    text = invoke("plugins", "list")
    assert "broken" in text.stdout and "failed" in text.stdout and "needs libfoo" in text.stdout


def test_plugins_list_shows_disabled_packs(invoke):
    result = invoke("plugins", "list", "-f", "json", env={"FRAME_DISABLE_PLUGINS": "ops_basic"})
    row = {r["name"]: r for r in json.loads(result.stdout)}["ops_basic"]
    assert row["status"] == "disabled" and "FRAME_DISABLE_PLUGINS" in row["error"]


@pytest.mark.parametrize("how", [("--strict",), ()])
def test_strict_plugins_list_fails_on_a_broken_pack(invoke, broken_site, how):
    env = None if how else {"FRAME_STRICT": "1"}
    result = invoke(*how, "plugins", "list", env=env)
    assert result.exit_code == 1
    assert "broken" in result.stdout  # still listed
    assert "strict" in result.stderr and "needs libfoo" in result.stderr


# -- ops list ---------------------------------------------------------------------------------
def test_ops_list_json_schema_and_default_filter(invoke):
    result = invoke("ops", "list", "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    for row in rows:
        check_op_row(row)
    names = [r["name"] for r in rows]
    assert names == sorted(names)
    assert "add" in names and "constant" in names
    assert not any(r["internal"] for r in rows)
    reg = frame_core.load_registry()
    assert set(names) == {s.name for s in reg.schemas.values() if not s.internal}
    add = rows[names.index("add")]
    assert add["pack"] == "ops_basic" and add["differentiable"] == "yes" and add["closure_order"] == "closed"


def test_ops_list_internal_and_pack_filters(invoke):
    everything = json.loads(invoke("ops", "list", "-f", "json", "--internal").stdout)
    assert any(r["internal"] for r in everything)
    basic = json.loads(invoke("ops", "list", "-f", "json", "--internal", "--pack", "ops_basic").stdout)
    assert basic and {r["pack"] for r in basic} == {"ops_basic"}
    assert {r["name"] for r in basic} == {r["name"] for r in everything if r["pack"] == "ops_basic"}
    by_distribution = json.loads(invoke("ops", "list", "-f", "json", "--internal", "--pack", "frame-ops-basic").stdout)
    assert by_distribution == basic


def test_ops_list_missing_gradient_filter(invoke, site):
    site.add("orderone", ORDER_ONE_PACK.format(prefix="oo"))
    rows = json.loads(invoke("ops", "list", "-f", "json", "--internal", "--missing-gradient").stdout)
    names = {r["name"] for r in rows}
    assert "oo_step" in names and "oo_ramp" not in names
    assert all(r["differentiable"] in ("no", "missing") and r["closure_order"] is None for r in rows)
    ramp = {r["name"]: r for r in json.loads(invoke("ops", "list", "-f", "json").stdout)}["oo_ramp"]
    assert ramp["closure_order"] == 1  # its gradient uses oo_step, which has none


def test_ops_list_text(invoke):
    result = invoke("ops", "list")
    assert result.exit_code == 0
    header, rule, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "PACK", "GRADIENT", "ORDER", "KERNELS", "NOTE"]
    assert any(line.split()[:4] == ["add", "ops_basic", "yes", "closed"] for line in rows)
    assert "internal ops hidden" in result.stdout


def test_a_comparison_is_listed_as_having_no_gradient_because_its_outputs_carry_none(invoke):
    (line,) = [line for line in invoke("ops", "list").stdout.splitlines() if line.split()[:1] == ["greater"]]
    assert line.split()[:4] == ["greater", "ops_basic", "no", "-"]
    assert line.endswith("no gradient: outputs carry no gradient")
    rows = {r["name"]: r for r in json.loads(invoke("ops", "list", "-f", "json").stdout)}
    assert rows["greater"]["differentiable"] == "no" and rows["greater"]["closure_order"] is None
    assert rows["greater"]["not_differentiable"] == "outputs carry no gradient"
    assert rows["add"]["not_differentiable"] is None


def test_ops_list_unknown_pack_suggests(invoke):
    result = invoke("ops", "list", "--pack", "ops_basik")
    assert result.exit_code == 2
    assert "unknown pack 'ops_basik'" in result.stderr and "did you mean 'ops_basic'" in result.stderr
    assert result.stdout == ""


def test_ops_list_warns_about_a_failed_pack_and_still_lists(invoke, broken_site):
    result = invoke("ops", "list", "-f", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)  # JSON on stdout is still valid
    assert "warning: pack 'broken'" in result.stderr and "needs libfoo" in result.stderr


def test_strict_ops_list_fails_on_a_broken_pack(invoke, broken_site):
    result = invoke("--strict", "ops", "list")
    assert result.exit_code == 1
    assert result.stdout == "" and "needs libfoo" in result.stderr


def test_no_command_prints_help(invoke):
    result = invoke()
    assert "ops" in result.output and "audit" in result.output and "new-pack" in result.output


def test_unknown_command_is_a_usage_error(invoke):
    assert invoke("opps").exit_code == 2
    assert invoke("ops", "list", "--format", "yaml").exit_code == 2


def test_a_bug_is_an_internal_error_with_exit_2_and_no_traceback(invoke, monkeypatch):
    import frame_core.cli.listing as listing

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(listing, "ops_list", broken)
    result = invoke("ops", "list")
    assert result.exit_code == 2
    assert "internal error: RuntimeError: boom" in result.stderr and "FRAME_DEBUG=1" in result.stderr
    assert "Traceback" not in result.stderr
    debug = invoke("ops", "list", env={"FRAME_DEBUG": "1"})
    assert debug.exit_code == 2 and "Traceback" in debug.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_plugins_list_warns_about_a_pack_name_no_pack_answers_to(invoke, fmt):
    # a typo in FRAME_LOAD_PLUGINS disables every pack; the command for finding out why must say so
    result = invoke("plugins", "list", "-f", fmt, env={"FRAME_LOAD_PLUGINS": "ops_basci"})
    assert result.exit_code == 0
    assert "warning: FRAME_LOAD_PLUGINS names 'ops-basci', which no installed pack answers to" in result.stderr
