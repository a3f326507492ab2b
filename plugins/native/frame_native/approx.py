"""``fast_tanh_internal``: float32 tanh by a rational approximation, compiled under ``compile(fast_math=True)``.

numpy's float32 tanh (its own SIMD code) costs about 4 ns an element here, and
frame-native does not compile it: its kernels promise numpy's bits. With
``fast_math=True`` the ``compile_fused_groups`` pass replaces every float32
``tanh`` member of a fused group by this op, and the group compiles (a float32
``tanh`` outside any group becomes a group of its own: ``compile_lone_tanh``). The
approximation, as XLA's (jax.jit) does for its tanh, is a clamp and a ratio
of two polynomials, with no table and no branch, so LLVM vectorises it::

    c = clamp(x, -9.125, 9.125)       # tanh(9.125) rounds to 1; inf -> 1; NaN stays NaN
    s = c * c
    t = c * P(s) / Q(s)               # P, Q of degree 4, P(0) = Q(0) = 1: tiny x (subnormals, -0.0) give x
    tanh(x) ~ clamp(t, -1, 1)         # |t| <= 1, so 1 - t * t (the gradient) is never negative

P and Q were fitted here (iteratively reweighted least squares on the relative
error over [0, 9.125], rounded to float32, then each coefficient nudged by a
few ulp to lower the count of results off by more than 2 ulp). The error
against float64 tanh rounded to float32 is at most 7 ulp over every float32 (docs/fast-math.md,
``tests/test_fast_math.py``); XLA's is 5, numpy's 1.

Both tiers of a group compute the same bits: the numpy kernel below runs the
same sequence of correctly rounded float32 operations (Horner's rule, no fused
multiply-add: the generated code never writes LLVM's ``contract`` flag) as the
code ``emit`` writes, so when a compiled kernel takes over never shows.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import Example, Graph, Node, NodeContext, OpSchema, Rewriter, Value

__all__ = ["FAST_TANH_OP", "FAST_TANH", "APPROXIMATE", "tanh_f32", "emit", "approximate_body", "compile_lone_tanh"]

FAST_TANH_OP = "fast_tanh_internal"

#: Ops whose code ``emit`` writes, with the packs that may provide them (see ``codegen.EXACT``).
APPROXIMATE = {FAST_TANH_OP: ("native",)}

#: float32 bit patterns (exact): the clamp, then P's and Q's coefficients from degree 0 up.
_CLAMP = 0x41120000  # 9.125
_P = (0x3F800000, 0x3E08F7FA, 0x3B64AD25, 0x37ABFB1C, 0x3262BD8C)
_Q = (0x3F800000, 0x3EEF26A3, 0x3CD3CA97, 0x39ABB70C, 0x354F12F0)


def _f32(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


CLAMP = _f32(_CLAMP)
P = tuple(_f32(b) for b in _P)
Q = tuple(_f32(b) for b in _Q)
_ONE = np.float32(1.0)


def tanh_f32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The approximation of tanh on a float32 array, by numpy: the same operations, in the same order, as the
    compiled code (``emit``), so the same bits."""
    maximum, minimum, multiply, add, divide = np.maximum, np.minimum, np.multiply, np.add, np.divide
    c = minimum(maximum(x, -CLAMP), CLAMP)
    s = multiply(c, c)
    p = multiply(s, P[4])
    q = multiply(s, Q[4])
    for k in (3, 2, 1):
        add(p, P[k], out=p)
        multiply(p, s, out=p)
        add(q, Q[k], out=q)
        multiply(q, s, out=q)
    add(p, P[0], out=p)
    add(q, Q[0], out=q)
    multiply(c, p, out=p)
    divide(p, q, out=p)
    if out is None:
        out = np.empty(np.shape(x), np.float32)
    return minimum(maximum(p, -_ONE, out=out), _ONE, out=out)


def _hex(value: np.float32) -> str:
    """LLVM's spelling of a float constant: the double of the same value, in hexadecimal (exact)."""
    return "0x" + struct.pack(">d", float(value)).hex().upper()


def emit(L: list[str], name: str, x: str, ty: str, t: str, lanes: int) -> str:
    """Append the instructions of ``fast_tanh_internal`` on ``x`` (``lanes`` float32 lanes); return the result's
    SSA name. Clamps are an ordered compare and a select: a NaN compares false and passes through, as through
    numpy's maximum and minimum."""
    def const(v: np.float32) -> str:
        return f"splat ({t} {_hex(v)})" if lanes > 1 else _hex(v)
    cmp = f"<{lanes} x i1>" if lanes > 1 else "i1"

    def clamp(src: str, tag: str, bound: np.float32) -> str:
        lo, hi = const(-bound), const(bound)
        L.extend([f"  {name}{tag}l = fcmp olt {ty} {src}, {lo}", f"  {name}{tag}a = select {cmp} {name}{tag}l, {ty} {lo}, {ty} {src}",
                  f"  {name}{tag}h = fcmp ogt {ty} {name}{tag}a, {hi}", f"  {name}{tag} = select {cmp} {name}{tag}h, {ty} {hi}, {ty} {name}{tag}a"])
        return f"{name}{tag}"
    c = clamp(x, "c", CLAMP)
    s = f"{name}s"
    L.append(f"  {s} = fmul {ty} {c}, {c}")
    for poly, coeffs in (("p", P), ("q", Q)):
        acc = f"{name}{poly}4"
        L.append(f"  {acc} = fmul {ty} {s}, {const(coeffs[4])}")
        for k in (3, 2, 1):
            L += [f"  {name}{poly}{k}a = fadd {ty} {acc}, {const(coeffs[k])}", f"  {name}{poly}{k} = fmul {ty} {name}{poly}{k}a, {s}"]
            acc = f"{name}{poly}{k}"
        L.append(f"  {name}{poly}0 = fadd {ty} {acc}, {const(coeffs[0])}")
    L += [f"  {name}n = fmul {ty} {c}, {name}p0", f"  {name}r = fdiv {ty} {name}n, {name}q0"]
    return clamp(f"{name}r", "", _ONE)


def _kernel(ctx: NodeContext) -> Callable[..., Any]:
    shape = ctx.input_types[0].shape

    def fast_tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return tanh_f32(x, out if out is not None else np.empty(shape, np.float32))
    return fast_tanh


def _infer(ctx: NodeContext) -> list:
    (x,) = ctx.input_types
    if x.dtype.name != "float32":
        raise ctx.error(f"x must be float32 (the approximation is float32's), got {x}; float64 tanh stays numpy's")
    return [x]


FAST_TANH = OpSchema(
    FAST_TANH_OP,
    inputs=("x",),
    shape_infer=_infer,
    kernels={"cpu": _kernel},
    not_differentiable="a compile-pipeline product made after differentiation (compile(fast_math=True) puts it in "
                       "place of tanh); differentiate the graph before compiling it",
    traits=("accepts_out",),
    doc="float32 tanh by a clamped rational approximation (at most 7 ulp from the correctly rounded tanh; XLA's "
        "is 5): what compile(fast_math=True) runs in place of frame-ops-basic's tanh in fused groups, by numpy "
        "and by compiled code with the same bits.",
    examples=[Example(["f32[3, 4]"]), Example(["f32[17]"], low=-12.0, high=12.0)],
)


def approximate_body(body: Graph, packs: dict[str, str | None]) -> Graph | None:
    """A copy of a fused ``body`` with each float32 ``tanh`` of frame-ops-basic replaced by ``fast_tanh_internal``,
    or None when it has none."""
    if not any(n.op == "tanh" and packs.get("tanh") == "ops_basic" and n.outputs[0].type.dtype.name == "float32"
               for n in body.nodes):
        return None
    g = Graph(body.name)
    new: dict[Value, Value] = {v: g.add_input(v.type) for v in body.inputs}
    for node in body.nodes:
        op = node.op
        if op == "tanh" and node.outputs[0].type.dtype.name == "float32":
            op = FAST_TANH_OP
        made = g.add_node(op, [new[v] for v in node.inputs], node.attrs, [v.type for v in node.outputs])
        new.update(zip(node.outputs, made.outputs))
    for v in body.outputs:
        g.mark_output(new[v])
    return g


def _one_tanh(t: Any) -> Graph:
    g = Graph("fast_tanh")
    x = g.add_input(t)
    g.mark_output(g.add_node(FAST_TANH_OP, [x], {}, [t]).outputs[0])
    return g


def compile_lone_tanh(graph: Graph, ctx: Any) -> Graph:
    """Under ``compile(fast_math=True)``: a float32 ``tanh`` that no fused group holds (``tanh(x @ w)`` in an
    inference graph) becomes a ``native_fused_internal`` group of one ``fast_tanh_internal``, as the ones in
    groups do (``compile_fused_groups``); the approximation costs a fifth of numpy's tanh, so a group of one
    pays for its call. Without ``fast_math`` the graph is returned as it is."""
    if not getattr(ctx, "fast_math", False) or ctx.backend != "cpu" or "tanh" not in ctx.ops(graph):
        return graph
    schema = ctx.registry.schemas.get("tanh")
    if schema is None or schema.pack != "ops_basic":
        return graph
    from .passes import enabled
    from .tiered import NATIVE_OP

    lone = {n for n in graph.nodes if n.op == "tanh" and n.outputs[0].type.dtype.name == "float32"
            and n.outputs[0].type.size > 0}
    if not lone or enabled() is not None:
        return graph
    rw = Rewriter(graph, ctx)
    bodies: dict[Any, Graph] = {}  # one body per type: groups of one structure share one kernel
    for node in graph.nodes:
        if node not in lone:
            if rw.vmap.keys().isdisjoint(node.inputs):
                rw.new.nodes.append(node)
            else:
                rw.copy(node)
            continue
        t = node.outputs[0].type
        body = bodies.get(t) or bodies.setdefault(t, _one_tanh(t))
        new = Node(NATIVE_OP, rw.read(node.inputs), {"body": body})
        new.outputs = (Value(t, new, 0),)
        rw.new.nodes.append(new)
        rw.alias(node.outputs[0], new.outputs[0])
    ctx.note("compile_lone_tanh", f"{len(lone)} float32 tanh outside fused groups approximated (fast_math)")
    ctx.dropped = list(lone)
    return rw.finish()
