"""Zeros the transforms make follow the batch: one trace runs at any batch size (design note, section 2).

``build_backward_graph`` gives an output of a multi-output node that no loss reads (batch_norm's running
averages, a gradient op's unused ``gx`` at second order) and a ``wrt`` input the loss does not reach
``zeros_like_internal`` of the value, and forward mode does the same for tangents that are zero; compiled, each is
the constant zeros it stands for. Checked here: graphs traced at one batch and run at 1 (where the op allows), a
smaller and a larger one equal, bit for bit, the graph traced at that batch, and finite differences or torch; and
at the traced shape the compiled programs are the ones constant zeros gave, node for node, at every opt level.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.ir.graph import Graph, traced_sizes

from ._fd import gradient

RNG = np.random.default_rng(21)
C = 3


def _bitwise(got, want, label):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes(), label


def normed_loss(x, w, b):
    y, _, _ = ops.batch_norm(x, w, b, np.zeros(C), np.ones(C))  # running averages: outputs nothing reads
    return ops.sum(ops.square(ops.tanh(y)))


def normed_training(batch):
    return fc.build_backward_graph(fc.trace(normed_loss, f"f64[{batch}, {C}]", f"f64[{C}]", f"f64[{C}]"), 0,
                                   ["x", "w", "b"])


def test_batch_norm_training_graph_runs_at_other_batches_as_a_fresh_trace_and_as_torch():
    torch = pytest.importorskip("torch")
    training = normed_training(4)
    assert traced_sizes(training) is None
    exe = fc.compile(training, dynamic_shapes=True)
    w, b = 1 + RNG.standard_normal(C) * 0.1, RNG.standard_normal(C) * 0.1
    for batch in (4, 2, 9):
        x = RNG.standard_normal((batch, C))
        got = exe.run([x, w, b])
        _bitwise(got, fc.compile(normed_training(batch)).run([x, w, b]), f"batch {batch}")
        ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = torch.nn.functional.batch_norm(ts[0], torch.zeros(C, dtype=torch.float64), torch.ones(C, dtype=torch.float64),
                                           ts[1], ts[2], training=True)
        torch.tanh(y).square().sum().backward()
        for a, t in zip(got[1:], ts):
            np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"batch {batch}")
    # batch 1 is refused by batch_norm itself (no variance from one value), by name, as torch refuses it
    with pytest.raises(fc.ShapeError, match="batch_norm"):
        exe.run([RNG.standard_normal((1, C)), w, b])


def unreached_loss(x, w, z):
    return ops.sum(ops.tanh(x @ w))  # z: an input the loss never reads


def test_an_input_the_loss_does_not_reach_gets_zeros_of_its_new_shape():
    def training(batch):
        graph = fc.trace(unreached_loss, f"f64[{batch}, {C}]", f"f64[{C}, 2]", f"f32[{batch}, 5]")
        return fc.build_backward_graph(graph, 0, ["w", "z"])
    exe = fc.compile(training(4), dynamic_shapes=True)
    assert traced_sizes(training(4)) is None
    w = RNG.standard_normal((C, 2))
    for batch in (4, 1, 9):
        x, z = RNG.standard_normal((batch, C)), RNG.standard_normal((batch, 5)).astype(np.float32)
        got = exe.run([x, w, z])
        _bitwise(got, fc.compile(training(batch)).run([x, w, z]), f"batch {batch}")
        assert got[2].shape == (batch, 5) and got[2].dtype == np.float32 and not got[2].any()
        np.testing.assert_allclose(got[1], gradient(lambda v: float(np.tanh(x @ v).sum()), w), rtol=1e-7)


def test_second_order_through_a_gradient_op_with_an_unused_batch_sized_output():
    """d/dx sum(grad_w(loss)^2): the second walk meets layer_norm's gradient op, whose gx (the batch's shape) no
    one reads; its zero cotangent follows the batch."""
    def loss(x, w, b):
        return ops.sum(ops.square(ops.tanh(ops.layer_norm(x, w, b))))

    def second(batch):
        first = fc.build_backward_graph(fc.trace(loss, f"f64[{batch}, {C}]", f"f64[{C}]", f"f64[{C}]"), 0, ["w"])
        extended, k = fc.extend_graph(first, lambda *values: ops.sum(ops.square(values[-1])))  # grad w
        return fc.build_backward_graph(extended, k, ["x"])
    traced = second(4)
    assert traced_sizes(traced) is None
    assert any(n.op == "zeros_like_internal" and n.outputs[0].type.shape == (4, C) for n in traced.nodes)
    exe = fc.compile(traced, dynamic_shapes=True)
    w, b = 1 + RNG.standard_normal(C) * 0.1, RNG.standard_normal(C) * 0.1
    first = {}
    for batch in (4, 1, 6):
        x = RNG.standard_normal((batch, C))
        got = exe.run([x, w, b])
        _bitwise(got, fc.compile(second(batch)).run([x, w, b]), f"batch {batch}")
        if batch not in first:
            first[batch] = fc.compile(fc.build_backward_graph(
                fc.trace(loss, f"f64[{batch}, {C}]", f"f64[{C}]", f"f64[{C}]"), 0, ["w"]))
        grad_w = first[batch]

        def objective(v, grad_w=grad_w):
            return float(np.sum(np.square(grad_w.run([v, w, b])[1])))
        np.testing.assert_allclose(got[-1], gradient(objective, x), rtol=1e-6, atol=1e-8, err_msg=f"batch {batch}")


def test_a_vjp_graph_gives_zeros_of_the_new_shape_to_an_input_no_output_reaches():
    def vjp(batch):
        graph = fc.trace(lambda x, z: ops.tanh(x) * 2.0, f"f64[{batch}, {C}]", f"f64[{batch}, 2]")
        return fc.build_vjp_graph(graph)
    exe = fc.compile(vjp(3), dynamic_shapes=True)
    for batch in (3, 1, 8):
        args = [RNG.standard_normal((batch, C)), RNG.standard_normal((batch, 2)), RNG.standard_normal((batch, C))]
        got = exe.run(args)
        _bitwise(got, fc.compile(vjp(batch)).run(args), f"batch {batch}")
        assert got[1].shape == (batch, 2) and not got[1].any()
        np.testing.assert_allclose(got[0], 2.0 * (1 - np.tanh(args[0]) ** 2) * args[2], rtol=1e-14)


def test_forward_mode_zero_tangents_follow_the_batch():
    def model(x, w, b, s):
        return ops.layer_norm(ops.tanh(x @ w), b, b), s * 3.0, x * 2.0   # no tangent reaches s * 3 or x * 2

    def traced(batch):
        return fc.trace(model, f"f64[{batch}, {C}]", f"f64[{C}, 2]", "f64[2]", f"f64[{batch}]")

    def jvp(batch):
        return fc.build_jvp_graph(traced(batch), ["w", "b"])
    assert traced_sizes(jvp(4)) is None
    exe = fc.compile(jvp(4), dynamic_shapes=True)
    w, b = RNG.standard_normal((C, 2)), 1 + RNG.random(2)
    dw, db = RNG.standard_normal((C, 2)), RNG.standard_normal(2)
    for batch in (4, 1, 7):
        x, s = RNG.standard_normal((batch, C)), RNG.standard_normal(batch)
        got = exe.run([x, w, b, s, dw, db])
        _bitwise(got, fc.compile(jvp(batch)).run([x, w, b, s, dw, db]), f"batch {batch}")
        assert got[4].shape == (batch,) and got[5].shape == (batch, C) and not got[4].any() and not got[5].any()
        value = fc.compile(traced(batch))
        at = [value.run([x, w + t * dw, b + t * db, s]) for t in (1e-6, -1e-6)]
        np.testing.assert_allclose(got[3], (at[0][0] - at[1][0]) / 2e-6, rtol=1e-5, atol=1e-8)


def test_forward_mode_through_batch_norm_follows_the_batch():
    """batch_norm's forward-mode rule is derived from its gradient, whose own gradient held the traced 1/N: the
    running mean's tangent came out scaled by the traced batch over the new one before the JVP graph was marked,
    then it was refused. That gradient now reads 1/N and 1/(N - 1) off x: batch 6 gives a batch-6 trace's bytes."""
    def model(x, w, rm, rv):
        y, m, v = ops.batch_norm(ops.tanh(x @ w), np.ones(2), np.zeros(2), rm, rv)
        return y, m

    def traced(batch):
        return fc.trace(model, f"f64[{batch}, {C}]", f"f64[{C}, 2]", "f64[2]", "f64[2]")

    exe = fc.compile(fc.build_jvp_graph(traced(4), ["w"]), dynamic_shapes=True)
    w, rm, rv, dw = RNG.standard_normal((C, 2)), RNG.standard_normal(2), 1 + RNG.random(2), RNG.standard_normal((C, 2))
    exe.run([RNG.standard_normal((4, C)), w, rm, rv, dw])
    x = RNG.standard_normal((6, C))
    got = exe.run([x, w, rm, rv, dw])
    _bitwise(got, fc.compile(fc.build_jvp_graph(traced(6), ["w"])).run([x, w, rm, rv, dw]), "batch 6")
    value = fc.compile(traced(6))
    at = [value.run([x, w + t * dw, rm, rv]) for t in (1e-6, -1e-6)]
    assert got[3].shape == (2,)  # the running mean's tangent, against central differences
    np.testing.assert_allclose(got[3], (at[0][1] - at[1][1]) / 2e-6, rtol=1e-6, atol=1e-9)


def test_forward_mode_through_an_op_whose_rule_holds_the_batch_is_refused_by_name():
    """adaptive_avg_pool2d declares no any_shape_gradient: a JVP graph through it is marked and refused at a new
    batch (softplus was the example until the tutorial pack that provides it declared the trait)."""
    def jvp(batch):
        return fc.build_jvp_graph(fc.trace(lambda x: ops.adaptive_avg_pool2d(x, output_size=[2, 2]) * 2.0,
                                           f"f64[{batch}, {C}, 4, 4]"), [0])
    exe = fc.compile(jvp(4), dynamic_shapes=True)
    exe.run([np.ones((4, C, 4, 4)), np.ones((4, C, 4, 4))])
    with pytest.raises(fc.ShapeError, match="the forward-mode rule of adaptive_avg_pool2d may hold the traced sizes"):
        exe.run([np.ones((6, C, 4, 4)), np.ones((6, C, 4, 4))])


def _signature(graph):
    return [(n.op, tuple(str(v.type) for v in n.outputs), sorted(n.attrs)) for n in graph.nodes]


@pytest.mark.parametrize("build", [
    lambda: normed_training(4),
    lambda: fc.build_backward_graph(fc.trace(unreached_loss, f"f64[4, {C}]", f"f64[{C}, 2]", "f32[4, 5]"), 0,
                                    ["w", "z"]),
    lambda: fc.build_jvp_graph(fc.build_jvp_graph(
        fc.trace(normed_loss, f"f64[4, {C}]", f"f64[{C}]", f"f64[{C}]"), ["x"]), ["x"]),
], ids=["batch_norm training", "unreached input", "batch_norm jvp of jvp"])
def test_at_the_traced_shape_the_compiled_program_is_the_one_constant_zeros_gave(build, monkeypatch):
    shape_free = build()
    monkeypatch.setattr(Graph, "zeros_like", lambda self, value: self.zeros(value.type))  # the zeros of old
    constant = build()
    assert any(n.op == "zeros_like_internal" for n in shape_free.nodes)
    assert not any(n.op == "zeros_like_internal" for n in constant.nodes)
    args = [RNG.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in constant.inputs]
    for level in (0, 1, 2):
        a, b = fc.compile(shape_free, opt_level=level), fc.compile(constant, opt_level=level)
        assert _signature(a.graph) == _signature(b.graph), f"O{level}"
        _bitwise(a.run(args), b.run(args), f"O{level}")


def test_laplacian_and_taylor_graphs_of_points_run_at_another_batch_and_over_all_of_x_refuse_it():
    """With batch_dims=0 the Laplacian's directions span every element of x, constants of its traced shape:
    refused by name at another batch, never run wrongly (a Taylor graph traced at 4 points returned 4 rows at 1
    point before its graph was marked). With batch_dims=1 the directions act on one point's coordinates, and the
    Taylor seed is a row of ones broadcast like x: both run there, bit for bit a graph built at that batch."""
    w, v = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 1))

    def graph(n):
        return fc.trace(lambda x: ops.tanh(ops.tanh(x @ w) @ v), f"f64[{n}, 2]")
    builders = {"laplacian of points": lambda g: fc.build_laplacian_graph(g, 0, batch_dims=1),
                "taylor": lambda g: fc.build_taylor_graph(g, 0, 3)}
    everything = fc.compile(fc.build_laplacian_graph(graph(4), 0), dynamic_shapes=True)
    everything.run([RNG.standard_normal((4, 2))])
    traced = {name: fc.compile(build(graph(4)), dynamic_shapes=True) for name, build in builders.items()}
    for batch in (1, 7):
        x = RNG.standard_normal((batch, 2))
        with pytest.raises(fc.ShapeError, match="build_laplacian_graph wrote its directions"):
            everything.run([x])
        for name, build in builders.items():
            _bitwise(traced[name].run([x]), fc.compile(build(graph(batch))).run([x]), f"{name} at {batch}")
