"""Imported torch models at batch sizes other than the one they were imported at, the empty batch included.

Each model is exported with a symbolic batch and imported once (at batch 1). Its forward graph and its training
graph (parameters' gradients of sum(y ** 2)), compiled once with ``dynamic_shapes=True``, run at batches 2, 5
and 0: each output must equal, bit for bit, that of the model imported at that batch, or be refused with a named
frame error that says what to do, never run wrongly (docs/design-parameters-and-shapes.md, docs/onnx.md).

The recurrent layers and ``Shaped`` compute sizes from ``Shape(x)`` and materialise them (torch's TorchScript
exporter builds a zero initial state ``[layers * directions, batch, hidden]`` with ``ConstantOfShape``): those
sizes follow the batch (``frame_onnx._follow``), so the models are ``any_batch``.
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


class Recurrent(nn.Module):  # GRU, batch first: torch builds its initial state [1, batch, 5] from Shape(x)
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(4, 5, batch_first=True), nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


class TimeFirst(nn.Module):  # LSTM over [T, B, F]: two initial states from Shape of an intermediate (the transpose)
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.LSTM(4, 5), nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(self.rnn(x.transpose(0, 1))[0][-1])


class Bidirectional(nn.Module):  # GRU both ways: initial state [2, batch, 5]
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(4, 5, batch_first=True, bidirectional=True), nn.Linear(10, 3)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


class Stacked(nn.Module):  # LSTM of 2 layers (one ONNX LSTM per layer, each with its slice of the [2, B, 5] states)
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.LSTM(4, 5, num_layers=2, batch_first=True), nn.Linear(5, 3)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.fc(out[:, -1] + h[0] * c[1])


class Elman(nn.Module):  # RNN (tanh), 2 layers, both ways, time first: initial state [4, batch, 5]
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.RNN(4, 5, num_layers=2, bidirectional=True), nn.Linear(10, 3)

    def forward(self, x):
        return self.fc(self.rnn(x.transpose(0, 1))[0][-1])


class Shaped(nn.Module):  # sizes read from Shape(x) and materialised: expand_as, zeros_like, ones_like, new_zeros,
    def __init__(self):   # full (of -0.0, kept as -0.0, and of -inf), view(x.size(0), -1)
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 4))

    def forward(self, x):
        y = self.w.expand_as(x) * x + torch.zeros_like(x) + torch.ones_like(x) * x
        y = y + x.new_zeros(x.shape[0], 1, 4)
        masked = torch.maximum(y[:, 0, :2], torch.full((x.size(0), 2), float("-inf")))
        flat = torch.cat([y.view(y.size(0), -1), torch.full((x.size(0), 2), -0.0), masked], 1)
        return flat * flat


class LearnedState(nn.Module):  # GRU from a learned initial state, h0.expand(-1, x.size(0), -1): Where picks 1 for -1
    def __init__(self):
        super().__init__()
        self.rnn, self.h0, self.fc = nn.GRU(4, 5, batch_first=True), nn.Parameter(torch.randn(1, 1, 5)), nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(self.rnn(x, self.h0.expand(-1, x.size(0), -1).contiguous())[0][:, -1])


class ClassToken(nn.Module):  # a learned token per row: cls.expand(x.size(0), -1, -1) and cls.repeat(x.size(0), 1, 1)
    def __init__(self):
        super().__init__()
        self.cls, self.sep = nn.Parameter(torch.randn(1, 1, 4)), nn.Parameter(torch.randn(1, 1, 4))

    def forward(self, x):
        return torch.cat([self.cls.expand(x.size(0), -1, -1), x, self.sep.repeat(x.size(0), 1, 1)], 1).tanh()


class Counting(nn.Module):  # torch.arange(x.size(0)): an integer Range(0, batch, 1), cast to float
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc(x.flatten(1)) * torch.arange(x.size(0)).unsqueeze(1).float()


FEATURES = {"separable": (4, 5, 5), "sequence": (3, 6), "pooled": (2, 6, 6), "normed": (5,), "recurrent": (5, 4),
            "time_first": (5, 4), "bidirectional": (5, 4), "stacked": (5, 4), "elman": (5, 4), "shaped": (5, 4),
            "counting": (3, 4), "learned_state": (5, 4), "class_token": (5, 4)}
#: the models whose training graph may be refused at another batch, and the reason it must name: batch_norm's
#: running averages; a recurrent layer whose time loop's gradient reads the shape of a value made inside the loop
#: body (a slice of the step's input: torch's time-first and stacked GRUs); every other model must train at any batch
TRAINING_REFUSED = {"normed": "unused output of batch_norm",
                    **{k: "the gradient of scan may hold the traced sizes" for k in ("time_first", "stacked")}}


@pytest.fixture(scope="module")
def models(separable_block):  # noqa: ANN001, ANN201
    """Each model's class: the separable block (depthwise + pointwise conv, ConvTranspose2d, InstanceNorm2d) is
    conftest's, shared with test_import_torch_layers."""
    return {"separable": separable_block, "sequence": Sequence, "pooled": Pooled, "normed": Normed,
            "recurrent": Recurrent, "time_first": TimeFirst, "bidirectional": Bidirectional, "stacked": Stacked,
            "elman": Elman, "shaped": Shaped, "counting": Counting, "learned_state": LearnedState,
            "class_token": ClassToken}


def _module(cls):
    torch.manual_seed(1)
    module = cls().eval()
    with torch.no_grad():  # distinct values everywhere: torch.onnx merges equal initializers
        for t in [*module.parameters(), *(b for b in module.buffers() if b.is_floating_point())]:
            t.copy_(torch.rand_like(t) + 0.5 if t.dim() == 1 else torch.randn_like(t) * 0.5)
    return module


def _export(cls, features):
    module = _module(cls)
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
    assert model.any_batch, f"{name}: a size read from Shape was baked in"
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
                message = str(refused)  # a gradient that may hold traced sizes: named
                assert kind == "training" and TRAINING_REFUSED.get(name, "(not refused)") in message, message
                continue
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{name} {kind} at batch {batch}"


class Counted(nn.Module):  # torch.arange(1, x.size(0) + 1): a Range over a size computed with, not followed
    def forward(self, x):
        return x.flatten(1) * torch.arange(1, x.size(0) + 1).unsqueeze(1).float()


class Scaled(nn.Module):  # a size read from Shape and then computed with (2 * batch rows): not followed
    def forward(self, x):
        return torch.cat([x, x], 0) + torch.zeros(2 * x.size(0), *x.shape[1:])


class Tiled(nn.Module):  # x.repeat(x.size(0), 1, 1): batch * batch rows, a Tile of an axis longer than 1
    def forward(self, x):
        return x.repeat(x.size(0), 1, 1) * 2


@pytest.mark.parametrize("cls", [Counted, Scaled, Tiled])
def test_a_size_the_importer_cannot_follow_is_refused_at_other_batches(cls):
    """A size read from Shape and computed with (a Range to batch + 1, 2 * batch rows, batch copies of the batch)
    is computed at the traced batch: the probe sees the graph change, the model is not any_batch, and another
    batch is refused by name, never run with the traced size (imported at that batch, it runs)."""
    data = _export(cls, (3, 4))
    model = frame_onnx.load(data)
    assert not model.any_batch
    x = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)
    with pytest.raises(fc.ShapeError, match=r"cannot be re-specialised.*import it again with frame_onnx\.load"):
        fc.compile(model.graph, dynamic_shapes=True).run([x, *model.flat_params()])
    again = frame_onnx.load(data, dims={"batch": 5})
    (got,) = again.run([x])
    with torch.no_grad():
        np.testing.assert_allclose(got, cls()(torch.from_numpy(x)).numpy(), rtol=1e-6, atol=1e-6)


def test_a_materialised_size_follows_the_batch_as_zeros_like_reads_it():
    """The GRU's initial state is built from x's type (zeros_like, which reads no values), not a constant of the
    traced batch (3): no constant of the state's shape [1, 3, 5] (the GRU's final state has it too), and torch's
    answer at batch 7."""
    data = _export(Recurrent, (5, 4))
    model = frame_onnx.load(data, dims={"batch": 3})
    assert model.any_batch
    state = [n.op for n in model.graph.nodes if any(tuple(o.type.shape) == (1, 3, 5) for o in n.outputs)]
    assert state[0] == "where" and not {"constant", "full"} & set(state), state  # the fill broadcast against x's
    assert any(n.op == "zeros_like" and n.inputs[0] is model.graph.inputs[0] for n in model.graph.nodes)
    x = np.random.default_rng(7).standard_normal((7, 5, 4)).astype(np.float32)
    (got,) = fc.compile(model.graph, dynamic_shapes=True).run([x, *model.flat_params()])
    with torch.no_grad():
        np.testing.assert_allclose(got, _module(Recurrent)(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


class Positions(nn.Module):  # a learned position table read at torch.arange(x.size(1)), the length symbolic
    def __init__(self):
        super().__init__()
        self.table, self.fc = nn.Embedding(32, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x + self.table(torch.arange(x.size(1))))


def test_positions_counted_to_a_symbolic_length_follow_it():
    """Range(0, Shape(x)[1], 1) follows the sequence length as it follows the batch: one import, forward and
    training graphs compiled once, bit for bit the model imported at each (batch, length), torch's answer too."""
    module = _module(Positions)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(2, 6, 4),), buffer, dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    data = buffer.getvalue()
    model = frame_onnx.load(data)
    assert model.any_batch and set(model.dims) == {"batch", "seq"}
    forward = fc.compile(model.graph, dynamic_shapes=True)
    training = fc.compile(_training(model), dynamic_shapes=True)
    for batch, seq in ((2, 3), (5, 7), (0, 5), (3, 0)):
        x = np.random.default_rng(batch + seq).standard_normal((batch, seq, 4)).astype(np.float32)
        again = frame_onnx.load(data, dims={"batch": batch, "seq": seq})
        for exe, fresh in ((forward, again.graph), (training, _training(again))):
            want = fc.compile(fresh).run([x, *again.flat_params()])
            got = exe.run([x, *model.flat_params()])
            assert [a.tobytes() for a in got] == [b.tobytes() for b in want], (batch, seq)
        with torch.no_grad():
            np.testing.assert_allclose(forward.run([x, *model.flat_params()])[0],
                                       module(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


def _hand_built(nodes):
    """A model of x[batch, 3] -> y[batch, 3] from ONNX nodes (opset 17)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _hand_built_cases():
    from onnx import TensorProto, helper, numpy_helper

    def constant(name, array):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))

    def fill(name, array):
        return numpy_helper.from_array(np.asarray(array), name)

    branch = helper.make_graph(  # ConstantOfShape(Shape(x)) inside a sub-graph, x captured from outside
        [helper.make_node("Shape", ["x"], ["s1"]), helper.make_node("ConstantOfShape", ["s1"], ["f"],
                                                                    value=fill("v", np.array([2.5], np.float32))),
         helper.make_node("Add", ["f", "x"], ["o1"])], "then", [],
        [helper.make_tensor_value_info("o1", TensorProto.FLOAT, ["batch", 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, ["batch", 3])])
    return {
        "a boolean mask expanded to Shape(x)": [
            helper.make_node("Shape", ["x"], ["s"]), constant("t", np.array([True, False, True])),
            helper.make_node("Expand", ["t", "s"], ["m"]), helper.make_node("Neg", ["x"], ["n"]),
            helper.make_node("Where", ["m", "x", "n"], ["y"])],
        "an int64 fill of Shape(x), cast": [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("ConstantOfShape", ["s"], ["k"], value=fill("v", np.array([7], np.int64))),
            helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["kf", "x"], ["y"])],
        "a fill inside an If branch": [
            helper.make_node("ReduceSum", ["x"], ["r"], keepdims=0), constant("z", np.float32(0)),
            helper.make_node("Greater", ["r", "z"], ["cond"]),
            helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)],
    }


@pytest.mark.parametrize("case", ["a boolean mask expanded to Shape(x)", "an int64 fill of Shape(x), cast",
                                  "a fill inside an If branch"])
def test_followed_sizes_of_other_dtypes_and_in_sub_graphs(case):
    """Fills and expansions of booleans and integers, and a fill in a sub-graph reading the outer x: any_batch,
    and bit for bit the model imported at batches 2, 5 and 0 (x shifted so both If branches are taken)."""
    data = _hand_built(_hand_built_cases()[case])
    model = frame_onnx.load(data)
    assert model.any_batch
    exe = fc.compile(model.graph, dynamic_shapes=True)
    for batch, shift in ((2, 0.5), (5, -2.0), (0, 0.0)):
        x = (np.random.default_rng(batch).standard_normal((batch, 3)) + shift).astype(np.float32)
        want = frame_onnx.load(data, dims={"batch": batch}).run([x])
        got = exe.run([x])
        assert [a.tobytes() for a in got] == [b.tobytes() for b in want] and got[0].shape == (batch, 3)


@pytest.mark.parametrize("name", ["recurrent", "time_first", "bidirectional", "stacked", "elman", "learned_state"])
def test_a_recurrent_training_graph_is_built_again_from_the_forward_specialised(name, models):
    """Where training through scan is refused at another batch (time_first, stacked), one import still serves it,
    and for every recurrent model the route gives the same bits: the forward graph
    specialised to the new batch (fc.specialize) and differentiated again gives, bit for bit, the training graph
    of the model imported at that batch."""
    import dataclasses

    data = _export(models[name], FEATURES[name])
    model = frame_onnx.load(data)
    for batch in (2, 5, 0):
        x = np.random.default_rng(batch).standard_normal((batch, *FEATURES[name])).astype(np.float32)
        types = [f"f32[{', '.join(map(str, x.shape))}]", *[v.type for v in model.graph.inputs[1:]]]
        at_batch = dataclasses.replace(model, graph=fc.specialize(model.graph, types))
        got = fc.compile(_training(at_batch)).run([x, *model.flat_params()])
        again = frame_onnx.load(data, dims={"batch": batch})
        want = fc.compile(_training(again)).run([x, *again.flat_params()])
        assert [a.tobytes() for a in got] == [b.tobytes() for b in want], (name, batch)
