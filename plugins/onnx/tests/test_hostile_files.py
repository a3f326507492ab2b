"""Hostile files: what a model declares must not make the importer allocate it, read outside the model's folder,
or fail with anything but a named error."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import frame_core as fc
import frame_onnx
from frame_onnx import ExternalDataError, OnnxFormatError


def _model(nodes, inputs, outputs, inits=(), sparse=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits), sparse_initializer=list(sparse))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _tensor(name, dims, raw=None, floats=None, elem=TensorProto.FLOAT):
    """A TensorProto as a hostile writer makes it (onnx.helper would refuse the mismatches)."""
    t = TensorProto(name=name, data_type=elem, dims=dims)
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    return t


def _add_w(w, shape=(3,)):
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", list(shape))], [_vi("y", list(shape))], [w])


@pytest.mark.parametrize("tensor, message", [
    (_tensor("w", [2**40], raw=b""), "declares 1099511627776 elements, so 4398046511104 bytes of raw_data, but holds 0"),
    (_tensor("w", [3], raw=b"\0" * 8), "so 12 bytes of raw_data, but holds 8"),
    (_tensor("w", [3], raw=b"\0" * 16), "so 12 bytes of raw_data, but holds 16"),
    (_tensor("w", [3], floats=[1.0, 2.0]), "so 3 entries of float_data, but holds 2"),
    (_tensor("w", [-3], raw=b""), "has a negative dimension"),
    (helper.make_tensor("w", TensorProto.STRING, [3], [b"a", b"b", b"c"]), "holds strings"),
])
def test_a_tensor_whose_data_does_not_match_its_dims_is_refused_before_decoding(tensor, message):
    with pytest.raises(OnnxFormatError, match=message):
        frame_onnx.load(_add_w(tensor).SerializeToString())


def test_a_constant_node_with_huge_dims_and_no_data_is_refused():
    const = helper.make_node("Constant", [], ["w"], value=_tensor("c", [2**20, 2**20], raw=b""))
    model = _model([const, helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [1])], [_vi("y", [None, None])])
    with pytest.raises(OnnxFormatError, match="tensor 'c'.*declares 1099511627776 elements"):
        frame_onnx.load(model.SerializeToString())


def test_negative_input_dims_and_sparse_initializers_are_named():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [-3, 2])], [_vi("y", [-3, 2])])
    with pytest.raises(OnnxFormatError, match="graph input 'x' declares size -3 for axis 0"):
        frame_onnx.load(model.SerializeToString())
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0], np.float32), "w"),
                                       numpy_helper.from_array(np.array([1], np.int64), "i"), [2**31, 2**31])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [3])], [_vi("y", [3])], sparse=[sparse])
    with pytest.raises(OnnxFormatError, match=r"sparse initializers \('w'\)"):
        frame_onnx.load(model.SerializeToString())


def _i64(name, value):
    return numpy_helper.from_array(np.asarray(value, np.int64), name)


@pytest.mark.parametrize("node, inits, want", [
    (helper.make_node("ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])),
     [_i64("s", [100000, 100000])], "full"),
    (helper.make_node("Range", ["a", "b", "d"], ["y"]), [_i64("a", 0), _i64("b", 2**40), _i64("d", 1)], "arange"),
    (helper.make_node("Tile", ["t", "r"], ["y"]), [_i64("t", [1, 2]), _i64("r", [2**36])], "broadcast_to"),
    (helper.make_node("Expand", ["t", "s"], ["y"]), [_i64("t", [1, 2]), _i64("s", [2**30, 2])], "broadcast_to"),
])
def test_known_values_that_would_be_huge_stay_in_the_graph_instead_of_being_allocated(node, inits, want):
    """A few bytes declaring a 40 GB ConstantOfShape (or an 8 TB Range, a Tile of 2**36 copies) are not computed
    while importing (the reference evaluator would allocate them): they become frame nodes, which cost nothing
    until run, and a Tile is a fixed number of nodes whatever its repeats."""
    rank = 1 if node.op_type in ("Range", "Tile") else 2
    out = _vi("y", [None] * rank, TensorProto.INT64 if want != "full" else TensorProto.FLOAT)
    model = _model([node], [], [out], inits)
    imported = frame_onnx.load(model.SerializeToString())
    assert want in {n.op for n in imported.graph.nodes} and len(imported.graph.nodes) < 10


def test_a_small_tile_still_tiles():
    model = _model([helper.make_node("Tile", ["x", "r"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [4, 9])],
                   [_i64("r", [2, 3])])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(frame_onnx.load(model.SerializeToString()).run([x])[0], np.tile(x, (2, 3)))


def test_a_loop_of_2_to_the_62_steps_with_per_step_outputs_is_a_named_error():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cin"], ["cout"]), helper.make_node("Add", ["s", "x"], ["s2"]),
         helper.make_node("Identity", ["s2"], ["row"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cin", [], TensorProto.BOOL), _vi("s", [2])],
        [_vi("cout", [], TensorProto.BOOL), _vi("s2", [2]), _vi("row", [2])])
    model = _model([helper.make_node("Loop", ["M", "c", "x"], ["y", "ys"], body=body)], [_vi("x", [2])],
                   [_vi("y", [2]), _vi("ys", [None, 2])],
                   [_i64("M", 2**62), numpy_helper.from_array(np.array(True), "c")])
    with pytest.raises(fc.FrameError, match="4611686018427387904"):
        frame_onnx.load(model.SerializeToString())


def _varint(n):
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


def _field(number, payload):  # a length-delimited protobuf field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_a_depth_bomb_of_nested_bodies_is_refused_by_the_parser():
    """If inside If, 500 deep, written as raw protobuf (onnx.helper cannot build it): protobuf's nesting limit
    refuses it while parsing, before anything walks it."""
    out = _vi("o", [2]).SerializeToString()
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "leaf", [], [_vi("o", [2])])
    body = graph.SerializeToString()
    for _ in range(500):
        attr = _field(1, b"then_branch") + _varint(20 << 3) + _varint(onnx.AttributeProto.GRAPH) + _field(6, body)
        node = _field(1, b"c") + _field(2, b"o") + _field(4, b"If") + _field(5, attr)
        body = _field(1, node) + _field(2, b"b") + _field(12, out)
    shell = _model([], [_vi("x", [2]), _vi("c", [], TensorProto.BOOL)], [_vi("o", [2])])
    shell.graph.ClearField("name")
    data = shell.SerializeToString() + _field(7, body)  # the graph field merged into the model's
    with pytest.raises(OnnxFormatError, match="not an ONNX model"):
        frame_onnx.load(data)


def _external_model(folder, location, data=np.arange(3, dtype=np.float32)):
    w = numpy_helper.from_array(data, "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("length", str(data.nbytes))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    path = folder / "model.onnx"
    path.write_bytes(_add_w(w).SerializeToString())
    return path


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(np.arange(3, dtype=np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").symlink_to(outside)
    (folder / "sub").symlink_to(tmp_path, target_is_directory=True)
    for location in ("w.bin", "sub/secret.bin"):
        with pytest.raises(ExternalDataError, match="leads out of the model's folder"):
            frame_onnx.load(_external_model(folder, location))


def test_external_data_reads_only_what_the_dims_need(tmp_path):
    """A length that disagrees with the dims is refused; a missing length reads the dims' bytes, not the file."""
    (tmp_path / "w.bin").write_bytes(np.arange(1000, dtype=np.float32).tobytes())
    path = _external_model(tmp_path, "w.bin")
    model = onnx.load(str(path), load_external_data=False)
    lengths = [e for e in model.graph.initializer[0].external_data if e.key == "length"]
    lengths[0].value = "4000"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ExternalDataError, match="length 4000 bytes, but the tensor's dims and type need 12"):
        frame_onnx.load(path)
    model.graph.initializer[0].external_data.remove(lengths[0])
    path.write_bytes(model.SerializeToString())
    np.testing.assert_array_equal(frame_onnx.load(path).params["w"], [0, 1, 2])
    os.truncate(tmp_path / "w.bin", 8)
    with pytest.raises(ExternalDataError, match="holds 8 bytes from offset 0, the model expects 12"):
        frame_onnx.load(path)


@pytest.mark.parametrize("node, inputs, inits, message", [
    (helper.make_node("Trilu", ["x"], ["y"]), [_vi("x", [3])], [], "Trilu takes matrices"),
    (helper.make_node("Gemm", ["x", "x"], ["y"]), [_vi("x", [3])], [], "A and B must be matrices"),
    (helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=4), [_vi("x", [2, 1, 3])],
     [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in (("w", (1, 8, 3)), ("r", (1, 16, 4)))],
     r"W is \[1, 8, 3\], but 1 direction\(s\) of 4 gates of hidden_size 4 over 3 input features need \[1, 16, 3\]"),
])
def test_nodes_the_standard_forbids_are_named_not_a_traceback(node, inputs, inits, message):
    model = _model([node], inputs, [_vi("y", [None])], inits)
    with pytest.raises(OnnxFormatError, match=message):
        frame_onnx.load(model.SerializeToString())


@pytest.mark.parametrize("depth, message", [(50, "checker cannot read the model"), (200, "more than 64 deep")])
def test_a_depth_bomb_built_in_memory_is_a_named_error(depth, message):
    """A proto built in memory is not bounded by the parser: 200 levels are refused before any walk that
    recurses, 50 (past the checker's C++ parser's limit) by the checker, as a named error."""
    model = _model([], [_vi("x", [2]), _vi("c", [], TensorProto.BOOL)], [_vi("o", [2])])
    graph = model.graph
    for _ in range(depth):
        node = graph.node.add(op_type="If", input=["c"], output=["o"])
        other = node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH)
        other.g.CopyFrom(helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "e", [], [_vi("o", [2])]))
        then = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        graph = then.g
        graph.name = "t"
        graph.output.append(_vi("o", [2]))
    graph.node.append(helper.make_node("Identity", ["x"], ["o"]))
    with pytest.raises(OnnxFormatError, match=message):
        frame_onnx.load(model)
