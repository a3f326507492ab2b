"""GridSample (torch's F.grid_sample) imported as frame ops: every mode and padding mode, with and without
align_corners, against torch and ONNX Runtime, and the gradients with respect to the input AND the grid against
torch autograd; cubic sampling and 3-D inputs refused by name."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")


def _net(mode, padding, align):
    class Net(torch.nn.Module):
        def forward(self, x, g):
            return torch.nn.functional.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align)
    return Net()


def _exported(net, x, g):
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x, g), buffer, dynamo=False, input_names=["x", "g"], output_names=["y"],
                          opset_version=17)
    return buffer.getvalue()


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_equals_torch_and_onnxruntime_with_both_gradients(mode, padding, align):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, generator=gen)
    g = torch.rand(2, 4, 7, 2, generator=gen) * 3.2 - 1.6  # beyond [-1, 1]: every padding mode is exercised
    net = _net(mode, padding, align)
    data = _exported(net, x, g)
    imported = frame_onnx.load(data)
    got = imported.run([x.numpy(), g.numpy()])[0]
    np.testing.assert_allclose(got, net(x, g).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, ort.InferenceSession(data).run(None, {"x": x.numpy(), "g": g.numpy()})[0],
                               rtol=1e-5, atol=1e-6)

    weights = np.random.default_rng(1).standard_normal(got.shape).astype(np.float32)
    graph, loss = fc.extend_graph(imported.graph, lambda *v: ops.sum(v[-1] * weights))
    outs = fc.compile(fc.build_backward_graph(graph, loss, [0, 1])).run([x.numpy(), g.numpy()])
    xt, gt = x.clone().requires_grad_(True), g.clone().requires_grad_(True)
    tx, tg = torch.autograd.grad((net(xt, gt) * torch.from_numpy(weights)).sum(), [xt, gt])
    np.testing.assert_allclose(outs[-2], tx.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[-1], tg.numpy(), rtol=1e-4, atol=1e-4)


def _node_model(mode, x_shape, grid_shape, out_shape):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, name="sample")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                                            helper.make_tensor_value_info("g", TensorProto.FLOAT, grid_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    return model


def test_opset_20_linear_name_imports():
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 4)).astype(np.float32)
    g = np.random.default_rng(3).uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)
    model = _node_model("linear", [1, 2, 4, 4], [1, 3, 3, 2], [1, 2, 3, 3])
    got = frame_onnx.load(model).run([x, g])[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "g": g})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cubic_sampling_and_3d_inputs_are_refused_by_name():
    with pytest.raises(frame_onnx.UnsupportedModelError, match="GridSample mode 'cubic'"):
        frame_onnx.load(_node_model("cubic", [1, 2, 4, 4], [1, 3, 3, 2], [1, 2, 3, 3]))
    with pytest.raises(frame_onnx.UnsupportedModelError, match="GridSample of a rank-5 input"):
        frame_onnx.load(_node_model("linear", [1, 2, 4, 4, 4], [1, 3, 3, 3, 3], [1, 2, 3, 3, 3]))


def test_the_audit_reports_grid_sample_closed_to_second_order():
    x, g = torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1
    report = frame_onnx.audit(_exported(_net("bilinear", "zeros", False), x, g), order=2)
    (row,) = [n for n in report["nodes"] if n["op_type"] == "GridSample"]
    assert row["status"] == "imported" and "gather" in row["frame_ops"] and row["order"] == "closed"


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # numpy warns about the NaN and inf arithmetic
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_a_nan_or_infinite_grid_coordinate_is_no_error(mode, padding):
    x = torch.randn(1, 2, 3, 3)
    g = torch.tensor([[[[float("nan"), 0.2], [0.1, float("inf")], [-float("inf"), 0.0], [0.3, -0.4]]]])
    net = _net(mode, padding, False)
    got = frame_onnx.load(_exported(net, x, g)).run([x.numpy(), g.numpy()])[0]
    assert got.shape == (1, 2, 1, 4)
    assert (got[..., 0] == 0).all()  # a NaN coordinate samples nothing
    np.testing.assert_allclose(got[..., 3], net(x, g).numpy()[..., 3], rtol=1e-5, atol=1e-6)  # finite ones as torch
    if padding == "border":  # infinities clamp to the edge, as torch's
        np.testing.assert_allclose(got[..., 1:], net(x, g).numpy()[..., 1:], rtol=1e-5, atol=1e-6)
