"""``jacfwd``, ``jacrev``, ``hessian`` and ``hvp``: derivative graphs users know from JAX, built from the
forward-mode (``autodiff.jvp``) and reverse-mode (``autodiff.backward``) transforms.

Each returns a new graph with ``graph``'s inputs (``hvp`` adds the direction) whose outputs are ``graph``'s
outputs followed by the derivative(s) asked for, named. A Jacobian of output ``y`` with respect to input ``x``
has shape ``y.shape + x.shape`` (JAX's layout). ``jacfwd`` appends one forward sweep per element of ``x``,
``jacrev`` one reverse sweep per element of ``y``: choose by which is smaller. The ops they use to assemble
the Jacobian (``stack``, ``reshape``) come from the ops_basic pack.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._gc import gc_paused
from ..errors import GradientError, MissingGradientError, TangentError
from ..ir.graph import Graph, Value, clone_graph, mark_traced_sizes
from ..ops_registry.registry import Registry, registry as current_registry, use_registry
from .backward import _backpropagate, _output_position, build_backward_graph, input_position, output_label
from .jvp import _drop_unneeded_after, build_jvp_graph, propagate

__all__ = ["jacfwd", "jacrev", "hessian", "hvp"]


def _one_input(graph: Graph, wrt: Any) -> int:
    if not isinstance(graph, Graph):
        raise GradientError(f"needs a Graph, got {type(graph).__name__}")
    if isinstance(wrt, str):
        i = input_position(wrt, graph)
    elif isinstance(wrt, (int, np.integer)) and not isinstance(wrt, bool):
        i = int(wrt)
        if not 0 <= i < len(graph.inputs):
            raise GradientError(f"wrt {i} is out of range: the graph has {len(graph.inputs)} inputs")
    else:
        raise GradientError(f"wrt is one input's name or position, got {type(wrt).__name__} {wrt!r:.40}")
    if not graph.inputs[i].type.dtype.is_float:
        raise TangentError(f"input {i} ({graph.inputs[i].name or 'unnamed'}) has type {graph.inputs[i].type}: only "
                           "floating inputs have derivatives")
    return i


def _float_output(graph: Graph, output: Any) -> int:
    k = _output_position(output, graph, "output")
    if not graph.outputs[k].type.dtype.is_float:
        raise GradientError(f"output {k} has type {graph.outputs[k].type}; only floating outputs have derivatives")
    return k


def _basis(t: Any) -> list[np.ndarray]:
    eye = np.eye(t.size, dtype=t.dtype.np)
    return [eye[k].reshape(t.shape) for k in range(t.size)]


def _assemble(graph: Graph, rows: list[Value], lead: tuple[int, ...], trail: tuple[int, ...], name: str) -> int:
    """``rows`` (each of shape ``trail``, in the order of ``lead``'s flat index) as one output of shape
    ``lead + trail`` when stacked along axis 0, or ``trail + lead`` with ``transpose``."""
    if len(rows) == 1:
        stacked = rows[0]
    else:
        stacked = graph.apply("stack", *rows, axis=0)
    full = graph.apply("reshape", stacked, shape=lead + trail) if stacked.type.shape != lead + trail else stacked
    return graph.mark_output(full, name)


def _registry(registry: Registry | None) -> Registry:
    if registry is not None and not isinstance(registry, Registry):
        raise GradientError(f"registry= takes a frame_core Registry, got {type(registry).__name__}")
    return registry if registry is not None else current_registry()


def _jacobian(graph: Graph, wrt: int | str, output: int | str, registry: Registry | None, mode: str) -> Graph:
    """``graph`` plus the Jacobian of ``output`` with respect to input ``wrt``: with ``mode`` ``"fwd"`` one
    forward-mode sweep per element of x (columns of y's shape, stacked last), with ``"rev"`` one reverse-mode
    sweep per element of y (rows of x's shape, stacked first); either way of shape ``y.shape + x.shape``."""
    reg = _registry(registry)
    i, k = _one_input(graph, wrt), _float_output(graph, output)
    with gc_paused(), use_registry(reg):
        result = clone_graph(graph)
        result.name = f"{graph.name}_jac{mode}"
        x, y = result.inputs[i], result.outputs[k]
        seed, target = (x, y) if mode == "fwd" else (y, x)
        sweep = propagate if mode == "fwd" else _backpropagate
        n = len(result.nodes)
        parts = []
        for e in _basis(seed.type):
            try:
                found = sweep(result, {seed: result.constant(e)}, {target}, reg, "")
            except MissingGradientError as exc:
                raise MissingGradientError(
                    f"cannot build jac{mode}({output_label(graph, k)}, {x.name or f'input {i}'}): {len(exc.paths)} "
                    f"op(s) on the chain have no {'forward rule' if mode == 'fwd' else 'gradient'}:\n  "
                    + "\n  ".join(exc.paths), exc.paths) from None
            parts.append(found.get(target) or result.constant(np.zeros(target.type.shape, target.type.dtype.np)))
        label = f"jac{mode}({output_label(graph, k)}, {x.name or f'input {i}'})"
        if not parts:  # x or y has no elements: no sweep to stack, the Jacobian is empty
            dtype = (y if mode == "fwd" else x).type.dtype.np
            result.mark_output(result.constant(np.zeros(y.type.shape + x.type.shape, dtype)), label)
        elif mode == "rev":
            _assemble(result, parts, y.type.shape, x.type.shape, label)
        else:
            jac = parts[0] if len(parts) == 1 else result.apply("stack", *parts, axis=-1)  # y.shape + [x.size]
            result.mark_output(result.apply("reshape", jac, shape=y.type.shape + x.type.shape), label)
        _drop_unneeded_after(result, n, reg)
    # one sweep per element of x (or y) of the traced shape, a basis of constants: refused at other shapes, never
    # run wrongly (a batch of 1 broadcast against the traced basis)
    swept = x.type if mode == "fwd" else y.type
    mark_traced_sizes(result, f"jac{mode} made one sweep per element of the traced {swept}; build the Jacobian "
                              "graph again for the new shapes")
    return result


def jacfwd(graph: Graph, wrt: int | str, output: int | str = 0, *, registry: Registry | None = None) -> Graph:
    """``graph`` plus the Jacobian of ``output`` with respect to input ``wrt`` (shape ``y.shape + x.shape``), by
    one forward-mode sweep per element of ``x``; named ``jacfwd(<output>, <input>)``."""
    return _jacobian(graph, wrt, output, registry, "fwd")


def jacrev(graph: Graph, wrt: int | str, output: int | str = 0, *, registry: Registry | None = None) -> Graph:
    """``graph`` plus the Jacobian of ``output`` with respect to input ``wrt`` (shape ``y.shape + x.shape``), by
    one reverse-mode sweep per element of ``y``; named ``jacrev(<output>, <input>)``."""
    return _jacobian(graph, wrt, output, registry, "rev")


def hessian(graph: Graph, wrt: int | str, output: int | str = 0, *, registry: Registry | None = None) -> Graph:
    """``graph`` plus the gradient and the Hessian of the scalar ``output`` with respect to input ``wrt``
    (forward-over-reverse: ``jacfwd`` of the gradient); the Hessian has shape ``x.shape + x.shape``."""
    reg = _registry(registry)
    i, k = _one_input(graph, wrt), _float_output(graph, output)
    grad = build_backward_graph(graph, k, [i], registry=reg)
    result = jacfwd(grad, i, len(grad.outputs) - 1, registry=reg)
    result.name = f"{graph.name}_hessian"
    result.name_output(len(result.outputs) - 1,
                       f"hessian({output_label(graph, k)}, {graph.inputs[i].name or f'input {i}'})")
    return result


def hvp(graph: Graph, wrt: int | str, output: int | str = 0, *, registry: Registry | None = None) -> Graph:
    """The Hessian-vector product of the scalar ``output`` with respect to input ``wrt``, forward-over-reverse.

    Inputs: ``graph``'s inputs, then the direction ``v`` (named ``tangent:<input>``, of the input's type).
    Outputs: ``graph``'s outputs, the gradient ``grad(<output>, <input>)``, then ``H v`` named
    ``hvp(<output>, <input>)``. Costs about one gradient's forward-mode sweep: no Hessian is formed.
    """
    reg = _registry(registry)
    i, k = _one_input(graph, wrt), _float_output(graph, output)
    grad = build_backward_graph(graph, k, [i], registry=reg)
    both = build_jvp_graph(grad, [i], registry=reg)
    n_out = len(grad.outputs)
    keep = [*range(n_out), 2 * n_out - 1]
    names = [*grad.output_names, f"hvp({output_label(graph, k)}, {graph.inputs[i].name or f'input {i}'})"]
    both.outputs = [both.outputs[j] for j in keep]
    both._output_names = {j: nm for j, nm in enumerate(names) if nm}
    both.name = f"{graph.name}_hvp"
    _drop_unneeded_after(both, len(grad.nodes), reg)
    return both
