"""RMSNormalization (opset 23), Swish (opset 24) and LpNormalization imported as frame ops: values against ONNX
Runtime and torch, gradients against torch autograd, and the audit reporting them closed to second order."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")


def _model(node, x, opset, inits=()):
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info("y", elem, list(x.shape))],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check(model, x, torch_fn, tol=1e-5):
    """frame's value equals ONNX Runtime's and torch's; its gradients (x, then the parameters) equal torch's."""
    imported = frame_onnx.load(model)
    got = imported.run([x])[0]
    np.testing.assert_allclose(got, ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0],
                               rtol=tol, atol=tol)
    params = [numpy_helper.to_array(t) for t in model.graph.initializer]
    xt = torch.tensor(x, requires_grad=True)
    pt = [torch.tensor(p, requires_grad=True) for p in params]
    want = torch_fn(xt, *pt)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=tol, atol=tol)
    weights = np.random.default_rng(1).standard_normal(got.shape).astype(x.dtype)
    graph, loss = fc.extend_graph(imported.graph, lambda *v: ops.sum(v[-1] * weights))
    grads = fc.compile(fc.build_backward_graph(graph, loss, list(range(len(graph.inputs))))).run(
        [x, *[imported.params[n] for n in imported.param_names]])[2:]
    expected = torch.autograd.grad((want * torch.from_numpy(weights)).sum(), [xt, *pt])
    for a, b in zip(grads, expected):
        np.testing.assert_allclose(a, b.numpy(), rtol=10 * tol, atol=10 * tol)
    return imported


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization_equals_onnxruntime_and_torch_with_gradients(axis):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    normalised = x.shape[axis:] if axis > 0 else x.shape[axis:]
    scale = rng.standard_normal(normalised).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-3)
    _check(_model(node, x, 23, [("scale", scale)]), x,
           lambda a, s: torch.nn.functional.rms_norm(a, tuple(normalised), s, eps=1e-3))


def test_rms_normalization_of_float16_computes_in_float32_as_onnxruntime():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 8)) * 30).astype(np.float16)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"])
    model = _model(node, x, 23, [("scale", rng.standard_normal(8).astype(np.float16))])
    got = frame_onnx.load(model).run([x])[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ort.InferenceSession(model.SerializeToString()).run(
        None, {"x": x})[0].astype(np.float32), rtol=2e-3, atol=2e-3)


def test_rms_normalization_with_another_stash_type_is_listed_as_unsupported():
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], stash_type=11)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(frame_onnx.UnsupportedModelError, match="stash_type 11"):
        frame_onnx.load(_model(node, x, 23, [("scale", np.ones(3, np.float32))]))


@pytest.mark.parametrize("alpha", [1.0, 1.7])
def test_swish_equals_onnxruntime_and_torch_with_gradients(alpha):
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32) * 4
    node = helper.make_node("Swish", ["x"], ["y"], alpha=alpha)
    _check(_model(node, x, 24), x, lambda a: a * torch.sigmoid(alpha * a))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalization_equals_onnxruntime_and_torch_with_gradients(p, axis):
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)
    _check(_model(node, x, 22), x, lambda a: torch.nn.functional.normalize(a, p=p, dim=axis, eps=0.0))


def test_lp_normalization_keeps_a_zero_vector_zero_as_onnxruntime_with_finite_gradients():
    x = np.array([[0, 0, 0], [1, -2, 2]], np.float32)
    for p in (1, 2):
        model = _model(helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=p), x, 22)
        imported = frame_onnx.load(model)
        got = imported.run([x])[0]
        np.testing.assert_array_equal(got, ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0])
        graph, loss = fc.extend_graph(imported.graph, lambda *v: ops.sum(v[-1]))
        (gx,) = fc.compile(fc.build_backward_graph(graph, loss, [0])).run([x])[2:]
        np.testing.assert_array_equal(gx[0], [1, 1, 1])  # the zero row divided by 1: the identity
        assert np.isfinite(gx).all()
    with pytest.raises(frame_onnx.OnnxFormatError, match="p = 3"):
        frame_onnx.load(_model(helper.make_node("LpNormalization", ["x"], ["y"], p=3), x, 22))


def test_the_audit_reports_the_three_closed_to_second_order():
    x = np.ones((2, 4), np.float32)
    nodes = [helper.make_node("RMSNormalization", ["x", "scale"], ["a"]), helper.make_node("Swish", ["a"], ["b"]),
             helper.make_node("LpNormalization", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              initializer=[numpy_helper.from_array(np.ones(4, np.float32), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    report = frame_onnx.audit(model, order=2)
    rows = {n["op_type"]: n for n in report["nodes"]}
    for op in ("RMSNormalization", "Swish", "LpNormalization"):
        assert rows[op]["status"] == "imported" and rows[op]["order"] == "closed", rows[op]
    assert frame_onnx.load(model).run([x])[0].shape == (2, 4)


LOSS_CASES = [  # (scores shape, ONNX attributes, class weights)
    ((5, 4), {}, False),
    ((5, 4), {"reduction": "sum"}, True),
    ((3, 4, 6), {"reduction": "mean", "ignore_index": 2}, True),
    ((3, 4, 2, 3), {"reduction": "none", "ignore_index": -100}, False),
    ((6, 3), {"ignore_index": 1}, False),
]


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
@pytest.mark.parametrize("shape, attrs, weighted", LOSS_CASES, ids=[str(c[1]) for c in LOSS_CASES])
def test_losses_equal_onnxruntime_and_torch_with_gradients(op, shape, attrs, weighted):
    rng = np.random.default_rng(6)
    scores = rng.standard_normal(shape).astype(np.float32)
    if op == "NegativeLogLikelihoodLoss":
        scores = torch.log_softmax(torch.from_numpy(scores), 1).numpy()
    labels = rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)
    if "ignore_index" in attrs:
        labels.flat[::3] = attrs["ignore_index"]
    weight = rng.uniform(0.5, 2, shape[1]).astype(np.float32) if weighted else None
    inputs = ["x", "t"] + (["w"] if weighted else [])
    out_shape = list(labels.shape) if attrs.get("reduction") == "none" else []
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
         helper.make_tensor_value_info("t", TensorProto.INT64, list(labels.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=[numpy_helper.from_array(weight, "w")] if weighted else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    imported = frame_onnx.load(model)
    got = imported.run([scores, labels])[0]
    np.testing.assert_allclose(got, ort.InferenceSession(model.SerializeToString()).run(
        None, {"x": scores, "t": labels})[0], rtol=1e-5, atol=1e-6)
    xt = torch.tensor(scores, requires_grad=True)
    fn = torch.nn.functional.cross_entropy if op == "SoftmaxCrossEntropyLoss" else torch.nn.functional.nll_loss
    want = fn(xt, torch.from_numpy(labels), weight=None if weight is None else torch.from_numpy(weight),
              ignore_index=attrs.get("ignore_index", -100), reduction=attrs.get("reduction", "mean"))
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    seed = np.random.default_rng(7).standard_normal(got.shape).astype(np.float32)
    g, loss = fc.extend_graph(imported.graph, lambda *v: ops.sum(v[-1] * seed))
    gx = fc.compile(fc.build_backward_graph(g, loss, [0])).run([scores, labels, *imported.params.values()])[2]
    (tx,) = torch.autograd.grad((want * torch.from_numpy(seed)).sum(), [xt])
    np.testing.assert_allclose(gx, tx.numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_cross_entropy_gives_its_log_probabilities_as_the_second_output():
    scores = np.random.default_rng(8).standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2], np.int64)
    graph = helper.make_graph(
        [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "logp"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("logp", TensorProto.FLOAT, [4, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    got = frame_onnx.load(model).run([scores, labels])
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": scores, "t": labels})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


SCATTER_CASES = [  # (data shape, indices shape, axis, reduction, indices known while importing)
    ((4, 5), (2, 5), 0, "none", True),
    ((4, 5), (4, 3), 1, "add", True),
    ((3, 4, 5), (3, 2, 5), -2, "add", False),
    ((3, 4, 5), (2, 4, 3), 2, "none", False),
]


@pytest.mark.parametrize("shape, ishape, axis, reduction, known", SCATTER_CASES, ids=[str(c) for c in SCATTER_CASES])
def test_scatter_elements_equals_onnxruntime_and_torch_with_gradients(shape, ishape, axis, reduction, known):
    rng = np.random.default_rng(9)
    data = rng.standard_normal(shape).astype(np.float32)
    updates = rng.standard_normal(ishape).astype(np.float32)
    n = shape[axis]
    if reduction == "none":  # distinct positions along the axis (ONNX leaves duplicates undefined)
        idx = np.moveaxis(np.argsort(rng.random(np.moveaxis(np.empty(shape), axis, -1).shape), axis=-1), -1, axis)
        idx = np.take(idx, np.arange(ishape[axis]), axis=axis)
        idx = idx[tuple(slice(0, k) for k in ishape)]
    else:
        idx = rng.integers(0, n, ishape)
    idx = idx.astype(np.int64)
    signed = np.where(rng.random(ishape) < 0.5, idx - n, idx)  # negative indices count from the end
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=reduction)
    inputs = [helper.make_tensor_value_info("d", TensorProto.FLOAT, list(shape)),
              helper.make_tensor_value_info("u", TensorProto.FLOAT, list(ishape))]
    if not known:
        inputs.insert(1, helper.make_tensor_value_info("i", TensorProto.INT64, list(ishape)))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                              initializer=[numpy_helper.from_array(signed, "i")] if known else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    feeds = {"d": data, "u": updates, **({} if known else {"i": signed})}
    args = [data, updates] if known else [data, signed, updates]
    imported = frame_onnx.load(model)
    got = imported.run(args)[0]
    np.testing.assert_allclose(got, ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0],
                               rtol=1e-6, atol=1e-6)
    dt, ut = torch.tensor(data, requires_grad=True), torch.tensor(updates, requires_grad=True)
    it = torch.from_numpy(idx)
    want = torch.scatter_add(dt, axis, it, ut) if reduction == "add" else torch.scatter(dt, axis, it, ut)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-6, atol=1e-6)
    seed = rng.standard_normal(shape).astype(np.float32)
    g, loss = fc.extend_graph(imported.graph, lambda *v: ops.sum(v[-1] * seed))
    float_inputs = [k for k, v in enumerate(g.inputs) if v.type.dtype.name == "float32"]
    grads = fc.compile(fc.build_backward_graph(g, loss, float_inputs)).run(args)[2:]
    for a, b in zip(grads, torch.autograd.grad((want * torch.from_numpy(seed)).sum(), [dt, ut])):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-6)


def test_scatter_elements_with_a_product_reduction_or_indices_out_of_range_is_named():
    def model(reduction, idx):
        node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction=reduction, name="put")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 2]),
                                                helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                                  initializer=[numpy_helper.from_array(np.array([idx], np.int64), "i")])
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        made.ir_version = 10
        return made

    with pytest.raises(frame_onnx.UnsupportedModelError, match="ScatterElements with reduction='mul'"):
        frame_onnx.load(model("mul", [0, 1]))
    with pytest.raises(frame_onnx.OnnxFormatError, match=r"node 'put' \(ScatterElements\).*indices outside -3..2"):
        frame_onnx.load(model("none", [0, 3]))


ATTENTION_CASES = [  # (Q, K, V shapes, attributes, mask: None, "bool" or "float")
    ((2, 4, 5, 8), (2, 4, 5, 8), (2, 4, 5, 8), {"is_causal": 1}, None),
    ((2, 4, 3, 8), (2, 2, 6, 8), (2, 2, 6, 4), {"scale": 0.3}, "bool"),              # grouped heads, cross
    ((1, 2, 4, 6), (1, 1, 4, 6), (1, 1, 4, 6), {"is_causal": 1}, "float"),          # one key/value head
    ((2, 5, 12), (2, 7, 6), (2, 7, 6), {"q_num_heads": 4, "kv_num_heads": 2}, "bool"),  # 3-D inputs
    ((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8), {"softcap": 2.0, "is_causal": 1}, None),
]


@pytest.mark.parametrize("shapes_q, shapes_k, shapes_v, attrs, mask", ATTENTION_CASES,
                         ids=[f"{c[3]}-{c[4]}" for c in ATTENTION_CASES])
def test_attention_equals_onnxruntime_and_torch_with_gradients(shapes_q, shapes_k, shapes_v, attrs, mask):
    rng = np.random.default_rng(10)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in (shapes_q, shapes_k, shapes_v))
    rank = len(shapes_q)
    length, keys = (shapes_q[-2], shapes_k[-2]) if rank == 4 else (shapes_q[1], shapes_k[1])
    feeds = {"q": q, "k": k, "v": v}
    if mask == "bool":
        feeds["m"] = rng.random((length, keys)) < 0.7
        feeds["m"][:, 0] = True  # every query attends to something
    elif mask == "float":
        feeds["m"] = rng.standard_normal((length, keys)).astype(np.float32)
    names = list(feeds)
    if rank == 4:
        out = [shapes_q[0], shapes_q[1], length, shapes_v[-1]]
    else:
        out = [shapes_q[0], length, attrs["q_num_heads"] * shapes_v[-1] // attrs["kv_num_heads"]]
    node = helper.make_node("Attention", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                                          list(a.shape)) for n, a in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    imported = frame_onnx.load(model)
    got = imported.run(list(feeds.values()))[0]
    np.testing.assert_allclose(got, ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-5)
    if "softcap" in attrs:  # torch's scaled_dot_product_attention has no softcap
        return
    ts = [torch.tensor(feeds[n], requires_grad=True) for n in ("q", "k", "v")]

    def heads(t, h):
        return t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2) if rank == 3 else t

    hq, hk = (attrs["q_num_heads"], attrs["kv_num_heads"]) if rank == 3 else (shapes_q[1], shapes_k[1])
    tm = None if mask is None else torch.from_numpy(feeds["m"])
    want = torch.nn.functional.scaled_dot_product_attention(
        heads(ts[0], hq), heads(ts[1], hk), heads(ts[2], hk), attn_mask=tm, is_causal=bool(attrs.get("is_causal")),
        scale=attrs.get("scale"), enable_gqa=hq != hk)
    if rank == 3:
        want = want.transpose(1, 2).reshape(got.shape)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    seed = rng.standard_normal(got.shape).astype(np.float32)
    g, loss = fc.extend_graph(imported.graph, lambda *t: ops.sum(t[-1] * seed))
    grads = fc.compile(fc.build_backward_graph(g, loss, [0, 1, 2])).run(list(feeds.values()))[2:]
    for a, b in zip(grads, torch.autograd.grad((want * torch.from_numpy(seed)).sum(), ts)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5)


def test_attention_with_a_cache_is_listed_as_unsupported_and_a_fully_masked_row_is_zero():
    q = np.ones((1, 1, 2, 4), np.float32)
    cache = helper.make_node("Attention", ["q", "q", "q", "", "q", "q"], ["y"])
    graph = helper.make_graph([cache], "g", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 1, 2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    with pytest.raises(frame_onnx.UnsupportedModelError, match="key/value cache"):
        frame_onnx.load(model)
    masked = helper.make_node("Attention", ["q", "q", "q", "m"], ["y"])
    graph = helper.make_graph([masked], "g", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 1, 2, 4]),
                                              helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    imported = frame_onnx.load(model)
    m = np.array([[False, False], [True, False]])
    y = imported.run([q, m])[0]
    np.testing.assert_array_equal(y[0, 0, 0], 0)  # no key to attend to
    np.testing.assert_array_equal(y[0, 0, 1], 1)
    g, loss = fc.extend_graph(imported.graph, lambda *t: ops.sum(t[-1]))
    (gq,) = fc.compile(fc.build_backward_graph(g, loss, [0])).run([q, m])[2:]
    assert np.isfinite(gq).all()
