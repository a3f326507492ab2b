"""SGD as a separate update graph (ARCH-065) and the MLP regression acceptance test."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

#: Acceptance settings, written in the test: seed, steps, learning rate, the loss the run must end below.
SEED, STEPS, LR, THRESHOLD = 20260713, 400, 0.05, 0.02
SIZES = (8, 32, 32, 1)


def mlp(x, t, w1, b1, w2, b2, w3, b3):
    h = ops.relu(x @ w1 + b1)
    h = ops.relu(h @ w2 + b2)
    return ops.mse_loss(h @ w3 + b3, t)


def param_types():
    types = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        types += [f"f32[{a}, {b}]", f"f32[{b}]"]
    return types


def test_sgd_update_graph_is_p_minus_lr_g_from_existing_ops_only():
    graph = fc.build_sgd_update_graph(["f32[2, 3]", "f64[4]"], 0.5)
    assert {n.op for n in graph.nodes} <= {"add", "mul", "constant"}
    assert [v.type for v in graph.outputs] == [fc.TensorType("f32", (2, 3)), fc.TensorType("f64", (4,))]
    p0, p1 = np.ones((2, 3), np.float32), np.arange(4.0)
    g0, g1 = np.full((2, 3), 2.0, np.float32), np.ones(4)
    n0, n1 = fc.compile(graph).run([p0, p1, g0, g1])
    np.testing.assert_allclose(n0, p0 - 0.5 * g0)
    np.testing.assert_allclose(n1, p1 - 0.5 * g1)
    assert n0.dtype == np.float32


@pytest.mark.parametrize("lr", [0.0, -1.0, float("nan"), float("inf")])
def test_sgd_refuses_a_bad_learning_rate(lr):
    with pytest.raises(fc.GradientError, match="learning rate"):
        fc.build_sgd_update_graph(["f32[2]"], lr)


def test_sgd_refuses_integer_parameters():
    with pytest.raises(fc.GradientError, match="floating parameters"):
        fc.build_sgd_update_graph(["i32[2]"], 0.1)


def test_mlp_regression_loss_falls_monotonically_below_threshold_with_zero_recompiles():
    rng = np.random.default_rng(SEED)
    x = rng.uniform(-1, 1, (64, SIZES[0])).astype(np.float32)
    t = np.sin(x @ rng.standard_normal((SIZES[0], 1))).astype(np.float32)  # a smooth target
    params = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        params += [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32), np.zeros(b, np.float32)]
    types = [f"f32[64, {SIZES[0]}]", "f32[64, 1]", *param_types()]
    training = fc.build_backward_graph(fc.trace(mlp, *types), 0, list(range(2, 8)))
    update = fc.build_sgd_update_graph(types[2:], LR)

    cache = fc.compile_cache
    losses, misses_after_first = [], None
    for step in range(STEPS):
        train_exe, update_exe = fc.compile(training), fc.compile(update)  # a loop that recompiles every step
        loss, *grads = train_exe.run([x, t, *params])
        params = update_exe.run([*params, *grads])
        losses.append(float(loss))
        if step == 0:
            misses_after_first = cache.misses
    assert cache.misses == misses_after_first, "shapes never change, so every step after the first hits the cache"
    assert all(b < a for a, b in zip(losses, losses[1:])), "the loss must fall at every step"
    assert losses[-1] < THRESHOLD, losses[-1]
    assert losses[0] > 5 * THRESHOLD  # the test starts from a real error
