"""ops_basic's ``simplify_algebra`` pass (anchored after fold_constants): each rule, and that broadcasting is kept.

Each case is compiled at opt_level 1 (folding, simplification and dead-node
elimination; no CSE or fusion) and compared with opt_level 0.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

ONES = np.ones(3, np.float32)
NEG_ZEROS = np.full(3, -0.0, np.float32)  # x + (-0.0) == x for every x; x + (+0.0) is not (-0.0 + 0.0 = +0.0)

# (id, function of x: f32[3] or f32[3, 3], the input type, the op the rule removes)
REMOVED = [
    ("x+(-0)", lambda x: x + fc.constant(NEG_ZEROS), "f32[3]", "add"),
    ("(-0)+x", lambda x: fc.constant(NEG_ZEROS) + x, "f32[3]", "add"),
    ("x+scalar(-0)", lambda x: x + -0.0, "f32[3]", "add"),
    ("x-0", lambda x: x - 0.0, "f32[3]", "sub"),
    ("x*1", lambda x: x * fc.constant(ONES), "f32[3]", "mul"),
    ("1*x", lambda x: 1.0 * x, "f32[3]", "mul"),
    ("x/1", lambda x: x / 1.0, "f32[3]", "div"),
    ("-(-x)", lambda x: -(-x), "f32[3]", "neg"),
    ("stop_gradient", lambda x: ops.stop_gradient(x), "f32[3]", "stop_gradient"),
    ("identity reshape", lambda x: ops.reshape(x, shape=[3, 3]), "f32[3, 3]", "reshape"),
    ("identity transpose", lambda x: ops.transpose(x, perm=[0, 1]), "f32[3, 3]", "transpose"),
    ("identity reduce_to_shape", lambda x: ops.reduce_to_shape_internal(x, shape=[3, 3]), "f32[3, 3]",
     "reduce_to_shape_internal"),
    ("identity broadcast_to", lambda x: ops.broadcast_to_internal(x, shape=[3, 3]), "f32[3, 3]", "broadcast_to_internal"),
]

# rewrites that would change the type or the value, so must not happen
KEPT = [
    ("x+0 broadcasts x", lambda x: x + fc.constant(np.zeros((2, 3), np.float32)), "f32[3]", "add"),
    ("x*1 broadcasts x", lambda x: x * fc.constant(np.ones((2, 3), np.float32)), "f32[3]", "mul"),
    ("0-x", lambda x: 0.0 - x, "f32[3]", "sub"),
    ("1/x", lambda x: 1.0 / x, "f32[3]", "div"),
    ("x*0 (inf, nan)", lambda x: x * 0.0, "f32[3]", "mul"),
    ("x+1", lambda x: x + 1.0, "f32[3]", "add"),
    ("x+(+0) (turns -0.0 into +0.0)", lambda x: x + 0.0, "f32[3]", "add"),
    ("square transpose", lambda x: ops.transpose(x), "f32[3, 3]", "transpose"),
    ("swapping transpose", lambda x: ops.transpose(x, perm=[1, 0]), "f32[3, 3]", "transpose"),
    ("real reshape", lambda x: ops.reshape(x, shape=[9]), "f32[3, 3]", "reshape"),
    ("single neg", lambda x: -x, "f32[3]", "neg"),
]


def sample(type_: str) -> np.ndarray:
    t = fc.TensorType.parse(type_)
    values = np.array([-0.0, np.inf, np.nan, 0.5, -2.0, 3.0, 1.0, -1.0, 2.5], np.float32)  # -0.0 in every sample
    return values[: t.size].reshape(t.shape)


def compiled_ops(fn, type_: str) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    graph = fc.trace(fn, type_)
    exe = fc.compile(graph, opt_level=1, cache=False)
    x = sample(type_)
    with np.errstate(invalid="ignore", divide="ignore"):  # inf * 0, 1 / -0.0 and nan are part of the samples
        return [n.op for n in exe.graph.nodes], exe.run([x]), fc.compile(graph, opt_level=0, cache=False).run([x])


@pytest.mark.parametrize("case, fn, type_, op", REMOVED, ids=[c[0] for c in REMOVED])
def test_rule_removes_the_node_and_keeps_the_value(case, fn, type_, op):
    found, got, want = compiled_ops(fn, type_)
    assert op not in found, found
    assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("case, fn, type_, op", KEPT, ids=[c[0] for c in KEPT])
def test_no_rule_fires_where_it_would_change_the_type_or_the_value(case, fn, type_, op):
    found, got, want = compiled_ops(fn, type_)
    assert op in found, found
    assert got[0].shape == want[0].shape
    np.testing.assert_array_equal(got[0], want[0])


def test_the_pass_is_contributed_by_ops_basic_after_constant_folding(basic_registry):
    (spec,) = [p for p in basic_registry.passes if p.name == "simplify_algebra"]
    assert (spec.pack, spec.after, spec.before, spec.min_level) == ("ops_basic", "fold_constants", None, 1)


def test_rules_cascade_through_values_already_rewritten():
    found, got, want = compiled_ops(lambda x: -(-(x * 1.0)) + -0.0, "f32[3]")
    assert found == []  # the output is the input itself
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("expand", ["sum_grad", "broadcast"])
def test_x_times_an_expanded_scalar_one_is_x_even_where_folding_would_not_materialise_it(expand):
    """A loss's seed is sum_grad_internal(1.0) to the input's shape: at [300, 300] it is larger than constant
    folding materialises, and multiplying by it was a full pass over the data in every training step."""
    shape = [300, 300]

    def f(x):
        one = fc.constant(np.array(1.0, np.float32))
        ones = (ops.sum_grad_internal(one, input_shape=shape, axes=(0, 1)) if expand == "sum_grad"
                else ops.broadcast_to_internal(one, shape=shape))
        return x * ones

    graph = fc.trace(f, "f32[300, 300]")
    exe = fc.compile(graph, opt_level=1, cache=False)
    assert [n.op for n in exe.graph.nodes] == []  # the output is the input itself
    x = np.random.default_rng(0).standard_normal((300, 300)).astype(np.float32)
    x[0, :4] = [-0.0, np.inf, np.nan, -np.inf]
    np.testing.assert_array_equal(exe.run([x])[0], fc.compile(graph, opt_level=0, cache=False).run([x])[0])


def test_an_expanded_scalar_that_is_not_one_or_that_broadcasts_x_is_kept():
    def not_one(x):
        return x * ops.broadcast_to_internal(fc.constant(np.array(2.0, np.float32)), shape=[300, 300])

    def broadcasts(x):
        return x * ops.broadcast_to_internal(fc.constant(np.array(1.0, np.float32)), shape=[300, 300])

    for fn, type_ in ((not_one, "f32[300, 300]"), (broadcasts, "f32[300]")):
        graph = fc.trace(fn, type_)
        exe = fc.compile(graph, opt_level=1, cache=False)
        assert "mul" in [n.op for n in exe.graph.nodes]
        x = np.linspace(-3, 3, 300 if type_ == "f32[300]" else 90000, dtype=np.float32).reshape(graph.inputs[0].shape)
        np.testing.assert_array_equal(exe.run([x])[0], fc.compile(graph, opt_level=0, cache=False).run([x])[0])
