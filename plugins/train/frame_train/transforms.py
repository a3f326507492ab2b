"""Optimizers as graph transforms: optax's composable pieces, torch.optim's formulas.

A ``Transform`` turns the updates of every parameter (the gradients, at the start of a chain) into new updates,
reading and writing its own per-parameter state slots; it is written on traced tensors, so a chain of them is
a piece of graph that ``TrainStep`` inlines after the backward pass. The last piece,
``scale_by_learning_rate``, multiplies by ``-lr``; the new parameter is ``p + update``.

Two scalars reach every transform as runtime graph inputs, never as constants, so changing them never
recompiles: ``lr`` (the schedule's value at this step, evaluated in Python) and ``step`` (``t``, 1 for the first
update, for bias corrections). A slot's graph input and output are named ``<transform>.<slot>:<param>``
(``adam.m:fc1.w``).

The formulas follow torch.optim (``weight_decay`` in SGD/Adam/RMSprop/Adagrad is L2, added to the gradient
before the moments; AdamW and Lion decay the weights separately), so each optimizer's trajectory equals
torch's in float64 up to rounding (tests/test_torch_reference.py).
"""

from __future__ import annotations

import fnmatch
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from frame_core import ops

from .errors import OptimizerError

__all__ = ["Transform", "Context", "add_decayed_weights", "scale_by_adam", "trace", "scale_by_rms",
           "scale_by_rss", "scale_by_lion", "clip_by_global_norm", "scale", "scale_by_learning_rate"]

Tensors = dict[str, Any]  # parameter name -> traced tensor


@dataclass
class Context:
    """What a transform reads besides updates and its state: the parameters and the two runtime scalars."""

    params: Tensors
    lr: Any    # f[]: the learning rate at this step, in the parameters' dtype
    step: Any  # f[]: t, 1 for the first update, in the parameters' dtype
    prepared: Any = None  # what this transform's ``prepare`` returned
    # lr and step as fed: float32 for float16/bfloat16 parameters, where t (exact only to 2048 in float16, 256 in
    # bfloat16) and 1 - b2^t (0 in bfloat16 for t = 1) need more bits. ``prepare`` computes its scalars from
    # these and hands them to ``narrow``; for float32/float64 parameters they are ``lr`` and ``step`` themselves.
    wide_lr: Any = None
    wide_step: Any = None
    dtype: Any = None  # the parameters' DType
    all_names: Any = None  # every parameter's name, where a parameter group's chain sees only its own

    def narrow(self, scalar: Any) -> Any:
        """A scalar computed from ``wide_lr``/``wide_step`` in the parameters' dtype (a no-op unless half precision)."""
        if self.dtype is None or not hasattr(scalar, "dtype") or scalar.dtype == self.dtype:
            return scalar
        return ops.cast(scalar, to=self.dtype.name)


def scalar_dtype(dtype: Any) -> Any:
    """The dtype of the ``lr`` and ``step`` inputs for parameters of ``dtype``: float32 for half precision."""
    from frame_core import as_dtype

    return as_dtype("f32") if dtype.np.itemsize < 4 else dtype


class Transform:
    """One gradient transformation. Subclasses set ``name`` and ``slots`` and write ``update``.

    ``update(updates, state, ctx) -> (updates, state)``: ``state[slot][param]`` is a traced tensor of the
    parameter's type; return the new updates and the new state for every slot (same keys).
    """

    name = "transform"
    slots: tuple[str, ...] = ()

    def initial(self, slot: str) -> float:
        """The value a slot starts at (every element)."""
        return 0.0

    def prepare(self, ctx: Context) -> Any:
        """Scalars the update reads (a bias correction, ``-lr``), built before any transform's per-parameter
        work: elementwise fusion then finds them defined before each parameter's chain and fuses the chain
        whole. The result reaches ``update`` as ``ctx.prepared``."""
        return None

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        """The new updates and slots, traced with frame ops (every subclass defines it: the base class is a contract)."""
        raise TypeError(f"{type(self).__name__} is a Transform without an update(updates, state, ctx) method; "
                        "subclass Transform and define it (the transforms in frame_train.transforms are examples)")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def ema(average: Any, value: Any, decay: float) -> Any:
    """``decay * average + (1 - decay) * value``, written as torch's ``lerp`` (one fusable chain from ``value``)."""
    return average + (value - average) * (1.0 - decay)


# -- argument checks -------------------------------------------------------------------------------------------
def _number(value: Any, what: str, *, low: float = 0.0, high: float = math.inf, open_low: bool = False,
            open_high: bool = False) -> float:
    """``value`` as a float inside [low, high] (ends opened as asked); ``OptimizerError`` otherwise."""
    # numbers.Real: numpy scalars (np.float32(0.9), np.int64(0)) are numbers too; booleans are not
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    if ok:
        value = float(value)
        ok = (value > low if open_low else value >= low) and (value < high if open_high else value <= high)
    if not ok:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        raise OptimizerError(f"{what} must be a finite number in {interval}, got {value!r:.40}")
    return value


def _mask(mask: Any) -> Callable[[str], bool]:
    """A parameter-name predicate from ``None`` (all), a callable, or fnmatch patterns (``['*.w', 'emb.*']``)."""
    if mask is None:
        return lambda name: True
    if callable(mask):
        return mask
    if isinstance(mask, str):
        mask = [mask]
    if isinstance(mask, Iterable) and not isinstance(mask, Mapping):
        patterns = list(mask)
        if all(isinstance(p, str) for p in patterns):
            return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)
    raise OptimizerError(f"mask= is a function of the parameter name returning True to decay it, or a list of "
                         f"name patterns such as ['*.w'], got {type(mask).__name__} {mask!r:.60}")


# -- the pieces ---------------------------------------------------------------------------------------------------
class add_decayed_weights(Transform):  # noqa: N801 - optax's names
    """``u + weight_decay * p`` for the parameters ``mask`` selects (a name predicate or fnmatch patterns).

    Before a scaling transform this is L2 regularisation (torch's ``weight_decay=`` in SGD and Adam); after
    it, decoupled weight decay (AdamW).
    """

    name = "decay"

    def __init__(self, weight_decay: float, mask: Any = None) -> None:
        self.weight_decay = _number(weight_decay, "weight_decay")
        self.mask = mask
        self._selects = _mask(mask)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        wd = self.weight_decay
        patterns = [self.mask] if isinstance(self.mask, str) else self.mask
        if isinstance(patterns, (list, tuple)):  # a pattern that selects nothing is a typo ('*.weight' for '*.w')
            every = ctx.all_names if ctx.all_names is not None else list(updates)  # (a group sees its own only)
            unused = [q for q in patterns if not any(fnmatch.fnmatchcase(n, q) for n in every)]
            if unused:
                raise OptimizerError(f"the weight-decay mask pattern{'s' if len(unused) > 1 else ''} {unused} "
                                     f"match{'' if len(unused) > 1 else 'es'} no parameter; the parameters are "
                                     f"{sorted(every)[:20]}{' ...' if len(every) > 20 else ''}")
        out = {}
        for name, u in updates.items():
            selected = self._selects(name)
            if isinstance(selected, np.bool_):  # a predicate written with numpy (np.isin, a mask array lookup)
                selected = bool(selected)
            if not isinstance(selected, bool):
                raise OptimizerError(f"the weight-decay mask returned {type(selected).__name__} {selected!r:.30} for "
                                     f"parameter {name!r}; it must return True or False")
            out[name] = u + ctx.params[name] * wd if selected and wd else u
        return out, state


class scale_by_adam(Transform):  # noqa: N801
    """Adam's direction ``m_hat / (sqrt(v_hat) + eps)`` with bias-corrected moments (slots ``m``, ``v``;
    ``vmax`` with ``amsgrad``, as torch keeps the running maximum of ``v``)."""

    name = "adam"

    def __init__(self, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, amsgrad: bool = False) -> None:
        self.b1 = _number(b1, "b1 (beta1)", high=1.0, open_high=True)
        self.b2 = _number(b2, "b2 (beta2)", high=1.0, open_high=True)
        self.eps = _number(eps, "eps")
        if not isinstance(amsgrad, bool):
            raise OptimizerError(f"amsgrad= is True or False, got {amsgrad!r:.30}")
        self.amsgrad = amsgrad
        self.slots = ("m", "v", "vmax") if amsgrad else ("m", "v")

    def prepare(self, ctx: Context) -> Any:
        # 1 - b^t with t a runtime input: exp(t log b) (b = 0 gives a correction of exactly 1)
        t = ctx.wide_step if ctx.wide_step is not None else ctx.step
        c1 = ctx.narrow(1.0 - ops.exp(t * math.log(self.b1))) if self.b1 > 0 else 1.0
        c2 = ctx.narrow(ops.sqrt(1.0 - ops.exp(t * math.log(self.b2)))) if self.b2 > 0 else 1.0
        return c1, c2

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        c1, c2 = ctx.prepared
        out: Tensors = {}
        new: dict[str, Tensors] = {slot: {} for slot in self.slots}
        for name, g in updates.items():
            m = new["m"][name] = ema(state["m"][name], g, self.b1)
            m_hat = m / c1
            v = new["v"][name] = ema(state["v"][name], ops.square(g), self.b2)
            if self.amsgrad:
                v = new["vmax"][name] = ops.maximum(state["vmax"][name], v)
            out[name] = m_hat / (ops.sqrt(v) / c2 + self.eps)
        return out, new


class trace(Transform):  # noqa: N801
    """Momentum (torch's SGD buffer): ``buf = momentum * buf + (1 - dampening) * u``, except at the first update,
    where the buffer is ``u`` itself (as torch starts it); ``u + momentum * buf`` with ``nesterov``, else ``buf``
    (slot ``buf``)."""

    name = "momentum"
    slots = ("buf",)

    def __init__(self, momentum: float, nesterov: bool = False, dampening: float = 0.0) -> None:
        self.momentum = _number(momentum, "momentum")
        if not isinstance(nesterov, bool):
            raise OptimizerError(f"nesterov= is True or False, got {nesterov!r:.30}")
        self.nesterov = nesterov
        self.dampening = _number(dampening, "dampening", high=1.0)

    def prepare(self, ctx: Context) -> Any:
        if not self.dampening:
            return None
        # 1 at the first update (t = 1), 1 - dampening after: 1 - dampening * min(t - 1, 1), t a runtime input
        t = ctx.wide_step if ctx.wide_step is not None else ctx.step
        return ctx.narrow(1.0 - ops.minimum(t - 1.0, 1.0) * self.dampening)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        mu, share = self.momentum, ctx.prepared
        out: Tensors = {}
        new: dict[str, Tensors] = {"buf": {}}
        for name, u in updates.items():
            buf = new["buf"][name] = state["buf"][name] * mu + (u if share is None else u * share)
            out[name] = u + buf * mu if self.nesterov else buf
        return out, new


class scale_by_rms(Transform):  # noqa: N801
    """RMSprop's ``u / (sqrt(v) + eps)`` with ``v = alpha v + (1 - alpha) u^2`` (slot ``v``; ``centered``
    subtracts the squared running mean, slot ``mean``), as torch.optim.RMSprop."""

    name = "rms"

    def __init__(self, alpha: float = 0.99, eps: float = 1e-8, centered: bool = False) -> None:
        self.alpha = _number(alpha, "alpha", high=1.0)
        self.eps = _number(eps, "eps")
        if not isinstance(centered, bool):
            raise OptimizerError(f"centered= is True or False, got {centered!r:.30}")
        self.centered = centered
        self.slots = ("v", "mean") if centered else ("v",)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        a = self.alpha
        out: Tensors = {}
        new: dict[str, Tensors] = {slot: {} for slot in self.slots}
        for name, g in updates.items():
            if self.centered:
                mean = new["mean"][name] = ema(state["mean"][name], g, a)
                v = new["v"][name] = ema(state["v"][name], ops.square(g), a)
                v = v - ops.square(mean)
            else:
                v = new["v"][name] = ema(state["v"][name], ops.square(g), a)
            out[name] = g / (ops.sqrt(v) + self.eps)
        return out, new


class scale_by_rss(Transform):  # noqa: N801
    """Adagrad's ``u / (sqrt(sum of u^2) + eps)`` (slot ``sum``, starting at ``initial_accumulator_value``)."""

    name = "adagrad"
    slots = ("sum",)

    def __init__(self, initial_accumulator_value: float = 0.0, eps: float = 1e-10) -> None:
        self.initial_accumulator_value = _number(initial_accumulator_value, "initial_accumulator_value")
        self.eps = _number(eps, "eps")

    def initial(self, slot: str) -> float:
        return self.initial_accumulator_value

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        out: Tensors = {}
        new: dict[str, Tensors] = {"sum": {}}
        for name, g in updates.items():
            s = new["sum"][name] = state["sum"][name] + ops.square(g)
            out[name] = g / (ops.sqrt(s) + self.eps)
        return out, new


class scale_by_lion(Transform):  # noqa: N801
    """Lion (Chen et al. 2023): ``sign(b1 m + (1 - b1) u)``, then ``m = b2 m + (1 - b2) u`` (slot ``m``)."""

    name = "lion"
    slots = ("m",)

    def __init__(self, b1: float = 0.9, b2: float = 0.99) -> None:
        self.b1 = _number(b1, "b1 (beta1)", high=1.0)
        self.b2 = _number(b2, "b2 (beta2)", high=1.0)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        b1, b2 = self.b1, self.b2
        out: Tensors = {}
        new: dict[str, Tensors] = {"m": {}}
        for name, g in updates.items():
            m = state["m"][name]
            out[name] = ops.sign(ema(m, g, b1))
            new["m"][name] = ema(m, g, b2)
        return out, new


class clip_by_global_norm(Transform):  # noqa: N801
    """Scale every update by ``min(1, max_norm / ||u||)``, ``||u||`` the norm of all updates together."""

    name = "clip"

    def __init__(self, max_norm: float) -> None:
        self.max_norm = _number(max_norm, "max_norm", open_low=True)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        total = None
        for u in updates.values():
            part = ops.sum(ops.square(u))
            total = part if total is None else total + part
        if total is None:
            return updates, state
        norm = ops.sqrt(total)
        factor = self.max_norm / ops.maximum(norm, self.max_norm)  # 1 while the norm is within the bound
        return {name: u * factor for name, u in updates.items()}, state


class scale(Transform):  # noqa: N801
    """Multiply every update by a fixed ``factor``."""

    name = "scale"

    def __init__(self, factor: float) -> None:
        self.factor = _number(factor, "factor", low=-math.inf)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        return {name: u * self.factor for name, u in updates.items()}, state


class scale_by_learning_rate(Transform):  # noqa: N801
    """``-lr * u``: ``lr`` is the runtime input fed from ``learning_rate`` (a number or a schedule of the step).

    ``lr_decay`` is Adagrad's: the rate at update ``t`` is ``lr / (1 + (t - 1) lr_decay)``.
    """

    name = "lr"

    def __init__(self, learning_rate: Any, lr_decay: float = 0.0) -> None:
        from .schedules import as_schedule

        self.learning_rate = as_schedule(learning_rate)
        self.lr_decay = _number(lr_decay, "lr_decay")

    def prepare(self, ctx: Context) -> Any:
        lr = ctx.wide_lr if ctx.wide_lr is not None else ctx.lr
        if self.lr_decay:
            lr = lr / (((ctx.wide_step if ctx.wide_step is not None else ctx.step) - 1.0) * self.lr_decay + 1.0)
        return ctx.narrow(-lr)

    def update(self, updates: Tensors, state: dict[str, Tensors], ctx: Context) -> tuple[Tensors, dict[str, Tensors]]:
        factor = ctx.prepared
        return {name: u * factor for name, u in updates.items()}, state
