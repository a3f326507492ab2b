"""Compiled kernels for the norms' training pairs, tiered behind frame-ops-nn's numpy kernels.

frame-ops-nn's ``layer_norm_train_internal`` (y, xhat and rstd of each row of
x) and ``layer_norm_grad_saved_internal`` (gx, gweight and gbias from xhat and
rstd) make six and nine passes over their arrays with numpy. The pass
``compile_norm_rows`` turns each node of them on float32/float64 into
``native_<op>``, whose kernel runs the op's own numpy kernel at first and,
once the background compiler has built it, one LLVM function that handles a
row at a time: the row is read from memory once and its temporaries stay in
the cache. Training-mode ``batch_norm_train_internal`` and
``batch_norm_grad_saved_internal`` of ``x[N, C]`` likewise become a few
compiled passes over the rows (``_PIECES``: column sums, centring, the affine
map, the gradient), with frame-ops-nn's numpy arithmetic on the ``[C]``
vectors in between.

Same bits. frame-ops-nn computes these ops in a fixed order (its
``_row_sums`` and ``_column_sums``): a row sum is numpy's pairwise summation
of a contiguous row (fewer than 8 values: in turn from 0; up to 128: eight
interleaved partial sums, combined as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) +
(s6 + s7)), then the rest in turn; longer: the sums of the two halves, split
at a multiple of 8 at or below the middle; the row's total is then added to 0,
numpy's identity, so a row of -0.0 sums to +0.0), a column sum adds the rows in turn
from 0, and every elementwise operation rounds once. The code below does
exactly that (the 8 partial sums are one 8-lane vector; no fast-math flag, no
fused multiply-add), so its results are the numpy kernel's bit for bit. Since
the order of numpy's reductions is numpy's (the same in every numpy this was
tested on, but not promised by numpy), every compiled kernel is first run on
the compiler thread against the numpy kernel on random data of the node's
shape, and stays on numpy (state ``failed``, one note) unless the bits agree.

Not compiled: other dtypes (float16/bfloat16 compute in float32 and round),
rows of one value and batch_norm of one channel (numpy sums a single column
pairwise, not in turn), batch_norm with spatial axes, empty arrays, and ops
from any pack other than frame-ops-nn.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import AttrSpec, Example, Graph, Node, NodeContext, OpSchema, Rewriter, TensorType, Value, registry
from frame_core import MutableRecord

from .tiered import Tier, calls_before_compile

__all__ = ["ROW_OPS", "ROW_SCHEMAS", "RowPlan", "compile_norm_rows", "generate_rows"]

#: The ops compiled, from frame-ops-nn: name -> (inputs, outputs)
ROW_OPS = {
    "layer_norm_train_internal": (("x", "weight", "bias"), ("y", "xhat", "rstd")),
    "layer_norm_grad_saved_internal": (("xhat", "rstd", "weight", "gy"), ("gx", "gweight", "gbias")),
    "batch_norm_train_internal": (("x", "weight", "bias", "running_mean", "running_var"),
                                  ("y", "running_mean", "running_var", "xc", "rstd")),
    "batch_norm_grad_saved_internal": (("xc", "rstd", "weight", "gy", "g_running_mean", "g_running_var"),
                                       ("gx", "gweight", "gbias")),
}
_BATCH = ("batch_norm_train_internal", "batch_norm_grad_saved_internal")
_PACK = "ops_nn"
_TYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
#: Lanes of the elementwise loops; also numpy's 8 partial sums.
_LANES = 8


def native_name(op: str) -> str:
    return "native_" + op


class RowPlan(MutableRecord):
    """One row kernel: which op, the element type, rows x features, eps, and the shape of every array argument
    (inputs, outputs, then one scratch row)."""

    __match_args__ = ("op", "dtype", "rows", "features", "eps", "shapes", "n_inputs")

    def __init__(self, op: str, dtype: np.dtype, rows: int, features: int, eps: float, shapes: list[tuple[int, ...]],
                 n_inputs: int) -> None:
        self.op = op
        self.dtype = dtype
        self.rows = rows
        self.features = features
        self.eps = eps
        self.shapes = shapes
        self.n_inputs = n_inputs

    @property
    def n_args(self) -> int:
        return len(self.shapes)

    @property
    def chunks(self) -> list[int]:  # codegen._entry calls @chunk0 with every data pointer
        return [0]

    def ir(self, width: int) -> str:  # (the row kernels use 8 lanes whatever the machine's width)
        return generate_rows(self)


def why_not(op: str, types: list, pack: str | None) -> str | None:
    """Why a node of ``op`` with input ``types`` is not compiled, or None."""
    if op not in ROW_OPS or pack != _PACK:
        return f"op {op}"
    if any(t.dtype.np not in _TYPES or t.dtype != types[0].dtype for t in types):
        return "not float32/float64 throughout"
    if types[0].size == 0:
        return "no elements"
    if op in _BATCH:
        if types[0].rank != 2:
            return "batch_norm of x[N, C, ...] with spatial axes (only x[N, C] is compiled)"
        if types[0].shape[1] < 2:
            return "one channel (numpy sums a single column pairwise, not in turn)"
        return None
    features = types[2].size if op == "layer_norm_grad_saved_internal" else types[1].size
    if features < 2:
        return "rows of one value"
    return None


def plan_rows(op: str, input_types: list, output_types: list, attrs: dict) -> RowPlan:
    x_t = input_types[0]
    features = input_types[2].size if op == "layer_norm_grad_saved_internal" else input_types[1].size
    shapes = [t.shape for t in input_types] + [t.shape for t in output_types] + [(features,)]
    return RowPlan(op, x_t.dtype.np, x_t.size // features, features, float(attrs.get("eps", 0.0)), shapes,
                   len(input_types))


# -- code generation --------------------------------------------------------------------------------
def _literal(value: float, dtype: np.dtype) -> str:
    """``value`` rounded to ``dtype`` as numpy rounds a Python number in an operation (NEP 50), written as
    LLVM's hexadecimal double (exact for a float too)."""
    return f"0x{np.float64(dtype.type(value)).view(np.uint64):016X}"


def _pairwise(t: str, a: int) -> list[str]:
    """``T @pw(ptr a, i64 n)``: numpy's pairwise sum of ``n`` contiguous values (see the module docstring)."""
    v = f"<{_LANES} x {t}>"
    e = [f"%e{k}" for k in range(_LANES)]
    return [
        f"define internal {t} @pw(ptr %a, i64 %n) #2 {{",
        "entry:", "  %small = icmp ult i64 %n, 8", "  br i1 %small, label %seq, label %big",
        "seq:", "  br label %sl",
        "sl:", "  %i = phi i64 [0, %seq], [%i1, %sb]", f"  %r = phi {t} [0.0, %seq], [%r1, %sb]",
        "  %sc = icmp ult i64 %i, %n", "  br i1 %sc, label %sb, label %sr",
        "sb:", f"  %sp = getelementptr {t}, ptr %a, i64 %i", f"  %sv = load {t}, ptr %sp, align {a}",
        f"  %r1 = fadd {t} %r, %sv", "  %i1 = add i64 %i, 1", "  br label %sl",
        "sr:", f"  ret {t} %r",
        "big:", "  %leaf = icmp ule i64 %n, 128", "  br i1 %leaf, label %block, label %split",
        "block:", f"  %v0 = load {v}, ptr %a, align {a}", "  %nm = urem i64 %n, 8", "  %end = sub i64 %n, %nm",
        "  br label %bl",
        "bl:", "  %j = phi i64 [8, %block], [%j1, %bb]", f"  %acc = phi {v} [%v0, %block], [%acc1, %bb]",
        "  %bc = icmp ult i64 %j, %end", "  br i1 %bc, label %bb, label %bd",
        "bb:", f"  %bp = getelementptr {t}, ptr %a, i64 %j", f"  %bv = load {v}, ptr %bp, align {a}",
        f"  %acc1 = fadd {v} %acc, %bv", "  %j1 = add i64 %j, 8", "  br label %bl",
        "bd:", *[f"  {e[k]} = extractelement {v} %acc, i64 {k}" for k in range(_LANES)],
        f"  %s01 = fadd {t} %e0, %e1", f"  %s23 = fadd {t} %e2, %e3", f"  %s45 = fadd {t} %e4, %e5",
        f"  %s67 = fadd {t} %e6, %e7", f"  %s03 = fadd {t} %s01, %s23", f"  %s47 = fadd {t} %s45, %s67",
        f"  %res0 = fadd {t} %s03, %s47", "  br label %tl",
        "tl:", "  %k = phi i64 [%end, %bd], [%k1, %tb]", f"  %res = phi {t} [%res0, %bd], [%res1, %tb]",
        "  %tc = icmp ult i64 %k, %n", "  br i1 %tc, label %tb, label %tr",
        "tb:", f"  %tp = getelementptr {t}, ptr %a, i64 %k", f"  %tv = load {t}, ptr %tp, align {a}",
        f"  %res1 = fadd {t} %res, %tv", "  %k1 = add i64 %k, 1", "  br label %tl",
        "tr:", f"  ret {t} %res",
        "split:", "  %h = udiv i64 %n, 2", "  %hm = urem i64 %h, 8", "  %n2 = sub i64 %h, %hm",
        f"  %lo = call {t} @pw(ptr %a, i64 %n2)", f"  %hp = getelementptr {t}, ptr %a, i64 %n2",
        "  %rest = sub i64 %n, %n2", f"  %hi = call {t} @pw(ptr %hp, i64 %rest)", f"  %sum = fadd {t} %lo, %hi",
        f"  ret {t} %sum", "}",
    ]


def _row_sum(t: str, name: str, row: str, features: int) -> list[str]:
    """``%name = 0.0 + @pw(row, features)``: numpy adds a row's pairwise sum to the identity +0.0, so a row of
    -0.0 sums to +0.0 (LLVM keeps the addition: without ``nsz`` it may not drop ``x + 0.0``)."""
    return [f"  %{name}.pw = call {t} @pw(ptr {row}, i64 {features})", f"  %{name} = fadd {t} 0.0, %{name}.pw"]


class _Loop:
    """Emits ``for j in 0..features`` over a row as a vector loop of 8 lanes and a scalar loop for the rest;
    ``body(L, tag, j, ty)`` writes one step (``ty`` the vector or scalar type, ``j`` the index)."""

    def __init__(self, lines: list[str], t: str, features: int) -> None:
        self.L, self.t, self.f = lines, t, features

    def __call__(self, name: str, after: str, body: Callable[[list[str], str, str, str, bool], None]) -> None:
        """The loop, then the label ``after`` (its exit). Loop names carry a dot, the body's names do not."""
        L, t, f = self.L, self.t, self.f
        vend = f - f % _LANES
        n = name
        L += [f"  br label %{n}.v0", f"{n}.v0:"]
        if vend:
            L += [f"  br label %{n}.v", f"{n}.v:", f"  %{n}.vj = phi i64 [0, %{n}.v0], [%{n}.vjn, %{n}.v]"]
            body(L, f"{n}v", f"%{n}.vj", f"<{_LANES} x {t}>", True)
            L += [f"  %{n}.vjn = add i64 %{n}.vj, {_LANES}", f"  %{n}.vc = icmp ult i64 %{n}.vjn, {vend}",
                  f"  br i1 %{n}.vc, label %{n}.v, label %{n}.s0"]
        else:
            L.append(f"  br label %{n}.s0")
        L.append(f"{n}.s0:")
        if vend < f:
            L += [f"  br label %{n}.s", f"{n}.s:", f"  %{n}.sj = phi i64 [{vend}, %{n}.s0], [%{n}.sjn, %{n}.s]"]
            body(L, f"{n}s", f"%{n}.sj", t, False)
            L += [f"  %{n}.sjn = add i64 %{n}.sj, 1", f"  %{n}.sc = icmp ult i64 %{n}.sjn, {f}",
                  f"  br i1 %{n}.sc, label %{n}.s, label %{after}"]
        else:
            L.append(f"  br label %{after}")
        L.append(f"{after}:")


def generate_rows(plan: RowPlan) -> str:
    """The module: ``@pw``, the row function ``@chunk0`` and codegen's checked entry ``@kernel``."""
    from .codegen import CODEGEN_VERSION, _entry

    t, suffix = _TYPES[plan.dtype]
    a = plan.dtype.itemsize
    f = plan.features
    count = _literal(f, plan.dtype)
    L = [f"; frame-native row kernels {CODEGEN_VERSION}-rows2 {plan.op}", f"declare {t} @llvm.sqrt.{suffix}({t})"]
    L += _pairwise(t, a)
    loop = _Loop(L, t, f)

    def splat(name: str, scalar: str) -> None:
        L.extend([f"  %{name}t = insertelement <{_LANES} x {t}> poison, {t} {scalar}, i64 0",
                  f"  %{name} = shufflevector <{_LANES} x {t}> %{name}t, <{_LANES} x {t}> poison, "
                  f"<{_LANES} x i32> zeroinitializer"])

    def at(L: list[str], tag: str, base: str, j: str, name: str) -> str:
        L.append(f"  %{tag}{name}p = getelementptr {t}, ptr {base}, i64 {j}")
        return f"%{tag}{name}p"

    def load(L: list[str], tag: str, base: str, j: str, ty: str, name: str) -> str:
        p = at(L, tag, base, j, name)
        L.append(f"  %{tag}{name} = load {ty}, ptr {p}, align {a}")
        return f"%{tag}{name}"

    def store(L: list[str], tag: str, base: str, j: str, ty: str, name: str, value: str) -> None:
        p = at(L, tag, base, j, name + "w")
        L.append(f"  store {ty} {value}, ptr {p}, align {a}")

    def scalar_or_vector(vec: bool, name: str) -> str:
        return f"%{name}v" if vec else f"%{name}"

    if plan.op == "layer_norm_train_internal":
        # (x, w, b, y, xhat, rstd, scratch): y's row holds the squares before it holds y
        L += ["define internal void @chunk0(ptr %x, ptr %w, ptr %b, ptr noalias %y, ptr noalias %xh, "
              "ptr noalias %rs, ptr noalias %scratch) #2 {", "go:", "  br label %row",
              "row:", "  %r = phi i64 [0, %go], [%rn, %next]", f"  %off = mul i64 %r, {f}",
              f"  %xr = getelementptr {t}, ptr %x, i64 %off", f"  %yr = getelementptr {t}, ptr %y, i64 %off",
              f"  %hr = getelementptr {t}, ptr %xh, i64 %off",
              *_row_sum(t, "s", "%xr", f), f"  %mean = fdiv {t} %s, {count}"]
        splat("meanv", "%mean")

        def centre(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
            x = load(L, tag, "%xr", j, ty, "x")
            L.append(f"  %{tag}c = fsub {ty} {x}, {scalar_or_vector(vec, 'mean')}")
            store(L, tag, "%hr", j, ty, "h", f"%{tag}c")
            L.append(f"  %{tag}q = fmul {ty} %{tag}c, %{tag}c")
            store(L, tag, "%yr", j, ty, "y", f"%{tag}q")
        loop("c", "centred", centre)
        L += [*_row_sum(t, "vs", "%yr", f), f"  %var = fdiv {t} %vs, {count}",
              f"  %ve = fadd {t} %var, {_literal(plan.eps, plan.dtype)}", f"  %sd = call {t} @llvm.sqrt.{suffix}({t} %ve)",
              f"  %rstd = fdiv {t} 1.0, %sd", f"  %rsp = getelementptr {t}, ptr %rs, i64 %r",
              f"  store {t} %rstd, ptr %rsp, align {a}"]
        splat("rstdv", "%rstd")

        def scale(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
            c = load(L, tag, "%hr", j, ty, "c")
            L.append(f"  %{tag}h = fmul {ty} {c}, {scalar_or_vector(vec, 'rstd')}")
            store(L, tag, "%hr", j, ty, "h", f"%{tag}h")
            w = load(L, tag, "%w", j, ty, "w")
            b = load(L, tag, "%b", j, ty, "b")
            L += [f"  %{tag}m = fmul {ty} %{tag}h, {w}", f"  %{tag}o = fadd {ty} %{tag}m, {b}"]
            store(L, tag, "%yr", j, ty, "y", f"%{tag}o")
        loop("k", "next", scale)
        L += ["  %rn = add i64 %r, 1", f"  %rc = icmp ult i64 %rn, {plan.rows}", "  br i1 %rc, label %row, label %done",
              "done:", "  ret void", "}"]
    else:
        # (xhat, rstd, w, gy, gx, gw, gb, scratch): gx's row holds g = gy w, scratch g xhat
        L += ["define internal void @chunk0(ptr %xh, ptr %rs, ptr %w, ptr %gy, ptr noalias %gx, ptr noalias %gw, "
              "ptr noalias %gb, ptr noalias %t) #2 {", "go:"]

        def zero(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
            z = "zeroinitializer" if vec else "0.0"
            store(L, tag, "%gw", j, ty, "w", z)
            store(L, tag, "%gb", j, ty, "b", z)
        loop("z", "zeroed", zero)
        L += ["  br label %row", "row:", "  %r = phi i64 [0, %zeroed], [%rn, %next]", f"  %off = mul i64 %r, {f}",
              f"  %hr = getelementptr {t}, ptr %xh, i64 %off", f"  %gr = getelementptr {t}, ptr %gy, i64 %off",
              f"  %xr = getelementptr {t}, ptr %gx, i64 %off"]

        def first(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
            g = load(L, tag, "%gr", j, ty, "g")
            h = load(L, tag, "%hr", j, ty, "h")
            ob = load(L, tag, "%gb", j, ty, "ob")
            L.append(f"  %{tag}nb = fadd {ty} {ob}, {g}")
            store(L, tag, "%gb", j, ty, "nb", f"%{tag}nb")
            ow = load(L, tag, "%gw", j, ty, "ow")
            L += [f"  %{tag}gh = fmul {ty} {g}, {h}", f"  %{tag}nw = fadd {ty} {ow}, %{tag}gh"]
            store(L, tag, "%gw", j, ty, "nw", f"%{tag}nw")
            w = load(L, tag, "%w", j, ty, "w")
            L.append(f"  %{tag}gg = fmul {ty} {g}, {w}")
            store(L, tag, "%xr", j, ty, "gg", f"%{tag}gg")
            L.append(f"  %{tag}tt = fmul {ty} %{tag}gg, {h}")
            store(L, tag, "%t", j, ty, "tt", f"%{tag}tt")
        loop("a", "summed", first)
        L += [*_row_sum(t, "sg", "%xr", f), f"  %mg = fdiv {t} %sg, {count}",
              *_row_sum(t, "st", "%t", f), f"  %mgx = fdiv {t} %st, {count}",
              f"  %rsp = getelementptr {t}, ptr %rs, i64 %r", f"  %rstd = load {t}, ptr %rsp, align {a}"]
        for name in ("mg", "mgx", "rstd"):
            splat(name + "v", "%" + name)

        def second(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
            g = load(L, tag, "%xr", j, ty, "g")
            h = load(L, tag, "%hr", j, ty, "h")
            L += [f"  %{tag}d = fsub {ty} {g}, {scalar_or_vector(vec, 'mg')}",
                  f"  %{tag}p = fmul {ty} {h}, {scalar_or_vector(vec, 'mgx')}",
                  f"  %{tag}e = fsub {ty} %{tag}d, %{tag}p",
                  f"  %{tag}o = fmul {ty} %{tag}e, {scalar_or_vector(vec, 'rstd')}"]
            store(L, tag, "%xr", j, ty, "o", f"%{tag}o")
        loop("b", "next", second)
        L += ["  %rn = add i64 %r, 1", f"  %rc = icmp ult i64 %rn, {plan.rows}", "  br i1 %rc, label %row, label %done",
              "done:", "  ret void", "}"]
    L += _entry(plan, plan.n_args, plan.shapes)  # type: ignore[arg-type]  # (RowPlan has what _entry reads)
    # no-builtins: LLVM would turn the zeroing loop into a call of memset, and a kernel calls nothing
    L.append('attributes #2 = { noinline nounwind "no-builtins" }')
    return "\n".join(L) + "\n"


# -- the ops and their tiered kernels ---------------------------------------------------------------------
def _infer(op: str, ctx: Any) -> list[TensorType]:
    """The original op's shape inference (with all its checks) when frame-ops-nn is loaded. Without it (the
    pack disabled) the pass never makes these ops, but the registry still checks their examples at load: the
    output types then follow from the inputs' alone, so frame-native loads whatever else is disabled."""
    original = registry().schemas.get(op)
    if original is not None:
        return list(original.infer(ctx.input_types, ctx.attrs))
    t = ctx.input_types
    if op == "layer_norm_train_internal":  # (x, weight, bias) -> y, xhat, rstd
        return [t[0], t[0], TensorType(t[0].dtype, t[0].shape[:t[0].rank - t[1].rank])]
    if op == "batch_norm_train_internal":  # (x, weight, bias, rm, rv) -> y, rm, rv, xc, rstd
        return [t[0], t[3], t[4], t[0], t[1]]
    return [t[0], t[2], t[2]]  # the grad_saved pair: (xhat|xc, rstd, weight, gy, ...) -> gx, gweight, gbias


def _original(op: str) -> OpSchema:
    schema = registry().schemas.get(op)
    if schema is None:
        from frame_core import ShapeError

        raise ShapeError(f"{native_name(op)}: needs frame-ops-nn's {op}, which is not registered (is the "
                         "frame-ops-nn pack installed and enabled?)")
    return schema


#: batch_norm of x[N, C]: its passes over the data, each a loop over the rows with the channels inside.
#: piece -> (arguments as (name, kind): "row" [N, C] and "vec" [C] are read, "out" [N, C] is written and
#: "acc" [C] is a column sum from 0 over the rows in turn; the steps (value, instruction, a, b); what is
#: stored or accumulated: argument -> value)
_PIECES: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str, str, str]], dict[str, str]]] = {
    "colsum": ([("x", "row"), ("s", "acc")], [], {"s": "x"}),
    "centre": ([("x", "row"), ("mean", "vec"), ("xc", "out"), ("sq", "acc")],
               [("c", "fsub", "x", "mean"), ("q", "fmul", "c", "c")], {"xc": "c", "sq": "q"}),
    "affine": ([("xc", "row"), ("scale", "vec"), ("b", "vec"), ("y", "out")],
               [("m", "fmul", "xc", "scale"), ("o", "fadd", "m", "b")], {"y": "o"}),
    "gradsums": ([("gy", "row"), ("xc", "row"), ("gb", "acc"), ("gd", "acc")], [("p", "fmul", "gy", "xc")],
                 {"gb": "gy", "gd": "p"}),
    "gx": ([("gy", "row"), ("xc", "row"), ("a", "vec"), ("d", "vec"), ("e", "vec"), ("gx", "out")],
           [("p", "fmul", "gy", "a"), ("q", "fmul", "xc", "d"), ("u", "fsub", "p", "q"), ("v", "fsub", "u", "e")],
           {"gx": "v"}),
}
_OP_PIECES = {"batch_norm_train_internal": ("colsum", "centre", "affine"),
              "batch_norm_grad_saved_internal": ("gradsums", "gx")}


class ColumnPlan(MutableRecord):
    """One pass of batch_norm over ``x[rows, columns]`` (a ``_PIECES`` entry)."""

    __match_args__ = ("piece", "dtype", "rows", "columns")

    def __init__(self, piece: str, dtype: np.dtype, rows: int, columns: int) -> None:
        self.piece = piece
        self.dtype = dtype
        self.rows = rows
        self.columns = columns

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [(self.rows, self.columns) if kind in ("row", "out") else (self.columns,)
                for _, kind in _PIECES[self.piece][0]]

    @property
    def n_inputs(self) -> int:
        return sum(kind in ("row", "vec") for _, kind in _PIECES[self.piece][0])

    @property
    def n_args(self) -> int:
        return len(_PIECES[self.piece][0])

    @property
    def chunks(self) -> list[int]:
        return [0]

    def ir(self, width: int) -> str:
        return generate_columns(self)


def generate_columns(plan: ColumnPlan) -> str:
    """The module of one batch_norm pass: ``@chunk0`` (zero the sums, then every row in turn, 8 channels at a
    time) and codegen's checked entry."""
    from .codegen import CODEGEN_VERSION, _entry

    t, _ = _TYPES[plan.dtype]
    a, c = plan.dtype.itemsize, plan.columns
    args, steps, results = _PIECES[plan.piece]
    L = [f"; frame-native column kernels {CODEGEN_VERSION}-columns1 {plan.piece}"]
    params = ", ".join(f"ptr noalias %p{k}" if kind in ("out", "acc") else f"ptr %p{k}"
                       for k, (_, kind) in enumerate(args))
    L += [f"define internal void @chunk0({params}) #2 {{", "go:"]
    loop = _Loop(L, t, c)
    accs = [k for k, (_, kind) in enumerate(args) if kind == "acc"]
    start = "go"
    if accs:
        def zero(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
            for k in accs:
                L.extend([f"  %{tag}z{k} = getelementptr {t}, ptr %p{k}, i64 {j}",
                          f"  store {ty} {'zeroinitializer' if vec else '0.0'}, ptr %{tag}z{k}, align {a}"])
        loop("z", "zeroed", zero)
        start = "zeroed"
    L += ["  br label %row", "row:", f"  %r = phi i64 [0, %{start}], [%rn, %next]", f"  %off = mul i64 %r, {c}"]
    for k, (_, kind) in enumerate(args):
        if kind in ("row", "out"):
            L.append(f"  %rp{k} = getelementptr {t}, ptr %p{k}, i64 %off")

    def body(L: list[str], tag: str, j: str, ty: str, vec: bool) -> None:
        value = {}
        for k, (name, kind) in enumerate(args):
            if kind in ("row", "vec"):
                base = f"%rp{k}" if kind == "row" else f"%p{k}"
                L.extend([f"  %{tag}l{k}p = getelementptr {t}, ptr {base}, i64 {j}",
                          f"  %{tag}l{k} = load {ty}, ptr %{tag}l{k}p, align {a}"])
                value[name] = f"%{tag}l{k}"
        for name, instruction, x, y in steps:
            L.append(f"  %{tag}_{name} = {instruction} {ty} {value[x]}, {value[y]}")
            value[name] = f"%{tag}_{name}"
        for k, (name, kind) in enumerate(args):
            if kind == "out":
                L.extend([f"  %{tag}o{k}p = getelementptr {t}, ptr %rp{k}, i64 {j}",
                          f"  store {ty} {value[results[name]]}, ptr %{tag}o{k}p, align {a}"])
            elif kind == "acc":  # the column sum so far + this row's value, as numpy's add.reduce(axis=0)
                L.extend([f"  %{tag}a{k}p = getelementptr {t}, ptr %p{k}, i64 {j}",
                          f"  %{tag}a{k}o = load {ty}, ptr %{tag}a{k}p, align {a}",
                          f"  %{tag}a{k}n = fadd {ty} %{tag}a{k}o, {value[results[name]]}",
                          f"  store {ty} %{tag}a{k}n, ptr %{tag}a{k}p, align {a}"])
    loop("c", "next", body)
    L += ["  %rn = add i64 %r, 1", f"  %rc = icmp ult i64 %rn, {plan.rows}", "  br i1 %rc, label %row, label %done",
          "done:", "  ret void", "}"]
    L += _entry(plan, plan.n_args, plan.shapes)  # type: ignore[arg-type]
    L.append('attributes #2 = { noinline nounwind "no-builtins" }')
    return "\n".join(L) + "\n"


def plan_pieces(op: str, input_types: list, output_types: list, attrs: dict) -> list:
    """The compiled functions one node needs: one row kernel for layer_norm, a few passes for batch_norm."""
    if op in _OP_PIECES:
        n, c = input_types[0].shape
        return [ColumnPlan(piece, input_types[0].dtype.np, n, c) for piece in _OP_PIECES[op]]
    return [plan_rows(op, input_types, output_types, attrs)]


_Native = Callable[..., Any]


def _row_call(plan: RowPlan, fn: _Native) -> _Native:
    """``native(*inputs)``: fresh outputs and a scratch row, the compiled function; None if it refuses."""
    outs = plan.shapes[plan.n_inputs:-1]
    dtype, descr, empty, ty = plan.dtype, np.dtype(plan.dtype), np.empty, np.ndarray
    scratch_shape = plan.shapes[-1]

    def native(*xs: np.ndarray) -> tuple[np.ndarray, ...] | None:
        made = tuple(empty(s, dtype) for s in outs)
        return None if fn(ty, descr, *xs, *made, empty(scratch_shape, dtype)) else made
    return native


def _batch_train(fns: dict[str, _Native], plan: ColumnPlan, attrs: dict) -> _Native:
    """batch_norm_train_internal of x[N, C] with the compiled passes; None if one refuses. The per-channel
    arithmetic is frame-ops-nn's numpy code, operation for operation (``_batch_train_kernel``)."""
    n, c, dtype = plan.rows, plan.columns, plan.dtype
    m, eps, count = attrs["momentum"], attrs["eps"], plan.rows
    colsum, centre, affine = fns["colsum"], fns["centre"], fns["affine"]
    ty, descr, empty = np.ndarray, np.dtype(dtype), np.empty

    def native(x, w, b, rm, rv):  # noqa: ANN001, ANN202
        sums = empty(c, dtype)
        if colsum(ty, descr, x, sums):
            return None
        mean = sums / count
        xc, sq = empty((n, c), dtype), empty(c, dtype)
        centre(ty, descr, x, mean, xc, sq)
        var = sq / count
        new_rm = (1.0 - m) * np.asarray(rm, dtype) + m * mean
        new_rv = (1.0 - m) * np.asarray(rv, dtype) + m * var * (count / (count - 1))
        y = empty((n, c), dtype)
        if affine(ty, descr, xc, np.asarray(w, dtype) / np.sqrt(var + eps), np.ascontiguousarray(b, dtype), y):
            return None
        return y, new_rm, new_rv, xc, 1.0 / np.sqrt(var + eps)
    return native


def _batch_grad(fns: dict[str, _Native], plan: ColumnPlan, attrs: dict) -> _Native:
    """batch_norm_grad_saved_internal of x[N, C] with the compiled passes; None if one refuses. Per channel as
    frame-ops-nn's ``_batch_grad_channels``."""
    n, c, dtype = plan.rows, plan.columns, plan.dtype
    m, count = attrs["momentum"], plan.rows
    gradsums, gx_pass = fns["gradsums"], fns["gx"]
    ty, descr, empty = np.ndarray, np.dtype(dtype), np.empty

    def native(xc, rstd, w, gy, g_rm, g_rv):  # noqa: ANN001, ANN202
        gb, gd = empty(c, dtype), empty(c, dtype)
        if gradsums(ty, descr, gy, xc, gb, gd):
            return None
        rstd, w = np.asarray(rstd, dtype), np.asarray(w, dtype)
        gw = gd * rstd
        mean_g, mean_gx = w * gb / count, w * gw / count
        share = 2.0 * m * np.asarray(g_rv, dtype) / (count - 1)
        gx = empty((n, c), dtype)
        gx_pass(ty, descr, gy, xc, rstd * w, rstd * rstd * mean_gx - share,
                rstd * mean_g - m * np.asarray(g_rm, dtype) / count, gx)
        return gx, gw, gb
    return native


#: Nodes of more elements than this are checked against numpy on a copy of their kernel compiled for fewer
#: rows (the same row length, so the same summation order): the check then costs a few MiB, not three times
#: the node's arrays.
PROBE_ELEMENTS = 1 << 20


def _probe_types(op: str, types: list) -> list:
    """The input types of the check: ``types`` with fewer rows when the node is large (``PROBE_ELEMENTS``)."""
    x = types[0]
    if x.size <= PROBE_ELEMENTS:
        return types
    if op in _OP_PIECES:  # batch_norm of x[N, C]: at least the two rows training mode needs
        rows = max(2, min(x.shape[0], PROBE_ELEMENTS // x.shape[1]))
        return [TensorType(t.dtype, (rows,) + t.shape[1:]) if t.rank == 2 else t for t in types]
    w = types[2] if op == "layer_norm_grad_saved_internal" else types[1]
    rows = min(x.size // w.size, max(2, PROBE_ELEMENTS // w.size))  # (two at least: the -0.0 row of _probe)
    full, per_row = TensorType(x.dtype, (rows, *w.shape)), TensorType(x.dtype, (rows,))
    if op == "layer_norm_train_internal":
        return [full, w, types[2]]
    return [full, per_row, w, full]


def _build_row_kernel(op: str) -> Callable[[NodeContext], Callable[..., Any]]:
    def build(ctx: NodeContext) -> Callable[..., Any]:
        original = _original(op)
        numpy_kernel = original.kernels["cpu"](NodeContext(original, ctx.input_types, ctx.attrs,
                                                           ctx.output_types))
        attrs = dict(ctx.attrs)
        types, out_types = list(ctx.input_types), list(ctx.output_types)
        plans = plan_pieces(op, types, out_types, attrs)
        probe_types = _probe_types(op, types)
        if probe_types is types:
            check = None
        else:  # (the numpy kernel of the check is built on the compiler thread, when it is needed)
            probe_out = list(original.infer(probe_types, ctx.attrs))
            check = (plan_pieces(op, probe_types, probe_out, attrs),
                     lambda: original.kernels["cpu"](NodeContext(original, probe_types, attrs, probe_out)))
        tier = Tier()
        after, count = calls_before_compile(), [0]

        def promote() -> None:
            from . import jit

            tier.slot[0] = numpy_kernel
            every = plans + (check[0] if check else [])
            done: dict[Any, Any] = {}
            def job(key: int, plan: Any) -> bool:
                def install(_: Any, fn: _Native | None, how: str) -> None:
                    _collect(tier, op, plans, check, attrs, probe_types, done, key, fn, how, numpy_kernel)
                return jit.submit(lambda: plan, install)
            # queued before the jobs go: the compiler thread may install the kernel before submit returns
            tier.state, tier.queued_at, tier.pid = "queued", time.perf_counter(), os.getpid()
            if not all([job(k, p) for k, p in enumerate(every)]):
                tier.state = "off"

        def counting(*xs: np.ndarray) -> Any:
            count[0] += 1
            if count[0] >= after:
                promote()
            return numpy_kernel(*xs)

        tier.slot.append(counting)
        slot = tier.slot

        def tiered(*xs: np.ndarray) -> Any:
            return slot[0](*xs)
        tiered.native = tier  # type: ignore[attr-defined]
        tiered.numpy = numpy_kernel  # type: ignore[attr-defined]
        return tiered
    return build


def _assemble(op: str, plans: list, fns: list, attrs: dict) -> _Native:
    """The node's compiled kernel from its compiled functions (None when an argument is refused)."""
    if op in _OP_PIECES:
        make = _batch_train if op == "batch_norm_train_internal" else _batch_grad
        return make({p.piece: f for p, f in zip(plans, fns)}, plans[0], attrs)
    return _row_call(plans[0], fns[0])


def _collect(tier: Tier, op: str, plans: list, check: tuple | None, attrs: dict, probe_types: list, done: dict,
             key: int, fn: _Native | None, how: str, numpy_kernel: _Native) -> None:
    """On the compiler thread, as each compiled function of a node arrives; once all have, check and install."""
    if fn is None:
        tier.state = how if how in ("failed", "off") else "failed"
        done["failed"] = True
        return
    done[key] = (fn, how)
    total = len(plans) + (len(check[0]) if check else 0)
    if done.get("failed") or len(done) < total:
        return
    fns = [done[k][0] for k in range(total)]
    compiled = _assemble(op, plans, fns[:len(plans)], attrs)
    if check is None:
        checked, reference = compiled, numpy_kernel
    else:
        checked, reference = _assemble(op, check[0], fns[len(plans):], attrs), check[1]()
    how = "compiled" if any(done[k][1] == "compiled" for k in range(len(plans))) else "cache"
    _install(tier, op, compiled, how, numpy_kernel, [t.shape for t in probe_types], plans[0].dtype,
             checked=checked, reference=reference, eps=attrs.get("eps", 1.0))


def _probe(op: str, shapes: list, dtype: np.dtype, eps: float = 1.0) -> list[np.ndarray]:
    """Random inputs of the node's types: values spread over several orders of magnitude, rstd positive; and,
    where there are at least two, a last row (layer_norm) or column (batch_norm) whose sums are of -0.0 alone
    (x; or gy w and gy w xhat), which only a sum that starts from numpy's +0.0 gets right (x's only when
    ``eps``, rounded to the dtype, is positive: a row of zero variance and no eps would make NaNs, whose payloads
    the check should not compare)."""
    rng = np.random.default_rng(sum(map(len, shapes)) * 7919 + sum(int(np.prod(s)) for s in shapes))
    grad = op.endswith("grad_saved_internal")
    features = int(np.prod(shapes[2 if op == "layer_norm_grad_saved_internal" else 1]))
    arrays: list[np.ndarray] = []
    for k, shape in enumerate(shapes):
        a = rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape) + (3.0 if k == 0 else 0.0)
        if grad and k == 1:  # rstd
            a = np.abs(a) + 0.1
        a = np.array(a, dtype)  # (C-contiguous; a 0-d rstd stays 0-d)
        if k == 0 or grad and k == 3:  # x (xhat, xc) and gy
            lines = a.reshape(-1, features) if op in _BATCH else a.reshape(-1, features).T
            if lines.shape[1] < 2 or not grad and not dtype.type(eps) > 0:
                pass
            elif not grad:
                lines[:, -1] = -0.0
            elif k == 0:  # xhat (xc) positive, gy of the sign that makes gy w and gy w xhat all -0.0
                lines[:, -1] = np.abs(lines[:, -1])
            else:
                w = arrays[2].reshape(-1)
                lines[:, -1] = np.copysign(0.0, -(w[-1] if op in _BATCH else w))
        arrays.append(a)
    return arrays


def _install(tier: Tier, op: str, compiled: _Native, how: str, numpy_kernel: _Native, shapes: list,
             dtype: np.dtype, checked: _Native | None = None, reference: _Native | None = None,
             eps: float = 1.0) -> None:
    """On the compiler thread: check the compiled kernel against numpy's on random data of ``shapes`` (the
    node's, or fewer rows of it with ``checked`` and ``reference`` compiled and built for those), then put it
    in the slot (or record why not)."""
    xs = _probe(op, shapes, dtype, eps)
    want, got = (reference or numpy_kernel)(*xs), (checked or compiled)(*xs)
    if got is None or any(np.asarray(g).tobytes() != np.asarray(w).tobytes() for g, w in zip(got, want)):
        from . import jit

        jit.note(f"a compiled {op} kernel does not give numpy's bits on this numpy {np.__version__} "
                 "(its summation order differs from the one the kernels reproduce)",
                 then="that normalisation runs on numpy")
        tier.state = "failed"
        return

    def native(*xs: np.ndarray) -> Any:
        result = compiled(*xs)
        if result is None:  # an argument the compiled code refuses (not C-contiguous, ...): numpy runs it
            tier.fallbacks += 1
            return numpy_kernel(*xs)
        return result
    tier.slot[0] = native
    tier.state, tier.how, tier.swapped_at = "native", how, time.perf_counter()


def _schema(op: str, examples: list[Example]) -> OpSchema:
    inputs, outputs = ROW_OPS[op]
    eps = AttrSpec("float", 1e-5, "added to the variance before the square root")
    momentum = AttrSpec("float", 0.1, "weight of the batch statistics in the running averages")
    attrs = {"layer_norm_train_internal": {"eps": eps}, "layer_norm_grad_saved_internal": {},
             "batch_norm_train_internal": {"training": AttrSpec("bool", True, "must be true: training mode"),
                                           "momentum": momentum, "eps": eps},
             "batch_norm_grad_saved_internal": {"momentum": momentum}}[op]  # (as frame-ops-nn's op)
    return OpSchema(
        native_name(op),
        inputs=inputs,
        outputs=outputs,
        attrs=attrs,
        shape_infer=lambda ctx: _infer(op, ctx),
        kernels={"cpu": _build_row_kernel(op)},
        not_differentiable="a compile-pipeline product made after differentiation; differentiate the graph "
                           "before compiling it",
        doc=f"frame-ops-nn's {op} run by its numpy kernel at first and by a compiled row kernel once the "
            "background compiler has built it; both give the same bits. Produced by the compile_norm_rows pass.",
        examples=examples,
    )


ROW_SCHEMAS = [
    _schema("layer_norm_train_internal", [Example(["f32[4, 6]", "f32[6]", "f32[6]"]),
                                          Example(["f64[2, 3, 4, 5]", "f64[4, 5]", "f64[4, 5]"], {"eps": 1e-3}),
                                          Example(["f64[5]", "f64[5]", "f64[5]"], note="no batch axes")]),
    _schema("layer_norm_grad_saved_internal",
            [Example(["f32[4, 6]", "f32[4]", "f32[6]", "f32[4, 6]"], low=0.5, high=1.5),
             Example(["f64[2, 3, 4, 5]", "f64[2, 3]", "f64[4, 5]", "f64[2, 3, 4, 5]"], low=0.5, high=1.5)]),
    _schema("batch_norm_train_internal", [Example(["f32[6, 3]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"]),
                                          Example(["f64[5, 9]", "f64[9]", "f64[9]", "f64[9]", "f64[9]"],
                                                  {"momentum": 0.3})]),
    _schema("batch_norm_grad_saved_internal",
            [Example(["f32[6, 3]", "f32[3]", "f32[3]", "f32[6, 3]", "f32[3]", "f32[3]"], low=0.5, high=1.5),
             Example(["f64[5, 9]", "f64[9]", "f64[9]", "f64[5, 9]", "f64[9]", "f64[9]"], {"momentum": 0.3},
                     low=0.5, high=1.5)]),
]


# -- the pass ---------------------------------------------------------------------------------------------
def compile_norm_rows(graph: Graph, ctx: Any) -> Graph:
    """layer_norm's training pair on float32/float64 becomes ``native_<op>`` nodes that tier up to compiled
    row kernels (the same inputs, attributes and outputs)."""
    if ctx.backend != "cpu" or ctx.ops(graph).isdisjoint(ROW_OPS):
        return graph
    from .passes import enabled

    off = enabled()
    if off is not None:
        ctx.note("compile_norm_rows", f"off: {off}")
        return graph
    schemas = ctx.registry.schemas
    chosen = [n for n in graph.nodes if n.op in ROW_OPS
              and why_not(n.op, [v.type for v in n.inputs], schemas[n.op].pack) is None]
    if not chosen:
        return graph
    return swap_ops(graph, ctx, chosen, lambda node: native_name(node.op), "compile_norm_rows",
                    f"{len(chosen)} normalisation kernel{'s' if len(chosen) > 1 else ''} tier up to compiled row "
                    "kernels")


def swap_ops(graph: Graph, ctx: Any, chosen: list[Node], op_of: Callable[[Node], str], stage: str,
             note: str) -> Graph:
    """``graph`` with each node of ``chosen`` replaced by a node of op ``op_of(node)`` with the same inputs,
    attributes and output types (its compiled twin); ``note`` goes to the compile log under ``stage``."""
    rw = Rewriter(graph, ctx)
    picked = set(chosen)
    for node in graph.nodes:
        if node not in picked:
            rw.copy(node)
            continue
        new = Node(op_of(node), rw.read(node.inputs), node.attrs)
        new.outputs = tuple([Value(v.type, new, i) for i, v in enumerate(node.outputs)])
        rw.new.nodes.append(new)
        for old, value in zip(node.outputs, new.outputs):
            rw.alias(old, value)
    ctx.note(stage, note)
    ctx.dropped = list(chosen)
    return rw.finish()
