"""Export rules of frame-ops-basic's random ops: Philox-4x64-10 written in ONNX's 64-bit integer ops, so that
an exported graph draws the same bits as frame from the same key (a graph input).

ONNX's own ``RandomUniform``/``RandomNormal``/``Bernoulli``/``Dropout`` are seeded by an attribute and drawn by
each runtime's generator: they could neither take frame's key nor give frame's numbers. Philox is integer
arithmetic (Salmon et al., SC 2011): ten rounds (one ``Loop``) of two 64 x 64 -> 128-bit products (the high
word from four 32 x 32-bit products in ``uint64``, the low word from ``Mul``'s wrap-around) and XORs with the
key, which ONNX Runtime runs on ``uint64`` tensors. Element ``i`` of a draw reads word ``i`` of the block sequence of its key,
block ``b`` having the counter ``(start + b, 0, 0, purpose)``, as ``frame_ops_basic.random._bits`` defines it.

From the bits, every op computes what frame's kernel computes, in the same IEEE operations: uniform, bernoulli,
dropout, split and fold_in give identical bits; a normal draw goes through ``Log``/``Cos``/``Sin`` of float64,
whose last bit may differ between ONNX Runtime's and numpy's maths libraries (docs/onnx.md bounds it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto

from frame_core import Node

from .errors import OnnxError
from .export import Exporter, onnx_type
from .rules_export import rule

__all__: list[str] = []

_M0, _M1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157   # Philox-4x64 multipliers
_W0, _W1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B   # the key's Weyl increments
_WORD = 2**64
_SAMPLE, _SPLIT, _FOLD_IN = 0, 1, 2  # what the counter's top word says a block is for (random.py)
U64 = TensorProto.UINT64


class _Philox:
    """The ONNX nodes computing words of Philox-4x64-10 under the ``int64[2]`` key named ``key_i64``: the ten rounds
    are one ``Loop`` whose body is a round (about 45 nodes, whatever the number of words)."""

    def __init__(self, ex: Exporter, key_i64: str) -> None:
        if ex.opset < 18:
            raise OnnxError(f"random ops export Philox with BitwiseXor and BitwiseAnd, which ONNX has from opset 18; "
                            f"export with opset 18 or newer (the default), not {ex.opset}")
        self.ex = ex
        key = ex.emit("Cast", [key_i64], to=U64)                      # the same 64 bits, unsigned
        self.k0 = ex.emit("Slice", [key, ex.ints([0]), ex.ints([1])])
        self.k1 = ex.emit("Slice", [key, ex.ints([1]), ex.ints([2])])

    def words(self, n: int, purpose: int, start: str | None = None) -> str:
        """``uint64[n]``: words 0..n-1 of the blocks with counters ``(start + b, 0, 0, purpose)``; ``start`` is an
        ``int64[1]`` name (fold_in's data) or 0."""
        ex = self.ex
        blocks = -(-n // 4)
        c0 = ex.const(np.arange(blocks, dtype=np.uint64))
        if start is not None:
            c0 = ex.emit("Add", [c0, ex.emit("Cast", [start], to=U64)])
        zeros = ex.const(np.zeros(blocks, np.uint64))
        state = [c0, zeros, zeros, ex.const(np.full(blocks, purpose, np.uint64)), self.k0, self.k1]
        finals = ex.emit("Loop", [ex.const(10, np.int64), ex.const(True, np.bool_), *state], n_out=6,
                         outputs=[ex.fresh("philox") for _ in range(6)], body=_round_body(ex, blocks))
        rows = [ex.emit("Unsqueeze", [w, ex.ints([1])]) for w in finals[:4]]
        flat = ex.emit("Reshape", [ex.emit("Concat", rows, axis=1), ex.ints([-1])])   # block by block, 4 words each
        return flat if n == 4 * blocks else ex.emit("Slice", [flat, ex.ints([0]), ex.ints([n])])


def _round_body(ex: Exporter, blocks: int) -> Any:
    """A Loop body: one Philox round of the counters ``c0..c3`` (``uint64[blocks]``) under ``k0, k1``
    (``uint64[1]``), then the key bumped by the Weyl increments."""
    from onnx import helper

    body = Exporter(ex.rules, ex.opset, parent=ex)

    def op(kind: str, a: str, b: str) -> str:
        return body.emit(kind, [a, b])

    def u64(value: int) -> str:
        return body.const(np.array(value % _WORD, np.uint64))

    def shift(a: str, bits: int) -> str:
        return body.emit("BitShift", [a, u64(bits)], direction="RIGHT")

    def mulhi(m: int, c: str) -> str:  # the high word of the 128-bit m * c, from 32-bit halves
        low32 = u64(0xFFFFFFFF)
        ch, cl = shift(c, 32), op("BitwiseAnd", c, low32)
        mh, ml = u64(m >> 32), u64(m & 0xFFFFFFFF)
        ll, lh, hl, hh = op("Mul", cl, ml), op("Mul", ch, ml), op("Mul", cl, mh), op("Mul", ch, mh)
        middle = op("Add", op("Add", shift(ll, 32), op("BitwiseAnd", lh, low32)), op("BitwiseAnd", hl, low32))
        return op("Add", op("Add", op("Add", hh, shift(lh, 32)), shift(hl, 32)), shift(middle, 32))

    names = [ex.fresh(n) for n in ("i", "cond", "c0", "c1", "c2", "c3", "k0", "k1")]
    _, cond, c0, c1, c2, c3, k0, k1 = names
    hi0, lo0 = mulhi(_M0, c0), op("Mul", c0, u64(_M0))
    hi1, lo1 = mulhi(_M1, c2), op("Mul", c2, u64(_M1))
    outs = [body.emit("Identity", [cond]), op("BitwiseXor", op("BitwiseXor", hi1, c1), k0), body.emit("Identity", [lo1]),
            op("BitwiseXor", op("BitwiseXor", hi0, c3), k1), body.emit("Identity", [lo0]),
            op("Add", k0, u64(_W0)), op("Add", k1, u64(_W1))]
    shapes = [[blocks]] * 4 + [[1], [1]]
    inputs = [helper.make_tensor_value_info(names[0], TensorProto.INT64, []),
              helper.make_tensor_value_info(cond, TensorProto.BOOL, [])]
    inputs += [helper.make_tensor_value_info(n, U64, s) for n, s in zip(names[2:], shapes)]
    outputs = [helper.make_tensor_value_info(outs[0], TensorProto.BOOL, [])]
    outputs += [helper.make_tensor_value_info(n, U64, s) for n, s in zip(outs[1:], shapes)]
    return helper.make_graph(body.nodes, ex.fresh("philox_round"), inputs, outputs)


_SIGNIFICAND = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def _uniform01(ex: Exporter, bits: str, dtype_name: str) -> str:
    """float64 in [0, 1): the top p bits over 2**p (frame_ops_basic.random.uniform_from_bits)."""
    p = _SIGNIFICAND[dtype_name]
    top = ex.emit("BitShift", [bits, ex.const(np.array(64 - p, np.uint64))], direction="RIGHT")
    return ex.emit("Mul", [ex.emit("Cast", [top], to=TensorProto.DOUBLE), ex.const(2.0 ** -p, np.float64)])


def _shaped(ex: Exporter, flat: str, node: Node) -> str:
    out = node.outputs[0]
    y = ex.emit("Reshape", [flat, ex.ints(out.shape)])
    return y if out.dtype.name == "float64" else ex.emit("Cast", [y], to=onnx_type(out))


def _empty(ex: Exporter, node: Node) -> list[str]:
    out = node.outputs[0]
    return [ex.const(np.zeros(out.shape, out.dtype.np), out.dtype)]


@rule("random_uniform")
def _random_uniform(ex: Exporter, node: Node) -> list[str]:
    out = node.outputs[0]
    n = math.prod(out.shape)
    if n == 0:
        return _empty(ex, node)
    low, high = float(node.attrs["low"]), float(node.attrs["high"])
    u = _uniform01(ex, _Philox(ex, ex.input(node, 0)).words(n, _SAMPLE), out.dtype.name)
    y = ex.emit("Add", [ex.emit("Mul", [u, ex.const(high - low, np.float64)]), ex.const(low, np.float64)])
    return [_shaped(ex, y, node)]


@rule("random_normal")
def _random_normal(ex: Exporter, node: Node) -> list[str]:
    """Box-Muller on the pairs of words (2j, 2j + 1): radius sqrt(-2 log(1 - u)) of the even word, angle 2 pi u
    of the odd one; samples 2j (cosine) and 2j + 1 (sine); an odd count draws one pair more."""
    out = node.outputs[0]
    n = math.prod(out.shape)
    if n == 0:
        return _empty(ex, node)
    pairs = (n + 1) // 2
    words = ex.emit("Reshape", [_Philox(ex, ex.input(node, 0)).words(2 * pairs, _SAMPLE), ex.ints([pairs, 2])])
    even = ex.emit("Slice", [words, ex.ints([0]), ex.ints([1]), ex.ints([1])])
    odd = ex.emit("Slice", [words, ex.ints([1]), ex.ints([2]), ex.ints([1])])
    u1 = ex.emit("Sub", [ex.const(1.0, np.float64), _uniform01(ex, even, "float64")])
    angle = ex.emit("Mul", [_uniform01(ex, odd, "float64"), ex.const(2.0 * math.pi, np.float64)])
    radius = ex.emit("Sqrt", [ex.emit("Mul", [ex.emit("Log", [u1]), ex.const(-2.0, np.float64)])])
    z = ex.emit("Concat", [ex.emit("Mul", [radius, ex.emit("Cos", [angle])]),
                           ex.emit("Mul", [radius, ex.emit("Sin", [angle])])], axis=1)   # [pairs, 2]: cos, sin
    z = ex.emit("Reshape", [z, ex.ints([-1])])
    if 2 * pairs != n:
        z = ex.emit("Slice", [z, ex.ints([0]), ex.ints([n])])
    y = ex.emit("Add", [ex.emit("Mul", [z, ex.const(float(node.attrs["std"]), np.float64)]),
                        ex.const(float(node.attrs["mean"]), np.float64)])
    return [_shaped(ex, y, node)]


def _threshold(p: float) -> int:
    return int(p * _WORD)  # p * 2**64 exactly: a uniform word is below it with probability p


@rule("bernoulli")
def _bernoulli(ex: Exporter, node: Node) -> list[str]:
    out = node.outputs[0]
    n, p = math.prod(out.shape), float(node.attrs["p"])
    if n == 0 or p == 1.0:  # p = 1: every draw is below 2**64, which a word cannot hold
        return [ex.const(np.full(out.shape, 1 if n else 0, out.dtype.np), out.dtype)]
    hits = ex.emit("Less", [_Philox(ex, ex.input(node, 0)).words(n, _SAMPLE), ex.const(np.array(_threshold(p), np.uint64))])
    return [ex.emit("Cast", [ex.emit("Reshape", [hits, ex.ints(out.shape)])], to=onnx_type(out))]


@rule("dropout")
def _dropout(ex: Exporter, node: Node) -> list[str]:
    """x * mask, the mask (word >= rate 2**64) cast to x's dtype and scaled by 1 / (1 - rate) first, as frame's
    kernel multiplies (a dropped NaN stays NaN: NaN * 0)."""
    out = node.outputs[0]
    n, rate = math.prod(out.shape), float(node.attrs["rate"])
    if n == 0:
        return [ex.emit("Identity", [ex.input(node, 0)])]
    kept = ex.emit("GreaterOrEqual", [_Philox(ex, ex.input(node, 1)).words(n, _SAMPLE),
                                      ex.const(np.array(_threshold(rate), np.uint64))])
    mask = ex.emit("Cast", [ex.emit("Reshape", [kept, ex.ints(out.shape)])], to=onnx_type(out))
    mask = ex.emit("Mul", [mask, ex.const(np.asarray(1.0 / (1.0 - rate), out.dtype.np), out.dtype)])
    return [ex.emit("Mul", [ex.input(node, 0), mask])]


@rule("random_split")
def _random_split(ex: Exporter, node: Node) -> list[str]:
    num = int(node.attrs["num"])
    if num == 0:
        return [ex.const(np.zeros((0, 2), np.int64))]
    words = _Philox(ex, ex.input(node, 0)).words(2 * num, _SPLIT)
    return [ex.emit("Reshape", [ex.emit("Cast", [words], to=TensorProto.INT64), ex.ints([num, 2])])]


@rule("random_fold_in")
def _random_fold_in(ex: Exporter, node: Node) -> list[str]:
    data = ex.input(node, 1)  # an integer scalar; int(data) % 2**64 is its two's-complement bits
    if node.inputs[1].dtype.name != "int64":
        data = ex.emit("Cast", [data], to=TensorProto.INT64)
    start = ex.emit("Reshape", [data, ex.ints([1])])
    return [ex.emit("Cast", [_Philox(ex, ex.input(node, 0)).words(2, _FOLD_IN, start)], to=TensorProto.INT64)]
