"""Shared helpers for the nn-op tests: value, first-order gradients and second-order products from frame and torch.

For ``f`` of the inputs and fixed random weights ``w``: ``y = f(x)``, ``g_i = d sum(w * y) / d x_i`` and the
second-order products ``d (sum_i sum(v_i * g_i)) / d x_j`` (frame: build_backward_graph applied twice; torch:
autograd with create_graph=True, an independent reference).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def _dot(grads, vs):  # noqa: ANN001, ANN202 - traced tensors
    total = None
    for g, v in zip(grads, vs):
        term = ops.sum(g * v)
        total = term if total is None else total + term
    return total


def frame_derivatives(fn: Callable, inputs: Sequence[np.ndarray], wrt: Sequence[int], w: np.ndarray,
                      vs: Sequence[np.ndarray]) -> list:
    """[y, [g_i], [second-order products]] of ``sum(w * fn(*inputs))`` from frame."""
    graph = fc.trace(fn, *[fc.TensorType(x.dtype, x.shape) for x in inputs])
    n = len(inputs)
    graph, loss = fc.extend_graph(graph, lambda *t: ops.sum(t[n] * w))
    first = fc.build_backward_graph(graph, loss, list(wrt))  # outputs: y, loss, grads
    second_graph, s = fc.extend_graph(first, lambda *t: _dot(t[n + 2:n + 2 + len(wrt)], vs))
    second = fc.build_backward_graph(second_graph, s, list(wrt))
    outs = fc.compile(second).run(list(inputs))
    k = len(wrt)
    return [outs[0], outs[2:2 + k], outs[3 + k:]]


def torch_derivatives(fn: Callable, inputs: Sequence[np.ndarray], wrt: Sequence[int], w: np.ndarray,
                      vs: Sequence[np.ndarray]) -> list:
    import torch

    ts = [torch.tensor(x, requires_grad=i in wrt) for i, x in enumerate(inputs)]
    y = fn(*ts)
    leaves = [ts[i] for i in wrt]
    grads = torch.autograd.grad((y * torch.tensor(w)).sum(), leaves, create_graph=True)
    s = sum((g * torch.tensor(v)).sum() for g, v in zip(grads, vs))
    # a linear op's gradients do not depend on its inputs: torch then has no graph to differentiate
    second = torch.autograd.grad(s, leaves, allow_unused=True) if s.requires_grad else [None] * len(leaves)
    second = [np.zeros(inputs[i].shape) if g is None else g.detach().numpy() for g, i in zip(second, wrt)]
    return [y.detach().numpy(), [g.detach().numpy() for g in grads], second]


def check_against_torch(frame_fn: Callable, torch_fn: Callable, inputs: Sequence[np.ndarray],
                        wrt: Sequence[int], seed: int = 0, tol: float = 1e-9) -> None:
    """frame's value, gradients and second-order products equal torch's (float64 inputs)."""
    rng = np.random.default_rng(seed)
    y_type = fc.trace(frame_fn, *[fc.TensorType(x.dtype, x.shape) for x in inputs]).outputs[0].type
    w = rng.standard_normal(y_type.shape)
    vs = [rng.standard_normal(inputs[i].shape) for i in wrt]
    got = frame_derivatives(frame_fn, inputs, wrt, w, vs)
    want = torch_derivatives(torch_fn, inputs, wrt, w, vs)
    np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol, err_msg="values")
    for order in (1, 2):
        for i, (a, b) in enumerate(zip(got[order], want[order])):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"order {order} gradient of input {wrt[i]}")


@pytest.fixture
def against_torch() -> Callable:
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    return check_against_torch
