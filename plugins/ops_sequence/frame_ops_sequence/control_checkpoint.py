"""Checkpointed loops: keep every k-th state for the gradient and recompute the rest (``checkpoint_every=k``).

A loop of M steps is rewritten as an outer loop of S = ceil(M/k) segments
whose body runs an inner loop of at most k steps. Nothing else is needed:
differentiating the nest with the ordinary rule saves the outer trajectory
(the S states at segment starts) and, inside the outer backward body,
recomputes one segment at a time with its own k-row trajectory. Memory for
the trajectory falls from M to S + k states; the forward runs once more
during the backward; the gradients are the same (the same kernels on the
same values). Scanned inputs are padded to S*k rows (``pad``) and cut into
``[S, k, ...]`` blocks (``reshape``); stacked outputs come back
``[S, k, ...]`` and are cut to M rows (``slice``). The inner body's step
``i = m*k + j`` is the step of the unrolled loop, and the last segment's trip
limit is the remainder. Every op involved is closed, so the nest is
differentiable to any order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from frame_core import Graph, IRError, Tensor, constant, current_graph, flatten_result, inline_graph, ops

__all__ = ["checkpointed_loop", "checkpointed_scan"]


def _segments(k: Any, steps: int) -> tuple[int, int]:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise IRError(f"checkpoint_every must be an int >= 1 (keep every k-th state), got {k!r}")
    k = int(k)
    return k, math.ceil(steps / k)


def _callable(body: Any) -> Callable[..., Any]:
    """A body given as a Graph, as a function of tensors (it is inlined where it is called)."""
    if not isinstance(body, Graph):
        return body

    def inlined(*args: Tensor) -> list[Tensor]:
        graph = current_graph()
        values = [a.value if isinstance(a, Tensor) else graph.constant(np.asarray(a)) for a in args]
        return [Tensor(v, graph) for v in inline_graph(graph, body, values)]
    return inlined


def _as_flag(c: Any) -> Any:
    """A one-element cond as ``bool[]`` (the flag carried between segments); anything else as it is, for the
    loop's own check to name (a ``bool[3]`` cond is the body's mistake, not a reshape's)."""
    if isinstance(c, Tensor) and c.shape != () and c.type.size == 1:
        return ops.reshape(c, shape=())
    return c


def checkpointed_loop(body_fn: Callable[..., Any] | Graph, max_trip: int, cond: Any, init: Sequence[Tensor],
                      scanned: Sequence[Tensor], invs: Sequence[Tensor], every: Any, reverse: bool = False,
                      exits: bool = True) -> Any:
    """``loop(...)`` as an outer loop over segments of ``every`` steps (module docstring); same outputs.

    ``exits=False`` says the body's cond is always true (a scan): no flag is carried between segments, and
    the loops may run in ``reverse`` (their rows counted from each trip limit).
    """
    from .control import _as_list, build_loop

    k, segments = _segments(every, max_trip)
    body_fn = _callable(body_fn)
    if segments <= 1:  # one segment: nothing to save on
        return build_loop(body_fn, max_trip, np.asarray(max_trip, np.int64), cond, init, scanned, invs, reverse)
    ns, nx = len(init), len(scanned)
    limits = np.full(segments, k, np.int64)
    limits[-1] = max_trip - (segments - 1) * k
    blocks = []
    for x in scanned:
        padded = ops.pad(x, before=[0], after=[segments * k - max_trip], axes=[0]) if segments * k != max_trip else x
        blocks.append(ops.reshape(padded, shape=(segments, k, *_free(x.shape[1:]))))

    flag = 1 if exits else 0  # the inner loop carries its last cond to the outer one

    def outer(m: Tensor, *args: Tensor) -> list[Any]:
        states, limit = args[:ns], args[ns]
        rows, inner_invs = args[ns + 1:ns + 1 + nx], args[ns + 1 + nx:]

        def inner(j: Tensor, *a: Tensor) -> list[Any]:
            out = flatten_result(body_fn(m * k + j, *a[:ns], *a[ns + flag:]))
            if len(out) < 1 + ns or not exits:
                return out  # (a malformed body: the loop's own checks say what is wrong)
            c = _as_flag(out[0])
            return [c, *out[1:1 + ns], c, *out[1 + ns:]]

        carried = [*states, constant(np.array(True))] if exits else list(states)
        result = _as_list(build_loop(inner, k, limit, True, carried, rows, inner_invs, reverse))
        cond_out = result[ns] if exits else constant(np.array(True))
        return [cond_out, *result[:ns], *result[ns + flag:]]

    nested = _as_list(build_loop(outer, segments, np.asarray(segments, np.int64), cond, init,
                                 [constant(limits), *blocks], invs, reverse))
    states, stacked = nested[:ns], nested[ns:]
    ys = []
    for y in stacked:
        flat = ops.reshape(y, shape=(segments * k, *_free(y.shape[2:])))
        ys.append(ops.slice(flat, starts=[0], stops=[max_trip], axes=[0]) if segments * k != max_trip else flat)
    outs = [*states, *ys]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _free(row: Sequence[int]) -> list[int]:
    """A row's shape with its first axis (where a batch is, the usual place) as -1: the reshapes between steps
    and segments then follow the batch when the graph is re-specialised (-1 is the row's own size)."""
    return [-1, *row[1:]] if row and 0 not in row[1:] else list(row)  # (-1 among empty axes: no one size)


def _regroup(outs: list[Tensor], nc: int, carry_struct: bool) -> tuple[Any, Any]:
    carry = tuple(outs[:nc]) if carry_struct else outs[0]
    ys = outs[nc:]
    return carry, (None if not ys else ys[0] if len(ys) == 1 else tuple(ys))


def checkpointed_scan(body_fn: Callable[..., Any] | Graph, carry0: Sequence[Tensor], carry_struct: bool,
                      scanned: Sequence[Tensor], xs_struct: bool, invs: Sequence[Tensor], length: int, reverse: bool,
                      every: Any) -> tuple[Any, Any]:
    """``scan(...)`` through ``checkpointed_loop`` (a scan is a loop whose cond stays true)."""
    from .control import scan_step_outputs

    nc, nx = len(carry0), len(scanned)
    y_struct: list[Any] = []
    if isinstance(body_fn, Graph):  # a graph body takes (carries, rows, invariants) flat: call it so
        graph_body = _callable(body_fn)
        body_fn = lambda c, x, *inv: _regroup(graph_body(*(c if carry_struct else (c,)),  # noqa: E731
                                                          *(() if x is None else x if xs_struct else (x,)), *inv),
                                                nc, carry_struct)

    def step(i: Tensor, *args: Tensor) -> list[Any]:
        c = tuple(args[:nc]) if carry_struct else args[0]
        x = (tuple(args[nc:nc + nx]) if xs_struct else args[nc]) if nx else None
        return [True, *scan_step_outputs(body_fn(c, x, *args[nc + nx:]), nc, carry_struct, y_struct)]

    outs = checkpointed_loop(step, length, True, carry0, scanned, invs, every, reverse, exits=False)
    outs = [outs] if isinstance(outs, Tensor) else list(outs)
    carry = tuple(outs[:nc]) if carry_struct else outs[0]
    y = y_struct[0]
    ys = outs[nc:]
    return carry, (None if y is None else tuple(ys) if isinstance(y, (tuple, list)) else ys[0])
