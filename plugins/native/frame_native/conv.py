"""A convolution layer for inference, ``relu(max_pool2d(conv2d(x, w)) + b)``, as one tiered kernel.

A CNN layer as exported to ONNX is ``max_pool2d(relu(conv2d(x, w) + b))``; frame-ops-nn's pass
``pool_before_monotone`` makes it ``relu(max_pool2d(conv2d(x, w)) + b)`` (the same bits). The pass
``compile_conv_pools`` turns that chain (2 x 2 windows of stride 2, ``b`` one value per channel, each
intermediate read by the next member only) into one ``native_conv_pool_internal`` node. Its kernel runs the
four original numpy kernels at first and, once the background compiler has built them, two compiled loops
around the very same matrix product, one sample at a time:

* the sample's columns (im2col), through a zero-bordered copy of the sample, with K in the order frame-ops-nn's
  conv2d sums for this geometry: ``(i, j, c)`` where it multiplies channels-last columns
  (``_forward_channels_last``), ``(c, i, j)`` where it multiplies NCHW ones (``_forward_by_sample``); data
  movement only (runs of 32-byte vectors);
* the product with frame-ops-nn's weights (``w[co, (i, j, c)]``, a compiled transpose, or ``w[co, (c, i, j)]``,
  a view), shapes, order of the terms and BLAS call. For NCHW columns that is ``np.matmul(wm, cols)`` on
  ``[K, oh * ow]`` columns, as frame-ops-nn's. For channels-last columns frame-ops-nn multiplies ``wm @
  cols^T`` with ``cols`` ``[oh * ow, K]`` (BLAS's NT form: rows of ``kw * C`` contiguous values copied from a
  channels-last copy of the sample); this layer can make the same call on the same layouts (order ``"last"``
  of the columns piece), the same bits by construction, or ``wm @ cols`` on ``[K, oh * ow]`` columns (BLAS's
  NN form, order ``"last_nn"``), which OpenBLAS multiplies 10-25% faster on the benchmark CNN's layers but
  need not sum in the same order: OpenBLAS 0.3.31's Haswell kernels on an AMD EPYC give other bits for some
  shapes (a stride-2 layer of 16 -> 36 channels on 20 x 19) and the same for others. So the install check
  tries the NN form first and keeps it only where it finds frame-ops-nn's bits, else compiles and checks the
  NT form (``_install``); BLAS chooses its kernels by shapes and form, not by values, so random data of the node's
  own shapes shows whether the two forms sum alike there;
* the 2 x 2 maximum (rows first, then columns, as frame-ops-nn's tiled pool; NaN spreads as in
  ``np.maximum``), the bias added on the side the graph adds it, and ReLU (``np.maximum(v, 0)``: NaN stays,
  -0.0 gives +0.0), written into the pooled output while the sample's product is still in cache.

Same bits, checked: before the compiled kernel takes over, the compiler thread runs it against the numpy
kernels (BLAS included) on random data of the node's shapes (at most two samples: both run the batch one
sample at a time), with a NaN, infinities and -0.0 in x, a -0.0 and a NaN in b (for channels-last layers the
NN form, then the NT form); it stays on numpy (state ``failed``, one note) unless every bit agrees but a NaN's
sign (where a NaN of the product meets a NaN
of ``b``, which one numpy's add keeps depends on its loop; the compiled add keeps the first term's). The sign
of a zero maximum is the one
thing numpy's own maximum leaves to its code path; ``+ b`` then ReLU makes every zero +0.0 or ``b`` itself, so
it never shows in the result.

Not compiled: dtypes other than float32/float64, groups, the geometries frame-ops-nn multiplies otherwise
(short rows on the padded grid, chunks of several samples; see ``layout``), pools other than 2 x 2 of stride
2 without padding, and chains whose intermediates are read elsewhere (training graphs) or are outputs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from frame_core import AttrSpec, Example, Graph, NodeContext, OpSchema, Rewriter, TensorType, registry
from frame_core import MutableRecord, Record

from .tiered import Tier, calls_before_compile, queue_plans

__all__ = ["CONV_POOL_OP", "CONV_POOL_SCHEMA", "compile_conv_pools", "layout"]

CONV_POOL_OP = "native_conv_pool_internal"
_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
#: Samples the install check runs (the whole batch when smaller).
PROBE_SAMPLES = 2
_SOURCE_PACKS = {"conv2d": "ops_nn", "max_pool2d": "ops_nn", "add": "ops_basic", "relu": "ops_basic"}


class Geometry(Record):
    """One layer: x[batch, c, h, w] (*) w[co, c, kh, kw] -> [batch, co, oh, ow], pooled to [.., oh // 2, ow // 2]."""

    __match_args__ = ("dtype", "batch", "c", "h", "w", "co", "kh", "kw", "stride", "dilation", "padding")
    dtype: np.dtype
    batch: int
    c: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]

    def __init__(
        self, dtype: np.dtype, batch: int, c: int, h: int, w: int, co: int, kh: int, kw: int, stride: tuple[int, int],
        dilation: tuple[int, int], padding: tuple[int, int, int, int]
    ) -> None:
        # padding: top, bottom, left, right
        self._store(dtype=dtype, batch=batch, c=c, h=h, w=w, co=co, kh=kh, kw=kw, stride=stride, dilation=dilation,
                    padding=padding)

    @property
    def padded(self) -> tuple[int, int]:
        top, bottom, left, right = self.padding
        return self.h + top + bottom, self.w + left + right

    @property
    def out(self) -> tuple[int, int]:
        (hp, wp), (sh, sw), (dh, dw) = self.padded, self.stride, self.dilation
        return (hp - dh * (self.kh - 1) - 1) // sh + 1, (wp - dw * (self.kw - 1) - 1) // sw + 1

    @property
    def pooled(self) -> tuple[int, int]:
        oh, ow = self.out
        return oh // 2, ow // 2

    @property
    def depth(self) -> int:
        """Terms of each output's sum: the product's K."""
        return self.c * self.kh * self.kw


def layout(g: Geometry) -> str | None:
    """How frame-ops-nn's conv2d forward multiplies this geometry (one group): ``"last"`` (channels-last columns,
    one sample per product), ``"sample"`` (NCHW columns, one sample per product), or None for its other paths
    (the padded grid for short rows, chunks of several samples), which this kernel does not reproduce. Mirrors
    ``frame_ops_nn.conv.conv_forward``'s choice; the install check and tests/test_conv_pool.py catch a drift."""
    ow, positions = g.out[1], g.out[0] * g.out[1]
    if g.stride == (1, 1) and ow <= 16 and g.co <= 32:  # _on_short_rows
        return None
    if g.dilation[1] == 1 and g.c >= 16 and positions >= 64:  # _channels_last
        return "last"
    if positions >= 256:  # _SAMPLE_POSITIONS
        return "sample"
    return None


# -- LLVM IR ------------------------------------------------------------------------------------------
class _Code:
    """LLVM IR lines of one function with counted loops of constant trip counts (``loop``) and i64 index sums."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.block = "go"
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def emit(self, *lines: str) -> None:
        self.lines.extend("  " + line for line in lines)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def loop(self, count: int, body: Callable[[str], None]) -> None:
        """``for i in range(count): body(i)`` (nothing when count <= 0); ``i`` is an i64 value's name."""
        if count <= 0:
            return
        name, before = self.fresh("L"), self.block
        self.emit(f"br label %{name}")
        self.label(name)
        i = f"%{name}i"
        self.emit(f"{i} = phi i64 [0, %{before}], [%{name}n, %{name}x]")
        body(i)
        self.emit(f"br label %{name}x")
        self.label(f"{name}x")
        self.emit(f"%{name}n = add i64 {i}, 1", f"%{name}c = icmp ult i64 %{name}n, {count}",
                  f"br i1 %{name}c, label %{name}, label %{name}e")
        self.label(f"{name}e")

    def index(self, *terms: tuple[str, int], const: int = 0) -> str:
        """``sum(var * coefficient) + const`` as an i64 value."""
        value = str(const)
        for var, coefficient in terms:
            if coefficient == 0:
                continue
            scaled = var
            if coefficient != 1:
                scaled = "%" + self.fresh("m")
                self.emit(f"{scaled} = mul i64 {var}, {coefficient}")
            total = "%" + self.fresh("s")
            self.emit(f"{total} = add i64 {value}, {scaled}")
            value = total
        return value

    def load(self, t: str, base: str, at: str) -> str:
        p, v = "%" + self.fresh("q"), "%" + self.fresh("v")
        self.emit(f"{p} = getelementptr {t}, ptr {base}, i64 {at}", f"{v} = load {t}, ptr {p}, align {_size(t)}")
        return v

    def store(self, t: str, base: str, at: str, value: str) -> None:
        p = "%" + self.fresh("q")
        self.emit(f"{p} = getelementptr {t}, ptr {base}, i64 {at}", f"store {t} {value}, ptr {p}, align {_size(t)}")


def _size(t: str) -> int:
    return 4 if t == "float" else 8


class _Plan(MutableRecord):
    """One compiled function for jit.submit: ``piece`` is ``"columns"``, ``"pool"`` or ``"weights"``."""

    __match_args__ = ("piece", "geo", "order")

    def __init__(self, piece: str, geo: Geometry, order: str) -> None:
        self.piece = piece
        self.geo = geo
        self.order = order  # "last" / "sample" for the columns; "bias_first" / "bias_second" for the pool

    @property
    def dtype(self) -> np.dtype:
        return self.geo.dtype

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        g = self.geo
        (oh, ow), (hp, wp), (ph, pw) = g.out, g.padded, g.pooled
        if self.piece == "columns" and self.order == "last":  # x[b], the columns, the channels-last copy
            return [(g.c, g.h, g.w), (oh * ow, g.depth), (hp, wp, g.c)]
        if self.piece == "columns":  # x[b], then the columns and the zero-bordered copy of the sample
            return [(g.c, g.h, g.w), (g.depth, oh * ow), (g.c, hp, wp)]
        if self.piece == "weights":  # w, then frame-ops-nn's channels-last wm
            return [(g.co, g.c, g.kh, g.kw), (g.co, g.depth)]
        return [(g.co, oh * ow), (g.co,), (g.co, ph, pw)]  # the product of one sample, b, the pooled sample

    @property
    def n_inputs(self) -> int:
        return 2 if self.piece == "pool" else 1

    @property
    def n_args(self) -> int:
        return len(self.shapes)

    @property
    def chunks(self) -> list[int]:  # codegen._entry calls @chunk0 with every data pointer
        return [0]

    def ir(self, width: int) -> str:
        return generate(self)


def generate(plan: _Plan) -> str:
    """The module of one piece: ``@chunk0`` and codegen's checked entry (type, dtype, shapes, contiguity)."""
    from .codegen import CODEGEN_VERSION, _entry

    t = _TYPES[plan.dtype]
    code = _Code()
    {"columns": _columns, "pool": _pool, "weights": _weights}[plan.piece](code, plan, t)
    params = ", ".join(["ptr %p0"] + [f"ptr noalias %p{k}" for k in range(1, plan.n_args)])
    head = [f"; frame-native conv kernels {CODEGEN_VERSION}-conv2 {plan.piece} {plan.order}",
            f"define internal void @chunk0({params}) #2 {{", "go:"]
    lines = head + code.lines + ["  ret void", "}"]
    lines += _entry(plan, plan.n_args, plan.shapes)  # type: ignore[arg-type]
    lines.append('attributes #2 = { noinline nounwind "no-builtins" }')  # (no memcpy calls: nothing outside)
    return "\n".join(lines) + "\n"


def _run(code: _Code, t: str, src: str, src_at: str, dst: str, dst_at: str, n: int) -> None:
    """Copy ``n`` contiguous values: vectors of 32 bytes, then the rest one at a time (written out: LLVM unrolls
    short constant loops before its vectorizer sees them, and then copies one value at a time)."""
    lanes = 32 // _size(t)
    vector = f"<{lanes} x {t}>"

    def block(k: str) -> None:
        p, q, v = "%" + code.fresh("q"), "%" + code.fresh("q"), "%" + code.fresh("v")
        code.emit(f"{p} = getelementptr {t}, ptr {src}, i64 {code.index((src_at, 1), (k, lanes))}",
                  f"{v} = load {vector}, ptr {p}, align {_size(t)}",
                  f"{q} = getelementptr {t}, ptr {dst}, i64 {code.index((dst_at, 1), (k, lanes))}",
                  f"store {vector} {v}, ptr {q}, align {_size(t)}")
    code.loop(n // lanes, block)
    for e in range(n // lanes * lanes, n):
        code.store(t, dst, code.index((dst_at, 1), const=e), code.load(t, src, code.index((src_at, 1), const=e)))


def _columns(code: _Code, plan: _Plan, t: str) -> None:
    """x[b] (%p0) into the zero-bordered copy (%p2: its borders stay zero), then the columns (%p1) from it:
    frame-ops-nn's channels-last ``[oh * ow, K]`` for order ``"last"`` (``_columns_last``); otherwise ``[K, oh *
    ow]``, one output row of one tap at a time, row ``k = (c, i, j)`` (``"sample"``: NCHW columns) or ``(i, j,
    c)`` (``"last_nn"``: the channels-last product in BLAS's NN form)."""
    if plan.order == "last":
        _columns_last(code, plan, t)
        return
    g = plan.geo
    top, _, left, _ = g.padding
    (oh, ow), (hp, wp), (sh, sw), (dh, dw) = g.out, g.padded, g.stride, g.dilation

    def row_in(c: str) -> None:  # padded[c, top + h, left:left + w] = x[c, h]
        def row(h: str) -> None:
            _run(code, t, "%p0", code.index((c, g.h * g.w), (h, g.w)), "%p2",
                 code.index((c, hp * wp), (h, wp), const=top * wp + left), g.w)
        code.loop(g.h, row)
    code.loop(g.c, row_in)

    def tap_rows(c: str, i: str, j: str) -> None:  # cols[k, p_h, p_w] = padded[c, p_h sh + i dh, p_w sw + j dw]
        k = (code.index((i, g.kw * g.c), (j, g.c), (c, 1)) if plan.order == "last_nn"
             else code.index((c, g.kh * g.kw), (i, g.kw), (j, 1)))

        def position(p_h: str) -> None:
            src = code.index((c, hp * wp), (i, dh * wp), (j, dw), (p_h, sh * wp))
            dst = code.index((k, oh * ow), (p_h, ow))
            if sw == 1:
                _run(code, t, "%p2", src, "%p1", dst, ow)
                return

            def item(p_w: str) -> None:
                v = code.load(t, "%p2", code.index((src, 1), (p_w, sw)))
                code.store(t, "%p1", code.index((dst, 1), (p_w, 1)), v)
            code.loop(ow, item)
        code.loop(oh, position)
    if plan.order == "last_nn":
        code.loop(g.kh, lambda i: code.loop(g.kw, lambda j: code.loop(g.c, lambda c: tap_rows(c, i, j))))
    else:
        code.loop(g.c, lambda c: code.loop(g.kh, lambda i: code.loop(g.kw, lambda j: tap_rows(c, i, j))))


def _columns_last(code: _Code, plan: _Plan, t: str) -> None:
    """frame-ops-nn's channels-last columns: x[b] (%p0, ``[C, h, w]``) into the zero-bordered channels-last copy
    ``[hp, wp, C]`` (%p2: its borders stay zero), one position's ``C`` channels at a time; then the columns
    ``[oh * ow, K]`` (%p1) from it, K in the order ``(i, j, c)``: for each output position and kernel row ``i``,
    its ``kw`` taps are one contiguous run of ``kw * C`` values (no dilation along W)."""
    g = plan.geo
    top, _, left, _ = g.padding
    (oh, ow), (hp, wp), (sh, sw), (dh, _) = g.out, g.padded, g.stride, g.dilation
    run = g.kw * g.c

    def row_in(h: str) -> None:  # padded[top + h, left + w, c] = x[c, h, w]
        def position(w: str) -> None:
            dst = code.index((h, wp * g.c), (w, g.c), const=(top * wp + left) * g.c)
            src = code.index((h, g.w), (w, 1))

            def channel(c: str) -> None:
                v = code.load(t, "%p0", code.index((src, 1), (c, g.h * g.w)))
                code.store(t, "%p2", code.index((dst, 1), (c, 1)), v)
            code.loop(g.c, channel)
        code.loop(g.w, position)
    code.loop(g.h, row_in)

    def out_row(p_h: str) -> None:  # cols[p_h, p_w, i, :] = padded[p_h sh + i dh, p_w sw:p_w sw + kw, :]
        def out_position(p_w: str) -> None:
            def kernel_row(i: str) -> None:
                src = code.index((p_h, sh * wp * g.c), (i, dh * wp * g.c), (p_w, sw * g.c))
                dst = code.index((p_h, ow * g.depth), (p_w, g.depth), (i, run))
                _run(code, t, "%p2", src, "%p1", dst, run)
            code.loop(g.kh, kernel_row)
        code.loop(ow, out_position)
    code.loop(oh, out_row)


def _weights(code: _Code, plan: _Plan, t: str) -> None:
    """frame-ops-nn's channels-last weights: wm[o, (i, j, c)] (%p1) = w[o, c, i, j] (%p0). ``lanes`` channels at a
    time: their ``lanes * taps`` contiguous weights as one vector, each tap's ``lanes`` values picked out of it
    by a shuffle and stored as one vector; the channels left over one value at a time."""
    g = plan.geo
    taps, lanes = g.kh * g.kw, 32 // _size(t)
    blocks = g.c // lanes
    wide, narrow = f"<{lanes * taps} x {t}>", f"<{lanes} x {t}>"

    def out_channel(o: str) -> None:
        def block(n: str) -> None:
            p, v = "%" + code.fresh("q"), "%" + code.fresh("v")
            code.emit(f"{p} = getelementptr {t}, ptr %p0, i64 {code.index((o, g.depth), (n, lanes * taps))}",
                      f"{v} = load {wide}, ptr {p}, align {_size(t)}")
            for k in range(taps):
                picked, q = "%" + code.fresh("e"), "%" + code.fresh("q")
                mask = ", ".join(f"i32 {c * taps + k}" for c in range(lanes))
                at = code.index((o, g.depth), (n, lanes), const=k * g.c)
                code.emit(f"{picked} = shufflevector {wide} {v}, {wide} poison, <{lanes} x i32> <{mask}>",
                          f"{q} = getelementptr {t}, ptr %p1, i64 {at}",
                          f"store {narrow} {picked}, ptr {q}, align {_size(t)}")
        code.loop(blocks, block)

        def tap(k: str) -> None:
            def channel(c: str) -> None:
                v = code.load(t, "%p0", code.index((o, g.depth), (c, taps), (k, 1), const=blocks * lanes * taps))
                code.store(t, "%p1", code.index((o, g.depth), (k, g.c), (c, 1), const=blocks * lanes), v)
            code.loop(g.c - blocks * lanes, channel)
        code.loop(taps, tap)
    code.loop(g.co, out_channel)


def _pool(code: _Code, plan: _Plan, t: str) -> None:
    """out[o, r, q] = relu(max(max(y[o, 2r, 2q], y[o, 2r+1, 2q]), max(y[o, 2r, 2q+1], y[o, 2r+1, 2q+1])) + b[o])
    with y (%p0) the sample's product [co, oh * ow], b (%p1), out (%p2): ``lanes`` outputs at a time (a 32- or
    16-byte vector) from two rows of ``2 lanes`` products (the columns' maximum split into even and odd lanes),
    then the rest of the row one at a time."""
    g = plan.geo
    (oh, ow), (ph, pw) = g.out, g.pooled
    lanes = 32 // _size(t)
    if pw < lanes:  # short pooled rows (8 x 8 products): 16-byte vectors
        lanes //= 2
    blocks = pw // lanes
    wide, narrow = f"<{2 * lanes} x {t}>", f"<{lanes} x {t}>"

    def maximum(ty: str, a: str, b: str) -> str:  # np.maximum(a, b): a if a is NaN, else b if b is NaN, else the larger
        n = code.fresh("x")
        mask = "i1" if ty == t else f"<{ty.split()[0][1:]} x i1>"
        code.emit(f"%{n}g = fcmp ogt {ty} {a}, {b}", f"%{n}u = fcmp uno {ty} {a}, {a}",
                  f"%{n}k = or {mask} %{n}g, %{n}u", f"%{n} = select {mask} %{n}k, {ty} {a}, {ty} {b}")
        return f"%{n}"

    def finish(ty: str, m: str, bias: str) -> str:  # + b on the graph's side, then np.maximum(v, 0)
        # Where both terms are NaN, numpy's add mostly keeps the first one's (x86 keeps its first source
        # operand; its broadcast loops do not always) and LLVM may swap fadd's operands: a NaN first term is
        # selected explicitly, so the kernel keeps one rule.
        n = code.fresh("y")
        zero = "0.0" if ty == t else "zeroinitializer"
        mask = "i1" if ty == t else f"<{lanes} x i1>"
        first, second = (bias, m) if plan.order == "bias_first" else (m, bias)
        code.emit(f"%{n}s = fadd {ty} {first}, {second}", f"%{n}n = fcmp uno {ty} {first}, {first}",
                  f"%{n}a = select {mask} %{n}n, {ty} {first}, {ty} %{n}s",
                  f"%{n}c = fcmp ugt {ty} %{n}a, {zero}", f"%{n} = select {mask} %{n}c, {ty} %{n}a, {ty} {zero}")
        return f"%{n}"

    def vector_load(ty: str, at: str) -> str:
        p, v = "%" + code.fresh("q"), "%" + code.fresh("v")
        code.emit(f"{p} = getelementptr {t}, ptr %p0, i64 {at}", f"{v} = load {ty}, ptr {p}, align {_size(t)}")
        return v

    def channel(o: str) -> None:
        bias = code.load(t, "%p1", o)
        splat = "%" + code.fresh("b")
        code.emit(f"{splat}i = insertelement {narrow} poison, {t} {bias}, i64 0",
                  f"{splat} = shufflevector {narrow} {splat}i, {narrow} poison, <{lanes} x i32> zeroinitializer")

        def row(r: str) -> None:
            top = code.index((o, oh * ow), (r, 2 * ow))
            out = code.index((o, ph * pw), (r, pw))

            def block(k: str) -> None:
                at = code.index((top, 1), (k, 2 * lanes))
                m = maximum(wide, vector_load(wide, at), vector_load(wide, code.index((at, 1), const=ow)))
                even, odd = "%" + code.fresh("e"), "%" + code.fresh("o")
                pick = lambda first: ", ".join(f"i32 {2 * i + first}" for i in range(lanes))  # noqa: E731
                code.emit(f"{even} = shufflevector {wide} {m}, {wide} poison, <{lanes} x i32> <{pick(0)}>",
                          f"{odd} = shufflevector {wide} {m}, {wide} poison, <{lanes} x i32> <{pick(1)}>")
                value = finish(narrow, maximum(narrow, even, odd), splat)
                p = "%" + code.fresh("q")
                code.emit(f"{p} = getelementptr {t}, ptr %p2, i64 {code.index((out, 1), (k, lanes))}",
                          f"store {narrow} {value}, ptr {p}, align {_size(t)}")
            code.loop(blocks, block)

            def item(q: str) -> None:
                at = code.index((top, 1), (q, 2), const=2 * blocks * lanes)
                a, c = code.load(t, "%p0", at), code.load(t, "%p0", code.index((at, 1), const=1))
                b, d = (code.load(t, "%p0", code.index((at, 1), const=ow)),
                        code.load(t, "%p0", code.index((at, 1), const=ow + 1)))
                value = finish(t, maximum(t, maximum(t, a, b), maximum(t, c, d)), bias)
                code.store(t, "%p2", code.index((out, 1), (q, 1), const=blocks * lanes), value)
            code.loop(pw - blocks * lanes, item)
        code.loop(ph, row)
    code.loop(g.co, channel)


# -- the op -------------------------------------------------------------------------------------------
def _geometry(input_types: list, attrs: Mapping[str, Any]) -> Geometry:
    sh, sw = attrs["stride"]
    dh, dw = attrs["dilation"]
    top, bottom, left, right = attrs["padding"]
    return _layer_geometry(input_types[0], input_types[1], (sh, sw), (dh, dw), (top, bottom, left, right))


def _layer_geometry(x: TensorType, w: TensorType, stride: tuple[int, int], dilation: tuple[int, int],
                    padding: tuple[int, int, int, int]) -> Geometry:
    batch, c, h, width = x.shape
    co, _, kh, kw = w.shape
    return Geometry(x.dtype.np, batch, c, h, width, co, kh, kw, stride, dilation, padding)


def _infer(ctx: Any) -> list[TensorType]:
    x, w, b = ctx.input_types
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1] or x.dtype != w.dtype or b.dtype != x.dtype \
            or b.shape not in ((w.shape[0], 1, 1), (1, w.shape[0], 1, 1)):
        raise ctx.error(f"needs x[B, C, H, W], w[C_out, C, kh, kw] and b[C_out, 1, 1] of one dtype, got {x}, {w}, {b}")
    if len(ctx.attrs["stride"]) != 2 or len(ctx.attrs["dilation"]) != 2 or len(ctx.attrs["padding"]) != 4:
        raise ctx.error("needs stride and dilation as 2 ints and padding as 4 ([top, bottom, left, right])")
    g = _geometry(list(ctx.input_types), ctx.attrs)
    if min(g.pooled) < 1:
        raise ctx.error(f"the convolution's output {list(g.out)} is smaller than one 2 x 2 window")
    return [TensorType(x.dtype, (g.batch, g.co, *g.pooled))]


def _numpy_kernel(input_types: list, attrs: Mapping[str, Any]) -> Callable[..., Any]:
    """The four original kernels in turn: conv2d, max_pool2d, add (on the graph's side), relu."""
    schemas = registry().schemas
    x_t, w_t, b_t = input_types
    g = _geometry(list(input_types), attrs)

    def built(op: str, types: list, attrs: dict) -> tuple[Callable[..., Any], TensorType]:
        schema = schemas[op]
        attrs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs.items()}
        out = list(schema.infer(types, attrs))
        return schema.kernels["cpu"](NodeContext(schema, types, attrs, out)), out[0]
    conv, y_t = built("conv2d", [x_t, w_t], {"stride": g.stride, "padding": g.padding, "dilation": g.dilation,
                                             "groups": 1})
    pool, p_t = built("max_pool2d", [y_t], {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0,)})
    first = attrs["bias_first"]
    add, s_t = built("add", [b_t, p_t] if first else [p_t, b_t], {})
    relu, _ = built("relu", [s_t], {})

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        p = pool(conv(x, w))
        return relu(add(b, p) if first else add(p, b))
    return kernel


def _native(geo: Geometry, order: str, columns: Callable[..., Any], pool: Callable[..., Any],
            weights: Callable[..., Any] | None) -> Callable[..., Any]:
    """``native(x, w, b)``: per sample, the compiled columns, frame-ops-nn's product, the compiled pool (the
    sample's product still in cache: one call over the whole batch, every sample's columns first, was slower);
    None when a compiled function refuses an argument (not C-contiguous, ...). The buffers are kept between
    calls (a call that finds them in use, from another thread, makes its own)."""
    dtype, ty, matmul, batch, nt = geo.dtype, np.ndarray, np.matmul, geo.batch, order == "last"
    (oh, ow), (ph, pw) = geo.out, geo.pooled
    lock, kept = threading.Lock(), []  # type: tuple[threading.Lock, list[tuple[np.ndarray, ...]]]

    shapes = _Plan("columns", geo, order).shapes

    def buffers() -> tuple:
        return np.empty(shapes[1], dtype), np.zeros(shapes[2], dtype), np.empty((geo.co, oh * ow), dtype)

    def native(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        if weights is not None:  # frame-ops-nn's channels-last wm: w[co, (i, j, c)]
            wm = np.empty((geo.co, geo.depth), dtype)
            if weights(ty, dtype, w, wm):
                return None
        else:
            wm = np.asarray(w, dtype).reshape(geo.co, geo.depth)
        bias = np.ascontiguousarray(b).reshape(geo.co)
        out = np.empty((batch, geo.co, ph, pw), dtype)
        mine = lock.acquire(blocking=False)
        try:
            if mine and not kept:
                kept.append(buffers())
            cols, scratch, product = kept[0] if mine else buffers()
            operand = cols.T if nt else cols  # frame-ops-nn's channels-last product: w @ columns^T (NT)
            for s in range(batch):
                if columns(ty, dtype, x[s], cols, scratch):
                    return None
                matmul(wm, operand, out=product)
                if pool(ty, dtype, product, bias, out[s]):
                    return None
            return out
        finally:
            if mine:
                lock.release()
    return native


def _probe(geo: Geometry) -> list[np.ndarray]:
    """x, w, b of the node's shapes: random, with a NaN, +-inf and -0.0 in x, a -0.0 and a NaN in b."""
    rng = np.random.default_rng(geo.c * 7919 + geo.co * 104729 + geo.h)
    x = rng.standard_normal((geo.batch, geo.c, geo.h, geo.w)).astype(geo.dtype)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 4)] = [np.nan, np.inf, -np.inf, -0.0]
    w = (rng.standard_normal((geo.co, geo.c, geo.kh, geo.kw)) / np.sqrt(geo.depth)).astype(geo.dtype)
    b = rng.standard_normal((geo.co, 1, 1)).astype(geo.dtype)
    b[0] = -0.0
    if geo.co > 1:
        b[-1] = np.nan
    return [x, w, b]


def _build(ctx: NodeContext) -> Callable[..., Any]:
    geo = _geometry(list(ctx.input_types), ctx.attrs)
    order = ctx.attrs["layout"]
    bias_first = bool(ctx.attrs["bias_first"])
    numpy_kernel = _numpy_kernel(list(ctx.input_types), ctx.attrs)
    # channels-last layers: the NN form's columns first, frame-ops-nn's NT form only where those disagree (_install)
    plans = [_Plan("columns", geo, "last_nn" if order == "last" else order),
             _Plan("pool", geo, "bias_first" if bias_first else "bias_second")]
    if order == "last":
        plans.append(_Plan("weights", geo, order))
    tier = Tier()
    after, count = calls_before_compile(), [0]

    def promote() -> None:
        tier.slot[0] = numpy_kernel
        queue_plans(tier, plans, lambda done: _install(tier, geo, order, done, numpy_kernel, ctx))

    def counting(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
        count[0] += 1
        if count[0] >= after:
            promote()
        return numpy_kernel(x, w, b)

    tier.slot.append(counting)
    slot = tier.slot

    def tiered(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
        return slot[0](x, w, b)
    tiered.native = tier  # type: ignore[attr-defined]
    tiered.numpy = numpy_kernel  # type: ignore[attr-defined]
    return tiered


def _same_bits_but_nan_signs(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit, except a NaN's sign and payload: where the probe's NaN in ``x`` meets its NaN in ``b``,
    which one numpy's add keeps depends on its loop (the vector body or the rest, the broadcast's shape),
    so no compiled add can follow it everywhere (docs/native.md: a NaN keeps its place, not its sign)."""
    nan = np.isnan(got)
    if got.shape != want.shape or not np.array_equal(nan, np.isnan(want)):
        return False
    return got[~nan].tobytes() == want[~nan].tobytes()


def _install(tier: Tier, geo: Geometry, order: str, done: dict, numpy_kernel: Callable[..., Any],
             ctx: NodeContext) -> None:
    """On the compiler thread: check the compiled layer against the numpy kernels, then put it in the slot. The
    check runs on at most ``PROBE_SAMPLES`` samples: both run the batch one sample at a time, each the same way.

    A channels-last layer is checked first with the NN form's columns (``[K, oh * ow]``, faster on OpenBLAS);
    where they disagree, frame-ops-nn's own NT form (columns ``[oh * ow, K]`` passed transposed: the same BLAS
    call on the same layouts) is compiled and checked in turn, and only a layer that disagrees in both stays on
    numpy. The installed function's ``product`` attribute says which form it runs (``"nn"`` or ``"nt"``)."""
    pool, weights = done[1][0], done[2][0] if order == "last" else None
    how = "compiled" if any(h == "compiled" for _, h in done.values()) else "cache"
    reference, probe_geo = numpy_kernel, geo.replace(batch=min(geo.batch, PROBE_SAMPLES))
    if geo.batch > PROBE_SAMPLES:
        x_t, *rest = ctx.input_types
        reference = _numpy_kernel([x_t.with_shape((PROBE_SAMPLES, *x_t.shape[1:])), *rest], ctx.attrs)
    probe = _probe(probe_geo)
    want = np.asarray(reference(*probe))

    from . import jit

    def install(columns_order: str, columns: Callable[..., Any], how: str) -> bool:
        checked = _native(probe_geo, columns_order, columns, pool, weights)
        got = checked(*probe)
        if got is None or not _same_bits_but_nan_signs(np.asarray(got), want):
            return False
        compiled = checked if probe_geo == geo else _native(geo, columns_order, columns, pool, weights)

        def native(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
            result = compiled(x, w, b)
            if result is None:  # an argument the compiled code refuses (not C-contiguous, ...): numpy runs it
                tier.fallbacks += 1
                return numpy_kernel(x, w, b)
            return result
        native.product = "nt" if columns_order == "last" else "nn"  # type: ignore[attr-defined]
        tier.slot[0] = native
        tier.state, tier.how, tier.swapped_at = "native", how, time.perf_counter()
        return True

    def refuse() -> None:
        jit.note(f"a compiled convolution layer ({order} columns) does not give the numpy kernels' bits here",
                 then="that layer runs on numpy")
        tier.state = "failed"

    if install("last_nn" if order == "last" else order, done[0][0], how):
        return
    if order != "last":
        refuse()
        return

    def then(_: Any, columns: Callable[..., Any] | None, how_nt: str) -> None:
        if columns is None:
            tier.state = "off" if how_nt == "off" else "failed"
        elif not install("last", columns, "compiled" if "compiled" in (how, how_nt) else "cache"):
            refuse()
    nt_plan: Any = _Plan("columns", geo, "last")  # (what jit.submit takes: ir, n_args, chunks, shapes)
    if not jit.submit(lambda: nt_plan, then):
        tier.state = "off"  # (the compiler is stopping or switched off: as a plan the queue refuses)


CONV_POOL_SCHEMA = OpSchema(
    CONV_POOL_OP,
    inputs=("x", "w", "b"),
    attrs={"stride": AttrSpec("ints", doc="conv2d's stride, 2 ints"),
           "padding": AttrSpec("ints", doc="conv2d's padding as [top, bottom, left, right]"),
           "dilation": AttrSpec("ints", doc="conv2d's dilation, 2 ints"),
           "layout": AttrSpec("str", doc="the columns frame-ops-nn's conv2d multiplies: 'last' or 'sample'"),
           "bias_first": AttrSpec("int", 0, "1 when the graph adds b + pooled, 0 for pooled + b")},
    shape_infer=_infer,
    kernels={"cpu": _build},
    not_differentiable="a compile-pipeline product made after differentiation; differentiate the graph before "
                       "compiling it",
    doc="relu(max_pool2d(conv2d(x, w), 2) + b) with b one value per channel: frame-ops-nn's and frame-ops-basic's "
        "numpy kernels at first, then compiled columns and pool around the same matrix product; both give the "
        "same bits. Produced by the compile_conv_pools pass.",
    examples=[Example(["f32[2, 16, 8, 8]", "f32[40, 16, 3, 3]", "f32[40, 1, 1]"],
                      {"stride": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "layout": "last"}),
              Example(["f64[1, 3, 17, 17]", "f64[4, 3, 3, 3]", "f64[1, 4, 1, 1]"],
                      {"stride": [1, 1], "padding": [0, 1, 1, 0], "dilation": [1, 1], "layout": "sample",
                       "bias_first": 1})],
)


# -- the pass -----------------------------------------------------------------------------------------
def _conv_padding(node: Any, size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                  dilation: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """conv2d's padding attribute as [top, bottom, left, right] (frame-ops-nn's rules: 'same' puts the odd
    position after), or None for what this pass does not read."""
    padding = node.attrs.get("padding", "valid")
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0, 0, 0
        if padding != "same":
            return None
        total = [max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0) for n, k, s, d in zip(size, kernel, stride,
                                                                                             dilation)]
        return total[0] // 2, total[0] - total[0] // 2, total[1] // 2, total[1] - total[1] // 2
    sizes = [int(p) for p in padding]
    if len(sizes) == 1:
        return sizes[0], sizes[0], sizes[0], sizes[0]
    if len(sizes) == 2:
        return sizes[0], sizes[0], sizes[1], sizes[1]
    return (sizes[0], sizes[1], sizes[2], sizes[3]) if len(sizes) == 4 else None


def _pair(value: Any) -> tuple[int, int] | None:
    sizes = [int(v) for v in value]
    return (sizes[0], sizes[0]) if len(sizes) == 1 else (sizes[0], sizes[1]) if len(sizes) == 2 else None


def _pool_2x2(node: Any) -> bool:
    a = node.attrs
    stride = a.get("stride")
    padding = a.get("padding", (0,))
    return (_pair(a["kernel_size"]) == (2, 2) and (stride is None or _pair(stride) == (2, 2))
            and (padding == "valid" or (not isinstance(padding, str) and not any(padding))))


def _chain(relu: Any, readers: dict, outputs: set, packs: dict) -> tuple | None:
    """``(conv, pool, add, bias value, bias_first, geometry, layout)`` for ``relu(add(max_pool2d(conv2d(x, w)), b))``
    that the pass compiles, else None."""
    def single(value: Any) -> bool:
        return readers.get(value, 0) == 1 and value not in outputs

    add = relu.inputs[0].producer
    if add is None or add.op != "add" or len(add.inputs) != 2 or not single(relu.inputs[0]):
        return None
    for mine, other in ((0, 1), (1, 0)):
        pool = add.inputs[mine].producer
        if pool is not None and pool.op == "max_pool2d":
            bias, bias_first = add.inputs[other], mine == 1
            break
    else:
        return None
    conv = pool.inputs[0].producer
    if conv is None or conv.op != "conv2d" or not single(add.inputs[mine]) or not single(pool.inputs[0]):
        return None
    if any(packs.get(n.op) != _SOURCE_PACKS[n.op] for n in (conv, pool, add, relu)) or not _pool_2x2(pool):
        return None
    x, w = conv.inputs
    y_t, p_t = conv.outputs[0].type, pool.outputs[0].type
    if x.type.dtype.np not in _TYPES or x.type.rank != 4 or w.type.rank != 4 or w.type.dtype != x.type.dtype \
            or conv.attrs.get("groups", 1) != 1 or bias.type.dtype != x.type.dtype \
            or bias.type.shape not in ((y_t.shape[1], 1, 1), (1, y_t.shape[1], 1, 1)) \
            or add.outputs[0].type != p_t or relu.outputs[0].type != p_t:
        return None
    stride, dilation = _pair(conv.attrs.get("stride", (1,))), _pair(conv.attrs.get("dilation", (1,)))
    if stride is None or dilation is None:
        return None
    padding = _conv_padding(conv, x.type.shape[2:], w.type.shape[2:], stride, dilation)
    if padding is None:
        return None
    geo = _layer_geometry(x.type, w.type, stride, dilation, padding)
    if w.type.shape[1] != geo.c or (geo.batch, geo.co, *geo.out) != y_t.shape \
            or (geo.batch, geo.co, *geo.pooled) != p_t.shape:
        return None  # ('same' padding and the like: the shapes say whether we read the attributes right)
    order = layout(geo)
    return None if order is None else (conv, pool, add, bias, bias_first, geo, order)


def compile_conv_pools(graph: Graph, ctx: Any) -> Graph:
    """``relu(add(max_pool2d(conv2d(x, w)), b))`` (after ``pool_before_monotone``) becomes
    ``native_conv_pool_internal(x, w, b)``."""
    ops = ctx.ops(graph)
    if ctx.backend != "cpu" or "conv2d" not in ops or "max_pool2d" not in ops or "relu" not in ops:
        return graph
    from .passes import enabled

    off = enabled()
    if off is not None:
        ctx.note("compile_conv_pools", f"off: {off}")
        return graph
    schemas = ctx.registry.schemas
    packs = {op: schemas[op].pack if op in schemas else None for op in _SOURCE_PACKS}
    readers: dict = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers[v] = readers.get(v, 0) + 1
    outputs = set(graph.outputs)
    chains = {}
    for node in graph.nodes:
        if node.op == "relu" and len(node.inputs) == 1:
            found = _chain(node, readers, outputs, packs)
            if found is not None:
                chains[node] = found
    if not chains:
        return graph
    moved = {n for conv, pool, add, *_ in chains.values() for n in (conv, pool, add)}
    rw = Rewriter(graph, ctx)
    for node in graph.nodes:
        if node in moved:
            continue
        if node not in chains:
            rw.copy(node)
            continue
        conv, _, _, bias, bias_first, geo, order = chains[node]
        attrs = {"stride": list(geo.stride), "padding": list(geo.padding), "dilation": list(geo.dilation),
                 "layout": order, "bias_first": int(bias_first)}
        (value,) = rw.emit(CONV_POOL_OP, rw.read([*conv.inputs, bias]), attrs, [node.outputs[0].type]).outputs
        rw.alias(node.outputs[0], value)
    ctx.note("compile_conv_pools", f"{len(chains)} convolution layer{'s' if len(chains) > 1 else ''} (conv2d, 2 x 2 "
                                   "max pool, bias, ReLU) tier up to compiled columns and pools")
    ctx.dropped = [n for chain in chains for n in (chain, *chains[chain][:3])]
    return rw.finish()
