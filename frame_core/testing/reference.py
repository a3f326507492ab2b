"""Second-order comparisons against another framework's autograd (ARCH-066, ARCH-067).

    value, grads, hvps = value_gradient_hvp(ops.tanh, [x], w, [v])            # frame: two reverse passes
    t_value, t_grads, t_hvps = torch_value_gradient_hvp(torch.tanh, [x], w, [v])

Both compute, for ``L(x_1..x_n) = sum(fn(x_1..x_n) * w)``:

- the value ``L``;
- the gradients ``g_i = dL/dx_i``;
- the Hessian-vector products ``h_i = d/dx_i sum_j <v_j, g_j>`` along the
  directions ``v_j``.

frame's side builds them the way a user differentiates to second order: trace
the loss, ``build_backward_graph``, contract the gradients with the
directions (``extend_graph``) and ``build_backward_graph`` again, then one
compiled run. torch's side uses ``torch.autograd.grad`` with
``create_graph=True``. Compare the two with tolerances of your choosing; each
side is an independent computation, so agreement checks the GradientFns to
second order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError


def _check_lengths(inputs: Sequence[Any], directions: Sequence[Any]) -> None:
    if not inputs:
        raise ArgumentError("value_gradient_hvp needs at least one input array; got none. "
                            "Pass the inputs of fn as a list of numpy arrays.")
    if len(directions) != len(inputs):
        raise ArgumentError(f"value_gradient_hvp needs one direction per input: got {len(inputs)} input(s) and "
                            f"{len(directions)} direction(s). Pass a list of arrays shaped like the inputs.")


def value_gradient_hvp(fn: Callable[..., Any], inputs: Sequence[np.ndarray], weights: Any,
                       directions: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """Value, gradients and Hessian-vector products of ``sum(fn(*inputs) * weights)`` by frame (ARCH-067).

    ``fn`` takes and returns frame values (ops); ``inputs`` are float64
    arrays (traced with their shapes); ``weights`` broadcasts against
    ``fn``'s output; ``directions`` has one array per input, shaped like it.
    The second pass differentiates the first pass's graph (no second
    engine), so this checks reverse-over-reverse.
    """
    from .. import compile as compile_graph, extend_graph, ops, trace
    from ..autodiff.backward import build_backward_graph
    from ..ir.dtypes import as_dtype
    from ..ir.types import TensorType

    _check_lengths(inputs, directions)
    arrays = [np.asarray(x) for x in inputs]
    n = len(arrays)
    types = [TensorType(as_dtype(a.dtype), tuple(a.shape)) for a in arrays]
    wrt = list(range(n))
    first = build_backward_graph(trace(lambda *v: ops.sum(fn(*v) * weights), *types), 0, wrt)

    def contract(*values: Any) -> Any:
        grads = values[-n:]
        total = ops.sum(grads[0] * directions[0])
        for g, d in zip(grads[1:], directions[1:]):
            total = total + ops.sum(g * d)
        return total
    with_dot, k = extend_graph(first, contract)
    outs = compile_graph(build_backward_graph(with_dot, k, wrt)).run(arrays)
    return float(outs[0]), list(outs[1:1 + n]), list(outs[-n:])


def torch_value_gradient_hvp(fn: Callable[..., Any], inputs: Sequence[np.ndarray], weights: Any,
                             directions: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """The same three results by ``torch.autograd`` (float64 tensors; ``fn`` takes and returns torch tensors).

    An input the directional term does not depend on (a linear ``fn``) gets
    a zero Hessian-vector product, as frame's. Raises ``ImportError`` naming
    the extra to install when PyTorch is missing.
    """
    _check_lengths(inputs, directions)
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("torch_value_gradient_hvp needs PyTorch; install it with pip install 'frame-core[compare]'.") \
            from exc
    tensors = [torch.tensor(np.asarray(x), requires_grad=True) for x in inputs]
    value = torch.sum(fn(*tensors) * torch.from_numpy(np.asarray(weights)))
    grads = torch.autograd.grad(value, tensors, create_graph=True)
    dot = sum((g * torch.from_numpy(np.asarray(d))).sum() for g, d in zip(grads, directions))
    hvps: Sequence[Any] = (torch.autograd.grad(dot, tensors, allow_unused=True)
                           if isinstance(dot, torch.Tensor) and dot.requires_grad else [None] * len(tensors))
    return (float(value.item()), [g.detach().numpy() for g in grads],
            [np.zeros_like(np.asarray(x)) if h is None else h.numpy(force=True) for h, x in zip(hvps, inputs)])
