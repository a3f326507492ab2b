"""``narrow_spectral_multipliers``: multiply only the bins that are kept, or that are not zero padding.

A Fourier layer keeps the lowest modes of a spectrum, and its gradient pads them back; the adjoints of rfft
and irfft put a constant bin weight next to both (``rfft -> *C -> slice`` and ``pad -> *W -> irfft``). A
multiply over the whole spectrum next to a slice or a pad wastes its work on bins that are dropped or are
zeros. The rules (k a constant; the multiply or the pad read by nothing else):

    slice(complex_mul(z, k))  -> complex_mul(slice(z), slice(k))      slice is a view: nothing copied
    complex_mul(pad(x), k)    -> pad(complex_mul(x, k on x's bins))   k finite: 0 * k is a zero

Every product kept is the same product of the same two numbers, so results are bitwise identical (a padded
zero is +0 where 0 * k could be -0 for a negative k; sums with it are the same).
"""

from __future__ import annotations

import numpy as np

from frame_core import Graph, PassSpec, Rewriter, TensorType, Value

from .simplify import _live_readers


def _constant(v: Value) -> np.ndarray | None:
    p = v.producer
    return p.attrs["value"] if p is not None and p.op == "constant" else None


def _region(attrs: dict, rank: int, first: str, second: str) -> list[tuple[int, int, int]] | None:
    """Per named axis ``(axis, a, b)``: a slice's (start, stop) or a pad's (before, after); None when it cuts the
    packed (re, im) axis (a slice of Re alone is no complex product)."""
    firsts, seconds = attrs[first], attrs[second]
    axes = attrs["axes"] if attrs["axes"] is not None else range(len(firsts))
    region = [(axis % rank, a, b) for axis, a, b in zip(axes, firsts, seconds)]
    for axis, a, b in region:
        whole = slice(a, b).indices(2) == (0, 2, 1) if first == "starts" else a == b == 0
        if axis == rank - 1 and not whole:
            return None
    return region


def _cut(k: np.ndarray, shape: tuple[int, ...], index: list[slice]) -> np.ndarray:
    """``k`` (broadcasting to ``shape``) cut by ``index`` on the axes where it has more than one element."""
    lead = len(shape) - k.ndim
    cut = tuple(index[lead + i] if k.shape[i] > 1 else slice(None) for i in range(k.ndim))
    return np.ascontiguousarray(k[cut])


def _multiplier(node, vmap) -> tuple[Value, np.ndarray] | None:  # noqa: ANN001
    """``(signal, k)`` for ``complex_mul(signal, k)`` (either order) with a finite constant k and a packed signal
    of the product's shape."""
    if node.op != "complex_mul":
        return None
    a, b = (vmap[v] for v in node.inputs)
    for signal, other in ((a, b), (b, a)):
        k = _constant(other)
        if k is not None and _constant(signal) is None and signal.type == node.outputs[0].type and np.isfinite(k).all():
            return signal, k
    return None


def narrow_spectral_multipliers(graph: Graph, ctx) -> Graph:  # noqa: ANN001 - a CompileContext
    if "complex_mul" not in ctx.ops(graph):
        return graph
    readers = _live_readers(graph)
    outputs = set(graph.outputs)
    rw = Rewriter(graph, ctx)
    moved = 0
    for node in graph.nodes:
        if node.op == "slice" and node.attrs["steps"] is None:
            source = node.inputs[0]
            found = _multiplier(source.producer, rw.vmap) if source.producer is not None else None
            region = _region(node.attrs, source.type.rank, "starts", "stops")
            if found is not None and region is not None and readers.get(source) == 1 and source not in outputs:
                signal, k = found
                shape = source.type.shape
                index = [slice(None)] * len(shape)
                for axis, start, stop in region:
                    index[axis] = slice(start, stop)
                narrow = rw.emit("slice", [signal], dict(node.attrs), [node.outputs[0].type]).outputs[0]
                k = _cut(k, shape, index)
                const = rw.emit("constant", [], {"value": k}, [TensorType(source.type.dtype, k.shape)]).outputs[0]
                rw.alias(node.outputs[0], rw.emit("complex_mul", [narrow, const], {}, [node.outputs[0].type]).outputs[0])
                moved += 1
                continue
        found = _multiplier(node, rw.vmap)
        if found is not None:
            signal, k = found
            pad = signal.producer
            old_signal = next(v for v in node.inputs if rw.vmap[v] is signal)
            region = _region(pad.attrs, signal.type.rank, "before", "after") if pad is not None and pad.op == "pad" else None
            if pad is not None and region is not None and readers.get(old_signal) == 1 and old_signal not in outputs:
                inner = pad.inputs[0]
                shape = signal.type.shape
                index = [slice(None)] * len(shape)
                for axis, before, after in region:
                    index[axis] = slice(before, shape[axis] - after)
                k = _cut(k, shape, index)
                const = rw.emit("constant", [], {"value": k}, [TensorType(inner.type.dtype, k.shape)]).outputs[0]
                product = rw.emit("complex_mul", [inner, const], {}, [inner.type]).outputs[0]
                rw.alias(node.outputs[0], rw.emit("pad", [product], dict(pad.attrs), [node.outputs[0].type]).outputs[0])
                moved += 1
                continue
        rw.copy(node)
    if not moved:
        return graph
    ctx.note("narrow_spectral_multipliers", f"moved {moved} multiplies across a slice or pad")
    return rw.finish()


PASSES = [PassSpec("narrow_spectral_multipliers", narrow_spectral_multipliers, after="fold_constants", min_level=2,
                   doc="slice(z * k) -> slice(z) * slice(k), pad(x) * k -> pad(x * k'): multiply only kept bins")]
