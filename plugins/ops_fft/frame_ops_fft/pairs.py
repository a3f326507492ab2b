"""``cancel_transform_pairs``: a forward transform of a scaled inverse transform is the spectrum itself, scaled.

A gradient graph transforms back what its forward pass just transformed: ``y = irfft(Z)`` and a loss such
as ``sum(y^2)`` give ``gy = 2 y``, whose adjoint rfft is ``rfft(2 irfft(Z))``. That pair of transforms is a
multiply (the rules, with s/t the forward/inverse scales of docs/fft.md and c a constant that is the
same at every point, found through ``mul`` and broadcasts of a scalar):

    rfft(c * irfft(Z, n, norm=a), norm=b) -> P(Z) * (c s(b) t(a) n)     P: Im of DC and Nyquist set to 0
    fft(c * ifft(Z, norm=a), norm=b)      -> Z * (c s(b) t(a) n)
    ifft(c * fft(Z, norm=a), norm=b)      -> Z * (c t(b) s(a) n)

(``irfft`` reads only Re of the DC and (even n) Nyquist bins, and ``rfft`` of a real signal has Im 0 there,
hence P.) When Z's Im is provably exactly 0 on those bins (it comes from an rfft through multiplies by
constants that keep it so, as in a spectral derivative), P is the identity and the multiply is a real
``complex_mul`` that ``fold_spectral_multipliers`` then merges into its neighbours; otherwise it is a
``mul`` by a packed per-bin mask. Two transforms become one pass over the spectrum, so the result differs
from the transformed one in the last bits (the transforms' own rounding is gone; docs/fft.md).
"""

from __future__ import annotations

import math

import numpy as np

from frame_core import Graph, Node, PassSpec, Rewriter, TensorType, Value

#: forward-transform scale s and inverse scale t of numpy's norms, for n points
_S = {"backward": lambda n: 1.0, "ortho": lambda n: 1 / math.sqrt(n), "forward": lambda n: 1.0 / n}
_T = {"backward": lambda n: 1.0 / n, "ortho": lambda n: 1 / math.sqrt(n), "forward": lambda n: 1.0}
#: forward op -> the inverse op it cancels
_INVERSE = {"rfft": "irfft", "fft": "ifft", "ifft": "fft"}
#: ops whose output is their only input broadcast (a uniform input stays uniform)
_BROADCASTS = frozenset({"sum_grad_internal", "broadcast_to", "reshape", "expand_dims"})
_DEPTH = 16


def _uniform(v: Value, depth: int = 0) -> float | None:
    """The one value every element of ``v`` has when ``v`` is a constant of equal elements (or a broadcast of
    one), else None."""
    p = v.producer
    if p is None or depth > _DEPTH:
        return None
    if p.op == "constant":
        value = p.attrs["value"]
        if value.size == 0 or value.size > 1 << 20 or not np.issubdtype(value.dtype, np.floating):
            return None
        first = value.flat[0]
        return float(first) if np.isfinite(first) and (value.size == 1 or np.all(value == first)) else None
    if p.op in _BROADCASTS and len(p.inputs) == 1:
        return _uniform(p.inputs[0], depth + 1)
    return None


def _scaled_inverse(v: Value, op: str, axis: int) -> tuple[Value, float, Node] | None:
    """``(inverse node's input Z, product of the constants c, inverse node)`` when ``v = c * inverse(Z)``."""
    factor = 1.0
    for _ in range(_DEPTH):
        p = v.producer
        if p is None:
            return None
        if p.op == _INVERSE[op]:
            return (p.inputs[0], factor, p) if _axis(p) == axis else None
        if p.op != "mul" or len(p.inputs) != 2:
            return None
        a, b = p.inputs
        for signal, other in ((a, b), (b, a)):
            c = _uniform(other)
            if c is not None and signal.type == v.type:  # the constant broadcasts to the signal, not beyond
                factor *= c
                v = signal
                break
        else:
            return None
    return None


def _axis(node) -> int:  # noqa: ANN001 - a transform node
    """The node's ``axis`` attribute made non-negative: it counts the complex axes (the packed one excluded)."""
    return node.attrs["axis"] % (node.outputs[0].type.rank - (0 if node.op == "irfft" else 1))


def _edge_bins(n: int) -> list[int]:
    return [0, n // 2] if n % 2 == 0 else [0]


def _real_at_edges(v: Value, axis: int, n: int, depth: int = 0) -> bool:
    """Whether packed ``v`` has Im exactly 0 on the DC and (even n) Nyquist bins of ``axis``: an rfft of n real
    points, through complex_mul/mul by constants whose Im is 0 on those bins."""
    p = v.producer
    if p is None or depth > _DEPTH:
        return False
    if p.op == "rfft":
        return _axis(p) == axis and p.inputs[0].type.shape[axis] == n
    if p.op not in ("complex_mul", "mul") or len(p.inputs) != 2:
        return False
    for signal, other in (p.inputs, p.inputs[::-1]):
        k = other.producer
        if k is None or k.op != "constant" or signal.type.shape != v.type.shape:
            continue
        value = k.attrs["value"]
        if value.ndim and value.shape[-1] == 2:  # a complex multiplier (mul of packed by packed is not complex)
            if p.op != "complex_mul":
                return False
            at = axis - (v.type.rank - value.ndim)  # the transformed axis in the constant's shape
            im = value[..., 1]
            if at >= 0 and value.shape[at] > 1:
                im = np.take(im, _edge_bins(n), axis=at)
            if np.any(im != 0):
                return False
        elif value.ndim and value.shape[-1] != 1:
            return False
        return _real_at_edges(signal, axis, n, depth + 1)
    return False


def cancel_transform_pairs(graph: Graph, ctx) -> Graph:  # noqa: ANN001 - a CompileContext
    if ctx.ops(graph).isdisjoint(_INVERSE):
        return graph
    rw = Rewriter(graph, ctx)
    cancelled = 0
    for node in graph.nodes:
        found = None
        if node.op in _INVERSE and node.outputs[0].type.dtype.np in (np.float32, np.float64):
            found = _scaled_inverse(rw.read(node.inputs)[0], node.op, _axis(node))
        if found is None:
            rw.copy(node)
            continue
        z, factor, inverse = found
        out = node.outputs[0]
        if z.type != out.type:  # irfft's n disagrees with the rfft's bins, or dtypes differ: not a pair
            rw.copy(node)
            continue
        axis, a, b = _axis(node), inverse.attrs["norm"], node.attrs["norm"]
        n = inverse.outputs[0].type.shape[axis] if node.op == "rfft" else out.type.shape[axis]
        if node.op == "ifft":
            scale = factor * _T[b](n) * _S[a](n) * n
        else:
            scale = factor * _S[b](n) * _T[a](n) * n
        dtype = out.type.dtype.np
        if node.op != "rfft" or _real_at_edges(z, axis, n):
            w = np.array([scale], dtype)  # a real multiplier: complex_mul reads a last axis of 1 as real
            op = "complex_mul"
        else:
            mask = np.full((z.type.shape[axis], 2), scale)
            mask[_edge_bins(n), 1] = 0.0  # P: irfft never read Im there, rfft makes it 0
            w = mask.reshape((mask.shape[0],) + (1,) * (out.type.rank - 2 - axis) + (2,)).astype(dtype)
            op = "mul"
        const = rw.emit("constant", [], {"value": w}, [TensorType(out.type.dtype, w.shape)]).outputs[0]
        rw.alias(out, rw.emit(op, [z, const], {}, [out.type]).outputs[0])
        cancelled += 1
    if not cancelled:
        return graph
    ctx.note("cancel_transform_pairs", f"replaced {cancelled} transform pair{'s' if cancelled > 1 else ''} by a multiply")
    return rw.finish()


PASSES = [PassSpec("cancel_transform_pairs", cancel_transform_pairs, after="fold_constants", min_level=2,
                   doc="rfft(c * irfft(Z)) -> Z scaled (likewise fft/ifft): a transform pair becomes one multiply")]
