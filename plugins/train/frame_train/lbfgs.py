"""L-BFGS through scipy: ``scipy.optimize.minimize(method="L-BFGS-B")`` on a compiled value-and-gradient.

``flat_value_and_grad(loss, params, *data)`` compiles the loss and its gradient with respect to every
parameter once and returns ``fun(x) -> (loss, gradient)`` over the flat float64 vector of the named
parameters (optree order), with ``x0`` and ``unravel(x) -> tree``: what every scipy optimizer takes.
``lbfgs`` runs L-BFGS-B on it and returns the trained tree and scipy's result. The physics-informed recipe
is Adam first (``TrainStep``), then ``lbfgs`` from Adam's parameters (examples/train_pinn_lbfgs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import frame_core as fc
from frame_core import Graph

from ._spine import flatten, trace_params, type_of, unflatten
from .errors import OptimizerError
from .schedules import _integral
from .step import loss_position, parameter_positions

__all__ = ["flat_value_and_grad", "lbfgs"]


def flat_value_and_grad(loss: Callable[..., Any] | Graph, params: Any, *data: Any
                        ) -> tuple[Callable[[np.ndarray], tuple[float, np.ndarray]], np.ndarray,
                                   Callable[[np.ndarray], Any]]:
    """``(fun, x0, unravel)``: ``fun(x) = (loss, dloss/dx)`` over the flat float64 parameter vector ``x``.

    ``loss`` is ``loss(params, *data)`` (traced once) or a loss ``Graph`` with an input named by every
    parameter; ``data`` are the fixed data arrays (the graph's other inputs, in order). Parameters must be
    float64 (``OptimizerError`` otherwise): scipy works in float64, and so must the gradient it trusts.
    """
    names, leaves, treedef = flatten(params)
    types = [type_of(leaf, f"parameter {p!r}") for p, leaf in zip(names, leaves)]
    wrong = [f"{p}: {t}" for p, t in zip(names, types) if t.dtype != fc.float64]
    if wrong or not names:
        raise OptimizerError("L-BFGS works on float64 parameters (scipy's precision); "
                             + (f"these are not: {', '.join(wrong)}; cast the tree, e.g. with "
                                "{k: v.astype(np.float64)}, and trace the loss in float64" if wrong
                                else "the parameter tree is empty"))
    graph = loss if isinstance(loss, Graph) else trace_params(loss, params, *data)
    wrt = parameter_positions(graph, names, types)
    loss_at = loss_position(graph)
    data_at = [i for i in range(len(graph.inputs)) if i not in set(wrt)]
    if len(data) != len(data_at):
        raise OptimizerError(f"the loss graph takes {len(data_at)} data input{'s' if len(data_at) != 1 else ''} "
                             f"besides the parameters, got {len(data)}")
    exe = fc.compile(fc.build_backward_graph(graph, loss_at, wrt))
    n_out = len(graph.outputs)
    sizes = [int(np.prod(t.shape)) for t in types]
    offsets = np.cumsum([0, *sizes])
    shapes = [t.shape for t in types]
    inputs: list[Any] = [None] * len(graph.inputs)
    for i, array in zip(data_at, data):
        inputs[i] = array

    def split(x: np.ndarray) -> list[np.ndarray]:
        return [x[a:b].reshape(s) for a, b, s in zip(offsets[:-1], offsets[1:], shapes)]

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        for i, leaf in zip(wrt, split(np.ascontiguousarray(x, np.float64))):
            inputs[i] = leaf
        outs = exe.run(inputs)
        return float(outs[loss_at]), np.concatenate([g.ravel() for g in outs[n_out:]])

    x0 = np.concatenate([np.asarray(leaf, np.float64).ravel() for leaf in leaves])
    return fun, x0, lambda x: unflatten(treedef, [leaf.copy() for leaf in split(np.asarray(x, np.float64))])


def lbfgs(loss: Callable[..., Any] | Graph, params: Any, *data: Any, maxiter: int = 1000,
          options: dict[str, Any] | None = None, callback: Callable[[np.ndarray], Any] | None = None
          ) -> tuple[Any, Any]:
    """Minimise ``loss`` over ``params`` with scipy's L-BFGS-B; return ``(trained params tree, OptimizeResult)``.

    ``options`` go to scipy (``maxcor``, ``ftol``, ``gtol``, ``maxfun``...); ``maxiter`` bounds the iterations.
    """
    from scipy.optimize import minimize

    if not _integral(maxiter) or maxiter < 1:
        raise OptimizerError(f"lbfgs(maxiter=) is an int >= 1, got {maxiter!r:.30}")
    maxiter = int(maxiter)
    fun, x0, unravel = flat_value_and_grad(loss, params, *data)
    settings = {"maxiter": maxiter, "maxfun": 2 * maxiter, **(options or {})}
    result = minimize(fun, x0, jac=True, method="L-BFGS-B", options=settings, callback=callback)
    return unravel(result.x), result
