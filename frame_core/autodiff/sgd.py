"""The SGD update graph (ARCH-065).

``build_sgd_update_graph(param_types, lr)`` builds a separate graph with
inputs ``[p_0..p_{k-1}, g_0..g_{k-1}]`` and outputs ``[new_p_0..]`` where
``new_p = add(p, mul(constant(-lr), g))``: existing ops only, no new kernel;
the learning rate is baked in as a constant. A training step runs the
training graph (loss and gradients), then this graph, then swaps the
parameters; shapes never change, so both executables come from the compile
cache after the first step.

It uses the ``add`` and ``mul`` ops, which the frame-ops-basic pack provides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import FrameError, GradientError
from ..ir.graph import Graph
from ..ir.types import TensorType, as_type

__all__ = ["build_sgd_update_graph"]


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an int past float's range
        return False


def build_sgd_update_graph(param_types: Sequence[TensorType | str], lr: float) -> Graph:
    """Graph ``[params..., grads...] -> [params - lr * grads...]``; ``GradientError`` on bad arguments."""
    from .._args import refuse_unordered
    from ..ops_registry.registry import registry

    if isinstance(param_types, (str, bytes, TensorType)) or not isinstance(param_types, Iterable):
        raise GradientError(f"build_sgd_update_graph takes a list of parameter types such as ['f32[3]', 'f32[2, 3]'], "
                            f"got {type(param_types).__name__} {param_types!r:.40}"
                            + (f"; for one parameter write [{str(param_types)!r}]"
                               if isinstance(param_types, (str, TensorType)) else ""))
    refuse_unordered(param_types, "build_sgd_update_graph(param_types)", GradientError, "['f32[3]', 'f32[2, 3]']")
    types = []
    for i, t in enumerate(param_types):
        try:
            types.append(as_type(t))
        except FrameError as exc:
            raise GradientError(f"parameter type {i} ({t!r:.40}) is not a tensor type: {exc}") from None
    if not types:
        raise GradientError("build_sgd_update_graph needs at least one parameter type")
    if not isinstance(lr, (int, float, np.integer, np.floating)) or isinstance(lr, (bool, np.bool_)) \
            or not _finite(lr) or lr <= 0:
        raise GradientError(f"the learning rate must be a positive finite number, got {lr!r:.40}")
    lr = float(lr)
    for i, t in enumerate(types):
        if not t.dtype.is_float:
            raise GradientError(f"parameter {i} has type {t}; SGD updates floating parameters only")
    reg = registry()
    missing = [op for op in ("add", "mul") if op not in reg]
    if missing:
        raise GradientError(f"build_sgd_update_graph needs the ops {missing}, which the frame-ops-basic pack provides; "
                            "install it (pip install frame-ops-basic)")
    graph = Graph("sgd_update")
    params = [graph.add_input(t, f"p{i}") for i, t in enumerate(types)]
    grads = [graph.add_input(t, f"g{i}") for i, t in enumerate(types)]
    for p, g in zip(params, grads):
        step = graph.apply("mul", graph.constant(np.asarray(-lr, p.type.dtype.np)), g)
        graph.mark_output(graph.apply("add", p, step))
    return graph
