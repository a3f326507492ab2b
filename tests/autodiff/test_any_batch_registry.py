"""Every registered op at a batch size other than the traced one: its forward, VJP (orders 1 and 2) and JVP graph.

Each case (``tests/autodiff/_any_batch.py``) compiles the graph of one node traced at the example's batch B with
``dynamic_shapes=True`` and runs it at B', against a graph traced at B': bit for bit the same, or refused with a
named ``ShapeError`` saying what was traced and what was given, never a numpy traceback or a silent wrong answer.
Here one case per op (the graph kind and B' in {1, B + 3, 2B, 0} rotate over the ops, so every kind and size is
met); ``benchmarks/any_batch_sweep.py`` runs every example at every size, kind and opt level.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from . import _any_batch as harness


def _one_case_per_op():
    reg = fc.registry()
    chosen = []
    for k, op in enumerate(sorted(reg.schemas)):
        example = reg.schemas[op].examples[0] if reg.schemas[op].examples else None
        batch = example is not None and harness.batch_axis([fc.as_type(t) for t in example.inputs])
        if not batch:
            continue
        lead = batch[0]
        kind = harness.KINDS[k % len(harness.KINDS)]
        sizes = [s for s in (lead + 3, 1, 2 * lead, 0) if s != lead]
        chosen.append((op, kind, sizes[(k // len(harness.KINDS)) % len(sizes)]))
    return chosen


CASES = _one_case_per_op()


@pytest.mark.parametrize("op, kind, size", CASES, ids=[f"{op}-{kind}-{size}" for op, kind, size in CASES])
def test_a_graph_traced_at_one_batch_runs_at_another_or_is_refused_by_name(op, kind, size):
    outcome = harness.check(op, 0, kind, size, options={"opt_level": 2 if len(op) % 2 else 0},
                            executable=False)
    assert outcome.verdict in harness.ACCEPTED, f"{op} {kind} at batch {size}: {outcome.verdict}: {outcome.detail}"


def test_the_rotation_meets_every_kind_and_size():
    assert {kind for _, kind, _ in CASES} == set(harness.KINDS)
    assert {0, 1} <= {size for _, _, size in CASES}


# -- regressions found by the sweep -----------------------------------------------------------------------------
def test_a_jvp_through_batch_norm_at_another_batch_is_a_fresh_traces_not_wrong():
    # batch_norm's derived JVP transposes batch_norm_grad_internal's gradient, which held 1/N and 1/(N-1) of the
    # running averages: at batch 9 its tangents were those of batch 6's constants (off by 1e-2), silently; then it
    # was refused. The gradient now reads both off x at run time: batch 9 gives a batch-9 trace's bytes
    def jvp_at(batch):
        forward = fc.trace(lambda x, w, b: ops.batch_norm(x, w, b, np.zeros(3, np.float32), np.ones(3, np.float32)),
                           f"f32[{batch}, 3]", "f32[3]", "f32[3]")
        return fc.build_jvp_graph(forward, [0, 1, 2])

    jvp = fc.compile(jvp_at(6), dynamic_shapes=True)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(9, 3), (3,), (3,), (9, 3), (3,), (3,)]]
    want = fc.compile(jvp_at(9)).run(args)
    for a, b in zip(jvp.run(args), want, strict=True):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("fn", [lambda x: (ops.tanh(x), ops.argmax(x, axis=1)),   # an integer output
                                lambda x: (ops.tanh(x), ops.stop_gradient(x))],    # an output no tangent reaches
                         ids=["integer output", "unreached output"])
def test_a_zero_tangent_runs_at_another_batch(fn):
    # the tangent of an output no input reaches is zeros read off the output's type: it came back [3, 4] at batch
    # 5 when it was a constant of the traced shape
    jvp = fc.compile(fc.build_jvp_graph(fc.trace(fn, "f64[3, 4]"), [0]), dynamic_shapes=True)
    x = np.random.default_rng(2).standard_normal((5, 4))
    want = fc.compile(fc.build_jvp_graph(fc.trace(fn, "f64[5, 4]"), [0])).run([x, x])
    got = jvp.run([x, x])
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_jvp_through_a_step_function_still_runs_at_any_batch():
    # floor's derived rule transposes a gradient that never reads its cotangent: the transpose is taken with
    # respect to the cotangents it reads only, or its zeros of the traced shape would mark every JVP through floor
    def fn(x):
        return ops.tanh(x) * ops.floor(x * 3.0)

    jvp = fc.compile(fc.build_jvp_graph(fc.trace(fn, "f64[3, 4]"), [0]), dynamic_shapes=True)
    x, t = np.random.default_rng(1).standard_normal((2, 5, 4))
    want = fc.compile(fc.build_jvp_graph(fc.trace(fn, "f64[5, 4]"), [0])).run([x, t])
    for a, b in zip(jvp.run([x, t]), want):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("build", [lambda g: fc.jacfwd(g, 0), lambda g: fc.jacrev(g, 0),
                                   lambda g: fc.build_laplacian_graph(g, 0)],
                         ids=["jacfwd", "jacrev", "laplacian"])
def test_derivative_graphs_with_directions_of_the_traced_shape_are_refused_at_another_batch(build):
    # their directions (a basis of x's elements) are constants of the traced shape: at batch 1 jacfwd and the
    # Laplacian graph broadcast them and answered with the traced batch's shapes ([5, 1, 5, 2] for [1, 1, 1, 2]).
    # The Taylor graph's seed and the directions of a Laplacian of points (batch_dims=1) follow x: they run at any
    # batch (tests/autodiff/test_taylor_any_batch.py)
    w = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    graph = build(fc.trace(lambda x: ops.tanh(x @ w), "f64[5, 2]"))
    exe = fc.compile(graph, dynamic_shapes=True)
    exe.run([np.ones((5, 2))])
    with pytest.raises(fc.ShapeError, match="build the .* graph again for the new shapes"):
        exe.run([np.ones((1, 2))])
