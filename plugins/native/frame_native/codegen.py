"""A fused elementwise body as LLVM IR text with explicit vectors (pure Python: no llvmlite needed here).

``plan_body(body)`` decides whether a body can be compiled and how it reads
its values; ``generate(plan, width)`` writes the module. Only ops whose
results IEEE 754 rounds exactly once are accepted (``EXACT``): the code does
per element what numpy does per array, one correctly rounded operation per
member, in graph order, with no fused multiply-add (LLVM contracts ``fmul``
and ``fadd`` only under the ``contract`` flag, which is never written), so a
compiled kernel's results are numpy's bit for bit. Transcendental functions
(tanh, exp, ...) differ from numpy's SIMD versions by an ulp and are left
to numpy: a body that holds one is not compiled. Under ``compile(fast_math=True)``
float32 tanh becomes ``fast_tanh_internal`` (``approx.py``), a fixed sequence of
exactly rounded operations that numpy's tier runs too, and compiles.

Layout of the kernel ``i32 kernel(ndarray_type, dtype, x0, ..., y0, ...)``:
every argument is a ``PyObject*``; the kernel reads numpy's C struct of an
array (``data`` at byte 16, ``nd`` 24, ``dimensions`` 32, ``descr`` 56,
``flags`` 64; checked once against numpy before any kernel runs). It returns
1 without writing anything unless every argument is an ndarray (not a
subclass, not a numpy scalar) of the group's dtype and shape and
C-contiguous and aligned, so the caller can fall back to numpy, and 0 when it has
written every output.

Values are read four ways: *full* (the output's shape: element i), *scalar*
(one element, splat into a vector once), *periodic* (a trailing part of
the output's shape, broadcast over the leading axes: element i mod P) and
*column* (a leading part of the output's shape, broadcast over the trailing
axes: element i div P, read once per row and splat; ``x[n, 1] * w[1, h]``,
an outer product, reads x this way and w periodically). The loops are a row
loop over N / P rows and, inside it, a vector loop of ``width`` lanes plus a
scalar loop for the P mod ``width`` remainder.
Constants of the body become private globals holding their exact bit
patterns. Bodies longer than ``CHUNK`` members are split into several
functions, each a full pass over the data, that hand values to each other
through scratch arrays: LLVM's cost grows faster than linearly with the size
of one function, and linearly with the number of functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from frame_core import Graph, Value

from . import approx
from .approx import APPROXIMATE

__all__ = ["EXACT", "CHUNK", "MAX_INLINE_CONSTANT", "MAX_ARRAYS", "Plan", "why_not", "plan_body", "generate", "CODEGEN_VERSION"]

#: Bump when the generated code changes meaning: it is part of every cache key.
CODEGEN_VERSION = "1"

#: Ops compiled, with the packs that may provide them (another pack's op of the same name is not ours to
#: compile). Each maps to an IR template over its operands (vector or scalar form, see ``_emit``).
EXACT = {
    "add": ("ops_basic",), "accumulate_internal": ("core", "ops_basic"), "sub": ("ops_basic",),
    "mul": ("ops_basic",), "div": ("ops_basic",), "neg": ("ops_basic",), "square": ("ops_basic",),
    "sqrt": ("ops_basic",), "relu": ("ops_basic",), "relu_grad_internal": ("ops_basic",),
    # compile(fast_math=True)'s tanh (approx.py): exactly rounded steps, which numpy's tier runs alike
    **APPROXIMATE,
}

#: Most members per generated function (see the module docstring).
CHUNK = 512
#: Constants up to this many elements are compiled into the code; larger ones are passed in like inputs.
MAX_INLINE_CONSTANT = 1 << 14
#: Most arrays (inputs, passed constants, outputs, scratch) a kernel takes: ctypes calls a function with at most
#: 1,024 arguments, two of which are the ndarray type and the dtype.
MAX_ARRAYS = 1000

_LLVM_TYPE = {np.dtype(np.float32): ("float", "f32", 4, "i32"), np.dtype(np.float64): ("double", "f64", 8, "i64")}


@dataclass
class Operand:
    """One array the kernel reads: a body input (``param``), or a constant (``constant``)."""

    kind: str            # "full", "scalar", "periodic" or "column"
    param: int = -1      # position among the kernel's array arguments, or -1 for an inlined constant
    constant: np.ndarray | None = None


@dataclass
class Plan:
    """How a compilable body reads and writes memory, and the kernel's argument list.

    Arguments are, in order: the body's inputs, the large constants, the body's outputs, then (when there
    are several chunks) one scratch array with a row per value handed from a chunk to a later one.
    """

    body: Graph
    dtype: np.dtype
    size: int                       # elements of every member's output
    period: int                     # elements of a period (size when nothing is periodic)
    operands: dict[Value, Operand]  # every value the members read that no member produced
    passed_constants: list[np.ndarray] = field(default_factory=list)
    chunks: list[list[int]] = field(default_factory=list)  # member indices (into body.nodes) per function
    scratch: list[Value] = field(default_factory=list)      # values handed from one chunk to a later one

    @property
    def n_inputs(self) -> int:
        return len(self.body.inputs) + len(self.passed_constants)

    @property
    def n_outputs(self) -> int:
        return len(self.body.outputs)

    @property
    def n_args(self) -> int:
        return self.n_inputs + self.n_outputs + (1 if self.scratch else 0)


def _period(shape: tuple[int, ...], out: tuple[int, ...]) -> int | None:
    """Elements per period when ``shape`` broadcasts to ``out`` by repeating along leading axes only, else None."""
    stripped = list(shape)
    while stripped and stripped[0] == 1:
        stripped.pop(0)
    if len(stripped) > len(out) or tuple(stripped) != out[len(out) - len(stripped):]:
        return None
    return math.prod(stripped)


def _column(shape: tuple[int, ...], out: tuple[int, ...]) -> int | None:
    """Elements per row when ``shape`` is ``out``'s leading axes followed by ones (a column broadcast across the
    trailing axes: ``[n, 1]`` in ``[n, h]`` repeats each element h times), else None."""
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    if len(padded) != len(out):
        return None
    k = len(out)
    while k and padded[k - 1] == 1:
        k -= 1
    if k == 0 or k == len(out) or padded[:k] != out[:k]:
        return None
    return math.prod(out[k:])


def _reading(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[str, int] | None:
    """How an operand of ``shape`` is read in a group of output shape ``out``: its kind and period (elements per
    row; 1 for a scalar, the size for a full operand), or None when it cannot be read by the row loop."""
    size = math.prod(out)
    p = _period(shape, out)
    if p is not None:
        return ("full" if p == size else "scalar" if p == 1 else "periodic"), p
    c = _column(shape, out)
    return None if c is None else ("column", c)


def why_not(body: Graph, packs: dict[str, str | None]) -> str | None:
    """Why ``body`` cannot be compiled (a short reason), or None when it can. Cheap: a scan of the members,
    the dtypes and the operands' shapes. ``packs`` maps each op name to the pack that registered it."""
    members = [n for n in body.nodes if n.op != "constant"]
    if not members or not body.outputs:
        return "empty body"
    out_t = members[0].outputs[0].type
    if out_t.dtype.np not in _LLVM_TYPE:
        return f"dtype {out_t.dtype.name} (float32 and float64 only)"
    if out_t.size == 0:
        return "no elements"
    for node in members:
        allowed = EXACT.get(node.op)
        if allowed is None:
            return f"op {node.op} (not exactly rounded, or not known here)"
        if packs.get(node.op) not in allowed:
            return f"op {node.op} comes from pack {packs.get(node.op)!r}"
        if len(node.outputs) != 1 or node.outputs[0].type is not out_t:
            return "members of more than one type"
    periods = set()
    for v in _operands(body):
        if v.type.dtype != out_t.dtype:
            return f"an operand of dtype {v.type.dtype.name}"
        reading = _reading(v.type.shape, out_t.shape)
        if reading is None:
            return f"an operand of shape {list(v.type.shape)} broadcast across inner axes of {list(out_t.shape)}"
        if reading[0] in ("periodic", "column"):
            periods.add(reading[1])
    if len(periods) > 1:
        return f"operands repeat with different periods {sorted(periods)}"
    arrays = len(body.inputs) + len(body.outputs) + 1 + sum(
        1 for v in _operands(body) if v.producer is not None and v.type.size > MAX_INLINE_CONSTANT)
    if arrays > MAX_ARRAYS:
        return f"{arrays} arrays to pass (at most {MAX_ARRAYS})"
    return None


def _operands(body: Graph) -> list[Value]:
    """The values members read that no member produces: the body's inputs, then the constants read."""
    read = {v for n in body.nodes if n.op != "constant" for v in n.inputs}
    return list(body.inputs) + [n.outputs[0] for n in body.nodes if n.op == "constant" and n.outputs[0] in read]


def plan_body(body: Graph, packs: dict[str, str | None]) -> Plan | str:
    """The plan for ``body``, or the reason (``why_not``) it is not compiled."""
    reason = why_not(body, packs)
    if reason is not None:
        return reason
    members = [n for n in body.nodes if n.op != "constant"]
    out_t = members[0].outputs[0].type
    dtype, size = out_t.dtype.np, out_t.size
    operands: dict[Value, Operand] = {}
    passed: list[np.ndarray] = []
    position = {v: i for i, v in enumerate(body.inputs)}
    period = size
    for v in _operands(body):
        reading = _reading(v.type.shape, out_t.shape)
        assert reading is not None  # why_not checked it
        op = operands[v] = Operand(reading[0])
        if op.kind in ("periodic", "column"):
            period = reading[1]
        if v in position:
            op.param = position[v]
            continue
        assert v.producer is not None  # not a body input: a constant (why_not checked it)
        value = np.ascontiguousarray(v.producer.attrs["value"], dtype)
        op.constant = value
        if value.size > MAX_INLINE_CONSTANT:
            op.param = len(body.inputs) + len(passed)
            passed.append(value)
    plan = Plan(body, dtype, size, period, operands, passed)
    index = {n: i for i, n in enumerate(body.nodes)}
    member_ids = [index[n] for n in members]
    plan.chunks = [member_ids[k:k + CHUNK] for k in range(0, len(member_ids), CHUNK)]
    if len(plan.chunks) > 1:
        chunk_of = {body.nodes[i].outputs[0]: c for c, ids in enumerate(plan.chunks) for i in ids}
        handed = [v for c, ids in enumerate(plan.chunks) for i in ids for v in body.nodes[i].inputs
                  if chunk_of.get(v, c) < c]
        outputs = set(body.outputs)
        plan.scratch = [v for v in dict.fromkeys(handed) if v not in outputs]
    return plan


def _bits(array: np.ndarray, itype: str) -> str:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint32 if itype == "i32" else np.uint64)
    return ", ".join(f"{itype} {int(b)}" for b in flat.tolist())


class _Writer:
    """Emits one function: the flag checks, the pointers, the loop nest and each member in vector and scalar
    form."""

    def __init__(self, plan: Plan, width: int, name: str, members: list[int], reads: list[Value],
                 writes: list[Value], arg_of: dict[Value, int], n_args: int, n_in: int,
                 const_names: dict[Value, str]) -> None:
        self.plan, self.width, self.name = plan, width, name
        self.members, self.reads, self.writes = members, reads, writes
        self.arg_of, self.n_args, self.n_in, self.const_names = arg_of, n_args, n_in, const_names
        self.scratch_row = {v: k for k, v in enumerate(plan.scratch)}
        self.t, self.suffix, self.size, _ = _LLVM_TYPE[plan.dtype]
        self.vt = f"<{width} x {self.t}>"
        self.lines: list[str] = []

    def kind(self, v: Value) -> str:
        op = self.plan.operands.get(v)
        return op.kind if op is not None else "full"  # member values and scratch are full

    def emit(self) -> list[str]:
        """``void chunkN(ptr data0, ...)``: the loop nest over the arrays' data."""
        p, w, t, vt = self.plan, self.width, self.t, self.vt
        L = self.lines
        args = ", ".join(f"ptr noalias %d{k}" if k >= self.n_in else f"ptr %d{k}" for k in range(self.n_args))
        L.append(f"define internal void @{self.name}({args}) #0 {{")
        L.append("go:")
        for v in dict.fromkeys(self.reads + self.writes):  # rows of the scratch array this chunk touches
            row = self.scratch_row.get(v)
            if row is not None:
                L.append(f"  %row{row} = getelementptr {t}, ptr %d{self.n_args - 1}, i64 {row * p.size}")
        for j, v in enumerate(self.reads):
            if self.kind(v) == "scalar":
                L += [f"  %s{j} = load {t}, ptr {self.ptr(v)}, align {self.size}",
                      f"  %st{j} = insertelement {vt} poison, {t} %s{j}, i64 0",
                      f"  %sv{j} = shufflevector {vt} %st{j}, {vt} poison, <{w} x i32> zeroinitializer"]
        rows, period = p.size // p.period, p.period
        vend = period - period % w
        L += ["  br label %row", "row:", "  %r = phi i64 [0, %go], [%rn, %rowend]", f"  %base = mul i64 %r, {period}"]
        for j, v in enumerate(self.reads):  # a column operand: one element per row, splat
            if self.kind(v) == "column":
                L += [f"  %cp{j} = getelementptr {t}, ptr {self.ptr(v)}, i64 %r",
                      f"  %c{j} = load {t}, ptr %cp{j}, align {self.size}",
                      f"  %ct{j} = insertelement {vt} poison, {t} %c{j}, i64 0",
                      f"  %cv{j} = shufflevector {vt} %ct{j}, {vt} poison, <{w} x i32> zeroinitializer"]
        L.append("  br label %vloop" if vend else "  br label %vdone")
        if vend:
            L += ["vloop:", "  %vj = phi i64 [0, %row], [%vjn, %vloop]"]
            self.body("v", "%vj", vt, w)
            L += [f"  %vjn = add i64 %vj, {w}", f"  %vc = icmp ult i64 %vjn, {vend}", "  br i1 %vc, label %vloop, label %vdone"]
        L.append("vdone:")
        if vend < period:
            L += ["  br label %sloop", "sloop:", f"  %sj = phi i64 [{vend}, %vdone], [%sjn, %sloop]"]
            self.body("s", "%sj", t, 1)
            L += ["  %sjn = add i64 %sj, 1", f"  %sc = icmp ult i64 %sjn, {period}", "  br i1 %sc, label %sloop, label %rowend"]
        else:
            L.append("  br label %rowend")
        L += ["rowend:", "  %rn = add i64 %r, 1", f"  %rc = icmp ult i64 %rn, {rows}",
              "  br i1 %rc, label %row, label %exit", "exit:", "  ret void", "}"]
        return L

    def ptr(self, v: Value) -> str:
        name = self.const_names.get(v)
        if name is not None:
            return name
        row = self.scratch_row.get(v)
        return f"%row{row}" if row is not None else f"%d{self.arg_of[v]}"

    def body(self, tag: str, j: str, ty: str, lanes: int) -> None:
        """One iteration (``lanes`` elements at position ``j`` of the current row) of every member."""
        L, t = self.lines, self.t
        L.append(f"  %{tag}ix = add i64 %base, {j}")
        value: dict[Value, str] = {}
        for k, v in enumerate(self.reads):
            kind = self.kind(v)
            if kind == "scalar":
                value[v] = f"%sv{k}" if lanes > 1 else f"%s{k}"
                continue
            if kind == "column":
                value[v] = f"%cv{k}" if lanes > 1 else f"%c{k}"
                continue
            index = f"%{tag}ix" if kind == "full" else j
            L += [f"  %{tag}p{k} = getelementptr {t}, ptr {self.ptr(v)}, i64 {index}",
                  f"  %{tag}l{k} = load {ty}, ptr %{tag}p{k}, align {self.size}"]
            value[v] = f"%{tag}l{k}"
        nodes = self.plan.body.nodes
        for i in self.members:
            node = nodes[i]
            value[node.outputs[0]] = _emit(L, f"%{tag}m{i}", node.op, [value[v] for v in node.inputs], ty, t,
                                           lanes, self.suffix)
        for k, v in enumerate(self.writes):
            L += [f"  %{tag}q{k} = getelementptr {t}, ptr {self.ptr(v)}, i64 %{tag}ix",
                  f"  store {ty} {value[v]}, ptr %{tag}q{k}, align {self.size}"]


def _emit(L: list[str], name: str, op: str, xs: list[str], ty: str, t: str, lanes: int, suffix: str) -> str:
    """Append the instructions of one member; return the SSA name of its result."""
    zero = "zeroinitializer" if lanes > 1 else "0.0"
    one = f"splat ({t} 1.0)" if lanes > 1 else "1.0"
    cmp = f"<{lanes} x i1>" if lanes > 1 else "i1"
    if op in ("add", "accumulate_internal"):
        L.append(f"  {name} = fadd {ty} {xs[0]}, {xs[1]}")
    elif op == "sub":
        L.append(f"  {name} = fsub {ty} {xs[0]}, {xs[1]}")
    elif op == "mul":
        L.append(f"  {name} = fmul {ty} {xs[0]}, {xs[1]}")
    elif op == "div":
        L.append(f"  {name} = fdiv {ty} {xs[0]}, {xs[1]}")
    elif op == "neg":
        L.append(f"  {name} = fneg {ty} {xs[0]}")
    elif op == "square":
        L.append(f"  {name} = fmul {ty} {xs[0]}, {xs[0]}")
    elif op == "sqrt":
        intrinsic = f"llvm.sqrt.v{lanes}{suffix}" if lanes > 1 else f"llvm.sqrt.{suffix}"
        L.append(f"  {name} = call {ty} @{intrinsic}({ty} {xs[0]})")
    elif op == "relu":  # numpy's maximum(x, 0): NaN stays (unordered compare), -0.0 and 0.0 give +0.0
        L += [f"  {name}c = fcmp ugt {ty} {xs[0]}, {zero}", f"  {name} = select {cmp} {name}c, {ty} {xs[0]}, {ty} {zero}"]
    elif op == "relu_grad_internal":  # numpy's gy * (x > 0): the mask is 1.0 or 0.0, then one multiply
        L += [f"  {name}c = fcmp ogt {ty} {xs[0]}, {zero}", f"  {name}k = select {cmp} {name}c, {ty} {one}, {ty} {zero}",
              f"  {name} = fmul {ty} {xs[1]}, {name}k"]
    elif op in APPROXIMATE:  # compile(fast_math=True) only (approx.py): exactly rounded steps, numpy's tier too
        return approx.emit(L, name, xs[0], ty, t, lanes)
    else:  # plan_body admits only EXACT ops
        raise ValueError(f"no code for op {op!r}")
    return name


def generate(plan: Plan, width: int) -> str:
    """The module: constants, one function per chunk, and ``kernel`` calling them in turn."""
    t, suffix, size, itype = _LLVM_TYPE[plan.dtype]
    body = plan.body
    lines = [f"; frame-native codegen {CODEGEN_VERSION}"]
    const_names: dict[Value, str] = {}
    for k, (v, op) in enumerate(plan.operands.items()):
        if op.constant is not None and op.param < 0:
            name = f"@k{k}"
            const_names[v] = name
            n = op.constant.size
            lines.append(f"{name} = private unnamed_addr constant [{n} x {itype}] [{_bits(op.constant, itype)}], align 64")
    if any(n.op == "sqrt" for n in body.nodes):
        lines += [f"declare <{width} x {t}> @llvm.sqrt.v{width}{suffix}(<{width} x {t}>)", f"declare {t} @llvm.sqrt.{suffix}({t})"]
    # kernel arguments: inputs, passed constants, outputs, scratch
    arg_of: dict[Value, int] = {}
    for v, op in plan.operands.items():
        if op.param >= 0:
            arg_of[v] = op.param
    n_in = plan.n_inputs
    for k, v in enumerate(body.outputs):
        arg_of.setdefault(v, n_in + k)
    n_args = plan.n_args
    needed_later: set[Value] = set(body.outputs) | set(plan.scratch)
    for c, ids in enumerate(plan.chunks):
        own = {body.nodes[i].outputs[0] for i in ids}
        reads = list(dict.fromkeys(v for i in ids for v in body.nodes[i].inputs if v not in own))
        writes = [v for v in dict.fromkeys(body.nodes[i].outputs[0] for i in ids) if v in needed_later]
        lines += _Writer(plan, width, f"chunk{c}", ids, reads, writes, arg_of, n_args, n_in, const_names).emit()
    lines += _entry(plan, n_args, [_arg_shape(plan, k) for k in range(n_args)])
    return "\n".join(lines) + "\n"


def _arg_shape(plan: Plan, k: int) -> tuple[int, ...]:
    """The shape the kernel's k-th array argument must have."""
    body = plan.body
    n_body, n_in = len(body.inputs), plan.n_inputs
    if k < n_body:
        return body.inputs[k].type.shape
    if k < n_in:
        return plan.passed_constants[k - n_body].shape
    out_shape = body.outputs[0].type.shape
    return out_shape if k < n_in + plan.n_outputs else (len(plan.scratch),) + out_shape


#: numpy's NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED
_CONTIGUOUS_ALIGNED = 0x1 | 0x100
#: NPY_ARRAY_WRITEABLE, required of the outputs and the scratch array
_WRITEABLE = 0x400


def _entry(plan: Plan, n_args: int, shapes: list[tuple[int, ...]]) -> list[str]:
    """``i32 kernel(ptr ndarray_type, ptr descr, ptr a0, ...)``: every argument must be an ndarray (its type
    pointer, byte 8, is numpy's ndarray type: a subclass or a numpy scalar is refused before anything else is
    read), of the group's dtype (descr at byte 56 is the dtype's own object), of its shape (nd at byte 24,
    dimensions at byte 32), C-contiguous and aligned (bits 0 and 8 of flags at byte 64: the loads and stores
    are declared aligned to the element, which LLVM may rely on), and the outputs writeable (bit 10: numpy
    refuses to write a read-only array, and so does the kernel). Then the data pointers (byte 16) go
    to the chunks in turn. Any failed check returns 1 and nothing is written."""
    args = ", ".join(["ptr %ty", "ptr %descr"] + [f"ptr %a{k}" for k in range(n_args)])
    need = [_CONTIGUOUS_ALIGNED | (_WRITEABLE if k >= plan.n_inputs else 0) for k in range(n_args)]
    L = [f"define i32 @kernel({args}) #1 {{", "entry:"]
    ok = "true"
    for k in range(n_args):
        L += [f"  %tp{k} = getelementptr i8, ptr %a{k}, i64 8", f"  %t{k} = load ptr, ptr %tp{k}",
              f"  %tb{k} = icmp eq ptr %t{k}, %ty", f"  %tok{k} = and i1 {ok}, %tb{k}"]
        ok = f"%tok{k}"
    L += [f"  br i1 {ok}, label %arrays, label %refuse", "arrays:"]
    ok = "true"
    for k in range(n_args):
        shape = shapes[k]
        L += [f"  %ep{k} = getelementptr i8, ptr %a{k}, i64 56", f"  %e{k} = load ptr, ptr %ep{k}",
              f"  %eb{k} = icmp eq ptr %e{k}, %descr",
              f"  %fp{k} = getelementptr i8, ptr %a{k}, i64 64", f"  %f{k} = load i32, ptr %fp{k}",
              f"  %fc{k} = and i32 %f{k}, {need[k]}", f"  %fb{k} = icmp eq i32 %fc{k}, {need[k]}",
              f"  %np{k} = getelementptr i8, ptr %a{k}, i64 24", f"  %n{k} = load i32, ptr %np{k}",
              f"  %nb{k} = icmp eq i32 %n{k}, {len(shape)}",
              f"  %o{k}a = and i1 {ok}, %eb{k}", f"  %o{k}b = and i1 %o{k}a, %fb{k}", f"  %o{k} = and i1 %o{k}b, %nb{k}"]
        ok = f"%o{k}"
    L += [f"  br i1 {ok}, label %dims, label %refuse", "dims:"]
    ok = "true"
    for k in range(n_args):  # the rank is right: read the dimensions
        shape = shapes[k]
        if not shape:
            continue
        L += [f"  %dimp{k} = getelementptr i8, ptr %a{k}, i64 32", f"  %dim{k} = load ptr, ptr %dimp{k}"]
        for j, d in enumerate(shape):
            L += [f"  %dp{k}_{j} = getelementptr i64, ptr %dim{k}, i64 {j}", f"  %dv{k}_{j} = load i64, ptr %dp{k}_{j}",
                  f"  %db{k}_{j} = icmp eq i64 %dv{k}_{j}, {d}", f"  %do{k}_{j} = and i1 {ok}, %db{k}_{j}"]
            ok = f"%do{k}_{j}"
    L += [f"  br i1 {ok}, label %go, label %refuse", "refuse:", "  ret i32 1", "go:"]
    for k in range(n_args):
        L += [f"  %dp{k} = getelementptr i8, ptr %a{k}, i64 16", f"  %d{k} = load ptr, ptr %dp{k}"]
    data = ", ".join(f"ptr %d{k}" for k in range(n_args))
    for c in range(len(plan.chunks)):
        L.append(f"  call void @chunk{c}({data})")
    # The checks are left unoptimised (optnone): LLVM's ConstraintElimination is quadratic in a function's
    # conditions (7.5 s for a group of 400 inputs, more than a minute for 950), and they run once per call.
    L += ["  ret i32 0", "}", "attributes #0 = { noinline nounwind }", "attributes #1 = { noinline nounwind optnone }"]
    return L
