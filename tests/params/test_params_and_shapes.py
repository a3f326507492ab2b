"""Named parameter trees, any-batch shapes, value_and_grad and checkpoints (docs/design-parameters-and-shapes.md)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.params import check_tree, flatten, trace_params, unflatten

rng = np.random.default_rng(0)


def _mlp_params(dtype=np.float64):
    return {"l1": {"w": rng.standard_normal((8, 16)).astype(dtype), "b": np.zeros(16, dtype)},
            "l2": {"w": rng.standard_normal((16, 1)).astype(dtype), "b": np.zeros(1, dtype)}}


def _mlp_loss(p, x, y):
    h = ops.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    return ops.mse_loss(h @ p["l2"]["w"] + p["l2"]["b"], y)


def _numpy_loss(p, x, y):
    h = np.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    return np.mean((h @ p["l2"]["w"] + p["l2"]["b"] - y) ** 2)


# -- trees ----------------------------------------------------------------------------------------
def test_flatten_names_leaves_by_path_in_sorted_key_order_and_round_trips():
    tree = {"enc": [{"w": np.ones(2)}, {"w": np.zeros(3)}], "b": np.arange(2)}
    names, leaves, treedef = flatten(tree)
    assert names == ["b", "enc.0.w", "enc.1.w"]
    back = unflatten(treedef, leaves)
    assert back.keys() == tree.keys() and back["enc"][1]["w"].shape == (3,)


def test_a_dotted_key_is_a_name_but_two_paths_with_one_name_are_refused():
    assert flatten({"fc1.w": np.ones(2), "fc2": {"w": np.ones(1)}})[0] == ["fc1.w", "fc2.w"]
    with pytest.raises(fc.ParameterError, match=r"both be named 'a\.b'"):
        flatten({"a.b": np.ones(2), "a": {"b": np.ones(1)}})


def test_trace_params_names_parameter_inputs_by_path_then_data_by_argument():
    g = trace_params(lambda p, x: x @ p["w"] + p["b"], {"w": "f32[3, 2]", "b": "f32[2]"}, "f32[5, 3]")
    assert [v.name for v in g.inputs] == ["b", "w", "x"]


def test_check_tree_lists_every_mismatch_at_once():
    expected = {"a": fc.TensorType("f32", (2,)), "b": fc.TensorType("f32", (3,)), "c": fc.TensorType("f32", ())}
    with pytest.raises(fc.ParameterError) as info:
        check_tree(expected, {"a": np.zeros(2, np.float64), "b": np.zeros(4, np.float32), "d": np.zeros(1)})
    text = str(info.value)
    assert "missing: c" in text and "not expected: d" in text
    assert "a: f32[2] expected, got float64[2]" in text and "b: f32[3] expected, got float32[4]" in text


# -- value_and_grad --------------------------------------------------------------------------------
def test_value_and_grad_returns_the_loss_and_a_gradient_tree_matching_finite_differences():
    params = _mlp_params()
    x, y = rng.standard_normal((12, 8)), rng.standard_normal((12, 1))
    loss, grads = fc.value_and_grad(_mlp_loss)(params, x, y)
    assert np.isclose(loss, _numpy_loss(params, x, y), rtol=1e-12)
    assert set(grads) == {"l1", "l2"} and grads["l1"]["w"].shape == (8, 16)
    eps = 1e-6
    for layer, name, index in (("l1", "w", (2, 5)), ("l1", "b", (3,)), ("l2", "w", (7, 0)), ("l2", "b", (0,))):
        up = {k: {kk: vv.copy() for kk, vv in v.items()} for k, v in params.items()}
        down = {k: {kk: vv.copy() for kk, vv in v.items()} for k, v in params.items()}
        up[layer][name][index] += eps
        down[layer][name][index] -= eps
        numeric = (_numpy_loss(up, x, y) - _numpy_loss(down, x, y)) / (2 * eps)
        assert np.isclose(grads[layer][name][index], numeric, rtol=1e-6, atol=1e-9)


def test_value_and_grad_runs_a_short_last_batch_from_the_same_trace():
    params = _mlp_params()
    step = fc.value_and_grad(_mlp_loss)
    x, y = rng.standard_normal((64, 8)), rng.standard_normal((64, 1))
    step(params, x, y)
    loss, grads = step(params, x[:29], y[:29])
    assert step.traces == 1
    assert np.isclose(loss, _numpy_loss(params, x[:29], y[:29]), rtol=1e-12)
    full = fc.value_and_grad(_mlp_loss)(params, x[:29], y[:29])[1]
    np.testing.assert_allclose(grads["l1"]["w"], full["l1"]["w"], rtol=1e-12)


def test_value_and_grad_with_aux_returns_the_aux_tree():
    def loss_fn(p, x):
        out = x @ p["w"]
        return ops.mean(out * out), {"out": out}
    (loss, aux), grads = fc.value_and_grad(loss_fn, has_aux=True)({"w": np.ones((3, 2))}, np.ones((4, 3)))
    assert loss == 9.0 and aux["out"].shape == (4, 2) and grads["w"].shape == (3, 2)


def test_gradients_of_integer_parameters_are_refused_with_what_to_do():
    with pytest.raises(fc.ParameterError, match="not floating point.*data arguments"):
        fc.grad(lambda p, x: ops.sum(x))({"n": np.arange(3)}, np.ones(3))


# -- any batch size ---------------------------------------------------------------------------------
def test_a_compiled_graph_runs_other_batch_sizes_and_caches_each_signature():
    g = fc.trace(lambda x, w: [ops.mean(ops.tanh(x @ w)), x[-1], x[2:]], "f32[64, 8]", "f32[8, 4]")
    exe = fc.compile(g, dynamic_shapes=True)
    w = np.ones((8, 4), np.float32)
    for batch in (128, 29, 128):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        mean, last, tail = exe.run([x, w])
        assert np.isclose(mean, np.mean(np.tanh(x @ w)), rtol=1e-6)
        np.testing.assert_array_equal(last, x[-1])
        np.testing.assert_array_equal(tail, x[2:])  # open slice ends follow the batch, not the traced 64
    info = exe.specializations()
    assert (info.misses, info.hits, info.entries) == (2, 1, 2)


def test_a_saved_graph_keeps_any_batch_size(tmp_path):
    g = fc.trace(lambda x, w: ops.relu(x @ w), "f64[4, 3]", "f64[3, 2]")
    fc.save_graph(g, tmp_path / "g.json")
    exe = fc.compile(fc.load_graph(tmp_path / "g.json"), dynamic_shapes=True)
    x, w = rng.standard_normal((9, 3)), rng.standard_normal((3, 2))
    np.testing.assert_allclose(exe.run([x, w])[0], np.maximum(x @ w, 0))


def test_a_reshape_holding_the_traced_size_names_the_input_dimension_and_the_node():
    g = fc.trace(lambda x: ops.reshape(x, shape=[64, 2, 4]), "f32[64, 8]")
    with pytest.raises(fc.ShapeError, match=r"input 0 \('x'\) dimension 0 is 29, traced as 64.*reshape.*-1"):
        fc.compile(g, dynamic_shapes=True).run([np.zeros((29, 8), np.float32)])


def test_a_trace_that_read_a_shape_is_refused_rather_than_answered_wrongly():
    g = fc.trace(lambda x: ops.sum(x) / x.shape[0], "f32[64, 8]")
    with pytest.raises(fc.ShapeError, match="read a tensor's shape"):
        fc.compile(g, dynamic_shapes=True).run([np.ones((128, 8), np.float32)])


def test_dtype_and_rank_changes_are_refused_as_at_trace_time():
    exe = fc.compile(fc.trace(lambda x: ops.relu(x), "f32[4, 3]"), dynamic_shapes=True)
    with pytest.raises(fc.InputError, match="dtype"):
        exe.run([np.zeros((5, 3))])
    with pytest.raises(fc.InputError, match="rank"):
        exe.run([np.zeros((5, 3, 1), np.float32)])
    with pytest.raises(fc.ShapeError, match="dtype or rank"):
        fc.specialize(exe.graph, ["f64[5, 3]"])


def test_a_new_batch_beside_a_wrong_rank_or_dtype_names_the_wrong_input():
    # the traced executable's check named input 0's new batch ("must have shape [1, 3]"), which is allowed
    exe = fc.compile(fc.trace(lambda x, y: ops.sum(x) + ops.sum(y), "f32[1, 3]", "f32[3]"), dynamic_shapes=True)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(fc.InputError, match=r"input 1 \('y'\) is float32\[2, 3\]; it was traced as f32\[3\].*rank"):
        exe.run([x, np.zeros((2, 3), np.float32)])
    with pytest.raises(fc.InputError, match=r"input 1 \('y'\) is float64\[3\].*dtype"):
        exe.run([x, np.zeros(3)])
    assert exe.run([x, np.ones(3, np.float32)])[0] == 3.0


def test_a_scan_body_is_re_specialised_for_a_new_batch_size():
    def rnn(h0, xs, w, u):
        h, _ = ops.scan(lambda h, x: (ops.tanh(x @ w + h @ u), ops.sum(h)), h0, xs)
        return ops.sum(h)
    g = fc.trace(rnn, "f64[4, 5]", "f64[7, 4, 3]", "f64[3, 5]", "f64[5, 5]")
    exe = fc.compile(g, dynamic_shapes=True)
    h0, xs = rng.standard_normal((9, 5)), rng.standard_normal((7, 9, 3))
    w, u = rng.standard_normal((3, 5)) * 0.3, rng.standard_normal((5, 5)) * 0.3
    h = h0
    for x in xs:
        h = np.tanh(x @ w + h @ u)
    assert np.isclose(exe.run([h0, xs, w, u])[0], h.sum(), rtol=1e-12)


# -- checkpoints -------------------------------------------------------------------------------------
def test_a_checkpoint_round_trips_trees_bitwise_with_step_and_metadata(tmp_path):
    params = {"enc": [{"w": rng.standard_normal((3, 4)).astype(np.float32)}],
              "half": np.array([1.5, -2.25], fc.bfloat16.np), "n": np.arange(3)}
    state = {"adam": {"m": {"enc.0.w": np.zeros((3, 4))}}, "step": np.array(7)}
    path = fc.save_checkpoint(tmp_path / "c.safetensors", {"params": params, "opt_state": state}, step=7,
                              metadata={"schedule_step": 7})
    assert sorted(os.listdir(tmp_path)) == ["c.safetensors"]  # no temporary file left behind
    back = fc.load_checkpoint(path, like={"params": params, "opt_state": state})
    assert back.step == 7 and back.metadata == {"schedule_step": 7}
    for a, b in zip(flatten(params)[1], flatten(back["params"])[1]):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    plain = fc.load_checkpoint(path)
    assert isinstance(plain["params"]["enc"], list) and plain["params"]["enc"][0]["w"].shape == (3, 4)


def test_a_checkpoint_of_another_model_lists_every_mismatch(tmp_path):
    path = fc.save_checkpoint(tmp_path / "c.safetensors", {"params": {"w": np.zeros((3, 4)), "b": np.zeros(4)}})
    with pytest.raises(fc.CheckpointError) as info:
        fc.load_checkpoint(path, like={"params": {"w": np.zeros((3, 5)), "c": np.zeros(1)}, "opt_state": {}})
    text = str(info.value)
    for part in ("sections missing from the file: ['opt_state']", "params/c: expected, not in the checkpoint",
                 "params/b: in the checkpoint, not expected", "params/w: expected float64[3, 5]"):
        assert part in text


def test_a_file_that_is_not_a_checkpoint_is_a_checkpoint_error(tmp_path):
    bad = tmp_path / "junk.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(fc.CheckpointError, match="not a readable frame checkpoint"):
        fc.load_checkpoint(bad)
    with pytest.raises(fc.CheckpointError, match="does not exist"):
        fc.load_checkpoint(tmp_path / "missing.safetensors")


def test_a_damaged_checkpoint_loads_whole_or_is_a_checkpoint_error(tmp_path):
    """Every truncation and every flipped byte of a small checkpoint: the exact contents, or CheckpointError
    (safetensors has no checksum of its own: the header's digests catch a flipped value)."""
    params = {"w": np.arange(6.0).reshape(2, 3), "b": np.ones(4, np.float32)}
    good = fc.save_checkpoint(tmp_path / "good.safetensors", {"params": params}, step=7).read_bytes()
    damaged = tmp_path / "damaged.safetensors"
    variants = [good[:n] for n in range(0, len(good), 3)]
    for i in range(len(good)):
        flipped = bytearray(good)
        flipped[i] ^= 0xFF
        variants.append(bytes(flipped))
    loaded_whole = 0
    for data in variants:
        damaged.write_bytes(data)
        try:
            back = fc.load_checkpoint(damaged, like={"params": params})
        except fc.CheckpointError:
            continue
        loaded_whole += 1
        assert back.step == 7
        for name in params:
            assert back["params"][name].dtype == params[name].dtype
            np.testing.assert_array_equal(back["params"][name], params[name])
    assert loaded_whole < len(variants) // 2  # most damage is caught, none loads as other values
