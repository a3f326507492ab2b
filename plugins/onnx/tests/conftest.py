"""Models for the frame-onnx tests, made at test time: small torch modules exported with torch.onnx (the
TorchScript exporter, ``dynamo=False``: it needs no onnxscript and takes a fraction of a second per model),
and hand-built ONNX graphs (``onnx.helper``). Nothing is downloaded."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest


@dataclass
class TorchModel:
    name: str
    module: Any
    x: np.ndarray
    onnx: bytes


def _torch_modules():
    import torch

    nn = torch.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 16), nn.Linear(16, 2)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)))

    class CNN1d(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv1d(2, 4, 3, padding=1), nn.Linear(16, 3)

        def forward(self, x):
            h = nn.functional.avg_pool1d(torch.relu(self.conv(x)), 2)
            return self.fc(h.reshape(h.shape[0], -1))

    class CNN2d(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(2, 4, 3, padding=1), nn.Linear(64, 3)

        def forward(self, x):
            h = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            return self.fc(torch.flatten(h, 1))

    class GRU(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru, self.fc = nn.GRU(3, 5, batch_first=True), nn.Linear(5, 1)

        def forward(self, x):
            y, _ = self.gru(x)
            return self.fc(y[:, -1])

    class Attention(nn.Module):  # one causal self-attention block with a residual
        def __init__(self):
            super().__init__()
            self.ln, self.qkv, self.out = nn.LayerNorm(8), nn.Linear(8, 24), nn.Linear(8, 8)

        def forward(self, x):
            t = x.shape[1]
            q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
            att = (q @ k.transpose(-2, -1)) / 8 ** 0.5
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            return x + self.out(att.masked_fill(mask, float("-inf")).softmax(-1) @ v)

    return {"mlp": (MLP, (6, 4)), "cnn1d": (CNN1d, (3, 2, 8)), "cnn2d": (CNN2d, (3, 2, 8, 8)),
            "gru": (GRU, (3, 6, 3)), "attention": (Attention, (2, 5, 8))}


def _separable_block() -> type:
    import torch

    nn = torch.nn

    class Separable(nn.Module):  # depthwise + pointwise conv, ConvTranspose2d, InstanceNorm2d
        def __init__(self):
            super().__init__()
            self.depthwise, self.pointwise = nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.Conv2d(4, 6, 1)
            self.up = nn.ConvTranspose2d(6, 2, 3, stride=2, padding=1, output_padding=1)
            self.norm = nn.InstanceNorm2d(2, affine=True)

        def forward(self, x):
            return self.norm(self.up(torch.relu(self.pointwise(self.depthwise(x)))))

    return Separable


@pytest.fixture(scope="session")
def separable_block() -> type:
    """A torch module class taking ``[batch, 4, H, W]``: a depthwise-separable convolution, ConvTranspose2d and
    InstanceNorm2d. Shared here because pytest's importlib mode lets no test module import another."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    return _separable_block()


@pytest.fixture(scope="session")
def torch_models() -> dict[str, TorchModel]:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    import warnings

    # One thread: on a loaded machine torch's OpenMP pool spin-waits, making a tiny conv's backward 20x slower
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = {}
    for name, (cls, shape) in _torch_modules().items():
        module = cls().eval()
        x = torch.randn(*shape)
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"],
                              opset_version=17, dynamic_axes={"x": {0: "batch"}})
        models[name] = TorchModel(name, module, x.numpy(), buffer.getvalue())
    return models
