"""Import rules of ONNX control flow (``If``, ``Loop``, ``Scan``) and of ``DFT``.

A sub-graph becomes a frame body: a Python function that imports the sub-graph's nodes in a child scope
(which sees the enclosing graphs' names, so outer values a body reads are captured by the front end).
``DFT`` maps onto frame-ops-fft, whose packed complex layout (a last axis of 2) is ONNX's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from frame_core import ops
from frame_core import Tensor

from ._import import POISON, NodeContext, Unsupported, rule
from .rules_ops import like, rank_of, shape_of

__all__: list[str] = []


class _BodyFailed(Exception):
    """A body holds unsupported nodes (already listed): the control-flow node's outputs are skipped."""


def _run_body(cx: NodeContext, graph: onnx.GraphProto, label: str, bindings: list[Any]) -> list[Any]:
    from onnx import numpy_helper

    scope = cx.scope.child(f"{cx.name}.{label}")
    for init in graph.initializer:  # a sub-graph's own initializers are constants (parameters live in the main graph)
        scope.names[init.name] = np.array(numpy_helper.to_array(init))
    for vi, value in zip(graph.input, bindings):
        scope.names[vi.name] = value
    scope.run(graph)
    outs = [scope.lookup(o.name) for o in graph.output]
    if any(o is POISON for o in outs):
        raise _BodyFailed()
    return outs


def _as_cond(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return bool(v.reshape(-1)[0]) if v.size == 1 else v
    return ops.reshape(v, shape=[]) if shape_of(v) != () else v


def _guard(fn: Any) -> Any:
    def apply(cx: NodeContext) -> Any:
        try:
            return fn(cx)
        except _BodyFailed:
            return None
    return apply


@rule("If")
@_guard
def _if(cx: NodeContext) -> Any:
    then_g, else_g = cx.attr("then_branch", "graph"), cx.attr("else_branch", "graph")
    cond = cx.input(0)
    known = cx.known(0)
    if known is not None:  # a condition known while importing: only that branch is imported
        return _run_body(cx, then_g if bool(known.reshape(-1)[0]) else else_g, "then" if known else "else", [])
    out = ops.if_else(_as_cond(cond), lambda: tuple(_run_body(cx, then_g, "then_branch", [])),
                      lambda: tuple(_run_body(cx, else_g, "else_branch", [])))
    return list(out) if isinstance(out, tuple) else [out]


@rule("Loop")
@_guard
def _loop(cx: NodeContext) -> Any:
    body = cx.attr("body", "graph")
    if not cx.has(0):
        raise Unsupported("a Loop without a trip count M (frame's loop needs a static bound on its steps; give M, "
                          "or M = Min(count, N) with a constant N)")
    known = cx.known(0)
    limit = None
    if known is not None:
        m = int(known.reshape(()))
    else:  # M depends on the data: a static bound must be provable, and M stops the loop through the cond
        limit = ops.reshape(cx.input(0), shape=[]) if shape_of(cx.input(0)) != () else cx.input(0)
        bound = _upper_bound(limit)
        if bound is None:
            raise Unsupported("a trip count M that depends on the data and has no provable bound (frame's loop needs "
                              "a static most-steps bound): compute M from shapes or constants, or bound it in the "
                              "model, M = Min(count, N) or Clip(count, max=N) with a constant N")
        m = max(bound, 0)
    cond = _as_cond(cx.input(1)) if cx.has(1) else True
    states = [cx.input(i) for i in range(2, len(cx))]
    n_states = len(states)

    def step(i: Tensor, *values: Tensor) -> tuple:
        outs = _run_body(cx, body, "body", [i, np.array(True), *values])
        go = _as_cond(outs[0])
        if limit is not None:  # the next step runs while i + 1 < M
            go = ops.where(ops.less(ops.cast(i, to=limit.dtype) + like(1, limit), limit), np.asarray(go)
                           if isinstance(go, bool) else go, np.array(False))
        return (go, *outs[1:])
    if limit is not None:
        cond = ops.where(ops.less(like(0, limit), limit), np.asarray(cond) if isinstance(cond, bool) else cond,
                         np.array(False))
    out = ops.loop(step, m, cond, *states)
    out = list(out) if isinstance(out, tuple) else [out]
    if len(out) != len(cx.node.output):
        raise Unsupported(f"a body with {len(out) - n_states} per-step outputs for {len(cx.node.output)} node outputs")
    return out


def _upper_bound(m: Any) -> int | None:
    """A constant ``N`` with ``m <= N`` proven from how ``m`` is computed (``minimum`` with a constant, ``clip``
    with a ``max``), else ``None``."""
    node = getattr(getattr(m, "value", None), "producer", None)
    while node is not None and node.op in ("reshape", "cast", "squeeze", "expand_dims"):
        if node.op == "cast" and not np.issubdtype(node.inputs[0].dtype.np, np.integer):
            return None  # a float cast to an integer: truncation is fine, but keep the proof on integers
        node = node.inputs[0].producer
    if node is None:
        return None
    if node.op == "clip" and node.attrs.get("max") is not None:
        return int(np.floor(node.attrs["max"]))
    if node.op == "minimum":
        bounds = [_constant_of(v) for v in node.inputs]
        found = [int(np.max(b)) for b in bounds if b is not None]
        return min(found) if found else None
    return None


def _constant_of(v: Any) -> np.ndarray | None:
    p = v.producer
    return np.asarray(p.attrs["value"]) if p is not None and p.op == "constant" else None


def _move(x: Any, src: int, dst: int) -> Any:
    rank = rank_of(x)
    src, dst = src % rank, dst % rank
    if src == dst:
        return x
    perm = [a for a in range(rank) if a != src]
    perm.insert(dst, src)
    return ops.transpose(x, perm=perm)


@rule("Scan")
@_guard
def _scan(cx: NodeContext) -> Any:
    body = cx.attr("body", "graph")
    n_in = cx.attr("num_scan_inputs", "int")
    values = [cx.input(i) for i in range(len(cx))]
    n_state = len(values) - n_in
    states, xs = values[:n_state], values[n_state:]
    in_axes = cx.attr("scan_input_axes", "ints") or [0] * n_in
    in_dirs = cx.attr("scan_input_directions", "ints") or [0] * n_in
    n_out = len(body.output) - n_state
    out_axes = cx.attr("scan_output_axes", "ints") or [0] * n_out
    out_dirs = cx.attr("scan_output_directions", "ints") or [0] * n_out
    if len(set(in_dirs)) > 1:
        raise Unsupported("scan inputs read in different directions")
    reverse = bool(in_dirs[0]) if in_dirs else False
    xs = [_move(x, a, 0) for x, a in zip(xs, in_axes)]

    def step(carry: tuple, rows: tuple) -> tuple:
        outs = _run_body(cx, body, "body", [*carry, *rows])
        return tuple(outs[:n_state]), tuple(outs[n_state:])
    carry, ys = ops.scan(step, tuple(states), tuple(xs), reverse=reverse)
    ys = list(ys or ())
    out = []
    for y, a, d in zip(ys, out_axes, out_dirs):
        if bool(d) != reverse:  # frame writes row t of ys at step t; ONNX stacks in the order steps ran
            n = shape_of(y)[0]
            y = ops.slice(y, starts=[n - 1], stops=[-(n + 1)], steps=[-1], axes=[0])
        out.append(_move(y, 0, a))
    return [*carry, *out]


@rule("DFT")
def _dft(cx: NodeContext) -> Any:
    x = cx.input(0)
    rank = rank_of(x)
    if cx.opset >= 20:
        axis = int(cx.need_known(2, "axis").reshape(())) if cx.has(2) else -2
    else:
        axis = cx.attr("axis", "int", 1)
    axis = axis % rank
    if axis == rank - 1:
        raise Unsupported("a DFT along the real/imaginary axis")
    n = shape_of(x)[axis]
    if cx.has(1) and int(cx.need_known(1, "dft_length").reshape(())) != n:
        raise Unsupported("a dft_length other than the signal's length (pad or slice the signal first)")
    inverse, onesided = bool(cx.attr("inverse", "int", 0)), bool(cx.attr("onesided", "int", 0))
    real = shape_of(x)[-1] == 1
    if real:
        signal = ops.squeeze(x, axes=[rank - 1])
        if onesided and not inverse:
            return ops.rfft(signal, axis=axis)
        x = ops.stack(signal, ops.mul(signal, 0.0), axis=-1)
    if onesided:
        raise Unsupported("a one-sided inverse DFT (use irfft semantics: export a full spectrum)")
    return (ops.ifft if inverse else ops.fft)(x, axis=axis)
