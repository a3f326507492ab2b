"""GridSample (torch's F.grid_sample) imported as frame ops: every mode (bilinear, nearest, bicubic in 2-D;
trilinear and nearest in 3-D) and padding mode, with and without align_corners, against torch and ONNX Runtime,
and the gradients with respect to the input AND the grid against torch autograd (second order against central
differences); the imported graph exported back runs on ONNX Runtime; 3-D cubic sampling refused by name."""

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


def _exported(net, x, g, opset=17):
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x, g), buffer, dynamo=False, input_names=["x", "g"], output_names=["y"],
                          opset_version=opset)
    return buffer.getvalue()


CASES = [  # (mode, x shape, grid shape, opset): opset 17 writes torch's names (bilinear, bicubic), 20 ONNX's
    *[(m, (2, 3, 5, 6), (2, 4, 7, 2), 17) for m in ("bilinear", "nearest", "bicubic")],
    ("bicubic", (1, 2, 4, 3), (1, 5, 3, 2), 20),
    *[(m, (2, 2, 3, 4, 5), (2, 3, 2, 4, 3), 20) for m in ("bilinear", "nearest")],  # 3-D: [N, C, D, H, W]
]


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode, x_shape, g_shape, opset", CASES, ids=[f"{c[0]}-{len(c[1]) - 2}d-opset{c[3]}"
                                                                      for c in CASES])
def test_grid_sample_equals_torch_and_onnxruntime_with_both_gradients(mode, x_shape, g_shape, opset, padding, align):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*x_shape, generator=gen)
    g = torch.rand(*g_shape, generator=gen) * 3.2 - 1.6  # beyond [-1, 1]: every padding mode is exercised
    net = _net(mode, padding, align)
    data = _exported(net, x, g, opset)
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


def _node_model(mode, x_shape, grid_shape, out_shape, elem=TensorProto.FLOAT):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, name="sample")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, x_shape),
                                            helper.make_tensor_value_info("g", elem, grid_shape)],
                              [helper.make_tensor_value_info("y", elem, out_shape)])
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


def test_3d_cubic_sampling_and_other_ranks_are_refused_by_name():
    with pytest.raises(frame_onnx.UnsupportedModelError, match="GridSample mode 'cubic' of a 3-D input"):
        frame_onnx.load(_node_model("cubic", [1, 2, 4, 4, 4], [1, 3, 3, 3, 3], [1, 2, 3, 3, 3]))
    with pytest.raises(frame_onnx.UnsupportedModelError, match="GridSample of a rank-3 input"):
        frame_onnx.load(_node_model("linear", [1, 2, 4], [1, 3, 1], [1, 2, 3]))
    with pytest.raises(frame_onnx.OnnxFormatError, match=r"grid of shape \[1, 3, 3, 3\] must be \[N, H_out, W_out, 2\]"):
        frame_onnx.load(_node_model("linear", [1, 2, 4, 4], [1, 3, 3, 3], [1, 2, 3, 3]))


@pytest.mark.parametrize("mode, x_shape, g_shape", [("cubic", [1, 2, 4, 5], [1, 3, 2, 2]),
                                                    ("linear", [1, 2, 3, 4, 4], [1, 2, 3, 2, 3]),
                                                    ("nearest", [1, 2, 3, 4, 4], [1, 2, 3, 2, 3])])
def test_an_imported_grid_sample_exports_back_and_runs_on_onnxruntime(mode, x_shape, g_shape):
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal(x_shape).astype(np.float32), rng.uniform(-1.3, 1.3, g_shape).astype(np.float32)
    model = _node_model(mode, x_shape, g_shape, [x_shape[0], x_shape[1], *g_shape[1:-1]])
    imported = frame_onnx.load(model)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "g": g})[0]
    back = frame_onnx.to_onnx(imported.graph)
    got = ort.InferenceSession(back.SerializeToString()).run(None, dict(zip(("x", "g"), (x, g))))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode, x_shape, g_shape", [("cubic", [1, 1, 3, 4], [1, 2, 2, 2]),
                                                    ("linear", [1, 1, 2, 3, 3], [1, 1, 2, 2, 3])])
def test_grid_sample_second_order_equals_central_differences(mode, x_shape, g_shape):
    """The Hessian-vector product of sum(w * y) in (x, grid), float64, against central differences of frame's own
    first-order gradient graph (the grid kept away from the integer positions where the weights' derivatives
    jump)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape)
    g = (rng.integers(-2, 2, g_shape) + rng.uniform(0.25, 0.75, g_shape)) / 2.0
    model = _node_model(mode, x_shape, g_shape, [*x_shape[:2], *g_shape[1:-1]], TensorProto.DOUBLE)
    model.graph.node[0].attribute.append(helper.make_attribute("align_corners", 1))
    graph = frame_onnx.load(model).graph
    weights = rng.standard_normal(graph.outputs[0].type.shape)
    graph, loss = fc.extend_graph(graph, lambda *v: ops.sum(v[-1] * weights))
    first = fc.build_backward_graph(graph, loss, [0, 1])
    vx, vg = rng.standard_normal(x.shape), rng.standard_normal(g.shape)
    dot, s = fc.extend_graph(first, lambda *v: ops.sum(v[-2] * vx) + ops.sum(v[-1] * vg))
    second = fc.compile(fc.build_backward_graph(dot, s, [0, 1])).run([x, g])
    grads, eps = fc.compile(first), 1e-6
    plus, minus = grads.run([x + eps * vx, g + eps * vg]), grads.run([x - eps * vx, g - eps * vg])
    assert np.abs(second[-1]).max() > 1e-3  # the grid's second derivative is not trivially 0
    for got, p, m in zip(second[-2:], plus[-2:], minus[-2:]):
        np.testing.assert_allclose(got, (p - m) / (2 * eps), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode, x_shape, g_shape", [("bilinear", (1, 2, 4, 4), (1, 3, 3, 2)),
                                                    ("bicubic", (1, 2, 4, 4), (1, 3, 3, 2)),
                                                    ("bilinear", (1, 2, 3, 4, 4), (1, 2, 3, 3, 3))])
def test_the_audit_reports_grid_sample_closed_to_second_order(mode, x_shape, g_shape):
    x, g = torch.randn(*x_shape), torch.rand(*g_shape) * 2 - 1
    report = frame_onnx.audit(_exported(_net(mode, "reflection", False), x, g, 20), order=2)
    (row,) = [n for n in report["nodes"] if n["op_type"] == "GridSample"]
    assert row["status"] == "imported" and "gather" in row["frame_ops"] and row["order"] == "closed"


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # numpy warns about the NaN and inf arithmetic
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
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
