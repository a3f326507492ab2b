"""Import of the configurations the last pass left out: ceil_mode and dilated pools, LSTM peepholes and cell
clipping, linear Resize, Einsum, TopK, ReduceProd, Hardmax and GroupNormalization. Each against ONNX Runtime
(and torch where torch.onnx emits it); gradients against torch autograd or central differences (in float64,
``frame_core.testing.check_gradients``)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_core as fc
from frame_core import ops
from frame_core.testing import check_gradients
import frame_onnx

ort = pytest.importorskip("onnxruntime")
F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(7)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _w(*shape):
    return (rng.standard_normal(shape) * 0.7).astype(np.float32)


def _const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "case", [_vi(n, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype))
                                              for n, a in inputs], outputs,
                              initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, dict(inputs)


def _same_as_onnxruntime(model, feeds, rtol=1e-5, atol=1e-5):
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    imported = frame_onnx.load(model)
    got = imported.run([feeds[n] for n in imported.input_names])
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return imported, got


def _gradients_match_central_differences(imported, feeds, wrt=None):
    args = imported.arguments([feeds[n] for n in imported.input_names])
    check_gradients(imported.graph, args, wrt, directions=3).assert_ok()


def _torch_onnx(net, x, opset=17):
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("torch").onnx.export(net, (x,), buffer, dynamo=False, input_names=["x"],
                                                 output_names=["y"], opset_version=opset)
    return buffer.getvalue()


def _equals_torch_with_input_gradient(net, x, data):
    torch = pytest.importorskip("torch")
    imported = frame_onnx.load(data)
    got = imported.run([x.numpy()])[0]
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, ort.InferenceSession(data).run(None, {"x": x.numpy()})[0], rtol=1e-5, atol=1e-5)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(ops.square(xs[-1])))
    gx = fc.compile(fc.build_backward_graph(graph, loss, [0])).run(imported.arguments([x.numpy()]))[-1]
    xt = x.clone().requires_grad_(True)
    (net(xt) ** 2).sum().backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    return imported


# -- pools: ceil_mode and dilations ------------------------------------------------------------------------------
@pytest.mark.parametrize("op, rank, ceil, dilation, pad, include", [
    ("MaxPool", 2, 1, 1, 1, 0), ("MaxPool", 2, 0, 2, 1, 0), ("MaxPool", 1, 1, 2, 0, 0), ("MaxPool", 3, 1, 2, 1, 0),
    ("AveragePool", 2, 1, 1, 1, 1), ("AveragePool", 2, 1, 1, 1, 0), ("AveragePool", 1, 1, 1, 0, 1),
    ("AveragePool", 2, 1, 2, 1, 1), ("AveragePool", 3, 1, 1, 1, 0), ("AveragePool", 1, 0, 1, 1, 0)])
def test_ceil_mode_and_dilated_pools_equal_onnxruntime(op, rank, ceil, dilation, pad, include):
    """Sizes where ceil_mode adds a window, and where the added window would start in the trailing padding (ONNX
    Runtime and torch drop it; ONNX's shape inference keeps it, so the output is declared without sizes)."""
    shape = [2, 3, 7, 6, 5][:2 + rank]
    attrs = dict(kernel_shape=[3, 2, 2][:rank], strides=[2, 2, 3][:rank], ceil_mode=ceil, dilations=[dilation] * rank,
                 pads=[pad] * (2 * rank))
    if op == "AveragePool":
        attrs["count_include_pad"] = include
    model, feeds = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", _w(*shape))],
                          [_vi("y", [None] * len(shape))], opset=19)
    imported, _ = _same_as_onnxruntime(model, feeds)
    if rank == 2:
        _gradients_match_central_differences(imported, feeds)


def test_torch_ceil_mode_and_dilated_pools_equal_torch_and_its_gradient():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Net(torch.nn.Module):
        def forward(self, x):
            a = torch.nn.functional.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True)
            b = torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True)
            c = torch.nn.functional.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False)
            return a.sum() + (b * b).sum() + c.sum((2, 3))
    net = Net()
    x = torch.randn(2, 3, 8, 7)
    _equals_torch_with_input_gradient(net, x, _torch_onnx(net, x))


# -- LSTM peepholes, input_forget, clip ---------------------------------------------------------------------------
def _lstm(direction, clip=None, peepholes=True, input_forget=0, op="LSTM"):
    t, b, i, h = 4, 3, 2, 5
    d = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    names = ["x", "w", "r", "b", "", "h0"] + (["c0"] if op == "LSTM" else [])
    inits = [("w", _w(d, gates * h, i)), ("r", _w(d, gates * h, h)), ("b", _w(d, 2 * gates * h)), ("h0", _w(d, b, h))]
    if op == "LSTM":
        inits.append(("c0", _w(d, b, h)))
    if peepholes:
        names.append("p")
        inits.append(("p", _w(d, 3 * h)))
    attrs = dict(hidden_size=h, direction=direction, input_forget=input_forget) if op == "LSTM" else \
        dict(hidden_size=h, direction=direction)
    if clip is not None:
        attrs["clip"] = clip
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    return _model([helper.make_node(op, names, outs, **attrs)], [("x", _w(t, b, i) * 3)],
                  [_vi("y", [t, d, b, h])] + [_vi(n, [d, b, h]) for n in outs[1:]], inits)


@pytest.mark.parametrize("direction, clip, input_forget", [("forward", None, 0), ("reverse", 0.8, 0),
                                                            ("bidirectional", 0.8, 1), ("bidirectional", None, 0)])
def test_lstm_peepholes_clip_and_coupled_gates_equal_onnxruntime(direction, clip, input_forget):
    """Peepholes read the previous cell (input and forget gates) and the new one (output gate); clip bounds the
    gates' inputs, not the cell state (ONNX Runtime's rule)."""
    _same_as_onnxruntime(*_lstm(direction, clip, input_forget=input_forget))


@pytest.mark.parametrize("op", ["RNN", "GRU"])
def test_rnn_and_gru_cell_clipping_equals_onnxruntime(op):
    _same_as_onnxruntime(*_lstm("bidirectional", 0.5, peepholes=False, op=op))


def test_lstm_peephole_gradients_equal_central_differences():
    """(check_gradients runs the graph in float64: ONNX Runtime has no float64 LSTM)"""
    model, feeds = _lstm("bidirectional", clip=2.0)
    imported, _ = _same_as_onnxruntime(model, feeds)
    _gradients_match_central_differences(imported, feeds, wrt=["x", "p", "r"])


# -- linear Resize --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transform, scales, sizes", [
    ("half_pixel", [1, 1, 2, 1.5], None), ("half_pixel", [1, 1, 0.5, 0.6], None), ("pytorch_half_pixel", None, [2, 3, 1, 9]),
    ("align_corners", [1, 1, 2, 1.5], None), ("align_corners", None, [2, 3, 1, 9]), ("asymmetric", [1, 1, 0.5, 0.6], None)])
def test_linear_resizing_equals_onnxruntime(transform, scales, sizes):
    given = _const("scales", np.array(scales, np.float32)) if scales else _const("sizes", np.array(sizes, np.int64))
    out = sizes or [int(np.floor(n * s)) for n, s in zip([2, 3, 4, 5], scales)]
    node = helper.make_node("Resize", ["x", "", "scales" if scales else "", "sizes" if sizes else ""], ["y"],
                            mode="linear", coordinate_transformation_mode=transform)
    model, feeds = _model([given, node], [("x", _w(2, 3, 4, 5))], [_vi("y", out)])
    imported, _ = _same_as_onnxruntime(model, feeds)
    if scales and scales[2] > 1:
        _gradients_match_central_differences(imported, feeds)


@pytest.mark.parametrize("align_corners", [False, True])
def test_torch_bilinear_and_trilinear_upsampling_equal_torch_and_its_gradient(align_corners):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):
            up = torch.nn.functional.interpolate(x, scale_factor=(2, 1.5), mode="bilinear", align_corners=align_corners)
            vol = torch.nn.functional.interpolate(x[:, None], size=(3, 5, 3), mode="trilinear",
                                                  align_corners=align_corners)
            return up.sum((2, 3)) + vol.sum((1, 3, 4)).mean(-1, keepdim=True)
    x = torch.randn(2, 3, 4, 5)
    _equals_torch_with_input_gradient(Net(), x, _torch_onnx(Net(), x))


# -- cubic Resize ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transform, scales, sizes, a, exclude", [
    ("half_pixel", [1, 1, 2, 1.5], None, -0.75, 0), ("half_pixel", [1, 1, 0.5, 0.6], None, -0.5, 0),
    ("pytorch_half_pixel", None, [2, 3, 1, 9], -0.75, 0), ("align_corners", [1, 1, 2, 1.5], None, -0.75, 0),
    ("asymmetric", [1, 1, 3, 0.6], None, -0.75, 1), ("half_pixel", [1, 1, 1.7, 2], None, -0.5, 1)])
def test_cubic_resizing_equals_onnxruntime(transform, scales, sizes, a, exclude):
    given = _const("scales", np.array(scales, np.float32)) if scales else _const("sizes", np.array(sizes, np.int64))
    out = sizes or [int(np.floor(n * s)) for n, s in zip([2, 3, 4, 5], scales)]
    node = helper.make_node("Resize", ["x", "", "scales" if scales else "", "sizes" if sizes else ""], ["y"],
                            mode="cubic", coordinate_transformation_mode=transform, cubic_coeff_a=a,
                            exclude_outside=exclude)
    model, feeds = _model([given, node], [("x", _w(2, 3, 4, 5))], [_vi("y", out)])
    imported, _ = _same_as_onnxruntime(model, feeds)
    if scales and scales[2] > 1:
        _gradients_match_central_differences(imported, feeds)


@pytest.mark.parametrize("align_corners", [False, True])
def test_torch_bicubic_upsampling_equals_torch_and_its_gradient(align_corners):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=(2, 1.5), mode="bicubic",
                                                   align_corners=align_corners)
    x = torch.randn(2, 3, 4, 5)
    _equals_torch_with_input_gradient(Net(), x, _torch_onnx(Net(), x))


def test_unsupported_resizes_are_refused_by_name_all_at_once():
    scales = _const("scales", np.array([1, 1, 0.5, 0.5], np.float32))
    nodes = [scales, helper.make_node("Resize", ["x", "", "scales"], ["a"], mode="cubic", name="smooth", antialias=1),
             helper.make_node("Resize", ["x", "", "scales"], ["b"], mode="linear", name="crop",
                              coordinate_transformation_mode="tf_crop_and_resize"),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model, _ = _model(nodes, [("x", _w(1, 1, 4, 4))], [_vi("y", [1, 1, 2, 2])])
    with pytest.raises(frame_onnx.UnsupportedModelError) as info:
        frame_onnx.load(model)
    text = str(info.value)
    assert "cubic downscaling with antialias=1" in text and "'smooth'" in text
    assert "coordinate_transformation_mode 'tf_crop_and_resize'" in text and "'crop'" in text


# -- Einsum ----------------------------------------------------------------------------------------------------------
EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ij->ji", [(3, 4)]),
           ("ij->", [(3, 4)]), ("ij,ij->ij", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]), ("bi,bi->b", [(3, 4), (3, 4)]),
           ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]), ("b...i->...b", [(2, 3, 4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
           ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]), ("bnd,dh->bnh", [(2, 3, 4), (4, 6)]),
           ("bij,jk->bik", [(1, 3, 4), (4, 5)]), ("ijk,k->ij", [(2, 3, 4), (4,)])]


@pytest.mark.parametrize("equation, shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_equals_onnxruntime_and_its_gradients_central_differences(equation, shapes):
    inputs = [(f"x{k}", _w(*s)) for k, s in enumerate(shapes)]
    want = np.einsum(equation, *[a for _, a in inputs])
    model, feeds = _model([helper.make_node("Einsum", [n for n, _ in inputs], ["y"], equation=equation)], inputs,
                          [_vi("y", list(want.shape))])
    imported, _ = _same_as_onnxruntime(model, feeds)
    assert not {n.op for n in imported.graph.nodes} - {"matmul", "transpose", "reshape", "sum", "mul", "expand_dims"}
    _gradients_match_central_differences(imported, feeds)


def test_torch_einsum_attention_equals_torch_and_its_gradient():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):
            scores = torch.einsum("bqd,bkd->bqk", x, x).softmax(-1)
            return torch.einsum("bqk,bkd->bqd", scores, x)
    x = torch.randn(2, 4, 3)
    _equals_torch_with_input_gradient(Net(), x, _torch_onnx(Net(), x))


DIAGONALS = [("ii->i", [(3, 3)]), ("ii->", [(4, 4)]), ("ii", [(4, 4)]), ("bii->bi", [(2, 3, 3)]), ("iij->ji", [(3, 3, 2)]),
             ("iii->i", [(3, 3, 3)]), ("ijji->ij", [(2, 3, 3, 2)]), ("ii,ij->j", [(3, 3), (3, 4)]),
             ("...ii->...i", [(2, 4, 4)]), ("bij,bjj->bi", [(2, 3, 4), (2, 4, 4)])]


@pytest.mark.parametrize("equation, shapes", DIAGONALS, ids=[e for e, _ in DIAGONALS])
def test_einsum_diagonals_and_traces_equal_onnxruntime_numpy_and_central_differences(equation, shapes):
    inputs = [(f"x{k}", _w(*s)) for k, s in enumerate(shapes)]
    want = np.einsum(equation, *[a for _, a in inputs])
    model, feeds = _model([helper.make_node("Einsum", [n for n, _ in inputs], ["y"], equation=equation)], inputs,
                          [_vi("y", list(want.shape))])
    _, got = _same_as_onnxruntime(model, feeds)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    _gradients_match_central_differences(frame_onnx.load(model), feeds)


def test_torch_trace_and_diagonal_einsums_equal_torch_and_their_gradient():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):
            gram = torch.einsum("bik,bjk->bij", x, x)
            return torch.einsum("bii->b", gram)[:, None] + torch.einsum("bii->bi", gram)
    x = torch.randn(2, 3, 4)
    _equals_torch_with_input_gradient(Net(), x, _torch_onnx(Net(), x))


def test_an_einsum_diagonal_of_unequal_axes_is_a_named_error():
    model, _ = _model([helper.make_node("Einsum", ["x"], ["y"], equation="ii->i", name="diag")], [("x", _w(3, 4))],
                      [_vi("y", [3])])
    with pytest.raises(frame_onnx.OnnxFormatError, match="index 'i' is repeated within one operand on axes of sizes 3 and 4"):
        frame_onnx.load(model)


# -- TopK, ReduceProd, Hardmax ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("k, axis", [(1, -1), (3, -1), (7, -1), (2, 0), (0, -1)])
def test_topk_equals_onnxruntime_ties_to_the_lower_index(largest, k, axis):
    x = _w(3, 7)
    x[0, 2] = x[0, 5]
    x[1, :3] = -np.inf
    x[2, 4] = np.inf
    shape = [3, k] if axis == -1 else [k, 7]
    model, feeds = _model([_const("k", np.array([k], np.int64)),
                           helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
                          [("x", x)], [_vi("v", shape), _vi("i", shape, I64)])
    _same_as_onnxruntime(model, feeds, rtol=0, atol=0)


def test_integer_topk_equals_onnxruntime():
    x = rng.integers(-3, 3, (3, 7)).astype(np.int64)
    model, feeds = _model([_const("k", np.array([4], np.int64)), helper.make_node("TopK", ["x", "k"], ["v", "i"])],
                          [("x", x)], [_vi("v", [3, 4], I64), _vi("i", [3, 4], I64)])
    _same_as_onnxruntime(model, feeds, rtol=0, atol=0)


def test_topk_values_gradient_is_scattered_to_the_picked_positions():
    torch = pytest.importorskip("torch")
    x = _w(4, 6)
    model, feeds = _model([_const("k", np.array([3], np.int64)), helper.make_node("TopK", ["x", "k"], ["v", "i"]),
                           helper.make_node("Mul", ["v", "v"], ["y"])], [("x", x)], [_vi("y", [4, 3])])
    imported, _ = _same_as_onnxruntime(model, feeds)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(xs[-1]))
    gx = fc.compile(fc.build_backward_graph(graph, loss, [0])).run([x])[-1]
    xt = torch.tensor(x, requires_grad=True)
    (xt.topk(3, dim=-1).values ** 2).sum().backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-6)
    _gradients_match_central_differences(imported, feeds)


@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([1, 3], 0), (None, 1), ([0, 2, 3], 1), ([2], 0)])
def test_reduce_prod_equals_onnxruntime_and_its_gradient_with_a_zero(axes, keepdims):
    x = (_w(2, 3, 5, 4) + 0.2).astype(np.float32)
    x[0, 1, 2, 3] = 0.0
    nodes = [_const("axes", np.array(axes, np.int64))] if axes is not None else []
    nodes.append(helper.make_node("ReduceProd", ["x", "axes"] if axes is not None else ["x"], ["y"], keepdims=keepdims))
    want = np.prod(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims))
    model, feeds = _model(nodes, [("x", x)], [_vi("y", list(want.shape))])
    imported, _ = _same_as_onnxruntime(model, feeds)
    if axes == [2]:  # the product of the other factors, where one of them is 0
        torch = pytest.importorskip("torch")
        graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(xs[-1]))
        gx = fc.compile(fc.build_backward_graph(graph, loss, [0])).run([x])[-1]
        xt = torch.tensor(x, requires_grad=True)
        xt.prod(2).sum().backward()
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
        assert gx[0, 1, 2, 3] != 0 and (gx[0, 1, [0, 1, 4], 3] == 0).all()


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_hardmax_equals_onnxruntime_first_maximum(axis):
    x = _w(2, 3, 4)
    x[0, 1, 1] = x[0, 1, 3] = x[1, 0, 0] = x[1, 2, 0] = 5.0
    model, feeds = _model([helper.make_node("Hardmax", ["x"], ["y"], axis=axis)], [("x", x)], [_vi("y", [2, 3, 4])])
    imported, _ = _same_as_onnxruntime(model, feeds, rtol=0, atol=0)
    graph, loss = fc.extend_graph(imported.graph, lambda *xs: ops.sum(xs[-1] * xs[0]))
    gx = fc.compile(fc.build_backward_graph(graph, loss, [0])).run([x])[-1]
    np.testing.assert_array_equal(gx, imported.run([x])[0])  # d(sum(hardmax(x) x))/dx: hardmax's own part is 0


# -- GroupNormalization -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset, groups, ops_nn", [(18, 2, True), (18, 1, False), (21, 2, False), (21, 6, True)])
def test_group_normalization_per_group_opset_18_per_channel_opset_21_equals_onnxruntime(opset, groups, ops_nn,
                                                                                         monkeypatch):
    from frame_onnx import rules_nn

    if not ops_nn:
        monkeypatch.setattr(rules_nn, "_have", lambda op: False)  # as if frame-ops-nn were not installed
    size = groups if opset < 21 else 6
    x = (_w(2, 6, 3, 4) * 3 + 1).astype(np.float32)
    model, feeds = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups,
                                            epsilon=1e-3)], [("x", x)], [_vi("y", [2, 6, 3, 4])],
                          [("s", _w(size)), ("b", _w(size))], opset=opset)
    imported, _ = _same_as_onnxruntime(model, feeds)
    assert ("group_norm" in {n.op for n in imported.graph.nodes}) == ops_nn
    if groups == 2:
        _gradients_match_central_differences(imported, feeds, wrt=["x", "s", "b"])


def test_group_normalization_with_opset_18_shaped_scales_at_opset_21_says_what_happened():
    model, _ = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
                      [("x", _w(1, 6, 2))], [_vi("y", [1, 6, 2])], [("s", _w(2)), ("b", _w(2))], opset=21)
    with pytest.raises(frame_onnx.OnnxFormatError, match=r"scale and bias must be \[6\].*version_converter"):
        frame_onnx.load(model)


# -- the audit ----------------------------------------------------------------------------------------------------------
def test_the_audit_reports_the_new_ops_with_their_frame_ops_and_orders():
    nodes = [_const("k", np.array([2], np.int64)), helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk"),
             helper.make_node("Einsum", ["v", "v"], ["e"], equation="ij,ik->jk", name="einsum"),
             helper.make_node("ReduceProd", ["e"], ["p"], keepdims=0, name="prod"),
             helper.make_node("Hardmax", ["x"], ["h"], name="hardmax"),
             helper.make_node("MaxPool", ["x4"], ["m"], kernel_shape=[2, 2], ceil_mode=1, dilations=[1, 2], name="pool"),
             helper.make_node("Resize", ["x4", "", "scales"], ["r"], mode="linear", name="crop",
                              coordinate_transformation_mode="tf_crop_and_resize")]
    model, _ = _model([_const("scales", np.array([1, 1, 2, 2], np.float32)), *nodes],
                      [("x", _w(3, 5)), ("x4", _w(1, 2, 5, 5))],
                      [_vi("p", []), _vi("i", [3, 2], I64), _vi("h", [3, 5]), _vi("m", [1, 2, 4, 3]), _vi("r", [1, 2, 10, 10])])
    report = frame_onnx.audit(model, order=2)
    rows = {n["node"]: n for n in report["nodes"]}
    assert rows["'topk'"]["status"] == "imported" and {"argmax", "where", "sum"} <= set(rows["'topk'"]["frame_ops"])
    assert rows["'einsum'"]["frame_ops"] == ["matmul", "transpose"] and rows["'einsum'"]["order"] == "closed"
    assert rows["'prod'"]["status"] == "imported" and "mul" in rows["'prod'"]["frame_ops"]
    assert rows["'hardmax'"]["status"] == "imported" and rows["'pool'"]["status"] == "imported"
    assert rows["'crop'"]["status"] == "unsupported" and "tf_crop_and_resize" in rows["'crop'"]["reason"]
    assert [f["node"] for f in report["findings"] if f["kind"] == "unsupported"] == ["'crop'"]
