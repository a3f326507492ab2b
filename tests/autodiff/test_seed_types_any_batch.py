"""Seeds follow the new shapes or are refused by name (design note, section 2: "Seeds at another batch size").

A VJP graph's cotangent inputs have the types of the outputs they seed, a JVP graph's tangent inputs the types
of their primal inputs. Traced, the input check says so; re-specialised for new input shapes (``compile(...,
dynamic_shapes=True)``, ``specialize``) only the type ties the transforms record do, and before them a seed of
another batch size was broadcast into a silently wrong answer (or refused by an internal gradient op, with a hint
about reshapes). Checked here for every transform and composition that takes seeds: a seed of another shape is a
``ShapeError`` naming the input, what it seeds, the shape to pass; matching seeds run bit for bit like the graph
traced at that batch, and agree with central differences.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.ir.graph import type_ties

from ._fd import gradient

B = 4  # the traced batch
RNG = np.random.default_rng(7)


def model(x, w):
    return ops.tanh(x @ w), ops.sin(x)  # two outputs of different shapes: each cotangent has its own


def loss(x, w):
    return ops.sum(ops.tanh(x @ w)) + ops.sum(ops.sin(x))


def traced(batch):
    return fc.trace(model, f"f64[{batch}, 3]", "f64[3, 2]")


TRANSFORMS = {
    "vjp": lambda b: fc.build_vjp_graph(traced(b)),
    "vjp_wrt_w": lambda b: fc.build_vjp_graph(traced(b), [1]),
    "jvp": lambda b: fc.build_jvp_graph(traced(b)),
    "jvp_wrt_x": lambda b: fc.build_jvp_graph(traced(b), ["x"]),
    "jvp_of_vjp": lambda b: fc.build_jvp_graph(fc.build_vjp_graph(traced(b))),
    "vjp_of_jvp": lambda b: fc.build_vjp_graph(fc.build_jvp_graph(traced(b))),
    "vjp_of_vjp": lambda b: fc.build_vjp_graph(fc.build_vjp_graph(traced(b))),
    "jvp_of_jvp": lambda b: fc.build_jvp_graph(fc.build_jvp_graph(traced(b))),
    "hvp": lambda b: fc.hvp(fc.trace(loss, f"f64[{b}, 3]", "f64[3, 2]"), 0),
    "vjp_of_hvp": lambda b: fc.build_vjp_graph(fc.hvp(fc.trace(loss, f"f64[{b}, 3]", "f64[3, 2]"), 0)),
    "saved_vjp": lambda b: fc.loads(fc.dumps(fc.build_vjp_graph(traced(b)))),
    "saved_jvp_of_vjp": lambda b: fc.loads(fc.dumps(fc.build_jvp_graph(fc.build_vjp_graph(traced(b))))),
}
PRIMALS = 2  # every transform's first two inputs are x and w


def _args(graph):
    return [RNG.standard_normal(v.type.shape) for v in graph.inputs]


def _bitwise(got, want, label):
    assert len(got) == len(want), label
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes(), label


@pytest.mark.parametrize("kind", sorted(TRANSFORMS))
def test_matching_seeds_run_bit_for_bit_like_a_graph_traced_at_that_batch(kind):
    build = TRANSFORMS[kind]
    graph = build(B)
    assert type_ties(graph), "the transform records its seeds' ties"
    exe = fc.compile(graph, dynamic_shapes=True)
    for batch in (1, 7, B):
        fresh = build(batch)
        args = _args(fresh)
        _bitwise(exe.run(args), fc.compile(fresh).run(args), f"{kind} at batch {batch}")


def _seed_cases():
    for kind in sorted(TRANSFORMS):
        graph = TRANSFORMS[kind](B)
        fresh = {batch: TRANSFORMS[kind](batch) for batch in (1, B)}
        for p in range(PRIMALS, len(graph.inputs)):
            for batch, how in ((1, "traced"), (1, "longer"), (B, "longer"), (B, "one"), (1, "wider")):
                right = fresh[batch].inputs[p].type.shape
                # (a scalar seed has no dimension to get wrong; a seed without a batch axis is right as traced)
                if right and _wrong(right, graph.inputs[p].type.shape, how) != right:
                    yield pytest.param(kind, p, batch, how, id=f"{kind}-input{p}-batch{batch}-{how}")


def _wrong(shape, traced_shape, how):
    if how == "traced":  # the cotangent / tangent left at the traced batch while the primals moved
        return traced_shape
    if how == "longer":
        return (shape[0] + 3,) + shape[1:]
    if how == "one":  # broadcasts against the right shape: the silent case
        return (1,) + shape[1:]
    return shape[:-1] + (shape[-1] + 2,)  # another size in the last (not the batch) dimension


@pytest.mark.parametrize("kind, p, batch, how", list(_seed_cases()))
def test_a_seed_of_another_shape_is_refused_by_name(kind, p, batch, how):
    build = TRANSFORMS[kind]
    graph, fresh = build(B), build(batch)
    right = fresh.inputs[p].type.shape
    wrong = _wrong(right, graph.inputs[p].type.shape, how)
    args = _args(fresh)
    args[p] = RNG.standard_normal(wrong)
    exe = fc.compile(graph, dynamic_shapes=True)
    with pytest.raises(fc.ShapeError) as info:
        exe.run(args)
    message = str(info.value)
    assert f"input {p}" in message and "tangent of " in message, message  # (cotangent or tangent, named)
    assert "pass a " in message and f"shape {list(right)}" in message, message
    assert f"given as f64{list(wrong)}" in message, message
    assert "_internal" not in message, message  # no gradient op's refusal, no hint about reshapes
    with pytest.raises(fc.ShapeError, match=rf"input {p}\b"):  # specialize itself refuses (any caller)
        fc.specialize(graph, [fc.TensorType(v.type.dtype, a.shape) for v, a in zip(graph.inputs, args)])


def test_the_message_names_the_input_what_it_seeds_and_the_shape_to_pass():
    g = fc.trace(lambda x: ops.tanh(x), "f32[4, 3]")
    x, gy = np.ones((1, 3), np.float32), np.ones((5, 3), np.float32)
    with pytest.raises(fc.ShapeError, match=r"input 1 is the cotangent of output 0, which is f32\[1, 3\] at these "
                                            r"input shapes; it was given as f32\[5, 3\]: pass a cotangent of the "
                                            r"output's shape \[1, 3\]"):
        fc.compile(fc.build_vjp_graph(g), dynamic_shapes=True).run([x, gy])
    with pytest.raises(fc.ShapeError, match=r"input 1 \('tangent:x'\) is the tangent of input 0 \('x'\), which is "
                                            r"f32\[1, 3\] .* pass a tangent of its primal's shape \[1, 3\]"):
        fc.compile(fc.build_jvp_graph(g), dynamic_shapes=True).run([x, gy])
    # a named output is named, and the gradient op that met the seed first (matmul's) is not blamed
    g3 = fc.trace(lambda x, w: ops.tanh(x @ w), "f32[4, 3]", "f32[3, 2]")
    g3.name_output(0, "y")
    with pytest.raises(fc.ShapeError, match=r"input 2 is the cotangent of output 0 \('y'\), which is "
                                            r"f32\[1, 2\] .* given as f32\[7, 2\]"):
        fc.compile(fc.build_vjp_graph(g3), dynamic_shapes=True).run([x, np.ones((3, 2), np.float32),
                                                                     np.ones((7, 2), np.float32)])


def test_at_the_traced_shapes_the_input_check_refuses_a_seed_of_another_shape():
    for build in (TRANSFORMS["vjp"], TRANSFORMS["jvp"]):
        graph = build(B)
        args = _args(graph)
        args[2] = RNG.standard_normal((B, 5))  # not the batch: the last dimension
        with pytest.raises(fc.InputError, match=r"input 2\b.*, the (cotangent|tangent) of .*, must have shape \[4, "):
            fc.compile(graph).run(args)
        with pytest.raises(fc.ShapeError, match=r"input 2 .*pass a"):  # dynamic, primals at the traced shapes
            fc.compile(graph, dynamic_shapes=True).run(args)


def test_matching_seeds_agree_with_central_differences_at_a_new_batch():
    vjp = fc.compile(TRANSFORMS["vjp"](B), dynamic_shapes=True)
    jvp = fc.compile(TRANSFORMS["jvp"](B), dynamic_shapes=True)
    x, w = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 2))
    gy0, gy1 = RNG.standard_normal((2, 2)), RNG.standard_normal((2, 3))
    dx, dw = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 2))

    def pairing(x_, w_):
        return float(np.sum(np.tanh(x_ @ w_) * gy0) + np.sum(np.sin(x_) * gy1))

    gx, gw = vjp.run([x, w, gy0, gy1])
    np.testing.assert_allclose(gx, gradient(lambda a: pairing(a, w), x), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(gw, gradient(lambda a: pairing(x, a), w), rtol=1e-7, atol=1e-9)
    _, _, dy0, dy1 = jvp.run([x, w, dx, dw])
    h = 1e-6
    for got, k in ((dy0, 0), (dy1, 1)):
        plus = (np.tanh((x + h * dx) @ (w + h * dw)), np.sin(x + h * dx))[k]
        minus = (np.tanh((x - h * dx) @ (w - h * dw)), np.sin(x - h * dx))[k]
        np.testing.assert_allclose(got, (plus - minus) / (2 * h), rtol=1e-6, atol=1e-8)


def test_ties_survive_copies_saves_and_respecialisation():
    graph = TRANSFORMS["jvp_of_vjp"](B)
    ties = type_ties(graph)
    roles = [t.role for t in ties]
    assert "the cotangent of output 1" in roles and "the tangent of input 2" in roles
    assert "the gradient of input 0 ('x')" in roles
    for copy in (fc.clone_graph(graph), fc.loads(fc.dumps(graph)),
                 fc.specialize(graph, [v.type.with_shape((2,) + v.type.shape[1:]) if v.type.shape[0] == B else v.type
                                       for v in graph.inputs])):
        assert [t.role for t in type_ties(copy)] == roles
        for t in type_ties(copy):  # each tie is between values of the copy
            assert t.value.type == t.like.type
    once = fc.specialize(TRANSFORMS["vjp"](B), ["f64[2, 3]", "f64[3, 2]", "f64[2, 2]", "f64[2, 3]"])
    with pytest.raises(fc.ShapeError, match=r"input 3 is the cotangent of output 1, which is f64\[1, 3\]"):
        fc.specialize(once, ["f64[1, 3]", "f64[3, 2]", "f64[1, 2]", "f64[2, 3]"])


def test_a_saved_tie_that_does_not_hold_is_refused_at_load():
    doc = json.loads(fc.dumps(TRANSFORMS["vjp"](B)))
    assert doc["graph"]["type_ties"]
    bad = json.loads(json.dumps(doc))
    bad["graph"]["type_ties"][0][1] = bad["graph"]["type_ties"][1][1]  # the first cotangent tied to output 1
    with pytest.raises(fc.GraphFormatError, match=r"type_ties\[0\].*one type"):
        fc.loads(json.dumps(bad))
    bad["graph"]["type_ties"] = [[0, 10 ** 6, "x"]]
    with pytest.raises(fc.GraphFormatError, match=r"type_ties\[0\].*defined values"):
        fc.loads(json.dumps(bad))


def test_a_gradient_output_that_leaves_its_input_type_is_refused_by_name():
    # a graph whose 'gradient' is x's transpose: tied to x at [3, 3], it leaves x's type at [1, 3]
    from frame_core.ir.graph import tie_types

    graph = fc.trace(lambda x: ops.transpose(x), "f64[3, 3]")
    tie_types(graph, graph.outputs[0], graph.inputs[0], "the gradient of input 0 ('x')")
    with pytest.raises(fc.ShapeError, match=r"output 0 is the gradient of input 0 \('x'\) and should have its type "
                                            r"f64\[1, 3\] .* came out f64\[3, 1\]"):
        fc.specialize(graph, ["f64[1, 3]"])


def test_training_graphs_tie_each_gradient_to_its_input():
    training = fc.build_backward_graph(fc.trace(loss, "f64[4, 3]", "f64[3, 2]"), 0, ["w", "x"])
    assert [(t.value, t.like, t.role) for t in type_ties(training)] == [
        (training.outputs[1], training.inputs[1], "the gradient of input 1 ('w')"),
        (training.outputs[2], training.inputs[0], "the gradient of input 0 ('x')")]


def test_jvp_inputs_checks_a_tangent_against_its_primal_at_any_batch():
    g = traced(B)
    exe = fc.compile(fc.build_jvp_graph(g), dynamic_shapes=True)
    x, w = RNG.standard_normal((1, 3)), RNG.standard_normal((3, 2))
    args = fc.jvp_inputs(g, [x, w], [np.ones((1, 3)), np.ones((3, 2))])
    assert exe.run(args)[2].shape == (1, 2)
    with pytest.raises(fc.TangentError, match=r"tangent of x has shape \[4, 3\], its primal is f64\[1, 3\]"):
        fc.jvp_inputs(g, [x, w], [np.ones((4, 3)), np.ones((3, 2))])


def test_taylor_and_laplacian_graphs_take_no_seed_inputs_to_tie():
    # their seeds are made from x (a row of ones, directions over one point's coordinates), so they follow x's
    # shape by construction; a seed input added to them later needs a tie (ir.graph.tie_types) like the others
    g = fc.trace(lambda x: ops.sum(ops.tanh(x), axes=[1]), "f64[4, 3]")
    for built in (fc.build_taylor_graph(g, 0), fc.build_laplacian_graph(g, 0, batch_dims=1)):
        assert [v.type for v in built.inputs] == [v.type for v in g.inputs]
        assert type_ties(built) == ()


def test_a_compiled_transform_says_what_each_seed_input_is():
    vjp, jvp = TRANSFORMS["vjp"](B), TRANSFORMS["jvp"](B)
    roles = fc.compile(vjp).input_roles
    assert roles and all(role.startswith("the cotangent of output") for role in roles.values())
    assert all(vjp.inputs[i] in {t.value for t in type_ties(vjp)} for i in roles)
    assert all(role.startswith("the tangent of input") for role in fc.compile(jvp).input_roles.values())
    assert fc.compile(fc.trace(lambda x: ops.tanh(x), "f32[4, 3]")).input_roles == {}  # a plain graph: no seeds
