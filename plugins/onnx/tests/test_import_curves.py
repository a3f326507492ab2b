"""Import of Tan, Sinh, Cosh, Asinh, Acosh and Atanh, written with frame ops in forms that keep their accuracy
near 0 (and near 1 for Acosh, near -1 for Atanh): values against ONNX Runtime (float32) and numpy (float64),
first and second derivatives against torch, including at 0."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

DOMAINS = {"Tan": (-1.4, 1.4), "Sinh": (-10, 10), "Cosh": (-10, 10), "Asinh": (-1e3, 1e3), "Acosh": (1, 1e3),
           "Atanh": (-0.999, 0.999)}
NUMPY = {"Tan": np.tan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
         "Atanh": np.arctanh}


def _model(op, elem):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", elem, ["n"])],
                              [helper.make_tensor_value_info("y", elem, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model.SerializeToString()


def _points(op, dtype):
    lo, hi = DOMAINS[op]
    x = np.linspace(lo, hi, 401)
    near = [1.0, 1 + 1e-7, 1 + 1e-3] if op == "Acosh" else [0.0, 1e-30, -1e-30, 1e-8, -1e-8, 1e-4, -0.998]
    return np.concatenate([x, near]).astype(dtype)


@pytest.mark.parametrize("op", list(DOMAINS))
def test_values_match_onnxruntime_and_numpy(op):
    for elem, dtype in ((TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)):
        data, x = _model(op, elem), _points(op, dtype)
        got = frame_onnx.load(data, dims={"n": len(x)}).run([x])[0]
        exact = NUMPY[op](x.astype(np.float64))
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, exact, rtol=4 * eps, atol=0)  # relative, at 0 and near the poles too
        if dtype is np.float32:  # ONNX Runtime has no float64 kernels for these
            np.testing.assert_allclose(got, ort.InferenceSession(data).run(None, {"x": x})[0], rtol=4 * eps, atol=0)


@pytest.mark.parametrize("op", list(DOMAINS))
def test_first_and_second_derivatives_match_torch(op):
    x = _points(op, np.float64)
    x = x[np.abs(x) < 50] if op in ("Sinh", "Cosh") else x[(x > 1 + 1e-6) if op == "Acosh" else slice(None)]
    model = frame_onnx.load(_model(op, TensorProto.DOUBLE), dims={"n": len(x)})
    graph, loss = fc.extend_graph(model.graph, lambda x, y: ops.sum(y))
    first = fc.build_backward_graph(graph, loss, [0])  # d/dx of sum(f(x)): f'(x)
    second_graph, second_loss = fc.extend_graph(first, lambda *xs: ops.sum(xs[-1]))
    second = fc.build_backward_graph(second_graph, second_loss, [0])  # f''(x)
    t = torch.tensor(x, requires_grad=True)
    (g1,) = torch.autograd.grad(getattr(torch, op.lower() if op not in ("Asinh", "Acosh", "Atanh") else
                                        "a" + op[1:].lower())(t).sum(), t, create_graph=True)
    (g2,) = torch.autograd.grad(g1.sum(), t)
    np.testing.assert_allclose(fc.compile(first).run([x])[-1], g1.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fc.compile(second).run([x])[-1], g2.numpy(), rtol=1e-7, atol=1e-9)
