"""A pack cannot take another down through the objects it shares with it (issue 8 §1, found in QA).

A pack may hand frame objects that another pack also hands it: a re-exported ``OpSchema`` (``from
frame_ops_basic.elementwise import RELU``), a module that another entry point names too, a ``PassSpec``
of the same name. None of these may change what the other pack's ops are, or fail the other pack.
"""

from __future__ import annotations

import pytest

import frame_core as fc
from frame_core import PluginError, ops
from frame_core.compiler.passspec import PassSpec
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import use_registry

from ..fakes import FakeEntryPoint
from .fakepacks import plugin, unary


@pytest.fixture(scope="module")
def basic():
    (ep,) = [ep for ep in discover_entry_points() if ep.dist_name == "frame-ops-basic"]
    return ep


@pytest.mark.parametrize("name", ["aaa_reexport", "zzz_reexport"])  # loaded before and after frame-ops-basic
def test_a_pack_reexporting_a_bundled_schema_and_failing_leaves_the_bundled_op(basic, name):
    import frame_ops_basic.elementwise as elementwise

    broken = unary("qa_broken", gradient=lambda ctx: 1 / 0)  # fails the closure audit: the pack is dropped
    ep = FakeEntryPoint(name, plugin(name, lambda: [elementwise.RELU, broken]))
    reg = load_registry([ep, basic] if name.startswith("a") else [basic, ep], environ={})
    assert reg.packs[name].status == "failed"
    assert reg.packs["ops_basic"].status == "loaded"
    relu = reg.get("relu")
    assert relu.pack == "ops_basic" and relu.qualname == "ops_basic::relu"
    assert elementwise.RELU.pack in (None, "ops_basic")  # the module's object was not re-stamped by the other pack
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.relu(x), "f32[3]")
        assert fc.dumps(graph).count('"ops_basic::relu"') == 1  # saved under the pack that owns it


def test_a_reexported_schema_loads_as_the_packs_own_qualified_op(basic):
    import frame_ops_basic.elementwise as elementwise

    ep = FakeEntryPoint("zzz_reexport", plugin("zzz_reexport", lambda: [elementwise.RELU]))
    reg = load_registry([basic, ep], environ={})
    assert reg.get("relu").qualname == "ops_basic::relu"
    assert reg.get("zzz_reexport::relu").qualname == "zzz_reexport::relu"
    assert reg.get("relu") is not reg.get("zzz_reexport::relu")


@pytest.mark.parametrize("first", [True, False])
def test_an_entry_point_naming_a_bundled_packs_module_does_not_fail_that_pack(basic, first):
    import frame_ops_basic.plugin as module

    ep = FakeEntryPoint("aaa_alias", module, dist_name="aaa-alias")  # pluggy refuses one object twice
    reg = load_registry([ep, basic] if first else [basic, ep], environ={})
    assert reg.packs["ops_basic"].status == "loaded", reg.packs["ops_basic"].error
    assert reg.packs["aaa_alias"].status == "loaded", reg.packs["aaa_alias"].error
    assert reg.get("relu").qualname == "ops_basic::relu"
    assert reg.get("aaa_alias::relu").pack == "aaa_alias"
    assert [p.pack for p in reg.passes if p.name == "simplify_algebra"] == (
        ["aaa_alias", "ops_basic"] if first else ["ops_basic", "aaa_alias"])


def _pass_pack(name: str, pass_name: str, calls: list | None = None):
    module = plugin(name, lambda: [unary(f"{name}_op", gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy))])

    def seen(graph, ctx):
        if calls is not None:
            calls.append(name)
        return graph

    @fc.hookimpl
    def frame_register_passes():
        return [PassSpec(pass_name, seen, after="fold_constants")]

    module.frame_register_passes = frame_register_passes
    return FakeEntryPoint(name, module)


def test_a_third_party_pass_named_like_a_bundled_one_fails_neither_pack(basic):
    ep = _pass_pack("aaa_passes", "simplify_algebra")  # sorts before frame-ops-basic
    reg = load_registry([ep, basic], environ={})
    assert reg.packs["ops_basic"].status == "loaded", reg.packs["ops_basic"].error
    assert reg.packs["aaa_passes"].status == "loaded"
    assert sorted(p.pack for p in reg.passes if p.name == "simplify_algebra") == ["aaa_passes", "ops_basic"]
    warning = next(p for p in reg.problems if "pass name collision" in p)
    assert "'simplify_algebra'" in warning and "frame-ops-basic" in warning and "aaa-passes-dist" in warning
    with pytest.raises(PluginError, match="pass name collision"):
        load_registry([ep, basic], environ={"FRAME_STRICT": "1"})


def test_disabling_a_pass_name_that_two_packs_share_skips_both(basic):
    calls: list = []
    reg = load_registry([_pass_pack("aaa_one", "shared_pass", calls), _pass_pack("aaa_two", "shared_pass", calls),
                         basic], environ={})
    assert reg.packs["aaa_one"].status == reg.packs["aaa_two"].status == "loaded"
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.relu(x) * 3.0, "f32[3]")
        fc.compile(graph, registry=reg, cache=False)
        assert calls == ["aaa_one", "aaa_two"]  # both run, in load order
        calls.clear()
        fc.compile(graph, registry=reg, disable=["shared_pass"], cache=False)
        assert calls == []


def _impostor(name: str = "ops_basic", dist: str = "aaa-impostor"):
    return FakeEntryPoint(name, plugin(name, lambda: [unary("relu", lambda ctx: ctx.grad_graph(lambda x, y, gy: gy))]),
                          dist_name=dist)


@pytest.mark.parametrize("name", ["ops_basic", "ops-basic"])  # the entry point name, or one with its namespace
@pytest.mark.parametrize("first", [True, False])
def test_a_third_party_pack_cannot_take_a_bundled_packs_namespace(basic, name, first):
    """aaa-impostor sorts before frame-ops-basic: the first to load kept the namespace, and frame-ops-basic failed."""
    reg = load_registry([_impostor(name), basic] if first else [basic, _impostor(name)], environ={})
    assert reg.packs["ops_basic"].status == "loaded" and reg.packs["ops_basic"].distribution == "frame-ops-basic"
    (impostor,) = [p for p in reg.packs.values() if p.distribution == "aaa-impostor"]
    assert impostor.status == "failed" and "ops_basic" in impostor.error
    assert reg.get("relu").distribution == "frame-ops-basic" and reg.get("ops_basic::relu") is reg.get("relu")
    assert len(reg.ops_of("ops_basic")) == len(reg.packs["ops_basic"].ops) > 10


def test_a_disabled_pack_does_not_hold_its_namespace(basic):
    reg = load_registry([_impostor(), basic], environ={"FRAME_DISABLE_PLUGINS": "aaa-impostor"})
    assert reg.packs["ops_basic"].status == "loaded" and reg.packs["ops_basic"].distribution == "frame-ops-basic"
    (impostor,) = [p for p in reg.packs.values() if p.distribution == "aaa-impostor"]
    assert impostor.status == "disabled"


def test_two_third_party_packs_of_one_namespace_keep_the_first(basic):
    first, second = _impostor("shared", "aaa-one"), _impostor("shared", "aaa-two")
    reg = load_registry([first, second, basic], environ={})
    assert reg.packs["shared"].distribution == "aaa-one" and reg.packs["shared"].status == "loaded"
    assert reg.packs["shared@aaa-two"].status == "failed"
