"""``value_and_grad`` and ``grad``: trace, differentiate and compile a loss over a parameter tree, cached.

The function-level entry point for the common case (docs/design-parameters-and-shapes.md):

    step = fc.value_and_grad(lambda params, x, y: ops.mse_loss(model(params, x), y))
    loss, grads = step(params, x, y)       # grads: the same tree as params

Built only from the graph transforms: ``trace_params`` (the parameters become graph inputs named by
path), ``build_backward_graph`` w.r.t. those inputs, ``compile``. One trace serves every batch size:
a new shape signature re-specialises the training graph when every op on its chain declares
``any_shape_gradient``, else specialises the traced forward graph and differentiates it again (no Python is
re-traced either way; the compiled programs are the same). A new tree structure, or new dtypes or ranks,
traces again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..ir.graph import Graph
from ..ir.types import TensorType

__all__ = ["value_and_grad", "grad", "ValueAndGrad"]


def _as_array(value: Any) -> Any:
    """``value`` if it is a numpy array or has a numpy dtype, else ``np.asarray(value)`` (lists, numbers, and
    tensors of other libraries whose dtype numpy cannot read, such as torch's, which the cache key needs)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        try:
            np.dtype(value.dtype)
            return value
        except TypeError:
            pass
    try:
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as exc:  # a torch tensor that requires grad, say
        raise ParameterError(f"parameters and data are arrays (numpy, or anything numpy.asarray reads); "
                             f"{type(value).__name__} could not be read: {str(exc)[:200]}") from None


class _Traced:
    """One trace: the forward and training graphs and their executable, for one structure and signature."""

    __slots__ = ("forward", "training", "exe", "names", "aux_def", "n_aux")

    def __init__(self, forward: Graph, training: Graph, exe: Any, names: list[str], aux_def: Any,
                 n_aux: int) -> None:
        self.forward, self.training, self.exe = forward, training, exe
        self.names, self.aux_def, self.n_aux = names, aux_def, n_aux


class ValueAndGrad:
    """``(params, *data) -> (loss, grads)`` (``((loss, aux), grads)`` with ``has_aux``); see the module doc."""

    def __init__(self, fn: Callable[..., Any], *, has_aux: bool = False, return_value: bool = True,
                 backend: str = "cpu", opt_level: int = 2, maxsize: int = 8) -> None:
        if not callable(fn):
            raise ParameterError(f"value_and_grad takes a function fn(params, *data) -> loss, got {type(fn).__name__}")
        if not isinstance(has_aux, bool):
            raise ParameterError(f"has_aux= is True or False, got {has_aux!r}")
        self.fn = fn
        self.has_aux = has_aux
        self._return_value = return_value
        self._options: dict[str, Any] = dict(backend=backend, opt_level=opt_level)
        self._traces: OrderedDict[Any, _Traced] = OrderedDict()
        self._maxsize = maxsize
        self.traces = 0  # how often fn was traced (a new structure, dtype or rank)

    # -- tracing ------------------------------------------------------------------------------------
    def _trace(self, treedef: Any, leaves: list[Any], data: list[Any]) -> _Traced:
        from ..compiler.api import compile as compile_graph
        from ..compiler.specialize import specialize
        from ..ir.graph import traced_sizes
        from ..params import trace_params, unflatten, _optree
        from ..runtime.dynamic import DynamicExecutable
        from .backward import build_backward_graph

        aux: dict[str, Any] = {}

        def body(params: Any, *args: Any) -> Any:
            result = self.fn(params, *args)
            if not self.has_aux:
                return result
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise ParameterError("with has_aux=True the function returns (loss, aux), where aux is a tensor or "
                                     f"a tree of tensors; it returned {type(result).__name__}")
            loss, extra = result
            aux_leaves, aux["def"] = _optree().tree_flatten(extra, namespace="frame")
            return [loss, *aux_leaves]

        params = unflatten(treedef, leaves)
        forward = trace_params(body, params, *data, name=getattr(self.fn, "__name__", "loss").replace("<lambda>", "loss"))
        self.traces += 1
        names = [str(v.name) for v in forward.inputs[:len(leaves)]]
        not_float = [f"{n}: {v.type}" for n, v in zip(names, forward.inputs) if not v.type.dtype.is_float]
        if not_float:
            raise ParameterError(f"gradients are taken w.r.t. every parameter, and these are not floating point: "
                                 f"{', '.join(not_float)}; pass integer or boolean arrays as data arguments instead")
        forward.name_output(0, "loss")

        def derive(graph: Graph) -> Graph:
            return build_backward_graph(graph, 0, list(range(len(names))),
                                        names=[f"grad(loss, {n})" for n in names])

        training = derive(forward)
        base = compile_graph(training, **self._options)
        if traced_sizes(training) is None:  # every gradient on the chain reads its sizes: re-specialise it
            def regraph(types: list[TensorType]) -> Graph:
                return specialize(training, types)
        else:  # a gradient may hold the traced sizes: specialise the forward graph and differentiate it again
            def regraph(types: list[TensorType]) -> Graph:
                return derive(specialize(forward, types))
        exe = DynamicExecutable(base, regraph, dict(self._options, cache=True))
        n_aux = len(forward.outputs) - 1
        return _Traced(forward, training, exe, names, aux.get("def"), n_aux)

    def _lookup(self, params: Any, data: tuple[Any, ...]) -> tuple[_Traced, list[Any], Any, list[Any]]:
        from ..params import flatten

        names, leaves, treedef = flatten(params)
        leaves = [_as_array(v) for v in leaves]
        arrays = [_as_array(v) for v in data]
        try:
            key = (treedef, tuple([(np.dtype(a.dtype), len(a.shape)) for a in leaves]),
                   tuple([(np.dtype(a.dtype), len(a.shape)) for a in arrays]))
        except TypeError as exc:
            raise ParameterError(f"parameters and data are arrays (numpy or with __array__); {exc}") from None
        traced = self._traces.get(key)
        if traced is None:
            traced = self._trace(treedef, leaves, arrays)
            self._traces[key] = traced
            while len(self._traces) > self._maxsize:
                self._traces.popitem(last=False)
        else:
            self._traces.move_to_end(key)
        return traced, leaves, treedef, arrays

    # -- calling ------------------------------------------------------------------------------------
    def __call__(self, params: Any, *data: Any) -> Any:
        from ..params import unflatten

        traced, leaves, treedef, arrays = self._lookup(params, data)
        outs = traced.exe.run([*leaves, *arrays])
        n = 1 + traced.n_aux
        grads = unflatten(treedef, outs[n:])
        if not self._return_value:
            return grads
        loss = outs[0]
        if self.has_aux:
            from ..params import _optree

            return (loss, _optree().tree_unflatten(traced.aux_def, outs[1:n])), grads
        return loss, grads

    def graph(self, params: Any, *data: Any) -> Graph:
        """The training graph (``[loss, aux..., grad(loss, <name>)...]``) for these arguments' structure."""
        return self._lookup(params, data)[0].training

    def input_types(self, params: Any, *data: Any) -> list[TensorType]:
        return self.graph(params, *data).input_types


def value_and_grad(fn: Callable[..., Any], *, has_aux: bool = False, backend: str = "cpu",
                   opt_level: int = 2) -> ValueAndGrad:
    """``fn(params, *data) -> scalar loss`` as a cached callable returning ``(loss, grads)``.

    ``params`` is a parameter tree (nested dicts/lists/tuples of float arrays); ``grads`` has its structure.
    With ``has_aux=True``, ``fn`` returns ``(loss, aux)`` and the call ``((loss, aux), grads)``. Any batch
    size runs from one trace (ARCH-061: the training graph is ``build_backward_graph`` of the trace).
    """
    return ValueAndGrad(fn, has_aux=has_aux, backend=backend, opt_level=opt_level)


def grad(fn: Callable[..., Any], *, has_aux: bool = False, backend: str = "cpu", opt_level: int = 2) -> ValueAndGrad:
    """As :func:`value_and_grad`, returning only the gradient tree."""
    return ValueAndGrad(fn, has_aux=has_aux, return_value=False, backend=backend, opt_level=opt_level)
