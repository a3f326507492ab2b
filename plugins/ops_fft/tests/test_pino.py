"""The PINO closed loop (ARCH-069): a small FNO trained by plain SGD on the spectral physics residual of
-u'' + u = f alone, and the one-layer linear spectral model as an exact check. The models, the data and the
training loop are examples/train_pino.py's, so the example is what is tested.

Seed and thresholds (written here as required): seed 0, batch 32, SGD lr 0.02, 2000 steps. The loss falls
at least 500x (first step against the mean of the last 20, each step on fresh forcings) and the relative L2
error against the analytic solution on 64 held-out forcings is below 5%. Measured on seed 0: 2025x, 1.5%;
seeds 0-7 give 367x-2026x and 1.0%-3.4% (plain SGD on a tanh network is seed-sensitive; torch measures
the same spread). The linear model reaches round-off in 300 steps at lr 0.1.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import frame_core as fc

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_pino.py"
SEED, STEPS, LR, FALL, REL_L2 = 0, 2000, 0.02, 500.0, 0.05


@pytest.fixture(scope="module")
def pino():
    spec = importlib.util.spec_from_file_location("train_pino", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_the_fno_trained_on_the_physics_residual_alone_solves_the_screened_poisson_problem(pino):
    result = pino.train("fno", STEPS, LR, SEED)
    losses = np.array(result.losses)
    assert np.all(np.isfinite(losses))
    fall = losses[0] / losses[-20:].mean()
    assert fall >= FALL, f"the physics loss fell only {fall:.0f}x ({losses[0]:.3e} -> {losses[-20:].mean():.3e})"
    assert result.rel_l2 < REL_L2, f"relative L2 error {result.rel_l2:.3e} against the analytic solution"
    print(f"PINO: loss fell {fall:.0f}x, rel-L2 {result.rel_l2:.2e}, {result.seconds:.1f} s for {STEPS} steps")


def test_the_linear_spectral_model_learns_the_exact_solution_operator(pino):
    result = pino.train("linear", 300, 0.1, SEED)
    assert result.rel_l2 < 1e-4, f"relative L2 error {result.rel_l2:.3e}"


def test_every_derived_pino_graph_verifies_and_gives_the_same_step_at_every_opt_level(pino):
    rng = np.random.default_rng(1)
    params = pino.fno_parameters(rng)
    types = [f"f64[{pino.BATCH}, {pino.N}]", *[f"f64{list(p.shape)}" for p in params]]
    forward = fc.trace(pino.residual_loss(pino.fno), *types)
    training = fc.build_backward_graph(forward, 0, list(range(1, len(types))))
    update = fc.build_sgd_update_graph(types[1:], LR)
    f, _ = pino.forcings(rng, pino.BATCH)
    for graph, inputs in ((forward, [f, *params]), (training, [f, *params])):
        fc.verify(graph)
        runs = [fc.compile(graph, opt_level=level).run(inputs) for level in (0, 1, 2)]
        for other in runs[1:]:
            for a, b in zip(runs[0], other):
                np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    grads = fc.compile(training).run([f, *params])[1:]
    fc.verify(update)
    for level in (0, 1, 2):
        new = fc.compile(update, opt_level=level).run([*params, *grads])
        for p, g, q in zip(params, grads, new):
            np.testing.assert_allclose(q, p - LR * g, rtol=1e-14, atol=1e-15)
