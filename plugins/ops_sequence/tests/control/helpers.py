"""Helpers of the control-flow tests: runners, finite differences, Hessian-vector products."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import frame_core as fc
from frame_core import ops


def run(graph: fc.Graph, *arrays: np.ndarray) -> list[np.ndarray]:
    return fc.compile(graph).run(list(arrays))


def grad_graph(fn: Callable, types: Sequence[str], wrt: Sequence[int]) -> fc.Graph:
    """The training graph of the scalar ``fn``: outputs ``[loss, grad(wrt[0]), ...]``."""
    return fc.build_backward_graph(fc.trace(fn, *types), 0, list(wrt))


def central_gradient(f: Callable[[list[np.ndarray]], float], inputs: Sequence[np.ndarray], i: int,
                     h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``f`` with respect to ``inputs[i]``, element by element."""
    base = [np.array(x, copy=True) for x in inputs]
    g = np.zeros(base[i].shape)
    for k in np.ndindex(base[i].shape):
        plus = [x.copy() for x in base]
        minus = [x.copy() for x in base]
        plus[i][k] += h
        minus[i][k] -= h
        g[k] = (f(plus) - f(minus)) / (2 * h)
    return g


def hvp_graph(fn: Callable, types: Sequence[str], wrt: Sequence[int], directions: Sequence[np.ndarray]) -> fc.Graph:
    """Outputs ``[loss, g(wrt)..., s, Hv(wrt)...]`` where ``s = sum_k <g_k, v_k>`` (ARCH-067, twice)."""
    first = grad_graph(fn, types, wrt)
    n_in = len(types)
    k = len(wrt)

    def contraction(*t):  # noqa: ANN001, ANN202
        grads = t[n_in + 1:n_in + 1 + k]
        total = None
        for g, v in zip(grads, directions):
            term = ops.sum(g * v)
            total = term if total is None else total + term
        return total
    extended, s = fc.extend_graph(first, contraction)
    return fc.build_backward_graph(extended, s, list(wrt))


def torch_hvp(fn: Callable, inputs: Sequence[np.ndarray], wrt: Sequence[int],
              directions: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """torch's loss, gradients and Hessian-vector products of the same function (an independent reference)."""
    import torch

    ts = [torch.tensor(x, requires_grad=i in wrt) for i, x in enumerate(inputs)]
    loss = fn(*ts)
    leaves = [ts[i] for i in wrt]
    grads = torch.autograd.grad(loss, leaves, create_graph=True)
    s = sum((g * torch.tensor(v)).sum() for g, v in zip(grads, directions))
    hv = torch.autograd.grad(s, leaves, allow_unused=True)
    hv = [np.zeros(x.shape) if h is None else h.detach().numpy() for h, x in zip(hv, (inputs[i] for i in wrt))]
    return float(loss.detach()), [g.detach().numpy() for g in grads], hv
