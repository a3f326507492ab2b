"""An imported model with a symbolic batch trains at any batch size from one training graph.

torch exports a small CNN (conv, batch norm folded into it, max pool, strided conv, flatten, Gemm) with a
symbolic batch; frame_onnx imports it once, at batch 1. Its training graph, compiled with dynamic_shapes=True,
runs at batches 1, 5 and 3: every op on its chain declares any_shape_gradient, so it equals, bit for bit, the
training graph of the model imported at that batch, and torch's gradients.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

torch = pytest.importorskip("torch")
frame_onnx = pytest.importorskip("frame_onnx")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.c2 = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        return self.fc(torch.flatten(torch.tanh(self.c2(h)), 1))


def _training(model):  # noqa: ANN001, ANN202 - an imported model: its training graph for mean(y ** 2)
    extended, at = fc.extend_graph(model.graph, lambda *values: ops.mean(ops.square(values[-1])))
    extended.outputs = [extended.outputs[at]]
    return fc.build_backward_graph(extended, 0, [i for i, v in enumerate(extended.inputs) if v.name != "x"])


def test_an_imported_cnn_trains_at_any_batch_from_one_graph():
    net = _Net().eval()
    buffer = io.BytesIO()
    torch.onnx.export(net, torch.randn(2, 2, 8, 8), buffer, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    model = frame_onnx.load(buffer.getvalue())
    assert model.any_batch and model.graph.inputs[0].type == fc.as_type("f32[1, 2, 8, 8]")
    exe = fc.compile(_training(model), dynamic_shapes=True)
    leaves = model.flat_params(model.params)
    rng = np.random.default_rng(0)
    for batch in (1, 5, 3):
        x = rng.standard_normal((batch, 2, 8, 8)).astype(np.float32)
        got = exe.run([x, *leaves])
        again = frame_onnx.load(buffer.getvalue(), dims={"batch": batch})
        want = fc.compile(_training(again)).run([x, *again.flat_params(again.params)])
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}"
    net.zero_grad()
    loss = (net(torch.tensor(x)) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(got[0], loss.detach().numpy(), rtol=1e-5)
    grads = dict(zip([v.name for v in model.graph.inputs[1:]], got[1:]))
    for name in ("c2.weight", "c2.bias", "fc.weight", "fc.bias"):
        np.testing.assert_allclose(grads[name], dict(net.named_parameters())[name].grad.numpy(), rtol=1e-4,
                                   atol=1e-6, err_msg=name)


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.attn(x, x, x)[0]


def test_multihead_attention_imports_for_any_batch_and_trains_there():
    """torch's MultiheadAttention computes its reshape targets from Shape ([T, B * H, Dh]): imported at batch 2,
    each writes -1 for its one batch-dependent dimension, so one graph serves batches 1, 2 and 7, bit for bit the
    model imported at that batch, and its training graph too (torch's gradients at 7)."""
    import warnings

    net = _Attention().eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.randn(2, 5, 8), buffer, input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    model = frame_onnx.load(buffer.getvalue(), dims={"batch": 2})
    assert model.any_batch
    forward = fc.compile(model.graph, dynamic_shapes=True)
    training = fc.compile(_training(model), dynamic_shapes=True)
    leaves = model.flat_params(model.params)
    rng = np.random.default_rng(4)
    for batch in (2, 1, 7):
        x = rng.standard_normal((batch, 5, 8)).astype(np.float32)
        again = frame_onnx.load(buffer.getvalue(), dims={"batch": batch})
        arguments = [x, *again.flat_params(again.params)]
        for exe, graph in ((forward, again.graph), (training, _training(again))):
            for a, b in zip(exe.run([x, *leaves]), fc.compile(graph).run(arguments)):
                assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}"
    got = training.run([x, *leaves])
    net.zero_grad()
    loss = (net(torch.tensor(x)) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(got[0], loss.detach().numpy(), rtol=1e-5)
    grads = dict(zip([v.name for v in model.graph.inputs[1:]], got[1:]))
    (stored,) = [n for n in grads if n.startswith("onnx::")]  # torch exports in_proj_weight transposed, unnamed
    grads["attn.in_proj_weight"] = grads.pop(stored).T
    for name, p in net.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
