"""Hand-built one-op models (onnx.helper), imported and run in frame, against ONNX Runtime: layers torch
exports differently or not at all (batch norm, LSTM/RNN, padded pools, strided convolutions), control flow
(If, Loop, Scan) and DFT."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_core as fc
from frame_core import ops
import frame_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _w(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def _case(nodes, inputs, outputs, inits=(), opset=18):
    """(model, feeds): inputs are (name, array) pairs."""
    graph = helper.make_graph(nodes, "case", [_vi(n, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype))
                                              for n, a in inputs], outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, dict(inputs)


def _node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def _scan_body():
    body = helper.make_graph(
        [_node("Add", ["s_in", "row"], ["s_out"]), _node("Mul", ["s_out", "row"], ["y_out"])], "body",
        [_vi("s_in", [3]), _vi("row", [3])], [_vi("s_out", [3]), _vi("y_out", [3])])
    return body


def _loop_body():
    # counts up while the state's sum stays below 6: a data-dependent exit
    nodes = [_node("Add", ["s_in", "one"], ["s_out"]), _node("ReduceSum", ["s_out"], ["total"], keepdims=0),
             _node("Less", ["total", "six"], ["cond_out"]), _node("Identity", ["s_out"], ["y_out"])]
    inits = [_init("one", np.float32(1.0)), _init("six", np.float32(6.0))]
    return helper.make_graph(nodes, "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                                             _vi("s_in", [2])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("s_out", [2]), _vi("y_out", [2])], inits)


def _branch(op):
    return helper.make_graph([_node(op, ["x"], ["out"])], op, [], [_vi("out", [4])])


CASES = {
    "batchnorm": lambda: _case([_node("BatchNormalization", ["x", "g", "b", "m", "v"], epsilon=1e-3)],
                               [("x", _w(2, 3, 4, 4))], [_vi("y", [2, 3, 4, 4])],
                               [_init("g", _w(3)), _init("b", _w(3)), _init("m", _w(3)),
                                _init("v", np.abs(_w(3)) + 0.5)]),
    "conv2d-stride-dilation": lambda: _case([_node("Conv", ["x", "w", "b"], strides=[2, 1], dilations=[1, 2],
                                                   pads=[1, 0, 1, 2])],
                                            [("x", _w(2, 3, 7, 7))], [_vi("y", [2, 4, 4, 7])],
                                            [_init("w", _w(4, 3, 3, 2)), _init("b", _w(4))]),
    "conv2d-same": lambda: _case([_node("Conv", ["x", "w"], auto_pad="SAME_UPPER")],
                                 [("x", _w(1, 2, 5, 5))], [_vi("y", [1, 3, 5, 5])], [_init("w", _w(3, 2, 2, 2))]),
    "avgpool2d-padded": lambda: _case([_node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1], count_include_pad=0)],
                                      [("x", _w(2, 2, 6, 6))], [_vi("y", [2, 2, 3, 3])]),
    "maxpool2d-strided": lambda: _case([_node("MaxPool", ["x"], kernel_shape=[2, 3], strides=[2, 1])],
                                       [("x", _w(1, 2, 6, 6))], [_vi("y", [1, 2, 3, 4])]),
    "global-pools": lambda: _case([_node("GlobalAveragePool", ["x"], ["a"]), _node("GlobalMaxPool", ["x"], ["m"]),
                                   _node("Add", ["a", "m"])], [("x", _w(2, 3, 4, 5))], [_vi("y", [2, 3, 1, 1])]),
    "lstm": lambda: _case([_node("LSTM", ["x", "w", "r", "b"], ["y", "h", "c"], hidden_size=4)],
                          [("x", _w(5, 2, 3))], [_vi("y", [5, 1, 2, 4]), _vi("h", [1, 2, 4]), _vi("c", [1, 2, 4])],
                          [_init("w", _w(1, 16, 3)), _init("r", _w(1, 16, 4)), _init("b", _w(1, 32))]),
    "rnn-reverse": lambda: _case([_node("RNN", ["x", "w", "r", "b", "", "h0"], ["y", "h"], hidden_size=3,
                                        direction="reverse")],
                                 [("x", _w(4, 2, 3))], [_vi("y", [4, 1, 2, 3]), _vi("h", [1, 2, 3])],
                                 [_init("w", _w(1, 3, 3)), _init("r", _w(1, 3, 3)), _init("b", _w(1, 6)),
                                  _init("h0", _w(1, 2, 3))]),
    "gru-reset-after": lambda: _case([_node("GRU", ["x", "w", "r", "b"], ["y", "h"], hidden_size=3)],
                                     [("x", _w(4, 2, 3))], [_vi("y", [4, 1, 2, 3]), _vi("h", [1, 2, 3])],
                                     [_init("w", _w(1, 9, 3)), _init("r", _w(1, 9, 3)), _init("b", _w(1, 18))]),
    "gemm": lambda: _case([_node("Gemm", ["a", "b", "c"], transA=1, transB=1, alpha=0.5, beta=2.0)],
                          [("a", _w(3, 2))], [_vi("y", [2, 4])], [_init("b", _w(4, 3)), _init("c", _w(4))]),
    "layernorm-axis": lambda: _case([_node("LayerNormalization", ["x", "s", "b"], axis=-2, epsilon=1e-4)],
                                    [("x", _w(2, 3, 4))], [_vi("y", [2, 3, 4])],
                                    [_init("s", _w(3, 4)), _init("b", _w(3, 4))]),
    "shapes": lambda: _case([_node("Split", ["x", "sp"], ["a", "b"], axis=1), _node("Tile", ["a", "rep"], ["t"]),
                             _node("Pad", ["b", "pads"], ["p"]), _node("Concat", ["t", "p"], ["c"], axis=1),
                             _node("Gather", ["c", "idx"], ["g"], axis=1), _node("Expand", ["g", "shape"], ["e"]),
                             _node("Transpose", ["e"], ["y"], perm=[2, 0, 1])],
                            [("x", _w(2, 5))], [_vi("y", [3, 2, 2])],
                            [_init("sp", np.array([2, 3], np.int64)), _init("rep", np.array([1, 2], np.int64)),
                             _init("pads", np.array([0, 1, 0, 0], np.int64)), _init("idx", np.array([-1, 0], np.int64)),
                             _init("shape", np.array([3, 1, 1], np.int64))]),
    "elementwise": lambda: _case([_node("LeakyRelu", ["x"], ["a"], alpha=0.2), _node("Elu", ["a"], ["b"]),
                                  _node("HardSigmoid", ["b"], ["c"]), _node("Clip", ["x", "lo", "hi"], ["d"]),
                                  _node("Softplus", ["d"], ["e"]), _node("Where", ["cond", "c", "e"], ["f"]),
                                  _node("CumSum", ["f", "ax"], ["g"], reverse=1), _node("Reciprocal", ["hi"], ["r"]),
                                  _node("Mul", ["g", "r"], ["h"]), _node("ReduceMean", ["h", "axes"], ["y"], keepdims=0)],
                                 [("x", _w(3, 4) * 4), ("cond", rng.random((3, 4)) > 0.5)], [_vi("y", [3])],
                                 [_init("lo", np.float32(-1)), _init("hi", np.float32(2)), _init("ax", np.int64(1)),
                                  _init("axes", np.array([1], np.int64))]),
    "erf-gelu": lambda: _case([_node("Erf", ["x"], ["a"]), _node("Gelu", ["a"], ["b"]),
                               _node("Gelu", ["b"], ["y"], approximate="tanh")],
                              [("x", _w(3, 4) * 3)], [_vi("y", [3, 4])], opset=20),
    "if": lambda: _case([_node("If", ["flag"], ["y"], then_branch=_branch("Relu"), else_branch=_branch("Neg"))],
                        [("flag", np.array(False)), ("x", _w(4))], [_vi("y", [4])]),
    "loop": lambda: _case([_node("Loop", ["m", "", "s0"], ["s", "ys"], body=_loop_body())],
                          [("s0", np.zeros(2, np.float32))], [_vi("s", [2]), _vi("ys", [None, 2])],
                          [_init("m", np.int64(5))]),
    "scan-reverse": lambda: _case([_node("Scan", ["s0", "xs"], ["s", "y"], body=_scan_body(), num_scan_inputs=1,
                                         scan_input_directions=[1])],
                                  [("s0", _w(3)), ("xs", _w(4, 3))], [_vi("s", [3]), _vi("y", [4, 3])]),
    "dft": lambda: _case([_node("Unsqueeze", ["x", "last"], ["xr"]), _node("DFT", ["xr"], ["half"], axis=1, onesided=1),
                          _node("DFT", ["half"], ["full"], axis=1), _node("DFT", ["full"], ["y"], axis=1, inverse=1)],
                         [("x", _w(2, 8))], [_vi("y", [2, 5, 2])], [_init("last", np.array([-1], np.int64))], opset=17),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_op_models_equal_onnxruntime(name):
    model, feeds = CASES[name]()
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    imported = frame_onnx.load(model)
    got = imported.run([feeds[n] for n in imported.input_names])
    if name == "loop":  # frame stacks max_trip rows (zeros after the exit), ONNX the rows of the steps run
        steps = expected[1].shape[0]
        assert steps == 3 and got[1].shape == (5, 2) and np.all(got[1][steps:] == 0)
        got[1] = got[1][:steps]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_lstm_parameter_gradients_match_finite_differences():
    """Directional derivatives of a loss through the imported LSTM (a frame scan) w.r.t. each parameter,
    against central differences (float32 model: a loose tolerance)."""
    model_proto, feeds = CASES["lstm"]()
    model = frame_onnx.load(model_proto)
    x = feeds["x"]
    params = dict(zip(model.param_names, model.flat_params()))
    graph, loss = fc.extend_graph(model.graph, lambda *xs: ops.sum(ops.square(xs[-3])) + ops.sum(xs[-1]))
    first = len(model.input_names)
    outs = fc.compile(fc.build_backward_graph(graph, loss, list(range(first, first + 3)))).run([x, *params.values()])
    f = fc.compile(graph)
    for k, name in enumerate(model.param_names):
        probe = rng.standard_normal(params[name].shape).astype(np.float32)
        h = np.float32(1e-2)
        shifted = [[a if n != name else a + sign * h * probe for n, a in params.items()] for sign in (1, -1)]
        numeric = (f.run([x, *shifted[0]])[loss] - f.run([x, *shifted[1]])[loss]) / (2 * h)
        analytic = float(np.sum(outs[-3 + k] * probe))
        assert abs(numeric - analytic) <= 1e-2 * max(1.0, abs(numeric)), (name, numeric, analytic)


def test_a_pack_imports_its_own_onnx_op_through_the_hook():
    class Plugin:
        @frame_onnx.hookimpl
        def frame_onnx_import_rules(self):
            def double_tanh(cx):
                if cx.attr("scale", "float", 2.0) <= 0:
                    raise frame_onnx.Unsupported("a scale of 0 or less")
                return ops.tanh(cx.input(0)) * cx.attr("scale", "float", 2.0)
            return {("com.example", "ScaledTanh"): double_tanh}

    def model(scale):
        node = helper.make_node("ScaledTanh", ["x"], ["y"], domain="com.example", scale=scale, name="st")
        graph = helper.make_graph([node], "g", [_vi("x", [3])], [_vi("y", [3])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)])
    x = np.array([0.1, -0.5, 2.0], np.float32)
    with pytest.raises(frame_onnx.UnsupportedModelError, match="ScaledTanh"):
        frame_onnx.load(model(3.0))
    plugin = Plugin()
    frame_onnx.register(plugin)
    try:
        np.testing.assert_allclose(frame_onnx.load(model(3.0)).run([x])[0], 3.0 * np.tanh(x), rtol=1e-6)
        with pytest.raises(frame_onnx.UnsupportedModelError, match="a scale of 0 or less"):
            frame_onnx.load(model(-1.0))
    finally:
        frame_onnx.unregister(plugin)


def test_audit_walks_into_bodies():
    report = frame_onnx.audit(CASES["loop"]()[0], order=3)
    assert report["ok"] and report["model"] == "<model 'case'>"
    loop = next(n for n in report["nodes"] if n["op_type"] == "Loop")
    assert loop["status"] == "imported" and "loop" in loop["frame_ops"] and loop["order"] == "closed"
    inner = [n for n in report["nodes"] if n["node"].startswith("#0.body > ")]
    assert {n["op_type"] for n in inner} == {"Add", "ReduceSum", "Less", "Identity"}
    assert "less" in next(n for n in inner if n["op_type"] == "Less")["frame_ops"]
    body = CASES["loop"]()[0]
    body.graph.node[0].attribute[0].g.node[0].op_type = "GridSample"  # Add -> GridSample (no rule) in the body
    report = frame_onnx.audit(body)
    assert not report["ok"] and {f["node"] for f in report["findings"]} == {"#0", "#0.body > #0"}
