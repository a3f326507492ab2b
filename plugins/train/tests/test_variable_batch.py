"""One training graph for every batch size: TrainStep and value_and_grad re-specialise it at a new batch size.

The reference for every step is the per-shape path at its most direct: a step (or value_and_grad) traced afresh
at that batch size, resumed from the same parameters and optimizer state. Parameters and losses must match it
bit for bit at batches 32, 32, 7, 32, 1, whether the one training graph was reused (an MLP and a CNN: every op
declares ``any_shape_gradient``) or the step fell back to deriving the backward again (a CNN through
``adaptive_avg_pool2d``, which does not declare it, or a cross-entropy at another class count).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.ir.graph import traced_sizes
import frame_train as ft

BATCHES = (32, 32, 7, 32, 1)
RNG = np.random.default_rng(5)


def mlp(p, x, y):
    h = ops.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    return ops.mse_loss(h @ p["l2"]["w"] + p["l2"]["b"], y)


def mlp_params(dtype):
    rng = np.random.default_rng(0)
    return {"l1": {"w": (rng.standard_normal((6, 10)) * 0.4).astype(dtype), "b": np.zeros(10, dtype)},
            "l2": {"w": (rng.standard_normal((10, 3)) * 0.4).astype(dtype), "b": np.zeros(3, dtype)}}


def mlp_data(dtype):
    x = RNG.standard_normal((32, 6)).astype(dtype)
    return x, np.sin(x[:, :3] * 2).astype(dtype)


def cnn(p, x, labels):
    h = ops.relu(ops.conv2d(x, p["conv"]["w"], padding="same"))
    h = ops.max_pool2d(h, kernel_size=(2, 2))
    return ops.cross_entropy(ops.reshape(h, shape=[-1, 4 * 3 * 3]) @ p["fc"]["w"] + p["fc"]["b"], labels)


def cnn_adaptive(p, x, labels):  # adaptive_avg_pool2d's gradient holds the traced sizes
    h = ops.relu(ops.conv2d(x, p["conv"]["w"], padding="same"))
    h = ops.adaptive_avg_pool2d(h, output_size=[3, 3])
    return ops.cross_entropy(ops.reshape(h, shape=[-1, 4 * 3 * 3]) @ p["fc"]["w"] + p["fc"]["b"], labels)


def cnn_params(dtype):
    rng = np.random.default_rng(1)
    return {"conv": {"w": (rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(dtype)},
            "fc": {"w": (rng.standard_normal((36, 5)) * 0.3).astype(dtype), "b": np.zeros(5, dtype)}}


def cnn_data(dtype):
    return RNG.standard_normal((32, 2, 6, 6)).astype(dtype), RNG.integers(0, 5, 32)


def flat(tree):
    return fc.params.flatten(tree)[1]


def assert_same_bits(got, want, what):
    for k, (a, b) in enumerate(zip(flat(got), flat(want))):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f"{what}: leaf {k} differs"


def run_both(loss, params, data, optimizer, batches=BATCHES):
    """The dynamic step over ``batches``, and a step traced afresh at each batch size from the same state."""
    step = ft.TrainStep(loss, params, optimizer)
    p, state = params, optimizer.init(params)
    for k, b in enumerate(batches):
        batch = [a[:b] for a in data]
        got = step(*batch)
        fresh = ft.TrainStep(loss, p, optimizer, state=state)
        want = fresh(*batch)
        p, state = fresh.params, fresh.state
        assert np.float64(got).tobytes() == np.float64(want).tobytes(), f"step {k} (batch {b}): loss differs"
        assert_same_bits(step.params, p, f"step {k} (batch {b})")
        assert_same_bits(step.state, state, f"step {k} (batch {b}), optimizer state")
    return step


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mlp_reuses_one_training_graph_bitwise(dtype):
    step = run_both(mlp, mlp_params(dtype), mlp_data(dtype), ft.adam(1e-2))
    assert traced_sizes(step.graph) is None
    assert step.derivations == 1  # the batches of 7 and 1 re-specialised the fused graph, derived nothing
    info = step.executables()[0].specializations()
    assert (info.misses, info.hits, info.entries) == (2, 0, 2)


def normed_mlp(p, x, y):  # batch_norm in training mode: its running averages are outputs the loss never reads
    h, _, _ = ops.batch_norm(x @ p["l1"]["w"], p["bn"]["w"], p["bn"]["b"], np.zeros(10, x.dtype.np),
                             np.ones(10, x.dtype.np))
    return ops.mse_loss(ops.tanh(h) @ p["l2"]["w"] + p["l2"]["b"], y)


def test_batch_norm_mlp_reuses_one_training_graph_bitwise():
    """The running averages' zero cotangents are read off their types, so they do not pin the batch (batch 1 is
    batch_norm's own refusal in training mode: no variance from one value)."""
    params = mlp_params(np.float32)
    params["bn"] = {"w": np.ones(10, np.float32), "b": np.zeros(10, np.float32)}
    step = run_both(normed_mlp, params, mlp_data(np.float32), ft.adam(1e-2), batches=(32, 7, 32, 2))
    assert traced_sizes(step.graph) is None
    assert step.derivations == 1
    assert step.executables()[0].specializations().misses == 2


def test_cnn_reuses_one_training_graph_bitwise():
    """conv2d, max_pool2d, reshape and cross_entropy read their gradients' sizes from operands."""
    step = run_both(cnn, cnn_params(np.float32), cnn_data(np.float32), ft.adam(1e-2))
    assert traced_sizes(step.graph) is None
    assert step.derivations == 1
    assert step.executables()[0].specializations().misses == 2


def test_cnn_through_an_op_without_the_trait_falls_back_to_deriving_per_shape_bitwise():
    """adaptive_avg_pool2d's gradient holds the traced sizes: the fused graph is marked and every new batch size
    derives the step again, as before (the result is the same either way)."""
    step = run_both(cnn_adaptive, cnn_params(np.float32), cnn_data(np.float32), ft.adam(1e-2))
    reason = traced_sizes(step.graph)
    assert reason is not None and "adaptive_avg_pool2d" in reason
    assert step.derivations == 3  # the traced batch, then 7 and 1
    assert step.executables()[0].specializations().misses == 2


def test_accumulation_reuses_both_graphs():
    x, y = mlp_data(np.float32)
    opt = ft.accumulate(ft.adam(1e-2), every=2)
    step = run_both(mlp, mlp_params(np.float32), (x, y), opt)
    assert step.derivations == 2  # the micro-batch graph and the applying one, once each
    assert step.count == 2  # five micro-batches: two updates, the fifth accumulated


def test_class_count_change_falls_back_to_deriving():
    """A non-batch size the reused graph refuses (cross-entropy's gradient holds the traced class count) is
    derived again for that shape, never broadcast: the result is a trace at that class count's."""
    def loss(p, logits, labels):
        return ops.cross_entropy(logits * p["scale"], labels)

    p0 = {"scale": np.array([1.5])}
    step = fc.value_and_grad(loss)
    for classes in (5, 5, 3, 7):
        logits, labels = RNG.standard_normal((4, classes)), RNG.integers(0, classes, 4)
        got = step(p0, logits, labels)
        want = fc.value_and_grad(loss)(p0, logits, labels)
        assert got[0].tobytes() == want[0].tobytes() and got[1]["scale"].tobytes() == want[1]["scale"].tobytes()
    assert traced_sizes(step.graph(p0, logits, labels)) is None
    assert (step.traces, step.derivations) == (1, 3)  # 3 and 7 classes refused the reuse


@pytest.mark.parametrize("loss, make, data, derivations", [(mlp, mlp_params, mlp_data, 1),
                                                          (cnn, cnn_params, cnn_data, 1),
                                                          (cnn_adaptive, cnn_params, cnn_data, 3)])
def test_value_and_grad_bitwise_at_every_batch(loss, make, data, derivations):
    params, arrays = make(np.float64), data(np.float64)
    vg = fc.value_and_grad(loss)
    for b in BATCHES:
        batch = [a[:b] for a in arrays]
        value, grads = vg(params, *batch)
        want_value, want_grads = fc.value_and_grad(loss)(params, *batch)
        assert value.tobytes() == want_value.tobytes()
        assert_same_bits(grads, want_grads, f"batch {b}")
    assert (vg.traces, vg.derivations) == (1, derivations)


def test_keys_dtype_rank_and_refused_sizes():
    """A new dtype or rank traces again (value_and_grad) or is named (TrainStep); a size the graph cannot take
    is the per-shape path's named error, never a reuse."""
    x, y = mlp_data(np.float64)
    vg = fc.value_and_grad(mlp)
    vg(mlp_params(np.float64), x, y)
    vg(mlp_params(np.float32), x.astype(np.float32), y.astype(np.float32))
    vg(mlp_params(np.float64), x[0], y[0])  # rank 1 data: x @ w still types
    assert vg.traces == 3
    with pytest.raises(fc.ShapeError, match="dimension 1"):
        vg(mlp_params(np.float64), x[:, :5], y)  # 5 features against l1.w's 6 rows

    step = ft.TrainStep(mlp, mlp_params(np.float64), ft.adam(1e-2))
    step(x, y)
    with pytest.raises(fc.InputError, match="float32"):
        step(x.astype(np.float32), y.astype(np.float32))
    with pytest.raises(fc.InputError):
        step(x[0], y[0])
    with pytest.raises(fc.ShapeError, match="dimension 1"):
        step(x[:, :5], y)
    assert step.count == 1


def test_mlp_variable_batch_equals_torch():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)  # tiny tensors: more threads only fight the machine's other work
    params, (x, y) = mlp_params(np.float64), mlp_data(np.float64)
    step = ft.TrainStep(mlp, params, ft.adam(1e-2))
    names = ["l1.w", "l1.b", "l2.w", "l2.b"]
    tensors = [torch.tensor(params[n[:2]][n[3:]], requires_grad=True) for n in names]
    opt = torch.optim.Adam(tensors, lr=1e-2)
    for b in BATCHES:
        step(x[:b], y[:b])
        opt.zero_grad()
        w1, b1, w2, b2 = tensors
        torch.nn.functional.mse_loss(torch.tanh(torch.tensor(x[:b]) @ w1 + b1) @ w2 + b2,
                                     torch.tensor(y[:b])).backward()
        opt.step()
        for n, t in zip(names, tensors):
            np.testing.assert_allclose(step.params[n[:2]][n[3:]], t.detach().numpy(), rtol=1e-6, atol=1e-12)


def test_a_loss_that_read_a_size_is_refused_by_name_as_before():
    """A trace that read x.shape may hold the traced size as a number: neither the reused graph nor the
    per-shape path may serve another batch size, and the error says why."""
    def loss(p, x, y):
        return ops.sum(ops.square(x @ p["w"] - y)) / x.shape[0]

    x, y = mlp_data(np.float64)
    p0 = {"w": np.ones((6, 3))}
    step = ft.TrainStep(loss, p0, ft.adam(1e-2))
    vg = fc.value_and_grad(loss)
    step(x, y)
    vg(p0, x, y)
    for run in (lambda: step(x[:7], y[:7]), lambda: vg(p0, x[:7], y[:7])):
        with pytest.raises(fc.ShapeError, match="read a tensor's shape"):
            run()
    assert step.count == 1 and step.derivations == 1 and vg.derivations == 1
