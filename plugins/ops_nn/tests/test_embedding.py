"""embedding: lookup and scatter-add gradient against torch (padding_idx included), out-of-range indices."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_matches_torch(padding_idx):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 4))
    idx = np.array([[0, 2, 2, 5], [2, 1, 0, 3]])
    gy = rng.standard_normal((2, 4, 4))
    graph = fc.trace(lambda t, i: ops.embedding(t, i, padding_idx=padding_idx), "f64[6, 4]", "i64[2, 4]")
    graph, loss = fc.extend_graph(graph, lambda *t: ops.sum(t[2] * gy))
    y, _, g = fc.compile(fc.build_backward_graph(graph, loss, [0])).run([table, idx])
    tt = torch.tensor(table, requires_grad=True)
    ty = torch.nn.functional.embedding(torch.tensor(idx), tt, padding_idx=padding_idx)
    (ty * torch.tensor(gy)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy())
    np.testing.assert_allclose(g, tt.grad.numpy(), rtol=1e-12)
    if padding_idx is not None:
        assert not g[padding_idx].any()


def test_embedding_index_out_of_range_is_a_data_error_naming_the_position():
    exe = fc.compile(fc.trace(lambda t, i: ops.embedding(t, i), "f32[5, 2]", "i64[2, 3]"))
    with pytest.raises(fc.DataError) as info:
        exe.run([np.ones((5, 2), np.float32), np.array([[0, 1, 2], [3, 7, 1]])])
    text = str(info.value)
    assert "embedding: index 7 at position [1, 1]" in text and "valid indices: 0..4" in text, text
    with pytest.raises(fc.DataError, match="index -1 at position"):
        exe.run([np.ones((5, 2), np.float32), np.array([[0, -1, 2], [3, 4, 1]])])


@pytest.mark.parametrize("types, attrs, message", [
    (["f32[5, 2]", "f32[3]"], {}, "indices must be integers"),
    (["f32[5]", "i64[3]"], {}, "table must be a floating [V, d] matrix"),
    (["f32[5, 2]", "i64[3]"], {"padding_idx": 5}, "padding_idx 5 must index a row of the table (0..4)"),
])
def test_bad_embedding_input_is_a_named_shape_error(types, attrs, message):
    with pytest.raises(fc.ShapeError) as info:
        fc.trace(lambda t, i: ops.embedding(t, i, **attrs), *types)
    assert message in str(info.value), str(info.value)


def test_forward_mode_is_the_transpose_of_the_gradient_so_the_padding_row_sends_no_tangent():
    rng = np.random.default_rng(0)
    table, tangent, gy = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal((2, 3, 3))
    idx = np.array([[0, 2, 2], [3, 1, 2]])
    graph = fc.trace(lambda t: ops.embedding(t, idx, padding_idx=2), "f64[4, 3]")
    _, jvp = fc.compile(fc.build_jvp_graph(graph, [0]), cache=False).run([table, tangent])
    grad_graph = fc.trace(lambda t, g: ops.sum(ops.embedding(t, idx, padding_idx=2) * g), "f64[4, 3]", "f64[2, 3, 3]")
    _, vjp = fc.compile(fc.build_backward_graph(grad_graph, 0, [0]), cache=False).run([table, gy])
    assert not jvp[idx == 2].any()
    np.testing.assert_allclose(jvp[idx != 2], tangent[idx[idx != 2]], rtol=0, atol=0)
    np.testing.assert_allclose(np.sum(jvp * gy), np.sum(tangent * vjp), rtol=1e-12)
