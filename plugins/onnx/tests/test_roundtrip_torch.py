"""Models exported from torch, imported into frame: forward equal to ONNX Runtime and torch, gradients equal
to torch autograd, and 100 SGD steps that follow torch's loss curve."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
NAMES = ["mlp", "cnn1d", "cnn2d", "gru", "attention"]


def _load(m):
    return frame_onnx.load(m.onnx, dims={"batch": m.x.shape[0]})


@pytest.mark.parametrize("name", NAMES)
def test_forward_equals_onnxruntime_and_torch(torch_models, name):
    import torch

    m = torch_models[name]
    model = _load(m)
    (got,) = model.run([m.x])
    (runtime,) = ort.InferenceSession(m.onnx).run(None, {"x": m.x})
    with torch.no_grad():
        reference = m.module(torch.from_numpy(m.x)).numpy()
    assert got.dtype == np.float32 and got.shape == reference.shape
    np.testing.assert_allclose(got, runtime, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
    assert model.input_names == ["x"] and model.output_names == ["y"]


def _match_parameters(module, model):
    """torch parameter name -> (imported parameter name, transposed?): by value (the TorchScript exporter
    renames some weights, ``onnx::MatMul_52``, and stores a Linear without bias transposed)."""
    flat = dict(zip(model.param_names, model.flat_params()))
    found = {}
    for name, p in module.named_parameters():
        p = p.detach().numpy()
        if name in flat and flat[name].shape == p.shape and np.array_equal(flat[name], p):
            found[name] = (name, False)
            continue
        for key, a in flat.items():
            if a.shape == p.shape and np.array_equal(a, p):
                found[name] = (key, False)
                break
            if p.ndim == 2 and a.shape == p.T.shape and np.array_equal(a, p.T):
                found[name] = (key, True)
                break
    return found


def _gru_gradients(module) -> dict[tuple[int, ...], np.ndarray]:
    """torch's GRU gradients in ONNX's layout, by shape: gates (r, z, n) reordered to (z, r, h), a leading
    direction axis, and the two biases concatenated (what the exporter does to the weights)."""
    gru = module.gru
    h = gru.hidden_size

    def reorder(a):
        r, z, n = a[:h], a[h:2 * h], a[2 * h:]
        return np.concatenate([z, r, n])
    w, r = reorder(gru.weight_ih_l0.grad.numpy()), reorder(gru.weight_hh_l0.grad.numpy())
    b = np.concatenate([reorder(gru.bias_ih_l0.grad.numpy()), reorder(gru.bias_hh_l0.grad.numpy())])
    return {w[None].shape: w[None], r[None].shape: r[None], b[None].shape: b[None]}


def _training_graph(model):
    """loss = mean(y ** 2) appended to the imported graph, differentiated w.r.t. every parameter."""
    graph, loss = fc.extend_graph(model.graph, lambda *xs: ops.mean(ops.square(xs[-1])))
    first = len(model.input_names)
    return fc.build_backward_graph(graph, loss, list(range(first, first + len(model.param_names)))), loss


@pytest.mark.parametrize("name", NAMES)
def test_parameter_gradients_equal_torch_autograd(torch_models, name):
    import torch

    m = torch_models[name]
    model = _load(m)
    training, loss_index = _training_graph(model)
    outs = fc.compile(training).run(model.arguments([m.x]))
    grads = dict(zip(model.param_names, outs[-len(model.param_names):]))
    m.module.zero_grad()
    loss = (m.module(torch.from_numpy(m.x)) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(outs[loss_index], loss.item(), rtol=1e-5)
    matched = _match_parameters(m.module, model)
    for tname, (key, transposed) in matched.items():
        want = dict(m.module.named_parameters())[tname].grad.numpy()
        np.testing.assert_allclose(grads[key], want.T if transposed else want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{name}: gradient of {tname} ({key})")
    rest = sorted(set(model.param_names) - {key for key, _ in matched.values()})
    if name == "gru":
        by_shape = _gru_gradients(m.module)
        for key in rest:
            np.testing.assert_allclose(grads[key], by_shape[grads[key].shape], rtol=1e-5, atol=1e-5, err_msg=key)
        rest = []
    assert not rest and len(matched) + (3 if name == "gru" else 0) == len(model.param_names)


@pytest.mark.parametrize("name", NAMES)
def test_training_100_steps_follows_torch(torch_models, name):
    """Plain SGD on a fixed batch and target in frame and in torch, from the same weights: the loss falls,
    and the two curves agree."""
    import copy

    import torch

    m = torch_models[name]
    model = _load(m)
    rng = np.random.default_rng(1)
    target = rng.standard_normal(model.graph.outputs[0].shape).astype(np.float32)
    graph, loss = fc.extend_graph(model.graph, lambda *xs: ops.mse_loss(xs[-1], target))
    first = len(model.input_names)
    n = len(model.param_names)
    step = fc.compile(fc.build_backward_graph(graph, loss, list(range(first, first + n))))
    lr = 0.05
    params = model.flat_params()
    ours = []
    for _ in range(100):
        outs = step.run([m.x, *params])
        ours.append(float(outs[loss]))
        params = [p - lr * g for p, g in zip(params, outs[-n:])]
    module = copy.deepcopy(m.module)
    theirs = []
    for _ in range(100):  # SGD by hand (torch.optim would import torch's compiler stack: seconds per session)
        module.zero_grad()
        value = torch.nn.functional.mse_loss(module(torch.from_numpy(m.x)), torch.from_numpy(target))
        value.backward()
        with torch.no_grad():
            for p in module.parameters():
                p -= lr * p.grad
        theirs.append(value.item())
    assert ours[-1] < 0.8 * ours[0], f"{name}: the loss did not fall: {ours[0]:.4g} -> {ours[-1]:.4g}"
    np.testing.assert_allclose(ours, theirs, rtol=2e-3, atol=1e-6)


@pytest.mark.parametrize("name", ["mlp", "cnn1d", "cnn2d", "gru", "attention"])
def test_one_import_serves_any_batch_size(torch_models, name):
    """Traced at batch 1, compiled with dynamic_shapes=True, run at the fixture's batch: torch's answer (the GRU's
    initial state, which torch builds from Shape(x), follows the batch)."""
    import torch

    m = torch_models[name]
    model = frame_onnx.load(m.onnx)  # symbolic batch traced at 1
    assert model.dims == {"batch": 1} and model.any_batch
    exe = fc.compile(model.graph, dynamic_shapes=True)
    (got,) = exe.run(model.arguments([m.x]))
    with torch.no_grad():
        np.testing.assert_allclose(got, m.module(torch.from_numpy(m.x)).numpy(), rtol=1e-5, atol=1e-5)

