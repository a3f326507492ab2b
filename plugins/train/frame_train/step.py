"""One fused training step: forward, backward and the optimizer update as ONE compiled graph.

``TrainStep(loss, params, optimizer)`` traces ``loss(params, *data)`` at the first call (or takes a loss
``Graph`` whose inputs are named by the flattened parameter names), differentiates it with
``build_backward_graph``, inlines the optimizer's update graph after the backward pass and compiles the whole
with ``dynamic_shapes=True`` (any batch size; one compile per new shape signature). A call is one ``run``:

    inputs   [params..., data..., <transform>.<slot>:<param>..., lr, step]   (lr: one rate per parameter group)
    outputs  [loss, params'..., state'...]

Buffers and aliasing: the step owns the parameter and state arrays. A call hands them to the executable and
keeps the arrays it returns (fresh ones: the runtime never writes into an input), a swap of two lists, with no
Python per parameter. ``step.params`` and ``step.state`` return read-only views of the current arrays: a later
step never writes into an array it has handed out, so what you hold keeps the values of the moment you read
it, and nothing can change the step's buffers behind its back. Read ``step.params`` again after a step for
the new values; ``step.set_params(tree)`` / ``set_state(tree)`` replace them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import frame_core as fc
from frame_core import Graph, ShapeError, TensorType, inline_graph

from ._spine import compile_rebuilt, flatten, trace_params, type_of, unflatten
from .errors import OptimizerError, ParameterError
from .optimizers import ACCUMULATE, Optimizer
from .transforms import scalar_dtype

__all__ = ["TrainStep", "loss_position", "parameter_positions"]


def loss_position(graph: Graph) -> int:
    """The loss of a loss graph: the output named ``loss``, else output 0."""
    names = graph.output_names
    return names.index("loss") if "loss" in names else 0


def parameter_positions(graph: Graph, names: Sequence[str], types: Sequence[TensorType]) -> list[int]:
    """The input position of every parameter name; ``ParameterError`` listing every parameter the graph lacks
    or holds with another type (a parameter tree that does not match the graph)."""
    where = {v.name: i for i, v in enumerate(graph.inputs) if v.name}
    problems = []
    for p, t in zip(names, types):
        i = where.get(p)
        if i is None:
            problems.append(f"parameter {p!r} ({t}) is no input of the graph")
        elif graph.inputs[i].type != t:
            problems.append(f"parameter {p!r} is {t}, the graph's input {i} is {graph.inputs[i].type}")
    if problems:
        inputs = ", ".join(f"{v.name or i}: {v.type}" for i, v in enumerate(graph.inputs))
        raise ParameterError(f"the parameter tree does not match graph {graph.name!r} (inputs {inputs}); "
                             f"{len(problems)} problem{'s' if len(problems) > 1 else ''}:\n  " + "\n  ".join(problems))
    return [where[p] for p in names]


def _float_dtype(names: Sequence[str], types: Sequence[TensorType]) -> Any:
    dtypes = {t.dtype for t in types}
    bad = [f"{p}: {t}" for p, t in zip(names, types) if not t.dtype.is_float]
    if bad:
        raise ParameterError(f"parameters are floating-point arrays; these are not: {', '.join(bad)}")
    if len(dtypes) > 1:
        raise ParameterError(f"the parameters mix dtypes ({', '.join(f'{p}: {t}' for p, t in zip(names, types))}); "
                             "a training step updates parameters of one floating dtype: cast them to one")
    if not types:
        raise ParameterError("the parameter tree is empty: there is nothing to train")
    return types[0].dtype


def _select(graph: Graph, positions: Sequence[int], names: Sequence[str | None], name: str) -> Graph:
    """A graph with ``graph``'s inputs and only the outputs at ``positions`` (named ``names``)."""
    out = Graph(name)
    args = [out.add_input(v.type, v.name) for v in graph.inputs]
    values = inline_graph(out, graph, args)
    for k, label in zip(positions, names):
        out.mark_output(values[k], label)
    return out


def build_step_graph(loss_graph: Graph, names: Sequence[str], types: Sequence[TensorType], optimizer: Optimizer,
                     apply: bool = True) -> tuple[Graph, int]:
    """The fused graph (see the module docstring) and its number of data inputs.

    With accumulation (``optimizer.every > 1``) the inputs end with ``accumulate.g:<param>``; ``apply=False``
    builds the micro-batch graph (outputs ``[loss, accumulate.g'...]``), ``apply=True`` the one that applies
    the update to the mean of the accumulated gradients (outputs ``[loss, params'..., state'...]``).
    """
    wrt = parameter_positions(loss_graph, names, types)
    loss_at = loss_position(loss_graph)
    if loss_graph.outputs[loss_at].type.rank != 0:
        raise OptimizerError(f"the loss (output {loss_at} of graph {loss_graph.name!r}) must be a scalar, got "
                             f"{loss_graph.outputs[loss_at].type}; reduce it, e.g. with ops.mean")
    dtype = _float_dtype(names, types)
    training = fc.build_backward_graph(loss_graph, loss_at, wrt)
    data_at = [i for i in range(len(loss_graph.inputs)) if i not in set(wrt)]

    fused = Graph("train_step")
    by_position: dict[int, Any] = {}
    for i in wrt:
        by_position[i] = fused.add_input(loss_graph.inputs[i].type, loss_graph.inputs[i].name)
    for k, i in enumerate(data_at):
        by_position[i] = fused.add_input(loss_graph.inputs[i].type, loss_graph.inputs[i].name or f"data{k}")
    slots = optimizer.slot_names(names)
    for slot_name, t in zip(slots, [t for _ in optimizer.state_keys for t in types]):
        fused.add_input(t, slot_name)
    accumulated = [f"{ACCUMULATE}.g:{p}" for p in names] if optimizer.every > 1 else []
    for label, t in zip(accumulated, types):
        fused.add_input(t, label)
    fused.add_input(TensorType(scalar_dtype(dtype), optimizer.rate_shape), "lr")
    fused.add_input(TensorType(scalar_dtype(dtype), ()), "step")
    values = inline_graph(fused, training, [by_position[i] for i in range(len(loss_graph.inputs))])
    fused.mark_output(values[loss_at], "loss")
    for p, g in zip(names, values[len(loss_graph.outputs):]):
        fused.mark_output(g, f"grad(loss, {p})")
    n, s, a = len(names), len(slots), len(accumulated)
    first_state = n + len(data_at)

    def update(*v: Any) -> list[Any]:
        inputs, grads = v[:len(fused.inputs)], list(v[len(fused.inputs) + 1:])
        params = dict(zip(names, inputs[:n]))
        state = dict(zip(slots, inputs[first_state:first_state + s]))
        lr, step = inputs[-2], inputs[-1]
        if accumulated:
            sums = [acc + g for acc, g in zip(inputs[first_state + s:first_state + s + a], grads)]
            if not apply:
                return sums
            grads = [total * (1.0 / optimizer.every) for total in sums]
        new_params, new_state = optimizer.updates(params, dict(zip(names, grads)), state, lr, step)
        return [new_params[p] for p in names] + [new_state[k] for k in slots]

    labels = accumulated if (accumulated and not apply) else [*names, *slots]
    extended, positions = fc.extend_graph(fused, update, names=labels)
    positions = positions if isinstance(positions, list) else [positions]
    return _select(extended, [0, *positions], ["loss", *labels], "train_step"), len(data_at)


def build_update_graph(optimizer: Optimizer, names: Sequence[str], types: Sequence[TensorType]) -> Graph:
    """The optimizer's update alone: inputs ``[params..., grad(loss, <p>)..., state..., lr, step]``, outputs
    ``[params'..., state'...]``, named as in the fused step (``Optimizer.apply`` compiles it)."""
    dtype = _float_dtype(names, types)
    graph = Graph("update")
    for p, t in zip(names, types):
        graph.add_input(t, p)
    for p, t in zip(names, types):
        graph.add_input(t, f"grad(loss, {p})")
    slots = optimizer.slot_names(names)
    for label, t in zip(slots, [t for _ in optimizer.state_keys for t in types]):
        graph.add_input(t, label)
    graph.add_input(TensorType(scalar_dtype(dtype), optimizer.rate_shape), "lr")
    graph.add_input(TensorType(scalar_dtype(dtype), ()), "step")
    n, s = len(names), len(slots)

    def update(*v: Any) -> list[Any]:
        params, grads = dict(zip(names, v[:n])), dict(zip(names, v[n:2 * n]))
        new_params, new_state = optimizer.updates(params, grads, dict(zip(slots, v[2 * n:2 * n + s])), v[-2], v[-1])
        return [new_params[p] for p in names] + [new_state[k] for k in slots]
    extended, positions = fc.extend_graph(graph, update, names=[*names, *slots])
    return _select(extended, positions if isinstance(positions, list) else [positions], [*names, *slots], "update")


def apply_updates(optimizer: Optimizer, params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
    """``(params', state')``: one update of ``params`` by the gradient tree ``grads`` (``Optimizer.apply``)."""
    names, leaves, treedef = flatten(params)
    types = [type_of(leaf, f"parameter {p!r}") for p, leaf in zip(names, leaves)]
    gnames, gleaves, _ = flatten(grads)
    got = dict(zip(gnames, gleaves))
    problems = [f"gradient for {g!r}, which is not a parameter (the parameters are {names})"
                for g in gnames if g not in names]
    problems += [f"no gradient for parameter {p!r}" for p in names if p not in got]
    for p, t in zip(names, types):
        if p in got:
            a = np.asarray(got[p])
            if a.shape != t.shape or a.dtype != t.dtype.np:
                problems.append(f"the gradient of {p!r} is {a.dtype}{list(a.shape)}, the parameter is {t}")
    if problems:
        raise ParameterError(f"the gradient tree does not match the parameters ({len(problems)} problem"
                             f"{'s' if len(problems) > 1 else ''}):\n  " + "\n  ".join(problems))
    if optimizer.every > 1:
        raise OptimizerError("Optimizer.apply takes one gradient per update; accumulate() works inside TrainStep "
                             "(or sum the micro-batch gradients yourself)")
    arrays, count, _ = optimizer.flat_state(state, names, types)
    key = (tuple(names), tuple(types))
    exe = optimizer._compiled.get(key)
    if exe is None:
        exe = optimizer._compiled[key] = fc.compile(build_update_graph(optimizer, names, types))
    dt = scalar_dtype(types[0].dtype).np
    outs = exe.run([*leaves, *(got[p] for p in names), *arrays, np.asarray(optimizer.rates(count), dt),
                    np.asarray(count + 1, dt)])
    n = len(names)
    return unflatten(treedef, outs[:n]), optimizer.state_tree(treedef, n, outs[n:], count + 1, 0)


class TrainStep:
    """``loss = step(*batch)``: one fused forward + backward + update per call (see the module docstring).

    ``loss`` is a function ``loss(params, *data) -> scalar`` (traced at the first call, with the first batch's
    types; later batches may have any batch size) or a loss ``Graph`` whose inputs include one named by every
    flattened parameter name (the loss is its output named ``loss``, else output 0). ``state`` resumes from an
    earlier ``step.state`` (``optimizer.init(params)`` by default).
    """

    def __init__(self, loss: Callable[..., Any] | Graph, params: Any, optimizer: Optimizer, *, state: Any = None,
                 data_names: Sequence[str] | None = None) -> None:
        if not isinstance(optimizer, Optimizer):
            raise OptimizerError(f"TrainStep(loss, params, optimizer) takes a frame_train optimizer (adam(1e-3), "
                                 f"chain(...)), got {type(optimizer).__name__}")
        if not isinstance(loss, Graph) and not callable(loss):
            raise OptimizerError(f"TrainStep(loss, ...) takes a function loss(params, *data) or a loss Graph, got "
                                 f"{type(loss).__name__}")
        self.loss = loss
        self.optimizer = optimizer
        self.data_names = data_names
        names, leaves, self._treedef = flatten(params)
        self.names: list[str] = list(names)
        self.types = [type_of(leaf, f"parameter {p!r}") for p, leaf in zip(names, leaves)]
        self.dtype = _float_dtype(self.names, self.types)
        self._params = [np.array(leaf, dtype=t.dtype.np, order="C") for leaf, t in zip(leaves, self.types)]
        self._zeros: list[np.ndarray] = []
        self.set_state(optimizer.init(params) if state is None else state)
        self._apply_exe: Any = None
        self._micro_exe: Any = None
        self.graph: Graph | None = None  # the fused graph, once built
        self.loss_graph: Graph | None = None
        self.n_data: int | None = None

    # -- the buffers ----------------------------------------------------------------------------------------------
    @property
    def params(self) -> Any:
        """The parameters now, as a tree of read-only views (later steps never write into them)."""
        return unflatten(self._treedef, [_frozen(a) for a in self._params])

    @property
    def state(self) -> dict[str, Any]:
        """The optimizer state now (a tree: ``{"step": count, "<transform>": {"<slot>": params-like}}``)."""
        n = len(self.names)
        flat = [_frozen(a) for a in self._state + self._accumulated]
        return self.optimizer.state_tree(self._treedef, n, flat, self.count, self._micro)

    @property
    def count(self) -> int:
        """Updates applied so far (the schedule's position)."""
        return self._count

    def set_params(self, params: Any) -> None:
        """Replace the parameters (a tree of the same names, shapes and dtypes); ``ParameterError`` otherwise."""
        names, leaves, _ = flatten(params)
        problems = [f"missing {p!r}" for p in self.names if p not in names]
        problems += [f"unexpected {p!r}" for p in names if p not in self.names]
        got = dict(zip(names, leaves))
        arrays = []
        for p, t in zip(self.names, self.types):
            if p in got:
                a = np.asarray(got[p])
                if a.shape != t.shape or a.dtype != t.dtype.np:
                    problems.append(f"{p!r} is {a.dtype}{list(a.shape)}, expected {t}")
                arrays.append(a)
        if problems:
            raise ParameterError("the parameter tree does not match this training step: " + "; ".join(problems))
        self._params = [np.array(a, order="C") for a in arrays]

    def set_state(self, state: Any) -> None:
        """Replace the optimizer state (``step.state`` of a step of the same model and optimizer)."""
        arrays, self._count, self._micro = self.optimizer.flat_state(state, self.names, self.types)
        copies = [np.array(a, order="C") for a in arrays]
        k = len(self.optimizer.state_keys) * len(self.names)
        self._state, self._accumulated = copies[:k], copies[k:]
        if self.optimizer.every > 1:
            self._zeros = [_frozen(np.zeros(t.shape, t.dtype.np)) for t in self.types]

    # -- building -------------------------------------------------------------------------------------------------
    def _build(self, data: Sequence[Any]) -> None:
        from frame_core import specialize

        if isinstance(self.loss, Graph):
            loss_graph = self.loss
        else:
            loss_graph = trace_params(self.loss, self.params, *data, data_names=self.data_names)
        wrt = parameter_positions(loss_graph, self.names, self.types)
        data_at = [i for i in range(len(loss_graph.inputs)) if i not in set(wrt)]
        loss_order = wrt + data_at  # the fused graph's leading inputs, as positions of the loss graph's

        def compiled(apply: bool) -> Any:
            graph, _ = build_step_graph(loss_graph, self.names, self.types, self.optimizer, apply=apply)

            def rebuild(types: list[TensorType]) -> Graph:  # a new batch size
                try:  # every gradient on the chain reads its sizes (any_shape_gradient): the step graph itself
                    return specialize(graph, types)
                except ShapeError:  # it may hold the traced sizes: specialise the loss, derive again
                    pass
                loss_types: list[Any] = [None] * len(loss_graph.inputs)
                for k, i in enumerate(loss_order):
                    loss_types[i] = types[k]
                return build_step_graph(specialize(loss_graph, loss_types), self.names, self.types,
                                        self.optimizer, apply=apply)[0]
            return graph, compile_rebuilt(graph, rebuild)

        self.loss_graph = loss_graph
        self.graph, self._apply_exe = compiled(True)
        self.n_data = len(data_at)
        if self.optimizer.every > 1:
            self._micro_exe = compiled(False)[1]

    def executables(self) -> list[Any]:
        """The compiled executables (one; two with gradient accumulation), once the first call built them."""
        return [e for e in (self._apply_exe, self._micro_exe) if e is not None]

    # -- running --------------------------------------------------------------------------------------------------
    def __call__(self, *data: Any) -> float:
        """One training step on a batch; returns the loss (a float)."""
        if self._apply_exe is None:
            self._build(data)
        if len(data) != self.n_data:
            raise OptimizerError(f"this training step takes {self.n_data} data input"
                                 f"{'s' if self.n_data != 1 else ''} per call (as at its first call), got {len(data)}")
        every = self.optimizer.every
        if every > 1 and self._micro + 1 < every:
            outs = self._micro_exe.run([*self._params, *data, *self._state, *self._accumulated,
                                        self._scalar(np.zeros(self.optimizer.rate_shape)), self._scalar(0.0)])
            self._accumulated = outs[1:]
            self._micro += 1
            return float(outs[0])
        lr = self.optimizer.rates(self._count)
        outs = self._apply_exe.run([*self._params, *data, *self._state, *self._accumulated,
                                    self._scalar(lr), self._scalar(self._count + 1)])
        n = len(self._params)
        self._params = outs[1:n + 1]
        self._state = outs[n + 1:]
        if every > 1:
            self._accumulated = self._zeros  # read-only zeros: the runtime never writes into inputs
            self._micro = 0
        self._count += 1
        return float(outs[0])

    def _scalar(self, value: Any) -> np.ndarray:
        return np.asarray(value, scalar_dtype(self.dtype).np)

    def save(self, path: Any, metadata: dict[str, Any] | None = None) -> None:
        """A checkpoint of the parameters, the optimizer state and the step count (``frame_core.save_checkpoint``)."""
        fc.save_checkpoint(path, {"params": self.params, "state": self.state}, step=self.count, metadata=metadata)

    def load(self, path: Any) -> None:
        """Resume from ``save``'s checkpoint: ``ParameterError`` listing every mismatch for another model's."""
        trees = fc.load_checkpoint(path, like={"params": self.params, "state": self.state})
        trees = getattr(trees, "trees", trees)
        self.set_params(trees["params"])
        self.set_state(trees["state"])

    def __repr__(self) -> str:
        return (f"<TrainStep {len(self.names)} parameters, {self.optimizer!r:.80}, {self.count} updates"
                f"{'' if self.graph is None else f', {len(self.graph.nodes)} nodes'}>")


def _frozen(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
