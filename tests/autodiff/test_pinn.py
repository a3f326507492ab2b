"""A 1-D physics-informed network whose loss uses u'' (ARCH-067, ARCH-069).

Solve u''(x) = -pi^2 sin(pi x) on [0, 1] with u(0) = u(1) = 0 (solution
sin(pi x)) at 32 fixed collocation points. u'' comes from two applications
of build_backward_graph (each collocation point is independent, so the
full-ones contraction of du/dx gives pointwise second derivatives); the
physics loss is then differentiated for the parameters by a third
application. Trained with SGD in a closed loop.
"""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops

from ._fd import second_difference

N, H = 32, 16
TYPES = [f"f64[{N}, 1]", "f64[2, 1]", f"f64[{N}, 1]", f"f64[1, {H}]", f"f64[{H}]", f"f64[{H}, {H}]", f"f64[{H}]",
         f"f64[{H}, 1]"]
#: Written in the test as required: seed, steps, learning rate, and the factor the loss must fall by.
SEED, STEPS, LR, FACTOR = 0, 2000, 1e-3, 300.0


def network(z, w1, b1, w2, b2, w3):
    return ops.tanh(ops.tanh(z @ w1 + b1) @ w2 + b2) @ w3


def build_training_graph():
    forward = fc.trace(lambda x, xb, f, *p: [ops.sum(network(x, *p)), network(xb, *p)], *TYPES)
    first = fc.build_backward_graph(forward, 0, [0])                     # [sum u, u(xb), du/dx]
    contracted, k = fc.extend_graph(first, lambda *v: ops.sum(v[-1]))  # sum(du/dx)
    second = fc.build_backward_graph(contracted, k, [0])                # [..., d2u/dx2]

    def physics(*v):
        f, ub, d2u = v[2], v[len(TYPES) + 1], v[-1]
        return ops.mse_loss(d2u, f) + ops.mean(ops.square(ub)) * 10.0
    with_loss, loss_index = fc.extend_graph(second, physics)
    training = fc.build_backward_graph(with_loss, loss_index, list(range(3, 8)))  # third application
    return training, loss_index


def initial_state():
    rng = np.random.default_rng(SEED)
    x = np.linspace(0.0, 1.0, N).reshape(N, 1)
    params = [rng.standard_normal((1, H)), np.zeros(H), rng.standard_normal((H, H)) / np.sqrt(H), np.zeros(H),
              rng.standard_normal((H, 1)) / np.sqrt(H)]
    return x, np.array([[0.0], [1.0]]), -np.pi**2 * np.sin(np.pi * x), params


def test_second_derivative_from_the_transform_matches_the_central_second_difference():
    training, _ = build_training_graph()
    x, xb, f, params = initial_state()
    d2u = fc.compile(training).run([x, xb, f, *params])[4]
    u = fc.compile(fc.trace(network, "f64[1, 1]", *TYPES[3:]))

    def u_at(point: float) -> float:
        return float(u.run([np.array([[point]]), *params])[0][0, 0])
    numeric = np.array([second_difference(u_at, float(p)) for p in x[::5, 0]])
    np.testing.assert_allclose(d2u[::5, 0], numeric, rtol=1e-4, atol=1e-4)


def test_pinn_trains_in_a_closed_loop_and_solves_the_equation():
    training_graph, loss_index = build_training_graph()
    fc.verify(training_graph)
    train = fc.compile(training_graph)
    update = fc.compile(fc.build_sgd_update_graph(TYPES[3:], LR))
    x, xb, f, params = initial_state()
    losses = []
    for _ in range(STEPS):
        outs = train.run([x, xb, f, *params])
        losses.append(float(outs[loss_index]))
        params = update.run([*params, *outs[-5:]])
    assert losses[-1] < losses[0] / FACTOR, (losses[0], losses[-1])
    u = fc.compile(fc.trace(network, TYPES[0], *TYPES[3:])).run([x, *params])[0]
    assert np.max(np.abs(u - np.sin(np.pi * x))) < 0.05
