"""Import rules of ONNX ops frame has no single op for, written with frame ops: ``Einsum`` (diagonals, products,
transposes and sums), ``TopK`` (rounds of arg-extremum and masks), ``ReduceProd`` (a tree of products), ``Hardmax``, and
``Tan`` and the hyperbolic functions (exp, expm1, log1p and sqrt in forms accurate near 0).

Each differentiates as the frame ops it becomes: an einsum like the matmuls and sums it maps to, TopK's values
like a ``where`` that picks each one out (its gradient lands on the picked positions: a scatter), ReduceProd like
its products (the product of the other factors, zeros included), Hardmax as a constant (zero gradient).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from frame_core import ops

from ._import import NodeContext, Unsupported, rule
from .rules_ops import _reduce_axes, invalid, like, norm_axis, rank_of, reshape_keeping_batch, shape_of

__all__: list[str] = []


# -- Einsum ------------------------------------------------------------------------------------------------------
def _einsum_terms(equation: str, ranks: list[int], cx: NodeContext) -> tuple[list[list[str]], list[str]]:
    """The labels of each operand's axes and of the output's; ``...`` becomes labels ``...0``, ``...1`` (aligned
    from the right, as they broadcast); without ``->`` the output is the labels used once, in order, after the
    broadcast ones (ONNX's implicit mode)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise invalid(cx, f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    width = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            width = max(width, rank - len(term.replace("...", "")))

    def labels(term: str, rank: int | None) -> list[str]:
        head, dots, tail = term.partition("...")
        if any(not c.isalpha() for c in head + tail) or "." in tail:
            raise invalid(cx, f"equation {equation!r}: term {term!r} holds characters other than letters and one '...'")
        if not dots:
            return list(head)
        count = width if rank is None else rank - len(head) - len(tail)
        return list(head) + [f"...{width - count + k}" for k in range(count)] + list(tail)

    ins = [labels(t, r) for t, r in zip(terms, ranks)]
    for term, got, rank in zip(terms, ins, ranks):
        if len(got) != rank:
            raise invalid(cx, f"equation {equation!r}: term {term!r} has {len(got)} axes, its operand {rank}")
    if arrow:
        out = labels(rhs, None)
    else:
        used = [lab for t in ins for lab in t]
        out = [f"...{k}" for k in range(width)] + sorted(lab for lab in set(used)
                                                          if used.count(lab) == 1 and not lab.startswith("..."))
    missing = sorted({lab for lab in out if all(lab not in t for t in ins)})
    if missing or len(set(out)) != len(out):
        raise invalid(cx, f"equation {equation!r}: the output must name each index once, and only indices of the "
                          "operands")
    return ins, out


def _diagonals(x: Any, labels: list[str], equation: str, cx: NodeContext) -> tuple[Any, list[str]]:
    """``x`` reduced to its diagonal along each index repeated within it (``ii`` -> ``i``): the two axes moved
    last, merged, and every ``n + 1``-th element sliced out (a copy of the diagonal; its gradient a strided
    scatter). A trace is this diagonal, summed later like any index the output does not hold."""
    while True:
        repeated = next((lab for lab in labels if labels.count(lab) > 1), None)
        if repeated is None:
            return x, labels
        p = labels.index(repeated)
        q = labels.index(repeated, p + 1)
        shape = shape_of(x)
        if shape[p] != shape[q]:
            raise invalid(cx, f"equation {equation!r}: index {repeated!r} is repeated within one operand on axes of "
                              f"sizes {shape[p]} and {shape[q]}; a diagonal needs equal sizes")
        n = shape[p]
        rest = [k for k in range(len(labels)) if k not in (p, q)]
        if rest + [p, q] != list(range(len(labels))):
            x = ops.transpose(x, perm=rest + [p, q])
        x = reshape_keeping_batch(x, [*(shape[k] for k in rest), n * n])
        x = ops.slice(x, starts=[0], stops=[n * n], steps=[n + 1], axes=[-1])
        labels = [labels[k] for k in rest] + [repeated]


def _sum_out(x: Any, labels: list[str], needed: set[str]) -> tuple[Any, list[str]]:
    """``x`` summed over the axes whose labels are not ``needed``."""
    axes = [k for k, lab in enumerate(labels) if lab not in needed]
    if not axes:
        return x, labels
    return ops.sum(x, axes=axes), [lab for lab in labels if lab in needed]


def _arranged(x: Any, labels: list[str], order: list[str]) -> Any:
    """``x`` transposed so that its labels follow ``order`` (which holds all of them)."""
    perm = [labels.index(lab) for lab in order]
    return x if perm == list(range(len(perm))) else ops.transpose(x, perm=perm)


def _contract(a: Any, la: list[str], b: Any, lb: list[str], keep: set[str]) -> tuple[Any, list[str]]:
    """The product of two operands summed over the labels they share and ``keep`` does not hold: one ``matmul``
    of ``[batch, left, shared]`` by ``[batch, shared, right]`` (a broadcast ``mul`` when nothing is summed)."""
    a, la = _sum_out(a, la, set(lb) | keep)
    b, lb = _sum_out(b, lb, set(la) | keep)
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    left = [lab for lab in la if lab not in lb]
    right = [lab for lab in lb if lab not in la]
    size_a, size_b = dict(zip(la, shape_of(a))), dict(zip(lb, shape_of(b)))
    size = {**size_a, **{lab: n for lab, n in size_b.items() if size_a.get(lab, 1) == 1}}  # broadcast: the larger
    if not summed:  # both laid out as batch + left + right, size 1 where an operand lacks the label
        order = batch + left + right

        def spread(x: Any, labels: list[str]) -> Any:
            x = _arranged(x, labels, [lab for lab in order if lab in labels])
            absent = [k for k, lab in enumerate(order) if lab not in labels]
            return ops.expand_dims(x, axes=absent) if absent else x
        return ops.mul(spread(a, la), spread(b, lb)), order
    unequal = [f"{lab!r} ({size_a[lab]} and {size_b[lab]})" for lab in summed if size_a[lab] != size_b[lab]]
    if unequal:
        raise Unsupported(f"Einsum summing over indices of different sizes, {', '.join(unequal)} (a broadcast "
                          "contraction)")
    a_batch, b_batch = [size_a[lab] for lab in batch], [size_b[lab] for lab in batch]
    rows, inner, cols = (math.prod(size[lab] for lab in group) for group in (left, summed, right))
    a3 = reshape_keeping_batch(_arranged(a, la, batch + left + summed), [*a_batch, rows, inner])
    b3 = reshape_keeping_batch(_arranged(b, lb, batch + summed + right), [*b_batch, inner, cols])
    y = ops.matmul(a3, b3)
    out_batch = list(np.broadcast_shapes(tuple(a_batch), tuple(b_batch)))
    return reshape_keeping_batch(y, [*out_batch, *(size[lab] for lab in left + right)]), batch + left + right


@rule("Einsum")
def _einsum(cx: NodeContext) -> Any:
    """Each operand first reduced to its diagonals (an index repeated within it), then operands folded in from the
    left, each pair by ``_contract``; a label is summed as soon as no later operand and not the output holds it
    (a trace is a diagonal summed)."""
    equation = cx.attr("equation", "string")
    if equation is None:
        raise invalid(cx, "Einsum needs its equation attribute")
    xs = [cx.input(i) for i in range(len(cx))]
    terms, out = _einsum_terms(equation, [rank_of(x) for x in xs], cx)
    for k, (x, labels) in enumerate(zip(xs, terms)):
        xs[k], terms[k] = _diagonals(x, labels, equation, cx)
    y, labels = xs[0], terms[0]
    for k in range(1, len(xs)):
        keep = set(out).union(*[set(t) for t in terms[k + 1:]])
        y, labels = _contract(y, labels, xs[k], terms[k], keep)
    y, labels = _sum_out(y, labels, set(out))
    return _arranged(y, labels, out)


# -- TopK ---------------------------------------------------------------------------------------------------------
@rule("TopK")
def _topk(cx: NodeContext) -> Any:
    """``k`` rounds, each picking the first extremum among the elements not picked yet (ONNX's order: ties go to
    the lower index); the values are the input read through a mask of the picked position, so their gradient
    is scattered back to it. Always sorted (``sorted=0`` allows any order). NaNs are not ordered."""
    x = cx.input(0)
    k = int(cx.need_known(1, "K").reshape(-1)[0])
    axis = norm_axis(cx.attr("axis", "int", -1), rank_of(x), cx)
    n = shape_of(x)[axis]
    if not 0 <= k <= n:
        raise invalid(cx, f"K = {k} is outside [0, {n}] for an axis of {n}")
    largest = bool(cx.attr("largest", "int", 1))
    dtype = np.dtype(x.dtype.np)
    if dtype.kind == "f":
        sentinel = -np.inf if largest else np.inf
    elif dtype.kind in "iu":
        sentinel = np.iinfo(dtype).min if largest else np.iinfo(dtype).max
    else:
        raise Unsupported(f"TopK of {dtype} values")
    rank = rank_of(x)
    positions = np.arange(n, dtype=np.int64).reshape([n if a == axis else 1 for a in range(rank)])
    taken: Any = np.zeros(positions.shape, bool)
    reduce = ops.max if largest else ops.min
    values, indices = [], []
    for _ in range(k):
        best = reduce(ops.where(taken, like(sentinel, x), x), axes=[axis], keepdims=True)
        candidate = ops.where(taken, np.array(False), ops.equal(x, best))
        index = ops.argmax(ops.cast(candidate, to="i32"), axis=axis, keepdims=True)      # the first candidate
        picked = ops.equal(positions, index)
        values.append(ops.sum(ops.where(picked, x, like(0, x)), axes=[axis], keepdims=True))
        indices.append(index)
        taken = ops.where(picked, np.array(True), taken)
    if k == 0:
        empty = [d if a != axis else 0 for a, d in enumerate(shape_of(x))]
        return [ops.slice(x, starts=[0], stops=[0], axes=[axis]), np.zeros(empty, np.int64)]
    if k == 1:
        return [values[0], indices[0]]
    return [ops.concat(*values, axis=axis), ops.concat(*indices, axis=axis)]


# -- ReduceProd, Hardmax ------------------------------------------------------------------------------------------
@rule("ReduceProd")
def _reduce_prod(cx: NodeContext) -> Any:
    """The reduced axes moved last and merged, then halves multiplied until one row is left (log2 steps; the
    gradient of each factor is the product of the others, zeros included)."""
    x = cx.input(0)
    rank = rank_of(x)
    axes = _reduce_axes(cx, rank)
    if axes == []:
        return x
    axes = list(range(rank)) if axes is None else axes
    keep = bool(cx.attr("keepdims", "int", 1))
    kept = [a for a in range(rank) if a not in axes]
    shape = shape_of(x)
    m = math.prod(shape[a] for a in axes)
    out_shape = [1 if a in axes else d for a, d in enumerate(shape)] if keep else [shape[a] for a in kept]
    if m == 0:  # the empty product
        return np.ones(out_shape, np.dtype(x.dtype.np))
    perm = kept + axes
    y = x if perm == list(range(rank)) else ops.transpose(x, perm=perm)
    y = reshape_keeping_batch(y, [*(shape[a] for a in kept), m])
    while m > 1:
        half = m // 2
        product = ops.slice(y, starts=[0], stops=[half], axes=[-1]) * ops.slice(y, starts=[half], stops=[2 * half],
                                                                                 axes=[-1])
        y = ops.concat(product, ops.slice(y, starts=[2 * half], stops=[m], axes=[-1]), axis=-1) if m % 2 else product
        m = half + m % 2
    return reshape_keeping_batch(y, out_shape)


@rule("Hardmax")
def _hardmax(cx: NodeContext) -> Any:
    """1 at the first maximum along ``axis``, 0 elsewhere (opset 13 and newer: the axis alone)."""
    x = cx.input(0)
    axis = norm_axis(cx.attr("axis", "int", -1), rank_of(x), cx)
    n, rank = shape_of(x)[axis], rank_of(x)
    positions = np.arange(n, dtype=np.int64).reshape([n if a == axis else 1 for a in range(rank)])
    hits = ops.equal(positions, ops.argmax(x, axis=axis, keepdims=True))
    return ops.where(hits, like(1, x), like(0, x))


# -- Tan and the hyperbolic functions ---------------------------------------------------------------------------
# Written with frame's exp/expm1/log1p/sqrt/sin/cos in the forms that keep their accuracy near 0, where the
# textbook ones cancel (sinh x = (e^x - e^-x) / 2 is 0 for |x| < 2^-24 in float32): each differentiates as
# those ops do. Asin, Acos and Atan need an arctangent, which frame has not.
def _tan(x: Any) -> Any:
    return ops.sin(x) / ops.cos(x)


def _sinh(x: Any) -> Any:  # (expm1(x) - expm1(-x)) / 2: x + x^3/6 + ... without cancelling near 0
    return (ops.expm1(x) - ops.expm1(ops.neg(x))) * like(0.5, x)


def _cosh(x: Any) -> Any:
    return (ops.exp(x) + ops.exp(ops.neg(x))) * like(0.5, x)


def _odd(f: Any, x: Any) -> Any:
    """f(x) for x >= 0 and -f(-x) below: the odd function from its accurate half. (Not sign(x) f(|x|): its
    gradient at 0 would be sign(0) = 0 times f', where the function's is f'(0).)"""
    return ops.where(ops.less(x, like(0, x)), ops.neg(f(ops.neg(x))), f(x))


def _asinh_half(a: Any) -> Any:
    square, one = a * a, like(1, a)
    return ops.log1p(a + square / (one + ops.sqrt(square + one)))


def _asinh(x: Any) -> Any:
    """log1p(x + x^2 / (1 + sqrt(1 + x^2))) for x >= 0 (log(x + sqrt(x^2 + 1)) without cancelling), odd."""
    return _odd(_asinh_half, x)


def _acosh(x: Any) -> Any:
    """log1p(t + sqrt(t (t + 2))) with t = x - 1: log(x + sqrt(x^2 - 1)) without cancelling near 1."""
    t = x - like(1, x)
    return ops.log1p(t + ops.sqrt(t * (t + like(2, x))))


def _atanh(x: Any) -> Any:
    """log1p(2x / (1 - x)) / 2 for x >= 0, odd (for x near -1 the argument of log1p would near -1 and cancel)."""
    return _odd(lambda a: ops.log1p((a + a) / (like(1, a) - a)) * like(0.5, a), x)


_CURVES = {"Tan": _tan, "Sinh": _sinh, "Cosh": _cosh, "Asinh": _asinh, "Acosh": _acosh, "Atanh": _atanh}


@rule(*_CURVES)
def _curve(cx: NodeContext) -> Any:
    return _CURVES[cx.node.op_type](cx.input(0))  # (the checker has refused integer inputs)
