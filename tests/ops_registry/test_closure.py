"""The start-up gradient-closure audit (ARCH-068) on fixture packs, and on the installed registry."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import Graph, PluginError
from frame_core.frontend.trace import apply, constant
from frame_core.ops_registry.closure import CLOSED, run_closure_audit
from frame_core.ops_registry.loader import load_registry

from .fakepacks import FakeEntryPoint, binary_internal, plugin, unary


def same_through(op: str):
    """A GradientFn ``gx = op(gy)``."""
    return lambda ctx: ctx.grad_graph(lambda x, y, gy: apply(op, gy))


def via_internal(op: str):
    """A GradientFn ``gx = op(x, gy)`` (the shape of ``relu``'s gradient)."""
    return lambda ctx: ctx.grad_graph(lambda x, y, gy: apply(op, x, gy))


def chain_ops():
    return [
        unary("c_closed", same_through("c_closed")),  # its gradient uses itself: closed
        binary_internal("o1_grad_internal"),  # no GradientFn (allowed: internal): order 0
        unary("o1", via_internal("o1_grad_internal")),  # order 1
        binary_internal("o2_grad_internal", lambda ctx: ctx.grad_graph(
            lambda x, gy, y, g: [apply("o1_grad_internal", x, g), apply("o1_grad_internal", gy, g)])),  # order 1
        unary("o2", via_internal("o2_grad_internal")),  # order 2
        unary("nd", not_differentiable="a fixture step function"),
        unary("o1b", same_through("nd")),  # order 1 through a declared non-differentiable op
        unary("u0", same_through("no_such_op_anywhere")),  # uses an op no pack provides: order 0
        unary("dead", lambda ctx: ctx.grad_graph(
            lambda x, y, gy: (apply("o1_grad_internal", constant(np.ones(3, np.float32)), constant(np.ones(3, np.float32))),
                              gy)[1])),  # an op on constants only is not on the active path: closed
    ]


@pytest.fixture(scope="module")
def chain_registry():
    return load_registry([FakeEntryPoint("chain", plugin("chain", chain_ops))], environ={})


@pytest.mark.parametrize("op, order, chain", [
    ("c_closed", CLOSED, ()),
    ("o1_grad_internal", 0, ("o1_grad_internal",)),
    ("o1", 1, ("o1", "o1_grad_internal")),
    ("o2_grad_internal", 1, ("o2_grad_internal", "o1_grad_internal")),
    ("o2", 2, ("o2", "o2_grad_internal", "o1_grad_internal")),
    ("nd", 0, ("nd",)),
    ("o1b", 1, ("o1b", "nd")),
    ("u0", 0, ("u0", "no_such_op_anywhere")),
    ("dead", CLOSED, ()),
])
def test_orders_and_chains(chain_registry, op, order, chain):
    info = chain_registry.closure[op]
    assert (info.order, info.chain) == (order, chain)
    assert info.closed == (order == CLOSED)
    assert info.at_least(1) == (order == CLOSED or order >= 1)


def test_differentiable_column_and_json_order(chain_registry):
    closure = chain_registry.closure
    assert [closure[o].differentiable for o in ("o1", "nd", "o1_grad_internal")] == ["yes", "no", "missing"]
    assert closure["o2"].json_order() == 2 and closure["c_closed"].json_order() == "closed"
    assert closure["nd"].json_order() is None and closure["o1_grad_internal"].json_order() is None


def test_uses_lists_the_ops_on_the_active_path(chain_registry):
    closure = chain_registry.closure
    assert closure["o1"].uses == ("o1_grad_internal",)
    assert closure["c_closed"].uses == ("c_closed",)
    assert closure["dead"].uses == ()


def test_a_gradient_using_an_unregistered_op_records_a_problem_but_the_pack_loads(chain_registry):
    assert chain_registry.closure["u0"].problems == ["gradient uses 'no_such_op_anywhere', which is not registered"]
    assert chain_registry.packs["chain"].status == "loaded" and "u0" in chain_registry


def test_orders_are_what_build_backward_graph_can_do(chain_registry):
    """Order k: k applications of the backward transform succeed, the next fails (ARCH-067).

    (Each fixture gradient reads ``x``, so every application meets the next op of the chain.)
    """
    from frame_core.autodiff.backward import build_backward_graph

    def times_differentiable(op: str) -> int:
        with fc.use_registry(chain_registry):
            g = Graph()
            x = g.add_input("f32[]")
            g.mark_output(g.apply(op, x))
            for k in range(4):
                try:
                    g = build_backward_graph(g, len(g.outputs) - 1, [0])
                except fc.GradientError:
                    return k
            return 4

    assert [times_differentiable(op) for op in ("nd", "o1", "o2", "c_closed")] == [0, 1, 2, 4]


# -- broken GradientFns -----------------------------------------------------------------------------------------
def hand_built(inputs, outputs):
    """A GradientFn returning a hand-built graph with these input types and (constant) output types."""
    def gradient(ctx):
        g = Graph("hand")
        for t in inputs:
            g.add_input(t)
        for t in outputs:
            g.mark_output(g.constant(np.zeros(fc.TensorType.parse(t).shape, fc.TensorType.parse(t).dtype.np)))
        return g
    return gradient


def fails_verify(ctx):
    g = Graph("bad")
    xs = [g.add_input(t) for t in ctx.gradient_input_types()]
    node = g.add_node("accumulate_internal", [xs[2], xs[2]], {}, ["f64[3]"])  # recorded type is wrong
    g.mark_output(node.outputs[0])
    return g


def raises(ctx):
    raise ValueError("a bug in the pack's GradientFn")


F3 = "f32[3]"
BROKEN = [
    ("wrong-count-hand-built", hand_built([F3] * 3, []), ["returns []", "one gradient per input"]),
    ("wrong-count-traced", lambda ctx: ctx.grad_graph(lambda x, y, gy: [gy, gy]),
     ["RegistrationError", "returned 2 gradients for 1 inputs"]),
    ("wrong-type-hand-built", hand_built([F3] * 3, ["f64[3]"]), ["returns [f64[3]]", "[f32[3]]"]),
    ("wrong-type-traced", lambda ctx: ctx.grad_graph(lambda x, y, gy: constant(np.zeros(3))),
     ["RegistrationError", "type f64[3] for input 0 (x), which has type f32[3]"]),
    ("wrong-inputs", hand_built([F3, F3], [F3]), ["micro-graph inputs are [f32[3], f32[3]]", "expected [x.., y.., gy..]"]),
    ("raising", raises, ["GradientFn raised ValueError", "a bug in the pack's GradientFn"]),
    ("not-a-graph", lambda ctx: None, ["returned NoneType, expected a Graph"]),
    ("fails-verify", fails_verify, ["micro-graph fails verify", "V6", "accumulate_internal"]),
]


@pytest.mark.parametrize("case, gradient, fragments", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_gradient_fn_fails_its_pack_and_removes_its_ops(case, gradient, fragments):
    def broken_ops():
        return [unary("b_sound", same_through("b_sound")), unary("b_broken", gradient)]

    def healthy_ops():
        return [unary("h_ok", same_through("h_ok"))]

    eps = [FakeEntryPoint("broken", plugin("broken", broken_ops)), FakeEntryPoint("healthy", plugin("healthy", healthy_ops))]
    reg = load_registry(eps, environ={})
    record = reg.packs["broken"]
    assert record.status == "failed"
    assert record.error.startswith("gradient contract violated: op 'b_broken':")
    for fragment in fragments:
        assert fragment in record.error
    assert "b_broken" not in reg and "b_sound" not in reg  # the whole pack goes
    assert "b_broken" not in reg.closure
    assert reg.packs["healthy"].status == "loaded" and reg.closure["h_ok"].closed
    assert any("broken-dist" in p and "b_broken" in p for p in reg.problems)
    with pytest.raises(PluginError, match="b_broken"):
        load_registry(eps, environ={}, strict=True)


def test_an_example_its_own_op_rejects_is_a_contract_error():
    def ops():
        return [unary("rank1_only", same_through("rank1_only"), example="f32[2, 2]",
                      shape_infer=lambda ctx: [ctx.input_types[0]] if ctx.input_types[0].rank == 1
                      else (_ for _ in ()).throw(ctx.error("rank 1 only")))]

    reg = load_registry([FakeEntryPoint("ex", plugin("ex", ops))], environ={})
    assert reg.packs["ex"].status == "failed" and "is rejected by its own op" in reg.packs["ex"].error


def test_a_failed_pack_contributes_no_compile_passes():
    from frame_core.compiler.passspec import PassSpec
    from frame_core.ops_registry.hookspecs import hookimpl

    module = plugin("withpass", lambda: [unary("p_broken", raises)])

    @hookimpl
    def frame_register_passes():
        return [PassSpec("fixture_noop", lambda graph, ctx: graph, after="verify")]

    module.frame_register_passes = frame_register_passes
    reg = load_registry([FakeEntryPoint("withpass", module)], environ={})
    assert reg.packs["withpass"].status == "failed"
    assert not [p for p in reg.passes if p.pack == "withpass"]


# -- deep audit ---------------------------------------------------------------------------------------------------
def deep_ops(seen: list):
    def inner_gradient(ctx):
        seen.append(ctx.input_types)
        if ctx.input_types[0].rank > 1:
            raise ValueError("inner's gradient only handles rank 1")
        return ctx.grad_graph(lambda x, y, gy: gy)

    return lambda: [
        unary("inner", inner_gradient, example="f32[3]"),
        unary("outer", same_through("inner"), example="f32[2, 2]"),
    ]


def test_start_up_audit_uses_each_ops_own_examples():
    seen: list = []
    reg = load_registry([FakeEntryPoint("deep", plugin("deep", deep_ops(seen)))], environ={})
    assert reg.packs["deep"].status == "loaded" and reg.closure["outer"].closed
    assert {t[0].shape for t in seen} == {(3,)}


def test_deep_audit_follows_the_types_ops_have_inside_micro_graphs():
    seen: list = []
    reg = load_registry([FakeEntryPoint("deep", plugin("deep", deep_ops(seen)))], environ={})
    seen.clear()
    run_closure_audit(reg, deep=True)
    assert {t[0].shape for t in seen} == {(3,), (2, 2)}
    assert reg.packs["deep"].status == "failed" and "only handles rank 1" in reg.packs["deep"].error


# -- the installed registry -----------------------------------------------------------------------------------------
#: Ops of the installed packs that are, by design, not closed: op -> why (documented in docs/plugins.md).
#: Besides the pipeline's fused op these are the ops declared not differentiable, with the reason they declare.
NOT_CLOSED = {
    "fused_elementwise_internal": "made by the compile pipeline after differentiation (ARCH-062)",
    **{op: "outputs carry no gradient" for op in ("equal", "not_equal", "less", "less_equal", "greater",
                                                   "greater_equal", "argmax", "argmin")},
    "one_hot": "integer indices carry no gradient",
    **{op: "keys are integers and carry no gradient" for op in ("random_split", "random_fold_in")},
    # frame-native's tiered form of a fused group (when that pack is installed)
    "native_fused_internal": "a compile-pipeline product made after differentiation; differentiate the "
                             "graph before compiling it",
    # ... and its compiled twins of layer_norm's and batch_norm's training pairs
    **{f"native_{norm}_{k}_internal": "a compile-pipeline product made after differentiation; differentiate "
                                      "the graph before compiling it"
       for norm in ("layer_norm", "batch_norm") for k in ("train", "grad_saved")},
    # ... and of reduce_to_shape_internal's sums over the rows of x[N, C]
    "native_column_sum_internal": "a compile-pipeline product made after differentiation; differentiate the "
                                  "graph before compiling it",
    # ... and of an inference convolution layer, relu(max_pool2d(conv2d(x, w), 2) + b)
    "native_conv_pool_internal": "a compile-pipeline product made after differentiation; differentiate the "
                                 "graph before compiling it",
    # ... and of tanh under compile(fast_math=True)
    "fast_tanh_internal": "a compile-pipeline product made after differentiation (compile(fast_math=True) puts it "
                          "in place of tanh); differentiate the graph before compiling it",
}


@pytest.mark.parametrize("deep", [False, True], ids=["start-up", "deep"])
def test_every_installed_op_is_closed_except_the_documented_ones(deep):
    reg = load_registry(environ={}, strict=True)
    if deep:
        run_closure_audit(reg, deep=True)
    assert all(p.status == "loaded" for p in reg.packs.values())
    expected = {op: why for op, why in NOT_CLOSED.items()
                if op in reg.schemas or not op.startswith(("native_", "fast_tanh"))}
    not_closed = {op: (info.order, info.differentiable) for op, info in reg.closure.items() if not info.closed}
    assert not_closed == {op: (0, "no") for op in expected}
    declared = {op: reg.schemas[op].not_differentiable for op in expected if op != "fused_elementwise_internal"}
    assert declared == {op: why for op, why in expected.items() if op != "fused_elementwise_internal"}
    assert all(not info.problems for info in reg.closure.values())


def test_a_gradient_in_the_slot_of_an_input_that_carries_none_fails_the_pack():
    # the slot of a non-differentiable input holds a zero (schema docstring); the audit enforces it at load
    def ops():
        return [unary("nd_bad", lambda ctx: ctx.grad_graph(lambda x, y, gy: gy), nondiff_inputs=(0,)),
                unary("nd_good", lambda ctx: ctx.grad_graph(lambda x, y, gy: None), nondiff_inputs=(0,))]

    reg = load_registry([FakeEntryPoint("slots", plugin("slots", ops))], environ={})
    assert reg.packs["slots"].status == "failed"
    assert "op 'nd_bad'" in reg.packs["slots"].error and "must be a zero constant" in reg.packs["slots"].error
    assert "nd_good" not in reg.packs["slots"].error


def test_the_deep_audit_says_what_its_bound_left_unchecked(monkeypatch):
    from frame_core.ops_registry import closure
    from frame_core.ops_registry.loader import load_registry

    reg = load_registry(environ={"FRAME_LOAD_PLUGINS": "ops_basic"}, audit=False)
    closure.run_closure_audit(reg, deep=True)
    assert not [n for n in reg.notes if "deep closure audit stopped" in n]  # the real bound is never reached
    monkeypatch.setattr(closure, "MAX_CONTEXTS", 3)
    reg = load_registry(environ={"FRAME_LOAD_PLUGINS": "ops_basic"}, audit=False)
    closure.run_closure_audit(reg, deep=True)
    (note,) = [n for n in reg.notes if "deep closure audit stopped" in n]
    assert "stopped after 3 GradientFn instantiations" in note and "were not checked" in note
    flagged = [op for op, info in reg.closure.items() if any("did not check" in p for p in info.problems)]
    assert flagged  # the ops whose contexts were left out say so too
    # every example is still checked: a contract break in any example would still be found
    assert all(op in reg.closure for op in reg.schemas)


def test_the_deep_audit_counts_each_context_it_left_unchecked_once(monkeypatch):
    """The queue may hold one context several times; the note once counted every copy (div: 10 for 5)."""
    import re

    from frame_core.ops_registry import closure
    from frame_core.ops_registry.loader import load_registry

    real = closure.check_gradient_contract

    def audit(bound: int | None) -> tuple[dict[str, set], "list[str]"]:
        checked: dict[str, set] = {}

        def spy(schema, ctx, micro, registry):
            checked.setdefault(schema.name, set()).add((ctx.input_types, closure.attrs_key(ctx.attrs)))
            return real(schema, ctx, micro, registry)

        monkeypatch.setattr(closure, "check_gradient_contract", spy)
        if bound is not None:
            monkeypatch.setattr(closure, "MAX_CONTEXTS", bound)
        reg = load_registry(environ={"FRAME_LOAD_PLUGINS": "ops_basic"}, audit=False)
        closure.run_closure_audit(reg, deep=True)
        return checked, reg.notes

    everything, _ = audit(None)
    checked, notes = audit(3)
    (note,) = [n for n in notes if "deep closure audit stopped" in n]
    counts = {op: int(n) for op, n in re.findall(r"(\w+) \((\d+)\)", note)}
    left = {op: len(everything[op] - checked.get(op, set())) for op in counts}
    assert counts and all(counts[op] <= left[op] for op in counts), (counts, left)
