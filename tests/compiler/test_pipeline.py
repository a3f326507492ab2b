"""Pipeline mechanics: one ordered stage list, opt levels, ``disable``, ``checks``/FRAME_CHECKS, plugin passes."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import CompileError, Graph, PassSpec, ops
from frame_core.compiler import pipeline
from frame_core.ops_registry.registry import use_registry

from .fixture_pack import registry_with_passes

FUSED = "fused_elementwise_internal"


def marked_graph() -> Graph:
    """A graph on which every optional stage leaves a visible trace.

    ``exp(constant)`` folds; the two ``sin(x)`` merge (CSE); ``cos(x)`` is dead;
    ``sin + sin -> tanh -> mul`` is an elementwise chain (fusion); ``* 1`` is for simplify_algebra.
    """
    def f(x):
        c = ops.exp(fc.constant(np.ones(3, np.float32)))
        a, b = ops.sin(x), ops.sin(x)
        ops.cos(x)  # dead
        return ops.sum(ops.tanh(a + b) * c * 1.0)
    return fc.trace(f, "f32[3]")


def ops_in(graph: Graph) -> list[str]:
    """Every op of ``graph``, including the bodies of fused nodes."""
    out = []
    for node in graph.nodes:
        out.append(node.op)
        if node.op == FUSED:
            out.extend(ops_in(node.attrs["body"]))
    return out


def run(exe, x=np.array([0.1, 0.2, 0.3], np.float32)):
    return exe.run([x])[0]


def expected(x=np.array([0.1, 0.2, 0.3], np.float32)):
    return np.sum(np.tanh(2 * np.sin(x)) * np.e)


# -- the stage list ------------------------------------------------------------------------------
def test_stage_order_comes_from_one_list():
    graph_stages = [s.name for s in pipeline.stages()]
    assert pipeline.STAGES == (*graph_stages, *pipeline.PLAN_STAGES)
    assert [d["name"] for d in pipeline.describe()] == list(pipeline.STAGES)
    assert pipeline.STAGES == ("verify", "infer_types", "decompose", "fold_constants",
                               "eliminate_common_subexpressions", "eliminate_dead_nodes", "fuse_elementwise",
                               "plan_memory", "lower")
    assert set(pipeline.OPTIONAL_STAGES) < set(pipeline.STAGES)


def test_passes_anchored_around_every_stage_run_in_the_order_of_the_stage_list():
    seen = []

    def recorder(label):
        def record(graph, ctx):
            seen.append((label, ops_in(graph)))
            return graph
        return record

    specs = []
    for stage in pipeline.STAGES[:-2]:
        specs.append(PassSpec(f"before_{stage}", recorder(f"before {stage}"), before=stage, min_level=0))
        specs.append(PassSpec(f"after_{stage}", recorder(f"after {stage}"), after=stage, min_level=0))
    specs.append(PassSpec("before_plan", recorder("before plan_memory"), before="plan_memory", min_level=0))
    reg = registry_with_passes(*specs)
    exe = fc.compile(marked_graph(), registry=reg, cache=False)
    labels = [label for label, _ in seen]
    assert labels == [f"{w} {s}" for s in pipeline.STAGES[:-2] for w in ("before", "after")] + ["before plan_memory"]
    snapshot = dict(seen)
    # each stage did its job between its "before" and "after" recorders
    assert "exp" in snapshot["before fold_constants"] and "exp" not in snapshot["after fold_constants"]
    assert snapshot["before eliminate_common_subexpressions"].count("sin") == 2
    assert snapshot["after eliminate_common_subexpressions"].count("sin") == 1
    assert "cos" in snapshot["before eliminate_dead_nodes"] and "cos" not in snapshot["after eliminate_dead_nodes"]
    assert FUSED not in snapshot["before fuse_elementwise"] and FUSED in snapshot["after fuse_elementwise"]
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


# -- opt levels ----------------------------------------------------------------------------------
def test_opt_level_0_runs_only_the_required_stages():
    exe = fc.compile(marked_graph(), opt_level=0, cache=False)
    found = ops_in(exe.graph)
    assert "exp" in found and found.count("sin") == 2 and "cos" in found and FUSED not in found
    assert exe.log == []
    assert exe.plan.buffer_of == {} and not exe.plan.enabled
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


def test_opt_level_1_adds_folding_simplification_and_dead_node_elimination():
    exe = fc.compile(marked_graph(), opt_level=1, cache=False)
    found = ops_in(exe.graph)
    assert "exp" not in found and "cos" not in found
    assert found.count("sin") == 2 and FUSED not in found  # no CSE, no fusion at level 1
    assert found.count("mul") == 1  # `* 1.0` removed by ops_basic's simplify_algebra (min_level 1)
    assert {stage for stage, _ in exe.log} == {"fold_constants", "simplify_algebra", "eliminate_dead_nodes"}
    assert exe.plan.buffer_of == {}
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


def test_opt_level_2_runs_every_stage():
    exe = fc.compile(marked_graph(), opt_level=2, cache=False)
    found = ops_in(exe.graph)
    assert "exp" not in found and "cos" not in found and found.count("sin") == 1 and FUSED in found
    assert [stage for stage, _ in exe.log] == ["fold_constants", "simplify_algebra", "eliminate_common_subexpressions",
                                               "eliminate_dead_nodes", "fuse_elementwise"]
    assert exe.plan.enabled
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


def test_opt_level_outside_0_to_2_is_a_compile_error():
    with pytest.raises(CompileError, match="opt_level must be 0, 1 or 2, got 3"):
        fc.compile(marked_graph(), opt_level=3)


# -- disable -------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage, still_there", [
    ("fold_constants", lambda found: "exp" in found),
    ("eliminate_common_subexpressions", lambda found: found.count("sin") == 2),
    ("eliminate_dead_nodes", lambda found: "cos" in found),
    ("fuse_elementwise", lambda found: FUSED not in found),
    ("simplify_algebra", lambda found: found.count("mul") == 2),
])
def test_disable_skips_exactly_the_named_stage(stage, still_there):
    exe = fc.compile(marked_graph(), disable=[stage], cache=False)
    assert still_there(ops_in(exe.graph)), ops_in(exe.graph)
    assert stage not in {s for s, _ in exe.log}
    others = {"fold_constants": "exp", "eliminate_dead_nodes": "cos", "fuse_elementwise": FUSED}
    for other, op in others.items():  # the stages not disabled still ran
        if other != stage:
            assert (op in ops_in(exe.graph)) == (other == "fuse_elementwise")
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


def test_disabling_plan_memory_leaves_every_value_unplanned():
    exe = fc.compile(marked_graph(), disable=["plan_memory"], cache=False)
    assert not exe.plan.enabled and exe.plan.buffer_of == {} and exe.memory["arena_bytes"] == 0
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


def test_disabling_an_unknown_stage_is_a_compile_error_listing_the_stages():
    with pytest.raises(CompileError, match=r"unknown stage\(s\) \['fold'\].*fold_constants"):
        fc.compile(marked_graph(), disable=["fold"])


@pytest.mark.parametrize("stage", ["verify", "infer_types", "decompose", "lower"])
def test_required_stages_cannot_be_disabled(stage):
    with pytest.raises(CompileError, match=f"{stage}.*cannot be disabled"):
        fc.compile(marked_graph(), disable=[stage])


# -- checks --------------------------------------------------------------------------------------
def mislabel_sum(graph: Graph, ctx) -> Graph:
    """A broken pass: records the ``sum`` output as f64 (the kernel still makes f32, so the program runs)."""
    out = Graph(graph.name)
    vmap = {v: out.add_input(v.type, v.name) for v in graph.inputs}
    for node in graph.nodes:
        types = [fc.TensorType.parse("f64[]") if node.op == "sum" else v.type for v in node.outputs]
        new = out.add_node(node.op, [vmap[v] for v in node.inputs], node.attrs, types)
        vmap.update(zip(node.outputs, new.outputs))
    for v in graph.outputs:
        out.mark_output(vmap[v])
    return out


def reverse_nodes(graph: Graph, ctx) -> Graph:
    """A broken pass: the same nodes in reverse order (reads before definitions)."""
    out = fc.clone_graph(graph)
    out.nodes.reverse()
    return out


@pytest.mark.parametrize("broken, rule", [(mislabel_sum, "V6"), (reverse_nodes, "V2")])
def test_checks_verify_after_every_stage_and_name_the_plugin_pass_that_broke_the_graph(broken, rule):
    reg = registry_with_passes(PassSpec("breaker", broken, after="eliminate_common_subexpressions"), pack="bad_pack")
    with pytest.raises(CompileError) as err:
        fc.compile(marked_graph(), registry=reg, checks=True, cache=False)
    message = str(err.value)
    assert "stage 'breaker (pack bad_pack)' produced an invalid graph" in message
    assert rule in message


def test_frame_checks_environment_variable_turns_checks_on(monkeypatch):
    reg = registry_with_passes(PassSpec("breaker", mislabel_sum, after="fold_constants"), pack="bad_pack")
    monkeypatch.delenv("FRAME_CHECKS", raising=False)
    # unchecked, the compile still sees that the pass changed an output's type (the interface check)
    with pytest.raises(CompileError, match=r"'breaker \(pack bad_pack\)' changed the graph's output types"):
        fc.compile(marked_graph(), registry=reg, cache=False)
    monkeypatch.setenv("FRAME_CHECKS", "1")
    with pytest.raises(CompileError, match=r"'breaker \(pack bad_pack\)' produced an invalid graph \(FRAME_CHECKS\)"):
        fc.compile(marked_graph(), registry=reg, cache=False)
    monkeypatch.setenv("FRAME_CHECKS", "0")
    with pytest.raises(CompileError, match=r"changed the graph's output types"):
        fc.compile(marked_graph(), registry=reg, cache=False)


def test_checks_pass_for_every_built_in_stage_on_a_training_graph():
    forward = fc.trace(lambda x, w: ops.mse_loss(ops.tanh(x @ w) * 2.0 + 0.0, x @ w), "f32[4, 3]", "f32[3, 3]")
    training = fc.build_backward_graph(forward, 0, [1])
    for level in (0, 1, 2):
        fc.compile(training, opt_level=level, checks=True, cache=False)


def test_a_plugin_pass_that_raises_is_a_compile_error_naming_it():
    def explode(graph, ctx):
        raise ZeroDivisionError("boom")
    reg = registry_with_passes(PassSpec("exploder", explode, before="fuse_elementwise"), pack="bad_pack")
    with pytest.raises(CompileError, match=r"stage 'exploder \(pack bad_pack\)' failed with ZeroDivisionError: boom"):
        fc.compile(marked_graph(), registry=reg, cache=False)


def test_a_plugin_pass_that_returns_no_graph_is_a_compile_error_naming_it():
    reg = registry_with_passes(PassSpec("forgetful", lambda graph, ctx: None, after="verify", min_level=0))
    with pytest.raises(CompileError, match=r"stage 'forgetful \(pack test_passes\)' returned NoneType, expected a Graph"):
        fc.compile(marked_graph(), registry=reg, cache=False)


# -- plugin passes -------------------------------------------------------------------------------
def test_a_pass_from_the_frame_register_passes_hook_runs_where_it_is_anchored():
    calls = []

    def count_exp(label):
        def fn(graph, ctx):
            calls.append((label, ops_in(graph).count("exp")))
            ctx.note(label, "looked")
            return graph
        return fn

    reg = registry_with_passes(PassSpec("early", count_exp("early"), before="fold_constants"),
                               PassSpec("late", count_exp("late"), after="fold_constants"), pack="counting")
    assert [(p.name, p.pack) for p in reg.passes if p.pack == "counting"] == [("early", "counting"), ("late", "counting")]
    with use_registry(reg):  # the current registry's passes run, as with registry=reg
        exe = fc.compile(marked_graph(), cache=False)
    assert calls == [("early", 1), ("late", 0)]
    assert ("early", "looked") in exe.log and ("late", "looked") in exe.log


def test_plugin_passes_at_one_anchor_run_in_registration_order_and_respect_min_level_and_disable():
    calls = []

    def mark(label):
        def fn(graph, ctx):
            calls.append(label)
            return graph
        return fn

    reg = registry_with_passes(PassSpec("one", mark("one"), after="eliminate_dead_nodes", min_level=0),
                               PassSpec("two", mark("two"), after="eliminate_dead_nodes", min_level=2))
    for level, disable, want in [(2, (), ["one", "two"]), (1, (), ["one"]), (0, (), ["one"]), (2, ["one"], ["two"])]:
        calls.clear()
        fc.compile(marked_graph(), registry=reg, opt_level=level, disable=disable, cache=False)
        assert calls == want, (level, disable)


@pytest.mark.parametrize("anchors, complaint", [
    (dict(before="folding"), "must name one built-in stage"),
    (dict(), "must name one built-in stage"),
    (dict(before="verify", after="verify"), "must name one built-in stage"),
    (dict(after="plan_memory"), "graph passes must run before plan_memory"),
    (dict(before="lower"), "graph passes must run before plan_memory"),
    (dict(after="lower"), "graph passes must run before plan_memory"),
])
def test_a_pack_whose_pass_has_a_bad_anchor_is_refused_and_compiling_still_works(anchors, complaint):
    # one bad PassSpec must not make every compile in the process fail (SPEC §4: a broken pack is not fatal)
    reg = registry_with_passes(PassSpec("misplaced", lambda g, ctx: g, **anchors), pack="odd_pack", strict=False)
    record = reg.packs["odd_pack"]
    assert record.status == "failed" and complaint in record.error and "'misplaced'" in record.error
    assert all(p.pack != "odd_pack" for p in reg.passes) and any("odd_pack" in p for p in reg.problems)
    with pytest.raises(fc.PluginError, match="odd_pack"):  # and FRAME_STRICT turns it into a hard failure
        registry_with_passes(PassSpec("misplaced", lambda g, ctx: g, **anchors), pack="odd_pack", strict=True)
    exe = fc.compile(marked_graph(), registry=reg, cache=False)
    np.testing.assert_allclose(run(exe), expected(), rtol=1e-6)


@pytest.mark.parametrize("name", ["verify", "fold_constants"])
def test_a_pass_named_like_a_built_in_stage_is_refused(name):
    # disable=["fold_constants"] would skip both, and disable=["verify"] is refused: the pass could not be skipped
    reg = registry_with_passes(PassSpec(name, lambda g, ctx: g, after="verify"), pack="odd_pack", strict=False)
    record = reg.packs["odd_pack"]
    assert record.status == "failed" and f"pass name {name!r} is the name of a built-in stage" in record.error


def test_a_pass_cache_key_joins_the_compile_cache_key():
    """A pass that reads a switch besides the graph (frame-native's FRAME_NATIVE) says so with ``cache_key``:
    a changed switch compiles again rather than serving an executable built under the old one."""
    switch = {"on": True}

    def maybe_mark(graph, ctx):
        ctx.note("switchable", f"on={switch['on']}")
        return graph
    reg = registry_with_passes(PassSpec("switchable", maybe_mark, after="verify", min_level=0,
                                        cache_key=lambda: switch["on"]))
    graph = marked_graph()
    on = fc.compile(graph, registry=reg)
    assert fc.compile(graph, registry=reg) is on
    switch["on"] = False
    off = fc.compile(graph, registry=reg)
    assert off is not on and ("switchable", "on=False") in off.log
    switch["on"] = True
    assert fc.compile(graph, registry=reg) is on
    bad = registry_with_passes(PassSpec("keyed", lambda g, ctx: g, after="verify", cache_key="FRAME_X"),
                               pack="odd_pack", strict=False)
    assert "cache_key must be a function" in bad.packs["odd_pack"].error


@pytest.mark.parametrize("cache_key, words", [(lambda: 1 / 0, "ZeroDivisionError"), (lambda: ["a"], "unhashable"),
                                              (lambda: exit(3), "SystemExit")])
def test_a_failing_cache_key_is_a_compile_error_naming_the_pass_and_pack(cache_key, words):
    reg = registry_with_passes(PassSpec("keyed", lambda g, ctx: g, after="verify", cache_key=cache_key),
                               pack="odd_pack")
    with pytest.raises(fc.CompileError, match=rf"pass 'keyed' \(pack odd_pack\): its cache_key\(\) failed with .*{words}"):
        fc.compile(marked_graph(), registry=reg)
    fc.compile(marked_graph(), registry=reg, cache=False)  # without the cache nothing asks for the key


def test_a_bad_pass_in_a_hand_built_registry_is_a_compile_error_naming_it():
    reg = registry_with_passes()
    reg.passes.append(PassSpec("misplaced", lambda g, ctx: g, after="lower", pack="odd_pack"))
    with pytest.raises(CompileError, match="pass from pack 'odd_pack': pass 'misplaced' is anchored after 'lower'"):
        fc.compile(marked_graph(), registry=reg, cache=False)


def test_a_pass_anchored_before_plan_memory_sees_the_fused_graph():
    seen = []
    reg = registry_with_passes(PassSpec("last", lambda g, ctx: seen.append(ops_in(g)) or g, before="plan_memory"))
    fc.compile(marked_graph(), registry=reg, cache=False)
    assert FUSED in seen[0]


def _snapshot(graph: Graph) -> tuple:
    ids = [(id(n), n.op, tuple(map(id, n.inputs)), tuple(map(id, n.outputs))) for n in graph.nodes]
    return ids, str(graph)


@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_compiling_leaves_the_callers_graph_untouched_and_recompiles(opt_level):
    # passes share unchanged nodes with their input and release the nodes they replace: never the caller's
    forward = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w) * ops.tanh(x @ w) + 1.0), "f32[4, 3]", "f32[3, 3]")
    training = fc.build_backward_graph(forward, 0, [1])
    before = _snapshot(training)
    first = fc.compile(training, opt_level=opt_level, cache=False)
    assert _snapshot(training) == before
    fc.verify(training)
    second = fc.compile(training, opt_level=opt_level, cache=False)
    x, w = np.ones((4, 3), np.float32), np.full((3, 3), 0.1, np.float32)
    for a, b in zip(first.run([x, w]), second.run([x, w])):
        np.testing.assert_array_equal(a, b)


def test_nodes_a_plugin_pass_returns_that_reach_the_final_graph_stay_intact():
    def rebuild(graph: Graph, ctx) -> Graph:  # a plugin pass that copies every node
        return fc.clone_graph(graph)

    reg = registry_with_passes(PassSpec("rebuild", rebuild, after="infer_types", min_level=0))
    graph = fc.trace(lambda x: ops.sum(ops.exp(x) + ops.exp(x)), "f32[3]")
    exe = fc.compile(graph, registry=reg, cache=False, checks=True)
    assert all(n.outputs for n in exe.graph.nodes)
    fc.verify(exe.graph, reg)
    np.testing.assert_allclose(exe.run([np.zeros(3, np.float32)])[0], 6.0)


def test_with_checks_an_invalid_input_is_still_the_callers_verify_error():
    """FRAME_CHECKS verifies after every stage; the caller's own mistake is reported as such (VerifyError
    naming the node), not as a stage that 'produced an invalid graph'."""
    graph = fc.trace(lambda x: ops.sin(x), "f64[3]")
    graph.nodes[-1].outputs[0].type = fc.TensorType("float32", (3,))
    for checks in (False, True):
        with pytest.raises(fc.VerifyError, match=r"node 0 \(sin\): output 0 is recorded as f32\[3\]"):
            fc.compile(graph, checks=checks, cache=False)


@pytest.mark.parametrize("changed, what", [
    (lambda: fc.trace(lambda a: ops.exp(-a), "f64[3]"), "input"),          # run() would want float64 arrays
    (lambda: fc.trace(lambda a: [ops.exp(-a), a], "f32[3]"), "output"),   # an extra output
])
def test_a_plugin_pass_that_changes_the_graphs_interface_is_a_compile_error_naming_it(changed, what):
    # the pass contract keeps inputs and output types; without the check the executable silently took other
    # arrays, and no FRAME_CHECKS run noticed (the changed graph is valid on its own)
    reg = registry_with_passes(PassSpec("retyper", lambda graph, ctx: changed(), after="verify", min_level=0))
    with pytest.raises(CompileError, match=rf"stage 'retyper \(pack test_passes\)' changed the graph's {what} types"):
        fc.compile(fc.trace(lambda a: ops.exp(-a), "f32[3]"), registry=reg, cache=False)
