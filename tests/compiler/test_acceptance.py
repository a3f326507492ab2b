"""The MLP training graph and a 1-D PINN-like second-order graph give the same results under every pipeline setting.

Settings: opt_level 0, 1 and 2, and opt_level 2 with each optional stage (and
ops_basic's ``simplify_algebra`` pass) disabled in turn; all compiled with
``checks=True``. Each is compared with an independent numpy computation
(hand-written MLP gradients; the closed form of u'').
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.compiler.pipeline import OPTIONAL_STAGES

SETTINGS = [dict(opt_level=0), dict(opt_level=1), dict(opt_level=2)] + [
    dict(opt_level=2, disable=[stage]) for stage in (*OPTIONAL_STAGES, "simplify_algebra")]
IDS = [f"O{s['opt_level']}" + (f"-no-{s['disable'][0]}" if "disable" in s else "") for s in SETTINGS]


# -- MLP ---------------------------------------------------------------------------------------------
B, SIZES = 16, (8, 12, 12, 3)


def mlp(x, t, w1, b1, w2, b2, w3, b3):
    h1 = ops.relu(x @ w1 + b1)
    h2 = ops.relu(h1 @ w2 + b2)
    return ops.mse_loss(h2 @ w3 + b3, t)


def mlp_training_graph() -> fc.Graph:
    types = [f"f32[{B}, {SIZES[0]}]", f"f32[{B}, {SIZES[-1]}]"]
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        types += [f"f32[{fan_in}, {fan_out}]", f"f32[{fan_out}]"]
    return fc.build_backward_graph(fc.trace(mlp, *types), 0, list(range(2, 8)))


def mlp_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((B, SIZES[0])), rng.standard_normal((B, SIZES[-1]))]
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        arrays += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in), rng.standard_normal(fan_out) * 0.1]
    return [a.astype(np.float32) for a in arrays]


def numpy_mlp(x, t, w1, b1, w2, b2, w3, b3) -> list[np.ndarray]:
    """Loss and gradients written by hand (the reference)."""
    a1 = x @ w1 + b1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ w2 + b2
    h2 = np.maximum(a2, 0)
    d = h2 @ w3 + b3 - t
    gy = d * (2.0 / d.size)
    gh2 = (gy @ w3.T) * (a2 > 0)
    gh1 = (gh2 @ w2.T) * (a1 > 0)
    return [np.mean(d * d), x.T @ gh1, gh1.sum(0), h1.T @ gh2, gh2.sum(0), h2.T @ gy, gy.sum(0)]


@pytest.fixture(scope="module")
def mlp_case():
    graph, inputs = mlp_training_graph(), mlp_inputs()
    return graph, inputs, fc.compile(graph, opt_level=0, cache=False).run(inputs)


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_mlp_training_graph_agrees_under_every_pipeline_setting(setting, mlp_case):
    graph, inputs, reference = mlp_case
    exe = fc.compile(graph, checks=True, cache=False, **setting)
    got = exe.run(inputs)
    for i, (a, b) in enumerate(zip(got, reference)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    for i, (a, b) in enumerate(zip(got, numpy_mlp(*inputs))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"output {i} against numpy")


# -- PINN-like: u'' by differentiating twice, then the physics loss differentiated for the parameters ---
N, H = 8, 6


def network(x, w1, b1, w2):
    return ops.tanh(x @ w1 + b1) @ w2


def pinn_training_graph() -> tuple[fc.Graph, int, int]:
    """Outputs include d2u/dx2 (index ``d2u``) and the physics loss (index ``loss``) and its parameter gradients."""
    forward = fc.trace(lambda x, f, w1, b1, w2: ops.sum(network(x, w1, b1, w2)),
                       f"f64[{N}, 1]", f"f64[{N}, 1]", f"f64[1, {H}]", f"f64[{H}]", f"f64[{H}, 1]")
    first = fc.build_backward_graph(forward, 0, [0])                    # [sum u, du/dx]
    contracted, k = fc.add_scalar_contraction(first, 1)                  # + sum(du/dx)
    second = fc.build_backward_graph(contracted, k, [0])                # + d2u/dx2 (points are independent)
    physics = fc.clone_graph(second)
    d2u = len(physics.outputs) - 1
    residual = physics.apply("mse_loss", physics.outputs[d2u], physics.inputs[1])
    loss = physics.mark_output(residual)
    return fc.build_backward_graph(physics, loss, [2, 3, 4]), d2u, loss  # third application


def pinn_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    x = np.linspace(0.0, 1.0, N).reshape(N, 1)
    return [x, -np.pi**2 * np.sin(np.pi * x), rng.standard_normal((1, H)), rng.standard_normal(H) * 0.1,
            rng.standard_normal((H, 1)) / np.sqrt(H)]


@pytest.fixture(scope="module")
def pinn_case():
    graph, d2u, loss = pinn_training_graph()
    inputs = pinn_inputs()
    return graph, d2u, loss, inputs, fc.compile(graph, opt_level=0, cache=False).run(inputs)


def test_the_pinn_graph_computes_the_closed_form_second_derivative(pinn_case):
    _, d2u, loss, (x, f, w1, b1, w2), reference = pinn_case
    s = np.tanh(x @ w1 + b1)
    exact = (-2.0 * s * (1.0 - s**2) * w1**2) @ w2   # u'' of tanh(x w1 + b1) @ w2
    np.testing.assert_allclose(reference[d2u], exact, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(reference[loss], np.mean((exact - f) ** 2), rtol=1e-10)


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_pinn_second_order_graph_agrees_under_every_pipeline_setting(setting, pinn_case):
    graph, _, _, inputs, reference = pinn_case
    exe = fc.compile(graph, checks=True, cache=False, **setting)
    got = exe.run(inputs)
    assert len(got) == len(reference)
    for i, (a, b) in enumerate(zip(got, reference)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"output {i}")
