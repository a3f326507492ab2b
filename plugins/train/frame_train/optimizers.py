"""``Optimizer``: a chain of transforms with named state, and the optimizers users know by name.

``chain(*transforms)`` is an optimizer; ``sgd``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad`` and ``lion`` are
chains with torch.optim's arguments and defaults. ``accumulate(optimizer, every=k)`` applies the update once
every ``k`` micro-batches to the mean of their gradients (optax's MultiSteps).

State is a tree: ``{"step": int64 count of applied updates, "<transform>": {"<slot>": <tree like the
parameters>}}`` (``{"adam": {"m": {...}, "v": {...}}}``), so a checkpoint stores it by path. In a graph the
slot of a parameter is the input/output named ``<transform>.<slot>:<param>`` (``adam.m:fc1.w``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import OptimizerError, ParameterError
from .schedules import _integral, evaluate
from .transforms import Context, Transform, add_decayed_weights, scale_by_adam, scale_by_learning_rate, \
    scale_by_lion, scale_by_rms, scale_by_rss, trace

__all__ = ["Optimizer", "chain", "accumulate", "sgd", "adam", "adamw", "rmsprop", "adagrad", "lion"]

ACCUMULATE = "accumulate"  # the state entry of gradient accumulation: {"g": tree, "count": int64[]}


class Optimizer:
    """A chain of ``Transform``s; the new parameter is ``p + chain(grad)``.

    ``state_keys``: ``(state name, transform, slot)`` of every per-parameter slot, in graph order; the state
    name is the transform's ``name``, suffixed ``_1``, ``_2``... when two transforms of a chain share it.
    """

    def __init__(self, transforms: Sequence[Transform], every: int = 1) -> None:
        for i, t in enumerate(transforms):
            if not isinstance(t, Transform):
                raise OptimizerError(f"chain() takes frame_train transforms (scale_by_adam(), clip_by_global_norm(1.0), "
                                     f"...), got {type(t).__name__} {t!r:.40} at position {i}")
        self.transforms = tuple(transforms)
        self.every = every
        rates = [t for t in self.transforms if isinstance(t, scale_by_learning_rate)]
        if len(rates) > 1:
            raise OptimizerError(f"a chain has at most one scale_by_learning_rate, got {len(rates)}")
        self.schedule = rates[0].learning_rate if rates else None
        self.state_names: list[str] = []
        seen: dict[str, int] = {}
        for t in self.transforms:
            k = seen.get(t.name, 0)
            seen[t.name] = k + 1
            self.state_names.append(t.name if k == 0 else f"{t.name}_{k}")
        self.state_keys = [(sname, t, slot) for sname, t in zip(self.state_names, self.transforms) for slot in t.slots]
        self._compiled: dict[Any, Any] = {}  # (names, types) -> the compiled update graph of ``apply``

    def __repr__(self) -> str:
        inner = f"chain({', '.join(map(repr, self.transforms))})"
        return inner if self.every == 1 else f"accumulate({inner}, every={self.every})"

    # -- the learning rate -----------------------------------------------------------------------------------
    def learning_rate(self, count: int) -> float:
        """The rate fed to the graph for update ``count`` (0 first); ``ScheduleError`` naming the step when the
        schedule gives NaN, infinity or a negative number. A chain without ``scale_by_learning_rate`` reads none."""
        return 0.0 if self.schedule is None else evaluate(self.schedule, count)

    # -- state ------------------------------------------------------------------------------------------------
    def slot_names(self, names: Sequence[str]) -> list[str]:
        """The graph names of the state inputs/outputs for parameters ``names``, in graph order."""
        return [f"{sname}.{slot}:{p}" for sname, _, slot in self.state_keys for p in names]

    def init(self, params: Any) -> dict[str, Any]:
        """The starting state for ``params`` (a tree of arrays): every slot filled with its initial value."""
        from ._spine import flatten, unflatten

        names, leaves, treedef = flatten(params)
        arrays = [np.asarray(leaf) for leaf in leaves]
        flat = [np.full_like(a, t.initial(slot)) for _, t, slot in self.state_keys for a in arrays]
        extra = [np.zeros_like(a) for a in arrays] if self.every > 1 else []
        return self.state_tree(treedef, len(names), flat + extra, 0, 0)

    def state_tree(self, treedef: Any, n: int, flat: Sequence[np.ndarray], count: int, micro: int) -> dict[str, Any]:
        """The state tree from its flat arrays (graph order, then the accumulated gradients)."""
        from ._spine import unflatten

        tree: dict[str, Any] = {"step": np.asarray(count, np.int64)}
        for k, (sname, _, slot) in enumerate(self.state_keys):
            tree.setdefault(sname, {})[slot] = unflatten(treedef, list(flat[k * n:(k + 1) * n]))
        if self.every > 1:
            rest = flat[len(self.state_keys) * n:]
            tree[ACCUMULATE] = {"g": unflatten(treedef, list(rest)), "count": np.asarray(micro, np.int64)}
        return tree

    def flat_state(self, state: Any, names: Sequence[str], types: Sequence[Any]) -> tuple[list[np.ndarray], int, int]:
        """``(arrays in graph order (+ accumulated gradients), step count, micro-batch count)`` of a state tree;
        ``ParameterError`` listing every missing, unexpected, misshaped or mistyped entry (a state of another
        model or another optimizer)."""
        from ._spine import flatten

        if not isinstance(state, dict):
            raise ParameterError(f"an optimizer state is the dict optimizer.init(params) returns, got "
                                 f"{type(state).__name__}")
        problems: list[str] = []
        groups = [(sname, slot) for sname, _, slot in self.state_keys]
        if self.every > 1:
            groups.append((ACCUMULATE, "g"))
        expected_top = {"step"} | {g[0] for g in groups} | ({ACCUMULATE} if self.every > 1 else set())
        for key in sorted(set(state) - expected_top, key=str):
            problems.append(f"unexpected entry {key!r} (this optimizer keeps {sorted(expected_top)})")
        arrays: list[np.ndarray] = []
        for sname, slot in groups:
            sub = state.get(sname)
            if not isinstance(sub, dict) or slot not in sub:
                problems.append(f"missing {sname}.{slot} (one array per parameter)")
                continue
            got_names, leaves, _ = flatten(sub[slot])
            got = dict(zip(got_names, leaves))
            for p, t in zip(names, types):
                if p not in got:
                    problems.append(f"{sname}.{slot}:{p} is missing")
                    continue
                a = np.asarray(got[p])
                if a.shape != t.shape or a.dtype != t.dtype.np:
                    problems.append(f"{sname}.{slot}:{p} is {a.dtype}{list(a.shape)}, the parameter is {t}")
                arrays.append(a)
            for p in got_names:
                if p not in names:
                    problems.append(f"{sname}.{slot}:{p} names no parameter of this model")
        count = self._counter(state.get("step"), "step", problems)
        micro = self._counter(state.get(ACCUMULATE, {}).get("count") if self.every > 1 else 0,
                              f"{ACCUMULATE}.count", problems)
        if problems:
            raise ParameterError(f"the optimizer state does not match this model and optimizer ({self!r:.80}); "
                                 f"{len(problems)} problem{'s' if len(problems) > 1 else ''}:\n  "
                                 + "\n  ".join(problems)
                                 + "\nBuild the state with optimizer.init(params) for these parameters.")
        return arrays, count, micro

    @staticmethod
    def _counter(value: Any, what: str, problems: list[str]) -> int:
        try:
            number = int(np.asarray(value)) if value is not None and np.ndim(value) == 0 else None
        except (TypeError, ValueError):
            number = None
        if number is None or number < 0:
            problems.append(f"{what} is {value!r:.30}; expected a count >= 0 (an int or a 0-d integer array)")
            return 0
        return number

    def apply(self, params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
        """One update outside a ``TrainStep``: ``(params', state')`` from the gradient tree ``grads`` (for example
        ``frame_core.value_and_grad``'s); ``ParameterError`` for a gradient of a name that is no parameter, a
        missing one, or a state of another model. Compiled once per parameter structure."""
        from .step import apply_updates

        return apply_updates(self, params, grads, state)

    # -- the graph ---------------------------------------------------------------------------------------------
    def updates(self, params: dict[str, Any], grads: dict[str, Any], state: dict[str, Any], lr: Any,
                step: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The new parameters and state (traced tensors, by graph name) from the gradients ``grads``."""
        dtype = next(iter(params.values())).dtype if params else None
        ctx = Context(params, lr, step, wide_lr=lr, wide_step=step, dtype=dtype)
        if dtype is not None and getattr(lr, "dtype", dtype) != dtype:  # half precision: lr, step fed as float32
            ctx.lr, ctx.step = ctx.narrow(lr), ctx.narrow(step)
        prepared = [t.prepare(ctx) for t in self.transforms]
        u = dict(grads)
        new_state: dict[str, Any] = {}
        for sname, t, ready in zip(self.state_names, self.transforms, prepared):
            ctx.prepared = ready
            slots = {slot: {p: state[f"{sname}.{slot}:{p}"] for p in params} for slot in t.slots}
            u, out = t.update(u, slots, ctx)
            for slot in t.slots:
                for p in params:
                    new_state[f"{sname}.{slot}:{p}"] = out[slot][p]
        return {p: params[p] + u[p] for p in params}, new_state


def chain(*transforms: Transform) -> Optimizer:
    """An optimizer from transforms applied in order (``chain(clip_by_global_norm(1.0), scale_by_adam(),
    scale_by_learning_rate(1e-3))``)."""
    return Optimizer(transforms)


def accumulate(optimizer: Optimizer, every: int) -> Optimizer:
    """``optimizer`` applied once every ``every`` calls, to the mean of their gradients; the other calls only
    add their gradient (state ``accumulate.g``, ``accumulate.count``) and leave the parameters alone."""
    if not isinstance(optimizer, Optimizer):
        raise OptimizerError(f"accumulate(optimizer, every) takes a frame_train optimizer, got "
                             f"{type(optimizer).__name__}")
    if not _integral(every) or every < 1:
        raise OptimizerError(f"accumulate(every=) is the number of micro-batches per update, an int >= 1, got "
                             f"{every!r:.30}")
    if optimizer.every != 1:
        raise OptimizerError("accumulate() of an optimizer that already accumulates: give the product of the two "
                             "counts to one accumulate()")
    return Optimizer(optimizer.transforms, int(every))


def _l2(weight_decay: float) -> list[Transform]:
    return [add_decayed_weights(weight_decay)] if weight_decay else []


def sgd(learning_rate: Any = 1e-3, momentum: float = 0.0, nesterov: bool = False,
        weight_decay: float = 0.0) -> Optimizer:
    """torch.optim.SGD (dampening 0): L2 ``weight_decay``, heavy-ball or Nesterov ``momentum``."""
    if nesterov and not momentum:
        raise OptimizerError("sgd(nesterov=True) needs a momentum > 0 (as torch.optim.SGD)")
    steps = _l2(weight_decay) + ([trace(momentum, nesterov)] if momentum else [])
    return chain(*steps, scale_by_learning_rate(learning_rate))


def adam(learning_rate: Any = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0, amsgrad: bool = False) -> Optimizer:
    """torch.optim.Adam: ``weight_decay`` is L2 (added to the gradient); see ``adamw`` for decoupled decay."""
    return chain(*_l2(weight_decay), scale_by_adam(b1, b2, eps, amsgrad), scale_by_learning_rate(learning_rate))


def adamw(learning_rate: Any = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 1e-2, mask: Any = None, amsgrad: bool = False) -> Optimizer:
    """torch.optim.AdamW: decoupled weight decay ``p -= lr * weight_decay * p`` on the parameters ``mask``
    selects (a name predicate or fnmatch patterns; all by default)."""
    return chain(scale_by_adam(b1, b2, eps, amsgrad), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate: Any = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
            momentum: float = 0.0, centered: bool = False) -> Optimizer:
    """torch.optim.RMSprop (momentum on the scaled gradient, as torch)."""
    steps = _l2(weight_decay) + [scale_by_rms(alpha, eps, centered)] + ([trace(momentum)] if momentum else [])
    return chain(*steps, scale_by_learning_rate(learning_rate))


def adagrad(learning_rate: Any = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
            initial_accumulator_value: float = 0.0, eps: float = 1e-10) -> Optimizer:
    """torch.optim.Adagrad."""
    return chain(*_l2(weight_decay), scale_by_rss(initial_accumulator_value, eps),
                 scale_by_learning_rate(learning_rate, lr_decay))


def lion(learning_rate: Any = 1e-4, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 0.0,
         mask: Any = None) -> Optimizer:
    """Lion (Chen et al. 2023, as optax.lion): the sign of an interpolated momentum, decoupled weight decay."""
    steps: list[Transform] = [scale_by_lion(b1, b2)]
    if weight_decay:
        steps.append(add_decayed_weights(weight_decay, mask))
    return chain(*steps, scale_by_learning_rate(learning_rate))
