"""numpy's ufuncs and common functions on traced tensors build frame ops (issue 17: ``np.tanh(x)`` said only
"a traced Tensor has no data"); those without an op say what to write instead. The reference is numpy itself,
run on the same data as the compiled graph."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.frontend.numpy_protocol import FUNCTIONS, UFUNCS

RNG = np.random.default_rng(7)
X = RNG.uniform(0.5, 1.5, size=(3, 4))  # positive: log, sqrt and pow are defined
Y = RNG.uniform(0.5, 1.5, size=(3, 4))


def _run(fn, *arrays):
    graph = fc.trace(fn, *[fc.TensorType("f64", a.shape) for a in arrays])
    return fc.compile(graph).run(list(arrays))[0]


@pytest.mark.parametrize("name", sorted(UFUNCS))
def test_every_mapped_ufunc_matches_numpy(name):
    ufunc = getattr(np, name)
    if name == "matmul":
        args = (X, Y.T)
    else:
        args = (X, Y)[:ufunc.nin]
    got = _run(lambda *xs: ufunc(*xs), *args)
    np.testing.assert_allclose(got, ufunc(*args), rtol=1e-12)


@pytest.mark.parametrize("call", [
    lambda x: np.sum(x), lambda x: np.sum(x, axis=0), lambda x: np.sum(x, axis=(0, 1), keepdims=True),
    lambda x: np.mean(x, axis=1), lambda x: np.max(x, axis=1, keepdims=True), lambda x: np.min(x),
    lambda x: np.amax(x, 0), lambda x: np.argmax(x, axis=1), lambda x: np.argmin(x, axis=0),
    lambda x: np.transpose(x), lambda x: np.reshape(x, (4, 3)), lambda x: np.reshape(x, -1),
    lambda x: np.concatenate([x, x], axis=1), lambda x: np.stack([x, x]), lambda x: np.where(x > 1.0, x, 0.0),
    lambda x: np.clip(x, 0.7, 1.2), lambda x: np.expand_dims(x, 1), lambda x: np.squeeze(np.expand_dims(x, 0)),
    lambda x: np.broadcast_to(x, (2, 3, 4)), lambda x: np.cumsum(x, axis=1), lambda x: np.dot(x, np.transpose(x)),
    lambda x: np.matmul(x, np.ones((4, 2))),
])
def test_common_functions_match_numpy(call):
    np.testing.assert_allclose(_run(call, X), call(X), rtol=1e-12)


def test_all_mapped_functions_are_exercised():
    assert set(FUNCTIONS) <= {"sum", "mean", "max", "amax", "min", "amin", "argmax", "argmin", "matmul", "dot",
                              "transpose", "reshape", "concatenate", "stack", "where", "clip", "expand_dims",
                              "squeeze", "broadcast_to", "cumsum"}


def test_numpy_spelling_traces_the_same_graph_as_ops():
    by_numpy = fc.trace(lambda x, w: np.sum(np.tanh(x @ w) * 2.0, axis=0), "f32[4, 3]", "f32[3, 2]")
    by_ops = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w) * 2.0, axes=[0]), "f32[4, 3]", "f32[3, 2]")
    assert fc.graph_key(by_numpy) == fc.graph_key(by_ops)
    # and it differentiates like it
    training = fc.build_backward_graph(fc.trace(lambda x: np.sum(np.exp(x)), "f64[3]"), 0, [0])
    x = np.array([0.1, -0.2, 0.3])
    np.testing.assert_allclose(fc.compile(training).run([x])[1], np.exp(x), rtol=1e-14)


def test_arrays_on_the_left_trace_too():
    a = np.arange(8.0).reshape(2, 4) / 8.0
    got = _run(lambda x: a @ x + np.ones(2)[:, None] * np.exp(a @ x), Y.T.copy())
    np.testing.assert_allclose(got, a @ Y.T + np.exp(a @ Y.T), rtol=1e-12)


@pytest.mark.parametrize("call, says", [
    (lambda x: np.arctan(x), "np.arctan on a traced Tensor: frame maps no op to it"),
    (lambda x: np.cbrt(x), "write ops.sign(x) * ops.abs(x) ** (1 / 3)"),
    (lambda x: np.prod(x), "np.prod on a traced Tensor"),
    (lambda x: np.add.reduce(x), "write ops.sum(x, axes=[axis])"),
    (lambda x: np.sum(x, where=x > 0), "np.sum on a traced Tensor takes (a, axis, dtype, out, keepdims)"),
    (lambda x: np.exp(x, out=np.empty(3)), "takes no out="),
    (lambda x: np.cumsum(x), "needs axis="),
    (lambda x: np.asarray(x), "numpy functions that frame maps to ops"),
])
def test_what_has_no_op_says_what_to_write(call, says):
    with pytest.raises(fc.IRError) as caught:
        fc.trace(call, "f64[3]")
    assert says in str(caught.value)
    assert "has no data" not in str(caught.value) or "asarray" in says or "frame maps" in says


def test_an_array_compared_with_a_tensor_by_eq_points_to_the_op():
    def fn(x):
        with pytest.raises(fc.IRError, match=r"write ops.equal\(a, b\)"):
            np.zeros(3) == x  # noqa: B015 - numpy's np.equal, handed to the tensor
        return np.less(x, 0.5)
    assert fc.trace(fn, "f64[3]").outputs[0].type == fc.TensorType("bool", (3,))


def test_a_mapped_ufunc_whose_op_is_not_installed_says_what_to_write(monkeypatch):
    # np.log1p traces as frame-ops-basic's log1p; with a pack that lacks it, the hint stands in
    from frame_core.frontend import numpy_protocol

    monkeypatch.setattr(numpy_protocol, "_registered", lambda op: False)
    with pytest.raises(fc.IRError, match=r"write ops.log\(1.0 \+ x\)"):
        fc.trace(lambda x: np.log1p(x), "f64[3]")
