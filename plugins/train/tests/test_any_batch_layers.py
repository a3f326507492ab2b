"""Every layer, loss and optimizer of the training stack at batch sizes other than the traced one.

One ``TrainStep`` (and one ``value_and_grad``) per model runs batches B, 1, B + 3 and 2B; every step must
equal, bit for bit, a step traced afresh at that batch size from the same parameters and optimizer state
(docs/design-parameters-and-shapes.md, "Reusing the training graph"). An empty batch (B' = 0) must either run
as a trace at 0 runs or be refused with a named frame error, never a numpy traceback.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_train as ft
from frame_ops_nn.layers import MLP, CausalSelfAttention, Conv1d, Conv2d, Embedding, LayerNorm, Linear

B = 4
SIZES = (B, 1, B + 3, 2 * B)


def _linear(p, x, y):
    return ops.mse_loss(Linear(3, 2).apply(p, x), y)


def _mlp(p, x, labels):
    return ops.cross_entropy(MLP((3, 5, 4), activation="tanh").apply(p, x), labels)


def _conv1d(p, x, y):
    h = ops.relu(Conv1d(2, 3, 3, padding="same").apply(p, x))
    return ops.mse_loss(ops.mean(h, axes=[2]), y)


def _conv2d(p, x, labels):
    h = ops.max_pool2d(ops.relu(Conv2d(2, 3, 3, padding="same").apply(p["conv"], x)), kernel_size=(2, 2))
    return ops.cross_entropy(Linear(12, 4).apply(p["fc"], ops.reshape(h, shape=[-1, 12])), labels)


def _layer_norm(p, x, y):
    return ops.mse_loss(Linear(3, 2).apply(p["fc"], LayerNorm((3,)).apply(p["norm"], x)), y)


def _embedding(p, indices, labels):
    return ops.cross_entropy(Linear(3, 4).apply(p["fc"], Embedding(6, 3).apply(p["emb"], indices)), labels)


def _attention(p, x, y):
    return ops.mse_loss(CausalSelfAttention(4, 2).apply(p, x), y)


def _batch_norm(p, x, y):
    h, _, _ = ops.batch_norm(x @ p["w"], p["g"], p["b"], np.zeros(2, np.float32), np.ones(2, np.float32))
    return ops.mse_loss(h, y)


RNG = np.random.default_rng(0)
MODELS = {  # name: (loss, params, data at batch n)
    "Linear, mse_loss": (_linear, Linear(3, 2).init(RNG),
                         lambda r, n: [r.standard_normal((n, 3)), r.standard_normal((n, 2))]),
    "MLP, cross_entropy": (_mlp, MLP((3, 5, 4)).init(RNG),
                           lambda r, n: [r.standard_normal((n, 3)), r.integers(0, 4, n)]),
    "Conv1d 'same'": (_conv1d, Conv1d(2, 3, 3).init(RNG),
                      lambda r, n: [r.standard_normal((n, 2, 5)), r.standard_normal((n, 3))]),
    "Conv2d, max_pool2d": (_conv2d, {"conv": Conv2d(2, 3, 3).init(RNG), "fc": Linear(12, 4).init(RNG)},
                           lambda r, n: [r.standard_normal((n, 2, 4, 4)), r.integers(0, 4, n)]),
    "LayerNorm": (_layer_norm, {"norm": LayerNorm((3,)).init(RNG), "fc": Linear(3, 2).init(RNG)},
                  lambda r, n: [r.standard_normal((n, 3)), r.standard_normal((n, 2))]),
    "Embedding": (_embedding, {"emb": Embedding(6, 3).init(RNG), "fc": Linear(3, 4).init(RNG)},
                  lambda r, n: [r.integers(0, 6, n), r.integers(0, 4, n)]),
    "CausalSelfAttention": (_attention, CausalSelfAttention(4, 2).init(RNG),
                            lambda r, n: [r.standard_normal((n, 3, 4)), r.standard_normal((n, 3, 4))]),
    "batch_norm": (_batch_norm, {"w": RNG.standard_normal((3, 2)).astype(np.float32), "g": np.ones(2, np.float32),
                                 "b": np.zeros(2, np.float32)},
                   lambda r, n: [r.standard_normal((n, 3)), r.standard_normal((n, 2))]),
}

OPTIMIZERS = {
    "sgd momentum nesterov": lambda: ft.sgd(0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "adam amsgrad": lambda: ft.adam(1e-2, amsgrad=True),
    "adamw": lambda: ft.adamw(1e-2),
    "rmsprop centered": lambda: ft.rmsprop(1e-2, momentum=0.5, centered=True),
    "adagrad": lambda: ft.adagrad(1e-2, lr_decay=0.1),
    "lion": lambda: ft.lion(1e-3, weight_decay=0.1),
    "clip, adam, cosine": lambda: ft.chain(ft.clip_by_global_norm(0.5), ft.scale_by_adam(),
                                           ft.scale_by_learning_rate(ft.cosine(1e-2, 10))),
    "accumulate 2": lambda: ft.accumulate(ft.adam(1e-2), every=2),
    "param groups": lambda: ft.param_groups(ft.adam(1e-2), (["*.b"], ft.sgd(0.1))),
}


def _as32(arrays):
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


def _same_tree(got, want, what):
    for k, (a, b) in enumerate(zip(fc.params.flatten(got)[1], fc.params.flatten(want)[1])):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{what}: leaf {k} differs"


def _sizes(model):
    return [n for n in SIZES if n > 1] if model == "batch_norm" else SIZES  # (one row has no variance: refused)


def _steps(model, optimizer):
    loss, params, data = MODELS[model]
    rng = np.random.default_rng(1)
    step = ft.TrainStep(loss, params, optimizer)
    p, state = params, optimizer.init(params)
    for k, n in enumerate(_sizes(model)):
        batch = _as32(data(rng, n))
        got = step(*batch)
        fresh = ft.TrainStep(loss, p, optimizer, state=state)
        want = fresh(*batch)
        p, state = fresh.params, fresh.state
        where = f"{model}, step {k} at batch {n}"
        assert np.float64(got).tobytes() == np.float64(want).tobytes(), f"{where}: the loss differs"
        _same_tree(step.params, p, where)
        _same_tree(step.state, state, f"{where}, optimizer state")
    return step


@pytest.mark.parametrize("model", list(MODELS))
def test_every_layer_trains_at_any_batch_bit_for_bit(model):
    _steps(model, ft.adam(1e-2))


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_every_optimizer_trains_at_any_batch_bit_for_bit(optimizer):
    _steps("MLP, cross_entropy", OPTIMIZERS[optimizer]())


@pytest.mark.parametrize("model", list(MODELS))
def test_value_and_grad_of_every_layer_at_any_batch_bit_for_bit(model):
    loss, params, data = MODELS[model]
    rng = np.random.default_rng(2)
    vg = fc.value_and_grad(loss)
    for n in _sizes(model):
        batch = _as32(data(rng, n))
        value, grads = vg(params, *batch)
        want_value, want_grads = fc.value_and_grad(loss)(params, *batch)
        assert value.tobytes() == want_value.tobytes(), f"{model} at batch {n}"
        _same_tree(grads, want_grads, f"{model} at batch {n}")
    assert vg.traces == 1


@pytest.mark.parametrize("model", list(MODELS))
def test_an_empty_batch_runs_as_a_trace_at_zero_or_is_refused_by_name(model):
    loss, params, data = MODELS[model]
    rng = np.random.default_rng(3)
    vg = fc.value_and_grad(loss)
    vg(params, *_as32(data(rng, B)))
    empty = _as32(data(rng, 0))
    try:
        want = fc.value_and_grad(loss)(params, *empty)
    except fc.FrameError as refused:
        with pytest.raises(type(refused)):
            vg(params, *empty)
        return
    value, grads = vg(params, *empty)
    assert np.asarray(value).tobytes() == np.asarray(want[0]).tobytes()
    _same_tree(grads, want[1], f"{model} at batch 0")
