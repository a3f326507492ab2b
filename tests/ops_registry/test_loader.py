"""The loader, driven by fake distributions on ``sys.path`` (SPEC §4): one try per pack, never fatal."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import frame_core as fc
from frame_core import Graph, PluginError, UnknownOpError
from frame_core.ops_registry.hookspecs import PLUGIN_API_VERSION
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import use_registry

from .fakepacks import pack_source

CORE_OPS = {"constant", "accumulate_internal", "weighted_sum_internal", "weighted_broadcast_internal",
            "fused_elementwise_internal", "zeros_like_internal"}


def packs_of(reg, dist: str):
    return [p for p in reg.packs.values() if p.distribution == dist]


def only_pack(reg, dist: str):
    (record,) = packs_of(reg, dist)
    return record


def test_healthy_pack_loads_with_its_distribution_version_and_ops(site):
    module = site.pack("fake-pack", pack_source(["fk_ident"]), version="1.2.3")
    reg = load_registry(environ={})
    record = only_pack(reg, "fake-pack")
    assert (record.name, record.version, record.status, record.error) == ("fake_pack", "1.2.3", "loaded", None)
    assert record.ops == ["fk_ident"] and record.module == module and record.api_version == "1.0"
    schema = reg.get("fk_ident")
    assert (schema.pack, schema.distribution) == ("fake_pack", "fake-pack")
    assert reg.closure["fk_ident"].closed
    assert CORE_OPS <= set(reg.schemas)
    with use_registry(reg):
        g = Graph()
        g.mark_output(g.apply("fk_ident", g.add_input("f32[3]")))
        x = np.arange(3, dtype=np.float32)
        np.testing.assert_array_equal(fc.compile(g, opt_level=0, registry=reg).run([x])[0], x)


def test_a_pack_whose_import_raises_is_failed_and_the_rest_still_loads(site):
    bad = site.pack("broken-pack", pack_source(["fk_never"], body="raise RuntimeError('boom at import')"))
    site.pack("good-pack", pack_source(["fk_good"]))
    reg = load_registry(environ={})
    record = only_pack(reg, "broken-pack")
    assert record.status == "failed"
    path = site.root / f"{bad}.py"
    line = path.read_text().splitlines().index("raise RuntimeError('boom at import')") + 1
    assert record.error == f"cannot load {bad}: RuntimeError: boom at import (at {path}:{line})"  # file and line
    assert "Traceback" in record.traceback and "boom at import" in record.traceback
    assert only_pack(reg, "good-pack").status == "loaded"
    assert "fk_good" in reg and "fk_never" not in reg and CORE_OPS <= set(reg.schemas)
    assert any("broken-pack" in p and "boom at import" in p for p in reg.problems)
    with pytest.raises(UnknownOpError) as info:  # asking for an op it would have provided points at it
        reg.get("fk_never")
    assert "'broken_pack' (broken-pack)" in str(info.value) and "failed to load" in str(info.value)


def test_a_pack_that_calls_exit_at_import_is_failed_not_fatal(site):
    site.pack("exiting-pack", pack_source(["fk_x"], body="import sys\nsys.exit(3)"))
    reg = load_registry(environ={})
    assert only_pack(reg, "exiting-pack").status == "failed"
    assert "SystemExit" in only_pack(reg, "exiting-pack").error


def test_a_raising_frame_register_ops_fails_only_its_pack(site):
    site.pack("raising-pack", pack_source(register="raise ValueError('no schemas today')"))
    site.pack("good-pack", pack_source(["fk_good"]))
    reg = load_registry(environ={})
    assert only_pack(reg, "raising-pack").status == "failed"
    error = only_pack(reg, "raising-pack").error
    assert error.startswith("frame_register_ops raised ValueError: no schemas today (at ") and ".py:" in error
    assert "fk_good" in reg


# (case id, frame_register_ops body, fragments the pack's error must hold)
CONTRACT_ERRORS = [
    ("non-opschema-item", "return [op('fk_ok'), {'name': 'fk_dict'}]",
     ["item 1 returned by frame_register_ops is a dict", "expected an OpSchema"]),
    ("not-a-list", "return op('fk_single')", ["returned OpSchema", "expected a list of OpSchema"]),
    ("missing-cpu-kernel", "return [op('fk_ok'), op('fk_gpu_only', kernels={'gpu': lambda ctx: abs})]",
     ["fk_gpu_only", "no 'cpu' kernel"]),
    ("no-gradient-no-reason", "return [op('fk_ok'), op('fk_silent', gradient=None)]",
     ["fk_silent", "must register a GradientFn or say why not"]),
    ("side-effect-with-gradient", "return [op('fk_ok'), op('fk_print', traits=('has_side_effect',))]",
     ["fk_print", "has_side_effect cannot register a GradientFn"]),
    ("gradient-and-reason", "return [op('fk_ok'), op('fk_both', not_differentiable='because')]",
     ["fk_both", "both a GradientFn and not_differentiable"]),
    ("no-examples", "return [op('fk_ok'), op('fk_bare', examples=[])]", ["fk_bare", "no examples"]),
    ("unknown-trait", "return [op('fk_ok'), op('fk_odd', traits=('shiny',))]", ["fk_odd", "unknown traits ['shiny']"]),
    ("same-name-twice", "return [op('fk_twice'), op('fk_twice')]", ["'fk_twice' is registered twice by this pack"]),
    ("bad-op-name", "return [op('fk ok')]", ["'fk ok'", "must be an identifier"]),
]


@pytest.mark.parametrize("case, register, fragments", CONTRACT_ERRORS, ids=[c[0] for c in CONTRACT_ERRORS])
def test_contract_errors_fail_the_whole_pack_and_name_the_op(site, case, register, fragments):
    site.pack("contract-pack", pack_source(register=register))
    site.pack("good-pack", pack_source(["fk_good"]))
    reg = load_registry(environ={})
    record = only_pack(reg, "contract-pack")
    assert record.status == "failed"
    for fragment in fragments:
        assert fragment in record.error
    assert not [s for s in reg if s.distribution == "contract-pack"]  # none of its ops, not even the sound ones
    assert "fk_good" in reg
    with pytest.raises(PluginError) as info:
        load_registry(environ={"FRAME_STRICT": "1"})
    assert "contract-pack" in str(info.value) and fragments[0] in str(info.value)


def test_side_effect_op_without_gradient_is_accepted(site):
    site.pack("effect-pack", pack_source(register="return [op('fk_log', traits=('has_side_effect',), gradient=None, "
                                                  "not_differentiable='it only logs')]"))
    reg = load_registry(environ={})
    assert only_pack(reg, "effect-pack").status == "loaded"
    assert reg.get("fk_log").has_side_effect and reg.closure["fk_log"].differentiable == "no"


def test_duplicate_op_name_loads_both_packs_and_warns_naming_both_distributions(site):
    site.pack("alpha-pack", pack_source(["fk_dup", "fk_alpha"]), version="1.0")
    site.pack("beta-pack", pack_source(["fk_dup", "fk_beta"]), version="2.0")
    reg = load_registry(environ={})
    alpha, beta = only_pack(reg, "alpha-pack"), only_pack(reg, "beta-pack")
    assert alpha.status == "loaded" and beta.status == "loaded"  # no pack can make another's ops unavailable
    assert "fk_alpha" in reg and "fk_beta" in reg
    assert reg.get("alpha_pack::fk_dup").distribution == "alpha-pack"
    assert reg.get("beta_pack::fk_dup").distribution == "beta-pack"
    (warning,) = [p for p in reg.problems if "collision" in p]
    assert "alpha-pack 1.0" in warning and "beta-pack 2.0" in warning and "FRAME_DISABLE_PLUGINS" in warning
    with pytest.raises(PluginError, match="fk_dup"):
        load_registry(environ={"FRAME_STRICT": "1"})


def test_entry_point_name_clash_fails_the_second_pack(site):
    site.pack("alpha-pack", pack_source(["fk_a"]), ep_name="samename")
    site.pack("beta-pack", pack_source(["fk_b"]), ep_name="samename", version="3.0")
    reg = load_registry(environ={})
    assert reg.packs["samename"].distribution == "alpha-pack" and reg.packs["samename"].status == "loaded"
    clash = reg.packs["samename@beta-pack"]
    assert clash.status == "failed" and "'samename' is already used by alpha-pack 1.0" in clash.error
    assert "fk_b" not in reg


@pytest.mark.parametrize("value", ["fake_pack", "fake-pack", "Fake_Pack", "other, fake.pack "],
                         ids=["ep-name", "dist-name", "case-and-separators", "in-a-list"])
def test_disabled_pack_is_recorded_not_imported(site, value):
    module = site.pack("fake-pack", pack_source(["fk_off"]), ep_name="fake_pack")
    reg = load_registry(environ={"FRAME_DISABLE_PLUGINS": value})
    record = only_pack(reg, "fake-pack")
    assert (record.status, record.error) == ("disabled", "disabled by FRAME_DISABLE_PLUGINS")
    assert "fk_off" not in reg and module not in sys.modules
    assert not reg.problems or all("fake-pack" not in p for p in reg.problems)  # disabled is not a problem


def test_allow_list_loads_only_the_named_packs(site):
    site.pack("wanted-pack", pack_source(["fk_wanted"]))
    other = site.pack("other-pack", pack_source(["fk_other"]))
    reg = load_registry(environ={"FRAME_LOAD_PLUGINS": "wanted_pack"})
    assert only_pack(reg, "wanted-pack").status == "loaded"
    for record in reg.packs.values():
        if record.name not in ("core", "wanted_pack"):
            assert (record.status, record.error) == ("disabled", "disabled by FRAME_LOAD_PLUGINS")
    assert other not in sys.modules and set(reg.schemas) == CORE_OPS | {"fk_wanted"}


def test_empty_allow_list_loads_no_pack_but_the_core(site):
    site.pack("fake-pack", pack_source(["fk_x"]))
    reg = load_registry(environ={"FRAME_LOAD_PLUGINS": ""})
    assert set(reg.schemas) == CORE_OPS
    assert reg.user_ops() == []
    assert all(p.status == "disabled" for p in reg.packs.values() if p.name != "core")
    assert reg.packs["core"].status == "loaded"


def test_disable_wins_over_allow(site):
    site.pack("fake-pack", pack_source(["fk_x"]))
    reg = load_registry(environ={"FRAME_LOAD_PLUGINS": "fake-pack", "FRAME_DISABLE_PLUGINS": "fake-pack"})
    assert only_pack(reg, "fake-pack").status == "disabled"


@pytest.mark.parametrize("environ, strict", [
    ({"FRAME_STRICT": "1"}, None), ({"FRAME_STRICT": "yes"}, None), ({}, True),
])
def test_strict_mode_raises_plugin_error_listing_every_problem(site, environ, strict):
    site.pack("broken-pack", pack_source(body="raise ImportError('needs scipy')"))
    site.pack("raising-pack", pack_source(register="raise KeyError('x')"))
    with pytest.raises(PluginError) as info:
        load_registry(environ=environ, strict=strict)
    message = str(info.value)
    assert "FRAME_STRICT" in message
    assert "broken-pack 1.0" in message and "needs scipy" in message
    assert "raising-pack 1.0" in message and "KeyError" in message


@pytest.mark.parametrize("value", ["0", "", "false", "no"])
def test_strict_off_values_do_not_raise(site, value):
    site.pack("broken-pack", pack_source(body="raise ImportError('needs scipy')"))
    assert only_pack(load_registry(environ={"FRAME_STRICT": value}), "broken-pack").status == "failed"


def test_strict_mode_is_quiet_when_all_packs_are_sound(site):
    site.pack("good-pack", pack_source(["fk_good"]))
    assert "fk_good" in load_registry(environ={"FRAME_STRICT": "1", "FRAME_LOAD_PLUGINS": "good-pack"})


def test_missing_plugin_api_is_refused_saying_what_to_add(site):
    module = site.pack("old-pack", pack_source(["fk_old"], api=None))
    record = only_pack(load_registry(environ={}), "old-pack")
    assert record.status == "failed"
    assert f"{module} does not declare FRAME_PLUGIN_API" in record.error
    assert f'FRAME_PLUGIN_API = "{PLUGIN_API_VERSION}"' in record.error


def test_incompatible_major_api_is_refused_saying_which_core_is_needed(site):
    site.pack("future-pack", pack_source(["fk_future"], api='"2.0"'), version="5.0")
    reg = load_registry(environ={})
    record = only_pack(reg, "future-pack")
    assert record.status == "failed" and "fk_future" not in reg
    assert "future-pack was written for frame plugin API 2.0" in record.error
    assert f"frame-core {fc.__version__} provides API {PLUGIN_API_VERSION}" in record.error
    assert "install a frame-core that provides API 2.x" in record.error


@pytest.mark.parametrize("api", ['"1.9"', "1"])
def test_same_major_api_loads(site, api):
    site.pack("minor-pack", pack_source(["fk_minor"], api=api))
    assert only_pack(load_registry(environ={}), "minor-pack").status == "loaded"


def test_a_distribution_seen_twice_on_sys_path_loads_once(site, tmp_path):
    module = site.pack("twice-pack", pack_source(["fk_twice"]), ep_name="twice")
    second = site.add_dir(tmp_path / "second")
    site.pack("twice-pack", pack_source(["fk_twice"]), ep_name="twice", where=second, module=module)
    reg = load_registry(environ={})
    assert len(packs_of(reg, "twice-pack")) == 1
    assert only_pack(reg, "twice-pack").status == "loaded"


def test_the_same_entry_point_passed_twice_loads_once(site):
    from frame_core.ops_registry.entrypoints import entry_points

    site.pack("twice-pack", pack_source(["fk_twice"]), ep_name="twice")
    (ep,) = [e for e in entry_points("frame") if e.dist_name == "twice-pack"]
    reg = load_registry([ep, ep], environ={})
    assert len(packs_of(reg, "twice-pack")) == 1 and reg.packs["twice"].status == "loaded"


def test_a_misspelt_hook_is_reported(site):
    body = "@hookimpl\ndef frame_register_opz():\n    return []\n"
    site.pack("typo-pack", pack_source(["fk_t"], body=body))
    reg = load_registry(environ={})
    assert any("typo-pack" in p and "frame_register_opz" in p and "does not define" in p for p in reg.problems)
    with pytest.raises(PluginError, match="frame_register_opz"):
        load_registry(environ={"FRAME_STRICT": "1"})


def test_unknown_op_of_a_failed_pack_says_which_pack_and_why(site):
    body = "def _bad(ctx):\n    raise ValueError('gradient bug')\n"
    site.pack("gradbug-pack", pack_source(register="return [op('fk_gradbug', gradient=_bad)]", body=body))
    reg = load_registry(environ={})
    with pytest.raises(UnknownOpError) as info:
        reg.get("fk_gradbug")
    assert "gradbug-pack" in str(info.value) and "failed" in str(info.value)


def test_discovery_ignores_other_groups_and_loads_nothing_at_import(site):
    module = site.pack("fake-pack", pack_source(["fk_x"]))  # its entry_points.txt also has a console script
    assert module not in sys.modules  # writing a pack imports nothing; only load_registry does
    found = discover_entry_points()
    assert [ep.name for ep in found if ep.dist_name == "fake-pack"] == ["fake_pack"]
    assert all(ep.name != "not-ours" for ep in found)
    reg = load_registry(environ={})
    assert module in sys.modules and "not-ours" not in reg.packs


@pytest.mark.parametrize("variable", ["FRAME_LOAD_PLUGINS", "FRAME_DISABLE_PLUGINS"])
def test_a_pack_name_no_pack_answers_to_is_reported(site, variable):
    site.pack("wanted-pack", pack_source(["fk_wanted"]))
    reg = load_registry(environ={variable: "wanted_pack, wantd_pack"})
    assert any(f"{variable} names 'wantd-pack', which no installed pack answers to" in p for p in reg.problems)
    assert not any("'wanted-pack'" in p for p in reg.problems)
    with pytest.raises(PluginError, match="wantd-pack"):
        load_registry(environ={variable: "wantd_pack", "FRAME_STRICT": "1"})


@pytest.mark.parametrize("api", ['" 1.0"', '"v1"', "b'1.0'", "True", '"01.0"'])
def test_a_plugin_api_that_is_no_version_is_refused_as_such(site, api):
    # " 1.0" was reported as "written for frame plugin API  1.0, but frame-core provides API 1.0"
    site.pack("odd-pack", pack_source(["fk_odd"], api=api))
    record = only_pack(load_registry(environ={}), "odd-pack")
    assert record.status == "failed" and "which is not a version" in record.error
    assert f'FRAME_PLUGIN_API = "{PLUGIN_API_VERSION}"' in record.error
