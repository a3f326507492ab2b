"""``Optimizer``: a chain of transforms with named state, and the optimizers users know by name.

``chain(*transforms)`` is an optimizer; ``sgd``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad`` and ``lion`` are
chains with torch.optim's arguments and defaults (``maximize`` too). ``accumulate(optimizer, every=k)`` applies
the update once every ``k`` micro-batches to the mean of their gradients (optax's MultiSteps).

Parameter groups (torch's ``param_groups``): ``param_groups(default, (select, optimizer), ...)`` updates the
parameters each ``select`` picks (name patterns or a predicate of the name) with that optimizer, the rest with
``default``; the named optimizers take ``groups=[group(select, **hyper-parameters)]`` for the same thing.
Every group's learning rate is a runtime input (``lr`` is then a vector, one rate per group, default first).

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
from .transforms import Context, Transform, _mask, add_decayed_weights, scale, scale_by_adam, \
    scale_by_learning_rate, scale_by_lion, scale_by_rms, scale_by_rss, trace

__all__ = ["Optimizer", "chain", "accumulate", "param_groups", "group", "Group", "sgd", "adam", "adamw", "rmsprop",
           "adagrad", "lion"]

ACCUMULATE = "accumulate"  # the state entry of gradient accumulation: {"g": tree, "count": int64[]}


class Optimizer:
    """A chain of ``Transform``s; the new parameter is ``p + chain(grad)``.

    ``state_keys``: ``(state name, transform, slot)`` of every per-parameter slot, in graph order; the state
    name is the transform's ``name``, suffixed ``_1``, ``_2``... when two transforms of a chain share it.

    ``groups``: ``((select, optimizer), ...)``, torch's further parameter groups (``param_groups``); the chain
    itself updates the parameters no group selects. ``state_keys`` then holds every group's slots: a parameter
    whose group has no such slot keeps it unchanged.
    """

    def __init__(self, transforms: Sequence[Transform], every: int = 1,
                 groups: Sequence[tuple[Any, "Optimizer"]] = ()) -> None:
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
        self.groups = tuple(groups)
        for _, other in self.groups:
            for key in other.state_keys:
                if all((key[0], key[2]) != (k[0], k[2]) for k in self.state_keys):
                    self.state_keys.append(key)
        self._compiled: dict[Any, Any] = {}  # (names, types) -> the compiled update graph of ``apply``

    def __repr__(self) -> str:
        inner = f"chain({', '.join(map(repr, self.transforms))})"
        if self.groups:
            inner = f"param_groups({inner}, {', '.join(f'({s!r:.40}, {o!r})' for s, o in self.groups)})"
        return inner if self.every == 1 else f"accumulate({inner}, every={self.every})"

    # -- parameter groups ------------------------------------------------------------------------------------
    def assign(self, names: Sequence[str]) -> dict[str, int]:
        """The group of every parameter name: 0 for the default chain, ``k`` for ``groups[k - 1]``.
        ``OptimizerError`` for a parameter two groups select, and for a group that selects none."""
        owner: dict[str, int] = {}
        for k, (select, _) in enumerate(self.groups, start=1):
            chosen = _mask(select)
            hits = []
            for name in names:
                picked = chosen(name)
                if isinstance(picked, np.bool_):
                    picked = bool(picked)
                if not isinstance(picked, bool):
                    raise OptimizerError(f"the selector of parameter group {k} returned {type(picked).__name__} "
                                         f"{picked!r:.30} for parameter {name!r}; it must return True or False")
                if picked:
                    hits.append(name)
            if not hits:
                raise OptimizerError(f"parameter group {k} ({select!r:.60}) selects no parameter; the parameters "
                                     f"are {list(names)[:20]}{' ...' if len(names) > 20 else ''}")
            for name in hits:
                if name in owner:
                    raise OptimizerError(f"parameter {name!r} is in parameter groups {owner[name]} and {k}; a "
                                         "parameter belongs to one group (as in torch): narrow the selectors")
                owner[name] = k
        return {name: owner.get(name, 0) for name in names}

    def _members(self) -> tuple["Optimizer", ...]:
        return (self, *(o for _, o in self.groups))

    @property
    def rate_shape(self) -> tuple[int, ...]:
        """The shape of the ``lr`` input: a scalar, or one rate per group (the default chain's first)."""
        return (1 + len(self.groups),) if self.groups else ()

    def rates(self, count: int) -> Any:
        """What the ``lr`` input is fed for update ``count``: ``learning_rate(count)``, one per group with groups."""
        if not self.groups:
            return self.learning_rate(count)
        return [member.learning_rate(count) for member in self._members()]

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
        if self.groups:  # a slot starts at the value its parameter's own group gives it (Adagrad's accumulator)
            members = self._members()
            owner = self.assign(names)
            flat = [np.full_like(a, self._initial(members[owner[p]], sname, t, slot))
                    for sname, t, slot in self.state_keys for p, a in zip(names, arrays)]
        else:
            flat = [np.full_like(a, t.initial(slot)) for _, t, slot in self.state_keys for a in arrays]
        extra = [np.zeros_like(a) for a in arrays] if self.every > 1 else []
        return self.state_tree(treedef, len(names), flat + extra, 0, 0)

    @staticmethod
    def _initial(member: "Optimizer", sname: str, t: Transform, slot: str) -> float:
        for name, own, own_slot in member.state_keys:
            if (name, own_slot) == (sname, slot):
                return own.initial(slot)
        return t.initial(slot)

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
        """The new parameters and state (traced tensors, by graph name) from the gradients ``grads``; with
        groups, ``lr`` holds one rate per group and each group's chain updates its own parameters."""
        if not self.groups:
            return self._chain_updates(params, grads, state, lr, step)
        owner = self.assign(list(params))
        new_params: dict[str, Any] = {}
        new_state: dict[str, Any] = {}
        for k, member in enumerate(self._members()):
            names = [p for p in params if owner[p] == k]
            if not names:
                continue
            mine = set(names)
            p2, s2 = member._chain_updates({p: params[p] for p in names}, {p: grads[p] for p in names},
                                           {key: v for key, v in state.items() if key.split(":", 1)[1] in mine},
                                           lr[k], step, list(params))
            new_params.update(p2)
            new_state.update(s2)
        for key, value in state.items():  # a slot of another group's chain: this parameter keeps it as it is
            new_state.setdefault(key, value)
        return {p: new_params[p] for p in params}, new_state

    def _chain_updates(self, params: dict[str, Any], grads: dict[str, Any], state: dict[str, Any], lr: Any,
                       step: Any, all_names: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        dtype = next(iter(params.values())).dtype if params else None
        ctx = Context(params, lr, step, wide_lr=lr, wide_step=step, dtype=dtype, all_names=all_names)
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
    return Optimizer(optimizer.transforms, int(every), optimizer.groups)


def param_groups(default: Optimizer, *groups: tuple[Any, Optimizer]) -> Optimizer:
    """torch's parameter groups: each ``(select, optimizer)`` updates the parameters ``select`` picks (fnmatch
    patterns such as ``["*.b", "norm*"]``, or a predicate of the parameter name), ``default`` the others. A
    parameter two groups select, or a group that selects none, is an ``OptimizerError`` when the step is
    built. Each group keeps its own learning rate (a number or a schedule), fed at run time."""
    if not isinstance(default, Optimizer):
        raise OptimizerError(f"param_groups(default, (select, optimizer), ...) takes a frame_train optimizer first, "
                             f"got {type(default).__name__}")
    checked = []
    for k, item in enumerate(groups, start=1):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Optimizer)):
            raise OptimizerError(f"parameter group {k} is a pair (select, optimizer) such as (['*.b'], "
                                 f"ft.sgd(0.1)), got {item!r:.60}")
        select, optimizer = item
        _mask(select)  # a bad selector is refused now, not at the first step
        if optimizer.every != 1 or optimizer.groups:
            raise OptimizerError(f"parameter group {k}: its optimizer is a plain chain (no accumulate(), no groups "
                                 "of its own); accumulate the whole: accumulate(param_groups(...), every)")
        checked.append((select, optimizer))
    if default.every != 1 or default.groups:
        raise OptimizerError("param_groups(default, ...): the default is a plain chain; accumulate the whole: "
                             "accumulate(param_groups(...), every)")
    if not checked:
        return default
    return Optimizer(default.transforms, 1, checked)


class Group:
    """One parameter group of a named optimizer: the parameters ``select`` picks get ``hyper`` (``group``)."""

    def __init__(self, select: Any, hyper: dict[str, Any]) -> None:
        _mask(select)
        self.select = select
        self.hyper = hyper

    def __repr__(self) -> str:
        return f"group({self.select!r:.40}, {', '.join(f'{k}={v!r}' for k, v in self.hyper.items())})"


def group(select: Any, **hyper: Any) -> Group:
    """A parameter group for a named optimizer's ``groups=``: the parameters ``select`` picks (fnmatch patterns or
    a predicate of the name) get these hyper-parameters (``learning_rate=1e-4``, ``weight_decay=0.0``, ...), the
    others the optimizer's own, as torch's ``param_groups``."""
    return Group(select, hyper)


def _grouped(make: Any, hyper: dict[str, Any], groups: Any) -> Optimizer:
    """``make(**hyper)``, with one more chain per ``group`` of ``groups`` (its hyper-parameters over ``hyper``)."""
    default = make(**hyper)
    if groups is None:
        return default
    if not isinstance(groups, (list, tuple)):
        raise OptimizerError(f"groups= is a list of ft.group(select, **hyper-parameters), got "
                             f"{type(groups).__name__} {groups!r:.40}")
    made = []
    for k, g in enumerate(groups, start=1):
        if not isinstance(g, Group):
            raise OptimizerError(f"groups= holds ft.group(select, **hyper-parameters); item {k - 1} is "
                                 f"{type(g).__name__} {g!r:.40}")
        unknown = sorted(set(g.hyper) - set(hyper))
        if unknown:
            raise OptimizerError(f"parameter group {k} sets {unknown}, which {make.__name__.strip('_')}() does not "
                                 f"take; it takes {sorted(hyper)}")
        made.append((g.select, make(**{**hyper, **g.hyper})))
    return param_groups(default, *made)


def _maximized(maximize: Any, steps: list[Transform]) -> list[Transform]:
    """torch's ``maximize``: the gradient negated before anything else reads it (weight decay included)."""
    if not isinstance(maximize, bool):
        raise OptimizerError(f"maximize= is True or False, got {maximize!r:.30}")
    return [scale(-1.0), *steps] if maximize else steps


def _l2(weight_decay: float) -> list[Transform]:
    return [add_decayed_weights(weight_decay)] if weight_decay else []


# Each named optimizer: torch.optim's arguments, plus ``maximize`` (torch's) and ``groups`` (a list of
# ``group(select, **hyper-parameters)``: torch's param_groups).
def sgd(learning_rate: Any = 1e-3, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
        dampening: float = 0.0, maximize: bool = False, groups: Any = None) -> Optimizer:
    """torch.optim.SGD: L2 ``weight_decay``, heavy-ball or Nesterov ``momentum`` with ``dampening`` (the
    buffer's first step is the gradient itself; later ones add ``(1 - dampening) * g``)."""
    return _grouped(_sgd, dict(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov,
                               weight_decay=weight_decay, dampening=dampening, maximize=maximize), groups)


def _sgd(learning_rate: Any, momentum: float, nesterov: bool, weight_decay: float, dampening: float,
         maximize: bool) -> Optimizer:
    if nesterov and (not momentum or dampening):
        raise OptimizerError("sgd(nesterov=True) needs a momentum > 0 and zero dampening (as torch.optim.SGD), got "
                             f"momentum={momentum!r}, dampening={dampening!r}")
    steps = _l2(weight_decay) + ([trace(momentum, nesterov, dampening)] if momentum else [])
    return chain(*_maximized(maximize, steps), scale_by_learning_rate(learning_rate))


def adam(learning_rate: Any = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False, groups: Any = None) -> Optimizer:
    """torch.optim.Adam: ``weight_decay`` is L2 (added to the gradient); see ``adamw`` for decoupled decay."""
    return _grouped(_adam, dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                                amsgrad=amsgrad, maximize=maximize), groups)


def _adam(learning_rate: Any, b1: float, b2: float, eps: float, weight_decay: float, amsgrad: bool,
          maximize: bool) -> Optimizer:
    steps = _l2(weight_decay) + [scale_by_adam(b1, b2, eps, amsgrad)]
    return chain(*_maximized(maximize, steps), scale_by_learning_rate(learning_rate))


def adamw(learning_rate: Any = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 1e-2, mask: Any = None, amsgrad: bool = False, maximize: bool = False,
          groups: Any = None) -> Optimizer:
    """torch.optim.AdamW: decoupled weight decay ``p -= lr * weight_decay * p`` on the parameters ``mask``
    selects (a name predicate or fnmatch patterns; all by default)."""
    return _grouped(_adamw, dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                                 mask=mask, amsgrad=amsgrad, maximize=maximize), groups)


def _adamw(learning_rate: Any, b1: float, b2: float, eps: float, weight_decay: float, mask: Any, amsgrad: bool,
           maximize: bool) -> Optimizer:
    steps = [scale_by_adam(b1, b2, eps, amsgrad), add_decayed_weights(weight_decay, mask)]
    return chain(*_maximized(maximize, steps), scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate: Any = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
            momentum: float = 0.0, centered: bool = False, maximize: bool = False, groups: Any = None) -> Optimizer:
    """torch.optim.RMSprop (momentum on the scaled gradient, as torch)."""
    return _grouped(_rmsprop, dict(learning_rate=learning_rate, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                   momentum=momentum, centered=centered, maximize=maximize), groups)


def _rmsprop(learning_rate: Any, alpha: float, eps: float, weight_decay: float, momentum: float, centered: bool,
             maximize: bool) -> Optimizer:
    steps = _l2(weight_decay) + [scale_by_rms(alpha, eps, centered)] + ([trace(momentum)] if momentum else [])
    return chain(*_maximized(maximize, steps), scale_by_learning_rate(learning_rate))


def adagrad(learning_rate: Any = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
            initial_accumulator_value: float = 0.0, eps: float = 1e-10, maximize: bool = False,
            groups: Any = None) -> Optimizer:
    """torch.optim.Adagrad."""
    return _grouped(_adagrad, dict(learning_rate=learning_rate, lr_decay=lr_decay, weight_decay=weight_decay,
                                   initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize),
                    groups)


def _adagrad(learning_rate: Any, lr_decay: float, weight_decay: float, initial_accumulator_value: float, eps: float,
             maximize: bool) -> Optimizer:
    steps = _l2(weight_decay) + [scale_by_rss(initial_accumulator_value, eps)]
    return chain(*_maximized(maximize, steps), scale_by_learning_rate(learning_rate, lr_decay))


def lion(learning_rate: Any = 1e-4, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 0.0,
         mask: Any = None, maximize: bool = False, groups: Any = None) -> Optimizer:
    """Lion (Chen et al. 2023, as optax.lion): the sign of an interpolated momentum, decoupled weight decay;
    ``maximize`` negates the gradient first, as torch's optimizers do."""
    return _grouped(_lion, dict(learning_rate=learning_rate, b1=b1, b2=b2, weight_decay=weight_decay, mask=mask,
                                maximize=maximize), groups)


def _lion(learning_rate: Any, b1: float, b2: float, weight_decay: float, mask: Any, maximize: bool) -> Optimizer:
    steps: list[Transform] = [scale_by_lion(b1, b2)]
    if weight_decay:
        steps.append(add_decayed_weights(weight_decay, mask))
    return chain(*_maximized(maximize, steps), scale_by_learning_rate(learning_rate))
