"""Each optimizer's 200-step trajectory equals torch.optim's (and optax's, where installed) in float64.

The model is a small tanh MLP on fixed data; torch runs the same model with the same initial parameters.
Tolerance: 1e-6 relative on every parameter after every one of the 200 steps.
"""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import ops
import frame_train as ft

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: more threads only fight the machine's other work (25 s a run instead of 0.1)

STEPS = 200
RNG = np.random.default_rng(3)
X = RNG.standard_normal((32, 4))
Y = np.sin(X @ RNG.standard_normal((4, 2)))
P0 = {"l1": {"b": RNG.standard_normal(6) * 0.1, "w": RNG.standard_normal((4, 6)) * 0.5},
      "l2": {"b": np.zeros(2), "w": RNG.standard_normal((6, 2)) * 0.5}}
NAMES = ["l1.b", "l1.w", "l2.b", "l2.w"]


def loss_fn(p, x, y):
    h = ops.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    return ops.mse_loss(h @ p["l2"]["w"] + p["l2"]["b"], y)


def frame_run(optimizer):
    step = ft.TrainStep(loss_fn, P0, optimizer)
    out = []
    for _ in range(STEPS):
        step(X, Y)
        p = step.params
        out.append([np.array(p[a][b]) for a, b in (n.split(".") for n in NAMES)])
    return out


def torch_run(make, scheduler=None):
    tensors = [torch.tensor(P0[a][b], requires_grad=True) for a, b in (n.split(".") for n in NAMES)]
    b1, w1, b2, w2 = tensors
    x, y = torch.tensor(X), torch.tensor(Y)
    opt = make(tensors)
    sched = scheduler(opt) if scheduler else None
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.mean((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        out.append([t.detach().numpy().copy() for t in tensors])
    return out


def assert_trajectories(got, want):
    for t, (g, w) in enumerate(zip(got, want)):
        for name, a, b in zip(NAMES, g, w):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=f"step {t + 1}, {name}")


O = torch.optim
CASES = [
    ("sgd", ft.sgd(0.1), lambda p: O.SGD(p, lr=0.1)),
    ("sgd momentum L2", ft.sgd(0.05, momentum=0.9, weight_decay=1e-3),
     lambda p: O.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3)),
    ("sgd nesterov", ft.sgd(0.05, momentum=0.9, nesterov=True),
     lambda p: O.SGD(p, lr=0.05, momentum=0.9, nesterov=True)),
    ("adam", ft.adam(1e-2), lambda p: O.Adam(p, lr=1e-2)),
    ("adam L2 amsgrad", ft.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, weight_decay=1e-2, amsgrad=True),
     lambda p: O.Adam(p, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, amsgrad=True)),
    ("adamw", ft.adamw(1e-2, weight_decay=0.05), lambda p: O.AdamW(p, lr=1e-2, weight_decay=0.05)),
    ("rmsprop", ft.rmsprop(1e-3), lambda p: O.RMSprop(p, lr=1e-3)),
    ("rmsprop centered momentum L2", ft.rmsprop(1e-3, alpha=0.9, momentum=0.5, centered=True, weight_decay=1e-3),
     lambda p: O.RMSprop(p, lr=1e-3, alpha=0.9, momentum=0.5, centered=True, weight_decay=1e-3)),
    ("adagrad", ft.adagrad(0.05, lr_decay=1e-3, weight_decay=1e-3, initial_accumulator_value=0.1),
     lambda p: O.Adagrad(p, lr=0.05, lr_decay=1e-3, weight_decay=1e-3, initial_accumulator_value=0.1)),
]


@pytest.mark.parametrize("name, optimizer, make", CASES, ids=[c[0] for c in CASES])
def test_trajectory_equals_torch_optim(name, optimizer, make):
    assert_trajectories(frame_run(optimizer), torch_run(make))


SCHEDULES = [
    ("step", ft.step_decay(1e-2, 50, 0.5), lambda o: O.lr_scheduler.StepLR(o, 50, 0.5)),
    ("exponential", ft.exponential(1e-2, 0.99), lambda o: O.lr_scheduler.ExponentialLR(o, 0.99)),
    ("cosine", ft.cosine(1e-2, 150, alpha=0.1),
     lambda o: O.lr_scheduler.CosineAnnealingLR(o, 150, eta_min=1e-3)),
]


@pytest.mark.parametrize("name, schedule, scheduler", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedules_equal_torch_lr_scheduler(name, schedule, scheduler):
    """torch's schedulers step after every update; the runtime lr input follows without a recompile. Compared
    over the first 150 steps: torch's CosineAnnealingLR turns back up after T_max, optax's (ours) stays flat."""
    got = frame_run(ft.adam(schedule))
    assert_trajectories(got[:150], torch_run(lambda p: O.Adam(p, lr=1e-2), scheduler)[:150])


def test_lion_and_adam_equal_optax():
    jax = pytest.importorskip("jax")
    optax = pytest.importorskip("optax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def jloss(p):
        h = jnp.tanh(jnp.asarray(X) @ p["l1"]["w"] + p["l1"]["b"])
        return jnp.mean((h @ p["l2"]["w"] + p["l2"]["b"] - jnp.asarray(Y)) ** 2)

    def optax_run(transformation):
        @jax.jit
        def update(p, state):
            updates, state = transformation.update(jax.grad(jloss)(p), state, p)
            return optax.apply_updates(p, updates), state

        p = jax.tree_util.tree_map(jnp.asarray, P0)
        state = transformation.init(p)
        out = []
        for _ in range(STEPS):
            p, state = update(p, state)
            out.append([np.asarray(p[a][b]) for a, b in (n.split(".") for n in NAMES)])
        return out

    for ours, theirs in ((ft.lion(1e-3, weight_decay=0.1), optax.lion(1e-3, weight_decay=0.1)),
                         (ft.adam(1e-2), optax.adam(1e-2)),
                         (ft.adamw(1e-2, weight_decay=0.05), optax.adamw(1e-2, weight_decay=0.05))):
        assert_trajectories(frame_run(ours), optax_run(theirs))
