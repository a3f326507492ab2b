"""``fold_spectral_multipliers``: one multiply where a spectrum meets several constant multipliers in a row.

Spectral graphs multiply a packed spectrum by constants back to back: a spectral derivative's (i k)^p and
-- in its gradient -- the bin weights C and W of the irfft and rfft adjoints (``rfft -> *C -> *(-ik) -> *W
-> irfft``). Each multiply is a pass over the whole spectrum. This pass replaces a chain of them by one
multiply with the product of the constants:

    mul(mul(z, r1), r2)                 -> complex_mul(z, r1 r2)    real multipliers (last axis 1)
    complex_mul(mul(z, r), k)           -> complex_mul(z, r k)      a real and a complex multiplier
    mul(complex_mul(z, k), r)           -> complex_mul(z, k r)
    complex_mul(complex_mul(z, k1), k2) -> complex_mul(z, k1 k2)

where r (a scalar or a last axis of 1; a ``complex_mul`` by such an r is real too) and k (packed) are
constants and the inner result feeds nothing else. It applies only to packed spectra (the
chain starts at the output of rfft, fft, ifft or a complex op), so other graphs are untouched. The
product of the constants is formed in float64 and rounded once, so a folded chain can differ from the
unfolded one in the last bit or two (it rounds once where the chain rounded at every multiply).
"""

from __future__ import annotations

import numpy as np

from frame_core import Graph, PassSpec, Rewriter, TensorType, Value

#: Ops whose outputs are packed spectra, where a multiplier chain may start.
SPECTRAL = frozenset({"rfft", "fft", "ifft", "complex_mul", "complex_matmul", "conj"})
#: Larger constants are left alone (folding copies them).
MAX_CONSTANT_ELEMENTS = 1 << 20


def _constant(v: Value) -> np.ndarray | None:
    p = v.producer
    if p is None or p.op != "constant":
        return None
    value = p.attrs["value"]
    return value if value.size <= MAX_CONSTANT_ELEMENTS else None


def _multiplier(node, vmap) -> tuple[Value, np.ndarray, str] | None:  # noqa: ANN001
    """``(operand, constant, kind)`` when ``node`` multiplies a packed value by a constant, else None.

    kind "real" scales re and im alike (a ``mul`` whose constant has a last axis of 1, or is a scalar);
    kind "complex" is a ``complex_mul`` by a packed constant.
    """
    if node.op not in ("mul", "complex_mul") or len(node.inputs) != 2:
        return None
    a, b = (vmap[v] for v in node.inputs)
    for operand, other in ((a, b), (b, a)):
        value = _constant(other)
        if value is None or _constant(operand) is not None:
            continue
        t = operand.type
        if t.rank < 2 or t.shape[-1] != 2 or not t.dtype.is_float:
            return None
        if value.ndim and value.shape[-1] == 2 and node.op == "complex_mul":
            return operand, value, "complex"
        if value.ndim == 0 or value.shape[-1] == 1:  # complex_mul reads a last axis of 1 as real; so does mul
            return operand, value, "real"
        return None
    return None


def _product(c1: np.ndarray, k1: str, c2: np.ndarray, k2: str) -> tuple[np.ndarray, str]:
    a, b = c1.astype(np.float64), c2.astype(np.float64)
    if k1 == k2 == "real":
        return a * b, "real"
    if k1 == "real" or k2 == "real":
        return a * b, "complex"  # the real one's size-1 last axis scales re and im alike
    z = (a[..., 0] + 1j * a[..., 1]) * (b[..., 0] + 1j * b[..., 1])
    return np.stack([z.real, z.imag], axis=-1), "complex"


def _live_readers(graph: Graph) -> dict[Value, int]:
    """For each value, how many reads of it nodes that reach a graph output make."""
    live = set(graph.outputs)
    counts: dict[Value, int] = {}
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            for v in node.inputs:
                live.add(v)
                counts[v] = counts.get(v, 0) + 1
    return counts


def fold_spectral_multipliers(graph: Graph, ctx) -> Graph:  # noqa: ANN001 - a CompileContext
    if SPECTRAL.isdisjoint(ctx.ops(graph)):  # a chain starts at a spectral op: none, nothing to fold
        return graph
    readers = _live_readers(graph)  # dead readers (gradients nobody asked for) do not block a fold
    outputs = set(graph.outputs)
    rw = Rewriter(graph, ctx)
    chains: dict[Value, tuple[Value, np.ndarray, str]] = {}  # old value -> (root in the new graph, constant, kind)
    folded = 0
    for node in graph.nodes:
        found = _multiplier(node, rw.vmap)
        if found is None:
            rw.copy(node)
            continue
        operand, value, kind = found
        old_operand = next(v for v in node.inputs if rw.vmap[v] is operand)
        inner = chains.get(old_operand)
        out = node.outputs[0]
        if inner is not None and readers.get(old_operand) == 1 and old_operand not in outputs:
            root, inner_value, inner_kind = inner
            value, kind = _product(inner_value, inner_kind, value, kind)
            shape = np.broadcast_shapes(root.type.shape, value.shape)
            if shape == out.type.shape:
                value = value.astype(out.type.dtype.np)
                const = rw.emit("constant", [], {"value": value}, [TensorType(out.type.dtype, value.shape)]).outputs[0]
                if value.ndim == 0:  # a scalar: complex_mul wants a last axis
                    value = value.reshape(1)
                    const = rw.emit("constant", [], {"value": value}, [TensorType(out.type.dtype, (1,))]).outputs[0]
                rw.alias(out, rw.emit("complex_mul", [root, const], {}, [out.type]).outputs[0])
                chains[out] = (root, value, kind)
                folded += 1
                continue
        rw.copy(node)
        if old_operand in chains or (operand.producer is not None and operand.producer.op in SPECTRAL):
            chains[out] = (operand, value, kind)  # a chain may start here
    if not folded:
        return graph
    ctx.note("fold_spectral_multipliers", f"folded {folded} multiplies into their neighbours")
    return rw.finish()


PASSES = [PassSpec("fold_spectral_multipliers", fold_spectral_multipliers, after="fold_constants", min_level=2,
                   doc="chains of constant multipliers on a packed spectrum -> one multiply by their product")]
