"""Each optimizer against a hand-written numpy reference of its formula (no torch needed).

The model is a least-squares problem whose gradient numpy writes in one line, so a wrong moment, bias
correction, decay or momentum in the graph changes the trajectory and fails these tests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_train as ft

RNG = np.random.default_rng(7)
A = RNG.standard_normal((12, 5))
B = RNG.standard_normal((12, 3))
P0 = {"layer": {"w": RNG.standard_normal((5, 3)), "b": RNG.standard_normal(3) * 0.1}}
STEPS = 25


def loss_fn(params, a, b):
    r = a @ params["layer"]["w"] + params["layer"]["b"] - b
    return ops.sum(ops.square(r)) * 0.5


def numpy_grads(p):
    r = A @ p["layer.w"] + p["layer.b"] - B
    return {"layer.b": r.sum(axis=0), "layer.w": A.T @ r}


def reference(update, lrs, **slots):
    """Run ``update(p, g, state, lr, t)`` for STEPS steps in numpy; return the parameter trajectory."""
    p = {"layer.b": P0["layer"]["b"].copy(), "layer.w": P0["layer"]["w"].copy()}
    state = {name: {k: np.full_like(v, init) for k, v in p.items()} for name, init in slots.items()}
    out = []
    for t in range(1, STEPS + 1):
        g = numpy_grads(p)
        for k in p:
            p[k] = update(p[k], g[k], {s: state[s][k] for s in state}, lrs[t - 1], t)
        out.append({k: v.copy() for k, v in p.items()})
    return out


def frame_trajectory(optimizer):
    step = ft.TrainStep(loss_fn, P0, optimizer)
    out = []
    for _ in range(STEPS):
        step(A, B)
        p = step.params
        out.append({"layer.b": np.array(p["layer"]["b"]), "layer.w": np.array(p["layer"]["w"])})
    return out


def assert_same(got, want):
    for t, (g, w) in enumerate(zip(got, want)):
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-10, atol=1e-12, err_msg=f"step {t + 1}, {k}")


def _adam(b1, b2, eps, wd=0.0, decoupled=False, amsgrad=False):
    def update(p, g, s, lr, t):
        if wd and not decoupled:
            g = g + wd * p
        s["m"][...] = b1 * s["m"] + (1 - b1) * g
        s["v"][...] = b2 * s["v"] + (1 - b2) * g * g
        v = s["v"]
        if amsgrad:
            s["vmax"][...] = np.maximum(s["vmax"], v)
            v = s["vmax"]
        direction = (s["m"] / (1 - b1 ** t)) / (np.sqrt(v) / math.sqrt(1 - b2 ** t) + eps)
        if decoupled:
            direction = direction + wd * p
        return p - lr * direction
    return update


def _sgd(mu, nesterov, wd):
    def update(p, g, s, lr, t):
        g = g + wd * p
        if mu:
            s["buf"][...] = mu * s["buf"] + g
            g = g + mu * s["buf"] if nesterov else s["buf"]
        return p - lr * g
    return update


def _rmsprop(alpha, eps, mu, centered):
    def update(p, g, s, lr, t):
        s["v"][...] = alpha * s["v"] + (1 - alpha) * g * g
        v = s["v"]
        if centered:
            s["mean"][...] = alpha * s["mean"] + (1 - alpha) * g
            v = v - s["mean"] ** 2
        u = g / (np.sqrt(v) + eps)
        if mu:
            s["buf"][...] = mu * s["buf"] + u
            u = s["buf"]
        return p - lr * u
    return update


def _adagrad(eps, decay):
    def update(p, g, s, lr, t):
        s["sum"][...] += g * g
        return p - lr / (1 + (t - 1) * decay) * g / (np.sqrt(s["sum"]) + eps)
    return update


def _lion(b1, b2, wd):
    def update(p, g, s, lr, t):
        direction = np.sign(b1 * s["m"] + (1 - b1) * g) + wd * p
        s["m"][...] = b2 * s["m"] + (1 - b2) * g
        return p - lr * direction
    return update


CONST = [0.01] * STEPS
CASES = [
    ("sgd", ft.sgd(0.01), _sgd(0, False, 0), {}),
    ("sgd momentum + L2", ft.sgd(0.01, momentum=0.9, weight_decay=0.01), _sgd(0.9, False, 0.01), {"buf": 0}),
    ("sgd nesterov", ft.sgd(0.01, momentum=0.8, nesterov=True), _sgd(0.8, True, 0), {"buf": 0}),
    ("adam", ft.adam(0.01), _adam(0.9, 0.999, 1e-8), {"m": 0, "v": 0}),
    ("adam L2 amsgrad", ft.adam(0.01, b1=0.8, b2=0.95, weight_decay=0.05, amsgrad=True),
     _adam(0.8, 0.95, 1e-8, 0.05, amsgrad=True), {"m": 0, "v": 0, "vmax": 0}),
    ("adamw", ft.adamw(0.01, weight_decay=0.1), _adam(0.9, 0.999, 1e-8, 0.1, decoupled=True), {"m": 0, "v": 0}),
    ("rmsprop", ft.rmsprop(0.01), _rmsprop(0.99, 1e-8, 0, False), {"v": 0}),
    ("rmsprop centered momentum", ft.rmsprop(0.01, momentum=0.5, centered=True),
     _rmsprop(0.99, 1e-8, 0.5, True), {"v": 0, "mean": 0, "buf": 0}),
    ("adagrad", ft.adagrad(0.01, lr_decay=0.01, initial_accumulator_value=0.5), _adagrad(1e-10, 0.01), {"sum": 0.5}),
    ("lion", ft.lion(0.01, weight_decay=0.1), _lion(0.9, 0.99, 0.1), {"m": 0}),
]


@pytest.mark.parametrize("name, optimizer, update, slots", CASES, ids=[c[0] for c in CASES])
def test_trajectory_equals_the_numpy_formula(name, optimizer, update, slots):
    assert_same(frame_trajectory(optimizer), reference(update, CONST, **slots))


def test_a_wrong_moment_update_is_caught():
    """The reference is sharp: Adam with b2 off by 1e-3 (a wrong second moment) leaves the tolerance."""
    wrong = reference(_adam(0.9, 0.998, 1e-8), CONST, m=0, v=0)
    with pytest.raises(AssertionError):
        assert_same(frame_trajectory(ft.adam(0.01)), wrong)


def test_schedule_is_fed_per_step_without_recompiling():
    schedule = ft.warmup_cosine(0.02, 5, STEPS)
    lrs = [schedule(k) for k in range(STEPS)]
    assert_same(frame_trajectory(ft.adam(schedule)), reference(_adam(0.9, 0.999, 1e-8), lrs, m=0, v=0))


def test_clip_by_global_norm_and_masked_decay():
    opt = ft.chain(ft.clip_by_global_norm(0.5), ft.scale_by_adam(), ft.add_decayed_weights(0.1, mask=["*.w"]),
                   ft.scale_by_learning_rate(0.01))
    p = {"layer.b": P0["layer"]["b"].copy(), "layer.w": P0["layer"]["w"].copy()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    want = []
    for t in range(1, STEPS + 1):
        g = numpy_grads(p)
        norm = math.sqrt(sum(float(np.sum(x * x)) for x in g.values()))
        factor = 0.5 / max(norm, 0.5)
        for k in p:
            gk = g[k] * factor
            m[k] = 0.9 * m[k] + 0.1 * gk
            v[k] = 0.999 * v[k] + 0.001 * gk * gk
            u = (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k]) / math.sqrt(1 - 0.999 ** t) + 1e-8)
            if k.endswith(".w"):
                u = u + 0.1 * p[k]
            p[k] = p[k] - 0.01 * u
        want.append({k: x.copy() for k, x in p.items()})
    assert_same(frame_trajectory(opt), want)


def test_gradient_accumulation_averages_micro_batches():
    """accumulate(adam, every=3) on three micro-batches equals adam on their mean gradient."""
    halves = [(A[i::3], B[i::3]) for i in range(3)]
    step = ft.TrainStep(loss_fn, P0, ft.accumulate(ft.adam(0.01), every=3))
    full = ft.TrainStep(lambda p, a, b: loss_fn(p, a, b) * (1.0 / 3), P0, ft.adam(0.01))
    for _ in range(4):
        before = step.params["layer"]["w"].copy()
        for i, (a, b) in enumerate(halves):
            step(a, b)
            if i < 2:
                np.testing.assert_array_equal(step.params["layer"]["w"], before)
        full(A, B)
    assert step.count == full.count == 4
    np.testing.assert_allclose(step.params["layer"]["w"], full.params["layer"]["w"], rtol=1e-10)
    assert int(step.state["accumulate"]["count"]) == 0
