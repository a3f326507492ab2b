"""Import of torch layers beyond the round-trip models: a transformer encoder layer (batch_first), multi-head
attention, a depthwise-separable convolution, ConvTranspose2d, BatchNorm1d, InstanceNorm2d and the activations
torch.onnx writes as their own ONNX ops. Forward equal to ONNX Runtime and torch, parameter gradients equal to
torch autograd.

The parameters are drawn at random before export: torch.onnx's TorchScript exporter merges initializers of
equal values (a fresh model's LayerNorm ones, its zero biases, a BatchNorm's zero bias and zero running mean)
into one, which frame then imports as one parameter (docs/onnx.md)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_onnx

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc, self.prelu = nn.BatchNorm1d(5), nn.Linear(5, 3), nn.PReLU(3)

    def forward(self, x):
        h = self.fc(self.norm(x))
        f = nn.functional
        return torch.stack([self.prelu(h), f.leaky_relu(h, 0.1), f.elu(h), f.selu(h), f.hardswish(h),
                            f.hardsigmoid(h), f.mish(h)])


SHAPES = {"encoder": (2, 5, 8), "attention": (2, 5, 8), "separable": (2, 4, 5, 5), "activations": (4, 5)}


@pytest.fixture(scope="module")
def models(separable_block):  # noqa: ANN001, ANN201
    """Each model's class: the separable block is conftest's, shared with test_any_batch_import."""
    return {"encoder": Encoder, "attention": Attention, "separable": separable_block, "activations": Activations}


def _exported(cls, shape):
    torch.manual_seed(1)
    module = cls().eval()
    with torch.no_grad():  # distinct values everywhere (see the module docstring)
        for t in [*module.parameters(), *(b for b in module.buffers() if b.is_floating_point())]:
            t.copy_(torch.rand_like(t) + 0.5 if t.dim() == 1 else torch.randn_like(t) * 0.5)
    x = torch.randn(*shape)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"],
                          opset_version=17, dynamic_axes={"x": {0: "batch"}})
    return module, x, buffer.getvalue()


@pytest.mark.parametrize("name", list(SHAPES))
def test_torch_layers_import_with_torchs_forward_and_gradients(name, models):
    torch.set_num_threads(1)
    module, x, data = _exported(models[name], SHAPES[name])
    model = frame_onnx.load(data, dims={"batch": x.shape[0]})
    y = model.run([x.numpy()])[0]
    np.testing.assert_allclose(y, module(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, ort.InferenceSession(data).run(None, {"x": x.numpy()})[0], rtol=1e-5, atol=1e-5)
    # one import serves other batches (attention's reshape targets, computed from Shape, write -1 for the batch)
    assert model.any_batch
    wide = torch.randn(7, *x.shape[1:])
    (got,) = fc.compile(model.graph, dynamic_shapes=True).run(model.arguments([wide.numpy()]))
    np.testing.assert_allclose(got, module(wide).detach().numpy(), rtol=1e-5, atol=1e-5)

    graph, loss = fc.extend_graph(model.graph, lambda *xs: ops.sum(ops.square(xs[-1])))
    first = len(model.input_names)
    step = fc.compile(fc.build_backward_graph(graph, loss, list(range(first, first + len(model.param_names)))))
    flat = model.flat_params()
    grads = dict(zip(model.param_names, step.run([x.numpy(), *flat])[-len(flat):]))
    module.zero_grad()
    (module(x) ** 2).sum().backward()
    reference = {n: p.grad.numpy() for n, p in module.named_parameters()}
    values = dict(zip(model.param_names, flat))
    # float32 noise scales with the largest gradient (a bias before InstanceNorm has a gradient near 0 from
    # cancelling terms of that size)
    scale = max(1.0, *(float(np.abs(g).max()) for g in reference.values()))
    for name_, grad in grads.items():
        if name_ not in reference:  # a weight torch stores transposed under another name (onnx::MatMul_52)
            if name_.startswith("onnx::"):
                (name_,) = [n for n, p in module.named_parameters()
                            if p.shape[::-1] == grad.shape and np.array_equal(p.detach().numpy().T, values[name_])]
                grad = grad.T
            else:  # a buffer (BatchNorm's running statistics): torch has no gradient for it
                assert "running" in name_
                continue
        np.testing.assert_allclose(grad, reference[name_], rtol=1e-5, atol=1e-5 * scale, err_msg=name_)
