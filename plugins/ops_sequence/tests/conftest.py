"""Shared helpers for the sequence-op tests: first and second derivatives from frame and from torch.

Both sides compute, for a function ``f`` of the inputs and fixed weights ``w``:
the value ``y = f(x)``, the gradients ``g_i = d sum(w * y) / d x_i`` and the
second-order vector products ``d (sum_i sum(v_i * g_i)) / d x_j`` (ARCH-067:
frame gets them by applying ``build_backward_graph`` twice). The torch side
is an independent reference (autograd with ``create_graph=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


@dataclass
class Derivatives:
    value: np.ndarray
    first: list[np.ndarray]
    second: list[np.ndarray]


def _type_of(x: np.ndarray) -> fc.TensorType:
    return fc.TensorType(x.dtype, x.shape)


def frame_derivatives(fn: Callable, inputs: Sequence[np.ndarray], wrt: Sequence[int], w: np.ndarray,
                      vs: Sequence[np.ndarray] | None = None) -> Derivatives:
    """frame's value, first-order gradients and (if ``vs``) second-order products of ``sum(w * fn(...))``."""
    graph = fc.trace(fn, *[_type_of(x) for x in inputs])
    n = len(inputs)
    graph, loss = fc.extend_graph(graph, lambda *t: ops.sum(t[n] * w))
    first = fc.build_backward_graph(graph, loss, list(wrt))  # outputs: y, loss, grads
    if vs is None:
        outs = fc.compile(first).run(list(inputs))
        return Derivatives(outs[0], outs[2:], [])
    second_graph, s = fc.extend_graph(first, lambda *t: _dot(t[n + 2:n + 2 + len(wrt)], vs))
    second = fc.build_backward_graph(second_graph, s, list(wrt))
    outs = fc.compile(second).run(list(inputs))
    k = len(wrt)
    return Derivatives(outs[0], outs[2:2 + k], outs[3 + k:])


def _dot(grads, vs):  # noqa: ANN001, ANN202 - traced tensors
    total = None
    for g, v in zip(grads, vs):
        term = ops.sum(g * v)
        total = term if total is None else total + term
    return total


def torch_derivatives(fn: Callable, inputs: Sequence[np.ndarray], wrt: Sequence[int], w: np.ndarray,
                      vs: Sequence[np.ndarray] | None = None) -> Derivatives:
    """The same quantities from torch autograd."""
    import torch

    ts = [torch.tensor(x, requires_grad=i in wrt) if x.dtype.kind == "f" else torch.tensor(x)
          for i, x in enumerate(inputs)]
    y = fn(*ts)
    leaves = [ts[i] for i in wrt]
    grads = torch.autograd.grad((y * torch.tensor(w)).sum(), leaves, create_graph=vs is not None)
    if vs is None:
        return Derivatives(y.detach().numpy(), [g.detach().numpy() for g in grads], [])
    s = sum((g * torch.tensor(v)).sum() for g, v in zip(grads, vs))
    second = torch.autograd.grad(s, leaves, allow_unused=True)
    second = [np.zeros(x.shape, x.dtype) if g is None else g.detach().numpy()
              for g, x in zip(second, (inputs[i] for i in wrt))]
    return Derivatives(y.detach().numpy(), [g.detach().numpy() for g in grads], second)


def assert_same_derivatives(got: Derivatives, want: Derivatives, rtol: float, atol: float) -> None:
    np.testing.assert_allclose(got.value, want.value, rtol=rtol, atol=atol, err_msg="values")
    for i, (a, b) in enumerate(zip(got.first, want.first)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"first-order gradient {i}")
    assert len(got.second) == len(want.second)
    for i, (a, b) in enumerate(zip(got.second, want.second)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"second-order product {i}")


@dataclass
class Compare:
    """The helpers above, handed to tests as one fixture (test modules cannot import conftest)."""

    frame = staticmethod(frame_derivatives)
    torch = staticmethod(torch_derivatives)
    assert_same = staticmethod(assert_same_derivatives)

    @staticmethod
    def weights_for(rng: np.random.Generator, inputs: Sequence[np.ndarray], wrt: Sequence[int],
                    out_shape: tuple[int, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
        dtype = inputs[wrt[0]].dtype
        w = rng.standard_normal(out_shape).astype(dtype)
        return w, [rng.standard_normal(inputs[i].shape).astype(dtype) for i in wrt]


@pytest.fixture
def compare() -> Compare:
    return Compare()
