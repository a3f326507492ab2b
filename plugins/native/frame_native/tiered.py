"""``native_fused_internal``: a fused elementwise group that tiers up from numpy to compiled code.

The pack's pass turns an eligible ``fused_elementwise_internal`` node into
this op, with the group's constants moved into its ``body`` (a compiled
kernel bakes them in instead of receiving hundreds of arrays per call). The
kernel builder returns a *forwarding* function with the node's exact arity,
``kernel(a0, ..., out=None) -> slot[0](a0, ..., out)``. ``slot[0]`` starts as
frame's own numpy code for the group (``build_fused_kernel``), so the first
call runs exactly today's code; after ``FRAME_NATIVE_AFTER`` calls (default
2) the group is queued on the background compiler, and when the compiled
kernel is ready the compiler thread stores its wrapper in ``slot[0]`` (one
list store: atomic under the GIL; a call in flight finishes on the old
kernel). The wrapper falls back to the numpy code for a call whose arrays are
not C-contiguous. Both tiers compute the same bits (see ``codegen``), so when
the swap happens never shows in a result.

The kernel's ``native`` attribute (a :class:`Tier`) tells which tier runs and
when the swap happened.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from frame_core import FUSED, AttrSpec, Example, Graph, NodeContext, OpSchema, build_fused_kernel, registry
from frame_core import MutableRecord
from frame_core import warn_environment


if TYPE_CHECKING:
    from .codegen import Plan

__all__ = ["NATIVE_OP", "NATIVE", "Tier", "build_tiered_kernel", "calls_before_compile"]

NATIVE_OP = "native_fused_internal"


def calls_before_compile() -> int:
    """``FRAME_NATIVE_AFTER``: runs of a group on numpy before it is queued for compilation (default 2, so
    a graph run once never costs a compile)."""
    raw = os.environ.get("FRAME_NATIVE_AFTER", "").strip()
    if not raw:
        return 2
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    warn_environment("FRAME_NATIVE_AFTER", raw, "a whole number of runs, 1 or more", "the default, 2, applies")
    return 2


class Tier(MutableRecord):
    """Which code a tiered kernel runs: ``numpy``, ``queued``, ``native``, ``failed`` or ``off``."""

    __match_args__ = ("state", "queued_at", "swapped_at", "how", "pid", "fallbacks", "slot")
    _unshown = ("slot",)

    def __init__(self, state: str = "numpy", queued_at: float | None = None, swapped_at: float | None = None,
                 how: str | None = None, pid: int = 0, fallbacks: int = 0,
                 slot: list[Callable[..., Any]] | None = None) -> None:
        self.state = state
        self.queued_at = queued_at    # time.perf_counter() when queued
        self.swapped_at = swapped_at  # ... when the compiled kernel took over
        self.how = how                # "compiled" or "cache" (loaded from the disk cache)
        self.pid = pid                # the process that queued it (a forked child never compiles it)
        self.fallbacks = fallbacks    # calls refused (not C-contiguous, unaligned, ...): they ran numpy
        self.slot: list[Callable[..., Any]] = [] if slot is None else slot  # a fresh list when not given


def queue_plans(tier: Tier, plans: list[Any], when_all: Callable[[dict[int, tuple[Callable[..., Any], str]]], None]
                ) -> None:
    """Queue the compile of every plan (anything ``jit.submit`` takes: ir, n_args, chunks, shapes); once all have
    compiled, ``when_all(done)`` runs on the compiler thread with ``done[k] = (function, how)`` for ``plans[k]``.

    ``tier`` is marked queued before the first job goes (a kernel from the cache may be installed before
    ``submit`` returns); a plan that fails leaves it ``failed`` (or ``off``), a queue that refuses a job ``off``.
    Kernels made of several compiled functions (column sums and their check, a conv layer's parts) use it."""
    from . import jit

    done: dict[int, tuple[Callable[..., Any], str]] = {}

    def job(key: int, plan: Any) -> bool:
        def install(_: Any, fn: Callable[..., Any] | None, how: str) -> None:
            if fn is None:
                tier.state = how if how in ("failed", "off") else "failed"
                return
            done[key] = (fn, how)
            if len(done) == len(plans):
                when_all(done)
        return jit.submit(lambda: plan, install)
    tier.state, tier.queued_at, tier.pid = "queued", time.perf_counter(), os.getpid()
    if not all([job(k, p) for k, p in enumerate(plans)]):
        tier.state = "off"


def build_tiered_kernel(ctx: NodeContext) -> Callable[..., Any]:
    body: Graph = ctx.attrs["body"]
    numpy_kernel = build_fused_kernel(ctx)
    reg = registry()
    packs = {n.op: reg.schemas[n.op].pack for n in body.nodes if n.op in reg.schemas}
    n = len(body.inputs)
    tier = Tier()
    after = calls_before_compile()
    count = [0]
    params = ", ".join([f"a{i}" for i in range(n)] + ["out=None"])
    args = ", ".join([f"a{i}" for i in range(n)] + ["out"])

    def promote() -> None:  # on the calling thread: keep it to a list store and a queue put
        from . import jit  # (the compiler and code generator load when the first group tiers up, not with the pack)
        from .codegen import plan_body

        tier.slot[0] = numpy_kernel
        # queued before the job goes: the compiler thread may install the kernel before submit returns
        tier.state, tier.queued_at, tier.pid = "queued", time.perf_counter(), os.getpid()
        if not jit.submit(lambda: plan_body(body, packs), lambda plan, fn, how: _install(tier, plan, fn, how,
                                                                                         numpy_kernel, n)):
            tier.state = "off"

    namespace: dict[str, Any] = {"_count": count, "_after": after, "_promote": promote, "_numpy": numpy_kernel,
                                 "_slot": tier.slot}
    exec(f"def counting({params}):\n"
         f"    _count[0] += 1\n"
         f"    if _count[0] >= _after:\n"
         f"        _promote()\n"
         f"    return _numpy({args})\n"
         f"def tiered({params}):\n"
         f"    return _slot[0]({args})\n", namespace)
    tier.slot.append(namespace["counting"])
    kernel = namespace["tiered"]
    kernel.native = tier
    kernel.numpy = numpy_kernel
    return kernel


def _install(tier: Tier, plan: Plan | None, fn: Callable[..., Any] | None, how: str,
             numpy_kernel: Callable[..., Any], n: int) -> None:
    """On the compiler thread: put the compiled kernel's wrapper in the slot (or record why not)."""
    if fn is None or plan is None:
        tier.state = how if how in ("failed", "off") else "failed"
        return
    tier.slot[0] = _wrapper(tier, plan, fn, numpy_kernel, n)
    tier.state, tier.how, tier.swapped_at = "native", how, time.perf_counter()


def _wrapper(tier: Tier, plan: Plan, fn: Callable[..., Any], numpy_kernel: Callable[..., Any], n: int) -> Callable:
    """``native(a0, ..., out=None)``: allocate what the caller did not give, call the compiled function, fall
    back to numpy if it refuses the arrays."""
    out_t = plan.body.outputs[0].type
    namespace: dict[str, Any] = {"_fn": fn, "_numpy": numpy_kernel, "_empty": np.empty, "_shape": out_t.shape,
                                 "_dtype": plan.dtype, "_ty": np.ndarray, "_descr": np.dtype(plan.dtype),
                                 "_refused": lambda: setattr(tier, "fallbacks", tier.fallbacks + 1)}
    params = [f"a{i}" for i in range(n)]
    # The compiled code itself refuses (returns 1 before reading anything else) an argument that is not exactly
    # an ndarray of the group's dtype and shape: a numpy scalar from a 0-d ufunc, a Python float, a subclass.
    lines = []
    passed = []
    for k, array in enumerate(plan.passed_constants):
        namespace[f"_p{k}"] = array
        passed.append(f"_p{k}")
    if plan.n_outputs == 1:
        lines.append("    if out is None:\n        out = _empty(_shape, _dtype)")
        outs, result = ["out"], "out"
    else:
        # several exports: `out` is a tuple of planned buffers, None for an export that is not planned (the
        # accepts_out contract: write into each one given and return it, as frame's numpy code does)
        outs = [f"o{k}" for k in range(plan.n_outputs)]
        lines.append("    if out is None:\n        out = (" + "None, " * plan.n_outputs + ")")
        lines += [f"    {o} = out[{k}]\n    if {o} is None:\n        {o} = _empty(_shape, _dtype)"
                  for k, o in enumerate(outs)]
        result = "(" + ", ".join(outs) + ")"
    namespace["_rows"] = (len(plan.scratch),) + tuple(out_t.shape)
    scratch = ["_empty(_rows, _dtype)"] if plan.scratch else []
    call = ", ".join(["_ty", "_descr"] + params + passed + outs + scratch)
    lines.append(f"    if _fn({call}):\n        _refused()\n        return _numpy({', '.join(params + ['out'])})")
    lines.append(f"    return {result}")
    source = f"def native({', '.join(params + ['out=None'])}):\n" + "\n".join(lines) + "\n"
    exec(source, namespace)
    native = namespace["native"]
    native.source = source
    return native


def _example_body() -> Graph:
    g = Graph("native")
    x = g.add_input("f32[8]")
    value = np.linspace(-1, 1, 8, dtype=np.float32)
    value.flags.writeable = False
    c = g.add_node("constant", (), {"value": value}, ["f32[8]"]).outputs[0]  # typed: no registry lookup
    m = g.add_node("mul", [x, c], {}, ["f32[8]"]).outputs[0]
    g.mark_output(g.add_node("add", [m, x], {}, ["f32[8]"]).outputs[0])
    return g


NATIVE = OpSchema(
    NATIVE_OP,
    inputs=("xs",),
    outputs=("ys",),
    variadic=True,
    attrs={"body": AttrSpec("graph", doc="the fused chain, its constants included: exactly rounded ops on one type")},
    shape_infer=FUSED.shape_infer,
    kernels={"cpu": build_tiered_kernel},
    not_differentiable="a compile-pipeline product made after differentiation; differentiate the "
                       "graph before compiling it",
    traits=("accepts_out",),  # as fused_elementwise_internal: `out` never aliases an input
    doc="A fused elementwise group that runs frame's numpy code at first and compiled native code once the "
        "background compiler has built it; both give the same bits. Produced by the native_fuse pass.",
    examples=[Example(["f32[8]"], {"body": _example_body()})],
)
