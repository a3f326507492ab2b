"""Op identity across packs (SPEC §4): qualified names, bundled short names, ambiguity, pack scope, JSON.

Packs are faked with ``FakeEntryPoint`` next to the real, installed frame-ops-basic entry point.
The third-party op ``relu`` of the fake pack ``aaa_relu`` doubles its input (``2x``), so that every
mix-up with frame-ops-basic's ``relu`` (``max(x, 0)``) changes a number: its GradientFn is
``relu(gy)``, which is right (``2 gy``) only if ``relu`` there means the pack's own op.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import frame_core as fc
from frame_core import AmbiguousOpError, FrameError, Graph, PluginError, UnknownOpError, ops
from frame_core.frontend.trace import apply
from frame_core.ir.keys import graph_key
from frame_core.ops_registry.loader import BUNDLED_DISTRIBUTIONS, discover_entry_points, load_registry, namespace_of
from frame_core.ops_registry.registry import op_scope, use_registry
from frame_core.ops_registry.schema import Example, OpSchema

from ..fakes import FakeEntryPoint
from .fakepacks import plugin, unary


def doubling(name: str, **overrides) -> OpSchema:
    """``name(x) = 2x``; its GradientFn is ``name(gy)``: right only when ``name`` means this very op."""
    spec = dict(gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: apply(name, gy)),
                kernels={"cpu": lambda ctx: (lambda x: np.multiply(x, x.dtype.type(2)))},
                examples=[Example(["f64[3]"]), Example(["f32[2, 2]"])])
    spec.update(overrides)
    return unary(name, **spec)


def twice_by_decomposition() -> OpSchema:
    """``aaa_twice(x)`` has no kernel of its own on ``gpu``; its DecomposeFn is ``relu(x)``, meaning its pack's ``2x``."""
    return unary("aaa_twice", gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.relu(gy)),
                 decomposition=lambda ctx: ctx.decomposition_graph(lambda x: ops.relu(x)),
                 kernels={"cpu": lambda ctx: (lambda x: np.multiply(x, x.dtype.type(2)))},
                 examples=[Example(["f64[3]"])])


def basic_entry_points() -> list:
    return [ep for ep in discover_entry_points() if ep.dist_name == "frame-ops-basic"]


def third_party(name: str = "aaa_relu", dist: str = "aaa-relu", ops_=None) -> FakeEntryPoint:
    make = ops_ or (lambda: [doubling("relu"), twice_by_decomposition()])
    return FakeEntryPoint(name, plugin(name, make), dist_name=dist)


@pytest.fixture(scope="module")
def basic():
    (ep,) = basic_entry_points()
    return ep


@pytest.mark.parametrize("order", ["third-party-first", "third-party-last"])
def test_a_third_party_relu_leaves_ops_basic_whole_and_relu_means_the_bundled_one(basic, order):
    eps = [third_party(), basic] if order == "third-party-first" else [basic, third_party()]
    reg = load_registry(eps, environ={})
    assert reg.packs["ops_basic"].status == "loaded" and reg.packs["aaa_relu"].status == "loaded"
    assert set(reg.packs["ops_basic"].ops) <= {s.name for s in reg.ops_of("ops_basic")}  # every op of it is there
    for schema in reg.ops_of("ops_basic"):
        assert reg.key_of(schema) == schema.name  # bundled ops keep their short names
    assert reg.get("relu").pack == "ops_basic" and reg.schemas["relu"].pack == "ops_basic"
    mine = reg.get("aaa_relu::relu")
    assert mine.pack == "aaa_relu" and mine.qualname == "aaa_relu::relu" and reg.key_of(mine) == "aaa_relu::relu"
    assert "aaa_relu::relu" in reg.schemas and reg.schemas.get("ops_basic::relu") is reg.get("relu")
    keys = [k for k, s in reg.schemas.items() if s.name == "relu"]
    assert sorted(keys) == ["aaa_relu::relu", "relu"] and len(reg.schemas) == len(set(reg.schemas))
    # the pack's own gradient uses its own op, so the closure audit keeps it
    assert reg.closure["aaa_relu::relu"].closed and reg.closure["aaa_relu::relu"].uses == ("aaa_relu::relu",)
    assert reg.closure["relu"].closed
    warning = next(p for p in reg.problems if "collision" in p)
    assert "frame-ops-basic" in warning and "aaa-relu 1.0" in warning
    assert "ops_basic::relu" in warning and "aaa_relu::relu" in warning


def test_load_order_does_not_change_what_names_mean(basic):
    first = load_registry([third_party(), basic], environ={})
    last = load_registry([basic, third_party()], environ={})
    assert sorted(first.schemas) == sorted(last.schemas)
    assert {k: s.qualname for k, s in first.schemas.items()} == {k: s.qualname for k, s in last.schemas.items()}


def test_short_and_qualified_names_build_the_same_node_and_run_the_right_kernel(basic):
    reg = load_registry([third_party(), basic], environ={})
    x = np.array([-1.5, 0.5, 2.0])
    with use_registry(reg):
        graph = fc.trace(lambda x: [ops.relu(x), apply("ops_basic::relu", x), ops.op("aaa_relu::relu")(x),
                                    apply("aaa_relu::relu", x)], "f64[3]")
        assert [n.op for n in graph.nodes] == ["relu", "relu", "aaa_relu::relu", "aaa_relu::relu"]
        g = Graph()
        assert g.add_node("ops_basic::relu", [g.add_input("f64[3]")]).op == "relu"
        got = fc.compile(graph, registry=reg).run([x])
    np.testing.assert_array_equal(got[0], np.maximum(x, 0))
    np.testing.assert_array_equal(got[1], np.maximum(x, 0))
    np.testing.assert_array_equal(got[2], 2 * x)
    np.testing.assert_array_equal(got[3], 2 * x)


def test_the_qualified_op_differentiates_with_its_own_gradient(basic):
    reg = load_registry([third_party(), basic], environ={})
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.sum(ops.op("aaa_relu::relu")(x)), "f64[3]")
        grad = fc.build_backward_graph(graph, 0, [0], registry=reg)
        second, index = fc.add_scalar_contraction(grad, 1)
        hess = fc.build_backward_graph(second, index, [0], registry=reg)
        x = np.array([-1.0, -2.0, 3.0])  # negative entries: ops_basic's relu(gy) would still give 2, not so relu(x)
        out = fc.compile(grad, registry=reg).run([x])
        np.testing.assert_allclose(out[1], [2.0, 2.0, 2.0])
        np.testing.assert_allclose(fc.compile(hess, registry=reg).run([x])[-1], [0.0, 0.0, 0.0])
    # gradient of 2x, traced by the pack's GradientFn on a negative cotangent: a relu would clip it to zero
    with use_registry(reg):
        schema = reg.get("aaa_relu::relu")
        micro = schema.gradient(schema.context(["f64[3]"]))
        assert [n.op for n in micro.nodes] == ["aaa_relu::relu"]
        gy = np.array([-1.0, 2.0, -3.0])
        got = fc.compile(micro, registry=reg).run([np.zeros(3), np.zeros(3), gy])[0]
    np.testing.assert_array_equal(got, 2 * gy)


def test_a_decomposition_uses_its_own_packs_op(basic):
    reg = load_registry([third_party(), basic], environ={})
    x = np.array([-1.0, 2.0, -3.0])
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.aaa_twice(x), "f64[3]")
        exe = fc.compile(graph, registry=reg, decompose={"aaa_twice"}, cache=False)
    assert [i.op for i in exe.instructions] == ["aaa_relu::relu"]
    np.testing.assert_array_equal(exe.run([x])[0], 2 * x)


def test_scope_prefers_the_packs_own_op_only_inside_it(basic):
    reg = load_registry([third_party(), basic], environ={})
    with use_registry(reg):
        assert reg.get("relu").pack == "ops_basic"
        with op_scope("aaa_relu"):
            assert reg.get("relu").pack == "aaa_relu"
            assert reg.get("ops_basic::relu").pack == "ops_basic"  # a qualified name is never re-scoped
            assert reg.get("add").pack == "ops_basic"  # names the pack does not have fall through
            assert reg.schemas["relu"].pack == "ops_basic"  # stored keys are looked up exactly
        with op_scope("ops_basic"):
            assert reg.get("relu").pack == "ops_basic"


def two_third_party_packs() -> list:
    def make(tag: str):
        return lambda: [doubling("fk_dup"), unary(f"fk_{tag}_only", gradient=lambda ctx: ctx.grad_graph(
            lambda x, y, gy: ops.fk_dup(gy)))]
    return [FakeEntryPoint("alpha", plugin("alpha", make("alpha")), dist_name="alpha-pack"),
            FakeEntryPoint("beta", plugin("beta", make("beta")), dist_name="beta-pack", dist_version="2.0")]


def test_two_third_party_packs_with_one_name_make_the_short_name_ambiguous():
    reg = load_registry(two_third_party_packs(), environ={})
    assert reg.packs["alpha"].status == "loaded" and reg.packs["beta"].status == "loaded"
    with pytest.raises(AmbiguousOpError) as info:
        reg.get("fk_dup")
    error = info.value
    assert isinstance(error, FrameError) and isinstance(error, KeyError) and isinstance(error, UnknownOpError)
    assert error.candidates == ["alpha::fk_dup", "beta::fk_dup"]
    assert "'alpha::fk_dup'" in str(error) and "'beta::fk_dup'" in str(error) and "ambiguous" in str(error)
    assert "fk_dup" not in reg.schemas and reg.schemas.get("fk_dup") is None
    with pytest.raises(AmbiguousOpError):
        reg.schemas["fk_dup"]
    assert reg.get("alpha::fk_dup").pack == "alpha" and reg.get("beta::fk_dup").pack == "beta"
    assert sorted(k for k in reg.schemas if "fk_dup" in k) == ["alpha::fk_dup", "beta::fk_dup"]
    with use_registry(reg), pytest.raises(AmbiguousOpError):
        fc.trace(lambda x: ops.fk_dup(x), "f64[3]")
    # inside each pack, the short name means the pack's own op: both gradients are closed
    for pack in ("alpha", "beta"):
        assert reg.closure[f"{pack}::fk_dup"].closed
        assert reg.closure[f"fk_{pack}_only"].uses == (f"{pack}::fk_dup",)
    warning = next(p for p in reg.problems if "collision" in p)
    assert "alpha-pack 1.0" in warning and "beta-pack 2.0" in warning and "ambiguous" in warning


def test_a_third_party_name_without_a_rival_keeps_its_short_name():
    reg = load_registry(two_third_party_packs()[:1], environ={})
    assert reg.get("fk_dup").qualname == "alpha::fk_dup" and "fk_dup" in reg.schemas
    assert not [p for p in reg.problems if "collision" in p]


def test_a_failed_rival_gives_the_short_name_back():
    def broken():
        return [unary("fk_dup", gradient=lambda ctx: 1 / 0)]
    eps = [two_third_party_packs()[0], FakeEntryPoint("gamma", plugin("gamma", broken), dist_name="gamma-pack")]
    reg = load_registry(eps, environ={})
    assert reg.packs["gamma"].status == "failed"  # its GradientFn raises: the closure audit drops it
    assert reg.get("fk_dup").qualname == "alpha::fk_dup" and "fk_dup" in reg.schemas
    assert not [p for p in reg.problems if "collision" in p]


@pytest.mark.parametrize("environ, strict", [({"FRAME_STRICT": "1"}, None), ({}, True)])
def test_a_collision_is_an_error_in_strict_mode(basic, environ, strict):
    with pytest.raises(PluginError, match="collision: 'relu'"):
        load_registry([third_party(), basic], environ=environ, strict=strict)
    with pytest.raises(PluginError, match="ambiguous"):
        load_registry(two_third_party_packs(), environ=environ, strict=strict)


@pytest.mark.parametrize("first, second", [("same_name", "same_name"), ("my-pack", "my_pack")],
                         ids=["same-entry-point-name", "same-namespace"])
def test_a_namespace_taken_by_another_distribution_refuses_the_second(first, second):
    eps = [FakeEntryPoint(first, plugin("a", lambda: [doubling("fk_a")]), dist_name="a-dist"),
           FakeEntryPoint(second, plugin("b", lambda: [doubling("fk_b")]), dist_name="b-dist")]
    reg = load_registry(eps, environ={})
    assert reg.packs[first].status == "loaded" and reg.packs[first].namespace == namespace_of(first)
    clash = reg.packs[f"{second}@b-dist"]
    assert clash.status == "failed" and "already used by a-dist 1.0" in clash.error and "unique" in clash.error
    assert "fk_b" not in reg


def test_namespaces_are_identifiers():
    assert namespace_of("ops_basic") == "ops_basic"
    assert namespace_of("my-pack.v2") == "my_pack_v2"
    assert namespace_of("2fast") == "_2fast"
    assert "frame-ops-basic" in BUNDLED_DISTRIBUTIONS and "frame-core" in BUNDLED_DISTRIBUTIONS


def test_the_core_ops_are_in_the_core_namespace():
    reg = load_registry([], environ={})
    assert reg.get("core::constant") is reg.get("constant") and reg.get("constant").qualname == "core::constant"
    assert reg.packs["core"].namespace == "core"


def test_a_third_party_constant_never_replaces_the_core_one_in_graph_constant():
    def make():
        return [unary("constant", gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * 2.0))]
    reg = load_registry([FakeEntryPoint("odd", plugin("odd", make), dist_name="odd-dist")], environ={})
    assert reg.get("constant").pack == "core" and reg.get("odd::constant").pack == "odd"
    with use_registry(reg), op_scope("odd"):  # inside the pack, literals still become the core's constants
        g = Graph()
        assert g.constant(np.ones(2)).producer.op == "constant"


def test_unknown_qualified_names_say_which_namespace_is_missing(basic):
    reg = load_registry([basic], environ={})
    with pytest.raises(UnknownOpError, match="no loaded pack has the namespace 'nosuch'"):
        reg.get("nosuch::relu")
    with pytest.raises(UnknownOpError, match="did you mean 'ops_basic::relu'"):
        reg.get("ops_basic::rellu")
    with pytest.raises(FrameError, match="named by a string"):
        reg.get(3)


# -- JSON ---------------------------------------------------------------------------------------------------------
def test_json_names_every_op_qualified_and_reads_back_canonical_keys(basic):
    reg = load_registry([third_party(), basic], environ={})
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.sum(ops.relu(x) + ops.op("aaa_relu::relu")(x) * 2.0), "f64[3]")
    text = fc.dumps(graph, registry=reg)
    doc = json.loads(text)
    assert doc["version"] == 2
    ops_written = [n["op"] for n in doc["graph"]["nodes"]]
    assert "ops_basic::relu" in ops_written and "aaa_relu::relu" in ops_written and "core::constant" in ops_written
    assert all("::" in op for op in ops_written)
    back = fc.loads(text, registry=reg)
    assert [n.op for n in back.nodes] == [n.op for n in graph.nodes]
    assert graph_key(back) == graph_key(graph)
    fc.verify(back, reg)


def test_json_qualifies_ops_inside_sub_graph_attributes(basic):
    reg = load_registry([basic], environ={})
    body = Graph("body")
    node = body.add_node("relu", [body.add_input("f32[2]")], registry=reg)
    body.mark_output(node.outputs[0])
    g = Graph()
    g.add_node("fused_elementwise_internal", [g.add_input("f32[2]")], {"body": body}, ["f32[2]"])
    doc = json.loads(fc.dumps(g, registry=reg))
    inner = doc["graph"]["nodes"][0]["attrs"]["body"]["value"]["nodes"][0]
    assert doc["graph"]["nodes"][0]["op"] == "core::fused_elementwise_internal" and inner["op"] == "ops_basic::relu"
    assert fc.loads(json.dumps(doc), registry=reg).nodes[0].attrs["body"].nodes[0].op == "relu"


def test_a_version_1_document_with_short_names_still_loads(basic):
    reg = load_registry([third_party(), basic], environ={})
    v1 = {"format": "frame-graph", "version": 1, "graph": {
        "name": "old", "inputs": [{"id": 0, "type": "f32[3]", "name": "x"}],
        "nodes": [{"op": "relu", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]"}]}], "outputs": [1]}}
    graph = fc.loads(json.dumps(v1), registry=reg)
    assert graph.nodes[0].op == "relu" and reg.schemas[graph.nodes[0].op].pack == "ops_basic"
    fc.verify(graph, reg)
    assert json.loads(fc.dumps(graph, registry=reg))["graph"]["nodes"][0]["op"] == "ops_basic::relu"


def test_a_qualified_op_of_a_pack_not_installed_loads_and_verify_names_it(basic):
    reg = load_registry([basic], environ={})
    doc = {"format": "frame-graph", "version": 2, "graph": {
        "name": "g", "inputs": [{"id": 0, "type": "f32[3]"}],
        "nodes": [{"op": "aaa_relu::relu", "inputs": [0], "outputs": [{"id": 1, "type": "f32[3]"}]}], "outputs": [1]}}
    graph = fc.loads(json.dumps(doc), registry=reg)
    assert graph.nodes[0].op == "aaa_relu::relu"
    (problem,) = fc.check_graph(graph, reg)
    assert problem.rule == "V3" and "aaa_relu::relu" in problem.message and "namespace 'aaa_relu'" in problem.message
    assert json.loads(fc.dumps(graph, registry=reg))["graph"]["nodes"][0]["op"] == "aaa_relu::relu"


def test_a_qualified_op_prints_qualified(basic):
    reg = load_registry([third_party(), basic], environ={})
    with use_registry(reg):
        graph = fc.trace(lambda x: ops.op("aaa_relu::relu")(ops.relu(x)), "f32[3]")
    text = fc.format_graph(graph)
    assert "aaa_relu::relu(" in text and "= relu(" in text
    assert "aaa_relu::relu" in fc.to_dot(graph)


def test_the_check_kit_checks_the_colliding_op_itself_not_the_bundled_one(basic):
    from frame_core.testing import check_op, run_conformance

    wrong = lambda: [doubling("relu", gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * 3.0))]  # noqa: E731
    reg = load_registry([third_party("bad", "bad-dist", wrong), third_party(), basic], environ={})
    report = check_op(reg.get("bad::relu"), registry=reg)
    assert not report.ok  # 3 gy is not the derivative of 2 x: checking ops_basic's relu instead would pass
    assert check_op(reg.get("aaa_relu::relu"), registry=reg).ok
    reports = run_conformance("aaa_relu", registry=reg)
    assert {r.op for r in reports} == {"aaa_relu::relu", "aaa_twice"} and all(r.ok for r in reports)


def test_every_way_of_writing_the_schema_table_keeps_qualified_names_in_step(basic):
    """``update``/``setdefault``/``pop``/``popitem``/``clear``/``|=``/``copy`` once bypassed the qualified-name
    index (the table is a dict subclass): a popped op stayed reachable as ``ns::name``, an updated one was not."""
    reg = load_registry([basic], environ={})
    schemas = reg.schemas
    relu = schemas["relu"]
    mine = doubling("mine")
    mine.namespace = "mine_ns"
    schemas.update({"mine": mine})
    assert schemas["mine_ns::mine"] is mine and "mine_ns::mine" in schemas
    copied = schemas.copy()
    assert type(copied) is type(schemas) and copied["ops_basic::relu"] is relu and copied["mine_ns::mine"] is mine
    assert schemas.pop("mine") is mine and "mine_ns::mine" not in schemas and schemas.get("mine_ns::mine") is None
    assert schemas.pop("mine", None) is None
    with pytest.raises(KeyError):
        schemas.pop("mine")
    assert schemas.setdefault("mine", mine) is mine and schemas["mine_ns::mine"] is mine
    assert schemas.setdefault("mine", relu) is mine
    schemas |= {"mine2": doubling("mine2")}
    assert "mine2" in schemas
    key, schema = schemas.popitem()
    assert key == "mine2" and key not in schemas and schema.qualname not in schemas
    assert copied["mine_ns::mine"] is mine  # the copy has its own index
    schemas.clear()
    assert len(schemas) == 0 and "ops_basic::relu" not in schemas and schemas.get("relu") is None
    assert copied["relu"] is relu and len(copied.qualified) == len(copied)


def test_schema_table_writes_take_qualified_names_as_lookups_do(basic):
    schemas = load_registry([basic], environ={}).schemas
    relu, count = schemas["relu"], len(schemas)
    assert schemas.setdefault("ops_basic::relu", schemas["tanh"]) is relu and len(schemas) == count
    merged = schemas | {}
    assert type(merged) is type(schemas) and merged["ops_basic::relu"] is relu
    assert schemas.pop("ops_basic::relu") is relu and "relu" not in schemas and len(schemas) == count - 1
    del merged["ops_basic::tanh"]
    assert "tanh" not in merged and "ops_basic::tanh" not in merged and "tanh" in schemas
