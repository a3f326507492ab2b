"""``maximize``, SGD's ``dampening`` and parameter groups, against torch.optim (optax for Lion) over 20 steps.

The model is test_torch_reference's tanh MLP in float64; every parameter after every step agrees to 1e-6
relative. Groups select the biases (``*.b``) by pattern or by predicate, as torch's ``param_groups`` list them.
The fused step resumes from a checkpoint bit for bit, and ``Optimizer.apply`` gives the fused step's values.
"""

from __future__ import annotations

import numpy as np
import pytest

from frame_core import ops
import frame_train as ft

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

STEPS = 20
RNG = np.random.default_rng(5)
X = RNG.standard_normal((16, 4))
Y = np.sin(X @ RNG.standard_normal((4, 2)))
P0 = {"l1": {"b": RNG.standard_normal(6) * 0.1, "w": RNG.standard_normal((4, 6)) * 0.5},
      "l2": {"b": RNG.standard_normal(2) * 0.1, "w": RNG.standard_normal((6, 2)) * 0.5}}
NAMES = ["l1.b", "l1.w", "l2.b", "l2.w"]
BIAS = [0, 2]  # positions of the biases in NAMES


def loss_fn(p, x, y):
    h = ops.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    return ops.mse_loss(h @ p["l2"]["w"] + p["l2"]["b"], y)


def flat(params):
    return [np.array(params[a][b]) for a, b in (n.split(".") for n in NAMES)]


def frame_run(optimizer, steps=STEPS):
    step = ft.TrainStep(loss_fn, P0, optimizer)
    out = []
    for _ in range(steps):
        step(X, Y)
        out.append(flat(step.params))
    return out


def torch_run(make, grouped=False, scheduler=None):
    tensors = [torch.tensor(P0[a][b], requires_grad=True) for a, b in (n.split(".") for n in NAMES)]
    b1, w1, b2, w2 = tensors
    x, y = torch.tensor(X), torch.tensor(Y)
    opt = make([w1, w2], [b1, b2]) if grouped else make(tensors)
    sched = scheduler(opt) if scheduler else None
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        torch.mean((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).backward()
        opt.step()
        if sched is not None:
            sched.step()
        out.append([t.detach().numpy().copy() for t in tensors])
    return out


def assert_trajectories(got, want):
    for t, (g, w) in enumerate(zip(got, want)):
        for name, a, b in zip(NAMES, g, w):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=f"step {t + 1}, {name}")


def groups(**bias):
    """torch's two groups: the weights with the optimizer's defaults, the biases with ``bias``."""
    return lambda weights, biases: [{"params": weights}, {"params": biases, **bias}]


O = torch.optim
MAXIMIZE = [
    ("sgd", ft.sgd(0.05, maximize=True), lambda p: O.SGD(p, lr=0.05, maximize=True)),
    ("sgd momentum L2", ft.sgd(0.05, momentum=0.9, weight_decay=1e-2, maximize=True),
     lambda p: O.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2, maximize=True)),
    ("adam L2", ft.adam(1e-2, weight_decay=1e-2, maximize=True),
     lambda p: O.Adam(p, lr=1e-2, weight_decay=1e-2, maximize=True)),
    ("adamw", ft.adamw(1e-2, weight_decay=0.1, maximize=True),
     lambda p: O.AdamW(p, lr=1e-2, weight_decay=0.1, maximize=True)),
    ("rmsprop centered", ft.rmsprop(1e-3, centered=True, momentum=0.5, weight_decay=1e-3, maximize=True),
     lambda p: O.RMSprop(p, lr=1e-3, centered=True, momentum=0.5, weight_decay=1e-3, maximize=True)),
    ("adagrad", ft.adagrad(0.05, weight_decay=1e-3, maximize=True),
     lambda p: O.Adagrad(p, lr=0.05, weight_decay=1e-3, maximize=True)),
]
DAMPENING = [
    ("dampening", ft.sgd(0.05, momentum=0.9, dampening=0.3),
     lambda p: O.SGD(p, lr=0.05, momentum=0.9, dampening=0.3)),
    ("dampening L2 maximize", ft.sgd(0.05, momentum=0.8, dampening=0.5, weight_decay=1e-2, maximize=True),
     lambda p: O.SGD(p, lr=0.05, momentum=0.8, dampening=0.5, weight_decay=1e-2, maximize=True)),
    ("dampening 1", ft.sgd(0.05, momentum=0.9, dampening=1.0),  # the buffer keeps the first gradient, shrinking
     lambda p: O.SGD(p, lr=0.05, momentum=0.9, dampening=1.0)),
]
GROUPS = [
    ("sgd", ft.sgd(0.05, momentum=0.9, weight_decay=1e-2, groups=[ft.group("*.b", learning_rate=0.2, weight_decay=0.0,
                                                                           momentum=0.5)]),
     lambda w, b: O.SGD(groups(lr=0.2, weight_decay=0.0, momentum=0.5)(w, b), lr=0.05, momentum=0.9,
                        weight_decay=1e-2)),
    ("sgd no momentum in a group", ft.sgd(0.05, momentum=0.9, groups=[ft.group(["l1.b", "l2.b"], momentum=0.0)]),
     lambda w, b: O.SGD(groups(momentum=0.0)(w, b), lr=0.05, momentum=0.9)),
    ("adam", ft.adam(1e-2, groups=[ft.group(lambda name: name.endswith(".b"), learning_rate=1e-3, b1=0.5)]),
     lambda w, b: O.Adam(groups(lr=1e-3, betas=(0.5, 0.999))(w, b), lr=1e-2)),
    ("adamw no decay on biases", ft.adamw(1e-2, weight_decay=0.1, groups=[ft.group("*.b", weight_decay=0.0)]),
     lambda w, b: O.AdamW(groups(weight_decay=0.0)(w, b), lr=1e-2, weight_decay=0.1)),
    ("rmsprop", ft.rmsprop(1e-3, groups=[ft.group("*.b", learning_rate=1e-2, centered=True, maximize=True)]),
     lambda w, b: O.RMSprop(groups(lr=1e-2, centered=True, maximize=True)(w, b), lr=1e-3)),
    ("adagrad", ft.adagrad(0.05, groups=[ft.group("*.b", learning_rate=0.1, initial_accumulator_value=0.5)]),
     lambda w, b: adagrad_started(O.Adagrad(groups(lr=0.1)(w, b), lr=0.05), b, 0.5)),
]


def adagrad_started(opt, tensors, value):
    """torch's Adagrad starts every accumulator at the constructor's initial_accumulator_value, even in a group
    that names its own; frame starts each group's at its own, which is this."""
    for t in tensors:
        opt.state[t]["sum"].fill_(value)
    return opt


@pytest.mark.parametrize("name, optimizer, make", MAXIMIZE + DAMPENING, ids=[c[0] for c in MAXIMIZE + DAMPENING])
def test_maximize_and_dampening_match_torch(name, optimizer, make):
    assert_trajectories(frame_run(optimizer), torch_run(make))


@pytest.mark.parametrize("name, optimizer, make", GROUPS, ids=[c[0] for c in GROUPS])
def test_parameter_groups_match_torch(name, optimizer, make):
    assert_trajectories(frame_run(optimizer), torch_run(make, grouped=True))


def test_group_schedules_are_runtime_inputs_as_torch_schedulers_scale_each_group():
    optimizer = ft.sgd(ft.exponential(0.05, 0.9), momentum=0.9,
                       groups=[ft.group("*.b", learning_rate=ft.exponential(0.2, 0.9))])
    want = torch_run(lambda w, b: O.SGD(groups(lr=0.2)(w, b), lr=0.05, momentum=0.9), grouped=True,
                     scheduler=lambda opt: O.lr_scheduler.ExponentialLR(opt, 0.9))
    step = ft.TrainStep(loss_fn, P0, optimizer)
    got = []
    for _ in range(STEPS):
        step(X, Y)
        got.append(flat(step.params))
    assert_trajectories(got, want)
    assert step.graph.inputs[-2].type.shape == (2,)  # one lr per group: a new rate never recompiles
    assert len(step.executables()) == 1 and step.executables()[0].specializations().misses == 0


def optax_lion(lr_of, maximize_sign):
    """optax.lion on gradients from torch, per parameter (``lr_of(position)``), the gradient times ``sign``."""
    optax = pytest.importorskip("optax")
    jnp = pytest.importorskip("jax.numpy")
    import jax

    jax.config.update("jax_enable_x64", True)
    tensors = [torch.tensor(P0[a][b], requires_grad=True) for a, b in (n.split(".") for n in NAMES)]
    b1, w1, b2, w2 = tensors
    x, y = torch.tensor(X), torch.tensor(Y)
    opts = [optax.lion(lr_of(k), b1=0.9, b2=0.99, weight_decay=0.0) for k in range(len(NAMES))]
    states = [o.init(jnp.asarray(t.detach().numpy())) for o, t in zip(opts, tensors)]
    out = []
    for _ in range(STEPS):
        for t in tensors:
            t.grad = None
        torch.mean((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).backward()
        for k, (o, t) in enumerate(zip(opts, tensors)):
            g = jnp.asarray(t.grad.numpy() * maximize_sign)
            update, states[k] = o.update(g, states[k], jnp.asarray(t.detach().numpy()))
            with torch.no_grad():
                t += torch.tensor(np.asarray(update))
        out.append([t.detach().numpy().copy() for t in tensors])
    return out


def test_lion_maximize_and_groups_match_optax():
    assert_trajectories(frame_run(ft.lion(1e-3, maximize=True)), optax_lion(lambda k: 1e-3, -1.0))
    grouped = ft.lion(1e-3, groups=[ft.group("*.b", learning_rate=1e-2)])
    assert_trajectories(frame_run(grouped), optax_lion(lambda k: 1e-2 if k in BIAS else 1e-3, 1.0))


@pytest.mark.parametrize("optimizer", [
    ft.sgd(0.05, momentum=0.9, dampening=0.3, maximize=True,
           groups=[ft.group("*.b", learning_rate=ft.exponential(0.1, 0.9), momentum=0.0)]),
    ft.adagrad(0.05, groups=[ft.group("*.b", initial_accumulator_value=0.5, learning_rate=0.1)]),
    ft.accumulate(ft.adamw(1e-2, groups=[ft.group("*.b", weight_decay=0.0)]), every=2),
], ids=["sgd", "adagrad", "accumulated adamw"])
def test_checkpoint_resume_is_bitwise_and_apply_agrees(tmp_path, optimizer):
    whole = ft.TrainStep(loss_fn, P0, optimizer)
    for _ in range(12):
        whole(X, Y)
    first = ft.TrainStep(loss_fn, P0, optimizer)
    for _ in range(7):
        first(X, Y)
    first.save(tmp_path / "ckpt.safetensors")
    resumed = ft.TrainStep(loss_fn, P0, optimizer)
    resumed.load(tmp_path / "ckpt.safetensors")
    for _ in range(5):
        resumed(X, Y)
    for a, b in zip(flat(whole.params), flat(resumed.params)):
        assert a.tobytes() == b.tobytes()
    if optimizer.every == 1:  # Optimizer.apply: the update alone, fed value_and_grad's gradients
        import frame_core as fc

        grads = fc.grad(loss_fn)(P0, X, Y)
        params, state = optimizer.apply(P0, grads, optimizer.init(P0))
        one = ft.TrainStep(loss_fn, P0, optimizer)
        one(X, Y)
        for a, b in zip(flat(params), flat(one.params)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_bad_options_are_named():
    with pytest.raises(ft.OptimizerError, match="zero dampening"):
        ft.sgd(0.1, momentum=0.9, nesterov=True, dampening=0.1)
    with pytest.raises(ft.OptimizerError, match="maximize= is True or False"):
        ft.adam(maximize="yes")
    with pytest.raises(ft.OptimizerError, match=r"sets \['betas'\], which adam\(\) does not take"):
        ft.adam(groups=[ft.group("*.b", betas=(0.9, 0.99))])
    with pytest.raises(ft.OptimizerError, match="dampening must be a finite number in"):
        ft.sgd(momentum=0.9, dampening=1.5)
    overlapping = ft.sgd(0.1, groups=[ft.group("*.b"), ft.group("l1.*")])
    with pytest.raises(ft.OptimizerError, match="parameter 'l1.b' is in parameter groups 1 and 2"):
        ft.TrainStep(loss_fn, P0, overlapping)(X, Y)
    with pytest.raises(ft.OptimizerError, match=r"parameter group 1 \('\*\.bias'\) selects no parameter"):
        ft.TrainStep(loss_fn, P0, ft.adam(groups=[ft.group("*.bias", learning_rate=0.1)]))(X, Y)
    with pytest.raises(ft.OptimizerError, match="groups= is a list of ft.group"):
        ft.adam(groups={"*.b": 0.1})
