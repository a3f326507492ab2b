"""Export rules of packed complex arithmetic, FFTs (as ONNX ``DFT``) and control flow (``If``, ``Loop``,
``Scan``).

frame's packed complex layout (a last axis of 2 holding re, im) is ONNX ``DFT``'s, so transforms map
directly; ``irfft`` is written as the Hermitian extension of the half spectrum followed by an inverse
complex ``DFT``, which every runtime supports. A ``loop``'s per-step outputs are padded with zero rows to
``max_trip`` as frame defines them (ONNX stacks only the steps run).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto

from frame_core import Node

from .export import Exporter
from .rules_export import rule

__all__: list[str] = []


# -- complex ----------------------------------------------------------------------------------------------
def _part(ex: Exporter, z: str, k: int) -> str:
    return ex.emit("Slice", [z, ex.ints([k]), ex.ints([k + 1]), ex.ints([-1])])


@rule("conj")
def _conj(ex: Exporter, node: Node) -> list[str]:
    return [ex.emit("Mul", [ex.input(node, 0), ex.const([1, -1], node.inputs[0].dtype)])]


@rule("complex_mul")
def _complex_mul(ex: Exporter, node: Node) -> list[str]:
    a, b = ex.input(node, 0), ex.input(node, 1)
    if node.inputs[0].shape[-1] == 1 or node.inputs[1].shape[-1] == 1:  # a real operand scales both parts
        return [ex.emit("Mul", [a, b])]
    ar, ai, br, bi = _part(ex, a, 0), _part(ex, a, 1), _part(ex, b, 0), _part(ex, b, 1)
    re = ex.emit("Sub", [ex.emit("Mul", [ar, br]), ex.emit("Mul", [ai, bi])])
    im = ex.emit("Add", [ex.emit("Mul", [ar, bi]), ex.emit("Mul", [ai, br])])
    return [ex.emit("Concat", [re, im], axis=-1)]


@rule("complex_matmul")
def _complex_matmul(ex: Exporter, node: Node) -> list[str]:
    a, b = ex.input(node, 0), ex.input(node, 1)
    last = ex.ints([-1])
    ar, ai, br, bi = (ex.emit("Squeeze", [_part(ex, z, k), last]) for z, k in ((a, 0), (a, 1), (b, 0), (b, 1)))
    re = ex.emit("Sub", [ex.emit("MatMul", [ar, br]), ex.emit("MatMul", [ai, bi])])
    im = ex.emit("Add", [ex.emit("MatMul", [ar, bi]), ex.emit("MatMul", [ai, br])])
    return [ex.emit("Concat", [ex.emit("Unsqueeze", [re, last]), ex.emit("Unsqueeze", [im, last])], axis=-1)]


# -- transforms ---------------------------------------------------------------------------------------------
def _dft(ex: Exporter, x: str, axis: int, *, inverse: bool = False, onesided: bool = False) -> str:
    if ex.opset >= 20:
        return ex.emit("DFT", [x, "", ex.const(axis, np.int64)], inverse=int(inverse), onesided=int(onesided))
    return ex.emit("DFT", [x], axis=axis, inverse=int(inverse), onesided=int(onesided))


def _scale(ex: Exporter, x: str, factor: float, dtype: Any) -> str:
    return x if factor == 1.0 else ex.emit("Mul", [x, ex.const(factor, dtype)])


def _forward_scale(norm: str, n: int) -> float:
    return {"backward": 1.0, "ortho": 1.0 / math.sqrt(n), "forward": 1.0 / n}[norm]


def _inverse_fix(norm: str, n: int) -> float:
    """What to multiply ONNX's inverse (scaled 1/n) by for frame's ``norm``."""
    return {"backward": 1.0, "ortho": math.sqrt(n), "forward": float(n)}[norm]


def _complex_axis(node: Node, shape: tuple[int, ...]) -> int:
    return node.attrs.get("axis", -1) % (len(shape) - 1)


@rule("fft", "ifft")
def _fft(ex: Exporter, node: Node) -> list[str]:
    z = node.inputs[0]
    axis = _complex_axis(node, z.shape)
    n, norm = z.shape[axis], node.attrs.get("norm", "backward")
    out = _dft(ex, ex.input(node, 0), axis, inverse=node.op == "ifft")
    factor = _inverse_fix(norm, n) if node.op == "ifft" else _forward_scale(norm, n)
    return [_scale(ex, out, factor, z.dtype)]


@rule("rfft")
def _rfft(ex: Exporter, node: Node) -> list[str]:
    x = node.inputs[0]
    axis = node.attrs.get("axis", -1) % len(x.shape)
    n, norm = x.shape[axis], node.attrs.get("norm", "backward")
    packed = ex.emit("Unsqueeze", [ex.input(node, 0), ex.ints([-1])])
    return [_scale(ex, _dft(ex, packed, axis, onesided=True), _forward_scale(norm, n), x.dtype)]


@rule("irfft")
def _irfft(ex: Exporter, node: Node) -> list[str]:
    z = node.inputs[0]
    axis = _complex_axis(node, z.shape)
    m = z.shape[axis]
    n = node.attrs.get("n") or 2 * (m - 1)
    norm = node.attrs.get("norm", "backward")
    half = ex.input(node, 0)
    needed = n // 2 + 1
    if m > needed:
        half = ex.emit("Slice", [half, ex.ints([0]), ex.ints([needed]), ex.ints([axis])])
    elif m < needed:
        rank = len(z.shape)
        after = [0] * rank
        after[axis] = needed - m
        half = ex.emit("Pad", [half, ex.ints([0] * rank + after)])
    rest = n - needed  # bins needed..n-1 are conj(X[n-k]), k = needed..n-1: X[n-needed], ..., X[1]
    full = half
    if rest > 0:
        mirrored = ex.emit("Slice", [half, ex.ints([rest]), ex.ints([0]), ex.ints([axis]), ex.ints([-1])])
        mirrored = ex.emit("Mul", [mirrored, ex.const([1, -1], z.dtype)])
        full = ex.emit("Concat", [half, mirrored], axis=axis)
    signal = _dft(ex, full, axis, inverse=True)
    real = ex.emit("Squeeze", [_part(ex, signal, 0), ex.ints([-1])])
    return [_scale(ex, real, _inverse_fix(norm, n), z.dtype)]


# -- control flow --------------------------------------------------------------------------------------------
def _bool_scalar() -> tuple[int, list[int]]:
    return (TensorProto.BOOL, [])


def _i64_scalar() -> tuple[int, list[int]]:
    return (TensorProto.INT64, [])


@rule("if_else")
def _if_else(ex: Exporter, node: Node) -> list[str]:
    outer = [ex.input(node, i) for i in range(1, len(node.inputs))]
    then = ex.subgraph(node.attrs["then_branch"], outer, [], label="then")
    other = ex.subgraph(node.attrs["else_branch"], outer, [], label="else")
    cond = ex.input(node, 0)
    return ex.emit("If", [cond], n_out=len(node.outputs), outputs=[ex.fresh("if") for _ in node.outputs],
                   then_branch=then, else_branch=other)


@rule("scan")
def _scan(ex: Exporter, node: Node) -> list[str]:
    a = node.attrs
    body, nc, nx, length = a["body"], a["n_carry"], a["n_scanned"], a["length"]
    reverse = bool(a.get("reverse"))
    names = [ex.input(node, i) for i in range(len(node.inputs))]
    carry, xs, invariants = names[:nc], names[nc:nc + nx], names[nc + nx:]
    ny = len(body.outputs) - nc
    if length == 0:  # nothing runs: ONNX Runtime's Scan cannot slice a scanned input of 0 rows (it refuses
        # the model at run time), and frame knows the result while exporting: the carry as given, empty rows
        return [*(ex.emit("Identity", [c]) for c in carry),
                *(ex.const(np.zeros(v.shape, v.dtype.np), v.dtype) for v in node.outputs[nc:])]
    if nx == 0:
        return _scan_as_loop(ex, node, carry, invariants, length, reverse, ny)
    declared_carry = [(ex.fresh("scan_carry"), v) for v in body.inputs[:nc]]
    declared_rows = [(ex.fresh("scan_row"), v) for v in body.inputs[nc:nc + nx]]
    bound = [n for n, _ in declared_carry] + [n for n, _ in declared_rows] + invariants
    graph = ex.subgraph(body, bound, declared_carry + declared_rows, label="scan_body")
    return ex.emit("Scan", carry + xs, n_out=nc + ny, outputs=[ex.fresh("scan") for _ in range(nc + ny)],
                   body=graph, num_scan_inputs=nx, scan_input_directions=[int(reverse)] * nx,
                   scan_output_directions=[int(reverse)] * ny)


def _scan_as_loop(ex: Exporter, node: Node, carry: list[str], invariants: list[str], length: int, reverse: bool,
                  ny: int) -> list[str]:
    body = node.attrs["body"]
    nc = len(carry)
    it, cond_in = ex.fresh("iter"), ex.fresh("cond_in")
    declared = [(it, _i64_scalar()), (cond_in, _bool_scalar())]
    declared_carry = [(ex.fresh("loop_carry"), v) for v in body.inputs[:nc]]
    bound = [n for n, _ in declared_carry] + invariants
    cond_out = ex.fresh("cond_out")
    graph = _loop_body(ex, body, bound, declared + declared_carry, cond_in, cond_out, nc, ny, prefix_cond=True)
    outs = ex.emit("Loop", [ex.const(length, np.int64), ex.const(True, np.bool_), *carry], n_out=nc + ny,
                   outputs=[ex.fresh("loop") for _ in range(nc + ny)], body=graph)
    ys = outs[nc:]
    if reverse:
        ys = [_reverse_rows(ex, y) for y in ys]
    return [*outs[:nc], *ys]


def _loop_body(ex: Exporter, body: Any, bound: list[Any], declared: list, cond_in: str, cond_out: str, nc: int,
               ny: int, prefix_cond: bool) -> Any:
    """A scan body (no cond output) wrapped as a Loop body: the cond passes through."""
    graph = ex.subgraph(body, bound, declared, label="loop_body")
    # put the cond first: the body's outputs are [carry..., ys...]; a Loop body returns [cond, carry..., ys...]
    from onnx import helper

    identity = helper.make_node("Identity", [cond_in], [cond_out], name=ex.fresh("n_Identity"))
    graph.node.append(identity)
    outputs = list(graph.output)
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), *outputs])
    return graph


def _reverse_rows(ex: Exporter, y: str) -> str:
    return ex.emit("Slice", [y, ex.ints([-1]), ex.ints([-(2**62)]), ex.ints([0]), ex.ints([-1])])


@rule("loop")
def _loop(ex: Exporter, node: Node) -> list[str]:
    a = node.attrs
    body, m, ns, nx = a["body"], a["max_trip"], a["n_states"], a["n_scanned"]
    reverse, count = bool(a.get("reverse")), bool(a.get("trip_count"))
    names = [ex.input(node, i) for i in range(len(node.inputs))]
    limit, cond, states = names[0], names[1], names[2:2 + ns]
    xs, invariants = names[2 + ns:2 + ns + nx], names[2 + ns + nx:]
    ny = len(body.outputs) - 1 - ns
    it, cond_in = ex.fresh("iter"), ex.fresh("cond_in")
    declared_states = [(ex.fresh("loop_state"), v) for v in body.inputs[1:1 + ns]]

    def row(x: str) -> Any:
        def make(inner: Exporter) -> str:
            index = it
            if reverse:  # step k reads row limit-1-k
                index = inner.emit("Sub", [inner.emit("Sub", [limit, inner.const(1, np.int64)]), it])
            return inner.emit("Gather", [x, index], axis=0)
        return make
    bound = [it, *(n for n, _ in declared_states), *(row(x) for x in xs), *invariants]
    declared = [(it, _i64_scalar()), (cond_in, _bool_scalar()), *declared_states]
    graph = ex.subgraph(body, bound, declared, label="loop_body")
    counter_init = []
    if count:  # the trip count T as one more state, counted in the body
        from onnx import helper

        c_in, c_out = ex.fresh("count_in"), ex.fresh("count_out")
        graph.input.insert(2 + ns, helper.make_tensor_value_info(c_in, TensorProto.INT64, []))
        one = ex.fresh("one")
        graph.node.append(helper.make_node("Constant", [], [one], name=ex.fresh("n_Constant"),
                                           value=helper.make_tensor(one, TensorProto.INT64, [], [1])))
        graph.node.append(helper.make_node("Add", [c_in, one], [c_out], name=ex.fresh("n_Add")))
        graph.output.insert(1 + ns, helper.make_tensor_value_info(c_out, TensorProto.INT64, []))
        counter_init = [ex.const(0, np.int64)]
    k = ns + len(counter_init)
    outs = ex.emit("Loop", [limit, cond, *states, *counter_init], n_out=k + ny,
                   outputs=[ex.fresh("loop") for _ in range(k + ny)], body=graph)
    finals, ys = outs[:ns], outs[k:]
    padded = [_pad_rows(ex, y, limit, m, reverse, len(node.outputs[ns + j].shape)) for j, y in enumerate(ys)]
    return [*finals, *padded, *outs[ns:k]]


def _pad_rows(ex: Exporter, y: str, limit: str, m: int, reverse: bool, rank: int) -> str:
    """ONNX's [T, ...] stacked rows as frame's [M, ...]: rows of the steps run, zeros elsewhere."""
    t = ex.emit("Slice", [ex.emit("Shape", [y]), ex.ints([0]), ex.ints([1])])
    zeros = ex.ints([0] * (rank - 1))
    total = ex.const([m], np.int64)
    if reverse:  # step k wrote row limit-1-k: the T rows end at row limit-1
        y = _reverse_rows(ex, y)
        lim = ex.emit("Reshape", [limit, ex.ints([1])])
        before = ex.emit("Sub", [lim, t])
        after = ex.emit("Sub", [total, lim])
    else:
        before = ex.ints([0])
        after = ex.emit("Sub", [total, t])
    pads = ex.emit("Concat", [before, zeros, after, zeros], axis=0)
    return ex.emit("Pad", [y, pads])
