"""Imported torch models at batch sizes other than the one they were imported at, the empty batch included.

Each model is exported with a symbolic batch and imported once (at batch 1). Its forward graph and its training
graph (parameters' gradients of sum(y ** 2)), compiled once with ``dynamic_shapes=True``, run at batches 2, 5
and 0: each output must equal, bit for bit, that of the model imported at that batch, or be refused with a named
frame error that says what to do, never run wrongly (docs/design-parameters-and-shapes.md, docs/onnx.md).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

torch = pytest.importorskip("torch")
frame_onnx = pytest.importorskip("frame_onnx")
nn = torch.nn


class Sequence(nn.Module):  # Conv1d, GroupNorm, LayerNorm, AvgPool1d, Flatten, LogSoftmax
    def __init__(self):
        super().__init__()
        self.conv, self.group, self.norm = nn.Conv1d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.LayerNorm(6)

    def forward(self, x):
        h = self.norm(self.group(torch.relu(self.conv(x))))
        return torch.log_softmax(nn.functional.avg_pool1d(h, 2).flatten(1), -1)


class Pooled(nn.Module):  # Conv2d, AdaptiveAvgPool2d(1) (GlobalAveragePool), Softmax
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)

    def forward(self, x):
        return nn.functional.adaptive_avg_pool2d(self.conv(x), 1).flatten(1).softmax(-1)


class Normed(nn.Module):  # BatchNorm1d in eval mode, Linear, PReLU
    def __init__(self):
        super().__init__()
        self.norm, self.fc, self.prelu = nn.BatchNorm1d(5), nn.Linear(5, 3), nn.PReLU(3)

    def forward(self, x):
        return self.prelu(self.fc(self.norm(x)))


class Recurrent(nn.Module):  # GRU: torch writes the batch into its initial state, so the import is at one batch
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(4, 5, batch_first=True), nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


FEATURES = {"separable": (4, 5, 5), "sequence": (3, 6), "pooled": (2, 6, 6), "normed": (5,), "recurrent": (5, 4)}


@pytest.fixture(scope="module")
def models(separable_block):  # noqa: ANN001, ANN201
    """Each model's class: the separable block (depthwise + pointwise conv, ConvTranspose2d, InstanceNorm2d) is
    conftest's, shared with test_import_torch_layers."""
    return {"separable": separable_block, "sequence": Sequence, "pooled": Pooled, "normed": Normed,
            "recurrent": Recurrent}


def _export(cls, features):
    torch.manual_seed(1)
    module = cls().eval()
    with torch.no_grad():  # distinct values everywhere: torch.onnx merges equal initializers
        for t in [*module.parameters(), *(b for b in module.buffers() if b.is_floating_point())]:
            t.copy_(torch.rand_like(t) + 0.5 if t.dim() == 1 else torch.randn_like(t) * 0.5)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(2, *features),), buffer, dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17, dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return buffer.getvalue()


def _training(model):
    graph, loss = fc.extend_graph(model.graph, lambda *xs: ops.sum(ops.square(xs[-1])))
    first = len(model.input_names)
    return fc.build_backward_graph(graph, loss, list(range(first, first + len(model.param_names))))


@pytest.mark.parametrize("name", list(FEATURES))
def test_an_imported_model_at_other_batches_is_bit_for_bit_or_refused_by_name(name, models):
    cls, features = models[name], FEATURES[name]
    data = _export(cls, features)
    model = frame_onnx.load(data)
    forward = fc.compile(model.graph, dynamic_shapes=True)
    training = fc.compile(_training(model), dynamic_shapes=True)
    params = model.flat_params()
    for batch in (2, 5, 0):
        x = np.random.default_rng(batch).standard_normal((batch, *features)).astype(np.float32)
        again = frame_onnx.load(data, dims={"batch": batch})
        for kind, exe, fresh in (("forward", forward, again.graph), ("training", training, _training(again))):
            want = fc.compile(fresh).run([x, *again.flat_params()])
            try:
                got = exe.run([x, *params])
            except fc.ShapeError as refused:
                message = str(refused)
                if not model.any_batch:  # the importer saw a size baked in: it says to import again
                    assert "import it again with frame_onnx.load(..., dims=" in message, message
                else:  # batch_norm's running averages (an inference BatchNorm imports as one): named
                    assert kind == "training" and "unused output of batch_norm" in message, message
                continue
            assert model.any_batch, f"{name}: a model imported for one batch ran at batch {batch}"
            for a, b in zip(got, want):
                assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{name} {kind} at batch {batch}"
