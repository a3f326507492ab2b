"""Ops for testing the kit itself: right ones, and ones that are wrong on purpose.

Loaded through the real loader from fake entry points, beside the real
frame-ops-basic (whose ``mul``, ``sum``, ``cos``... the fixtures' GradientFns
and the kit's loss contraction use). Each wrong op is wrong in exactly one way:

- ``fx_sin_wrong_sign``: first-order gradient has the wrong sign;
- ``fx_cube_bad2``: right first order; its gradient op's own GradientFn is
  half what it should be, so only the second order is wrong;
- ``fx_scale``: right in float32/float64, its gradient kernel drops the factor 2
  in float16/bfloat16 (a low-precision-only bug);
- ``fx_step_bad_surrogate``: the GradientFn is not the derivative of the
  declared ``gradient_surrogate`` (ARCH-066 exception misused);
- ``fx_sin_bad_jvp``, ``fx_mul_bad_jvp``: right GradientFn, wrong declared JvpFn (the JVP checks only);
- ``fx_tanh_fwd_bad_internal``: a JvpFn and no GradientFn, the JvpFn wrong (central differences catch it);
- ``fx_abs``: gradient uses ``fx_sign_internal``, which has no GradientFn
  (closure order 1);
- trait liars: ``fx_not_elementwise``, ``fx_ignores_out``, ``fx_wrong_shape``,
  ``fx_mutates``, ``fx_not_commutative``, ``fx_bad_view``, ``fx_bad_slot``.
"""

from __future__ import annotations

import types

import numpy as np

from frame_core import TensorType, ops
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.registry import PackRecord, Registry
from frame_core.ops_registry.schema import Example, NodeContext, OpSchema
from ..fakes import FakeEntryPoint

PACK = "kit_fixture"


def _same(ctx: NodeContext) -> list[TensorType]:
    return [ctx.input_types[0]]


def _float_same(ctx: NodeContext) -> list[TensorType]:
    (t,) = ctx.input_types
    if not t.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {t}")
    return [t]


def _pair_same(ctx: NodeContext) -> list[TensorType]:
    a, b = ctx.input_types
    if a != b:
        raise ctx.error(f"needs two inputs of one type, got {a} and {b}")
    return [a]


_UNARY = [Example(["f64[3, 4]"]), Example(["f32[5]"])]


def _unary(name: str, kernel, gradient=None, *, examples=_UNARY, traits=(), shape=_float_same, **kw) -> OpSchema:
    if gradient is None and not name.endswith("_internal"):
        kw.setdefault("not_differentiable", "a fixture for the kernel checks")
    return OpSchema(name, inputs=("x",), shape_infer=shape, kernels={"cpu": lambda ctx: kernel},
                    gradient=gradient, traits=traits, examples=examples, **kw)


# -- gradients right and wrong --------------------------------------------------------------------
FX_SIN = _unary("fx_sin", lambda x, out=None: np.sin(x, out),
                lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.cos(x)),  # gx = gy cos x
                traits=("elementwise", "accepts_out"))
FX_SIN_WRONG_SIGN = _unary("fx_sin_wrong_sign", np.sin,
                           lambda ctx: ctx.grad_graph(lambda x, y, gy: -(gy * ops.cos(x))))  # wrong: -gy cos x
# wrong: forgets gy (right only for an all-ones upstream gradient, which the random loss weights rule out)
FX_SIN_IGNORES_GY = _unary("fx_sin_ignores_gy", np.sin, lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.cos(x)))


def _cube_grad_shape(ctx: NodeContext) -> list[TensorType]:
    return _pair_same(ctx)


def _cube_grad_op(name: str, factor: float) -> OpSchema:
    # name(x, gy) = 3 x^2 gy; its gradient: g_x = 6 x gy ggx (factor 6 is right), g_gy = 3 x^2 ggx
    return OpSchema(
        name, inputs=("x", "gy"), shape_infer=_cube_grad_shape,
        kernels={"cpu": lambda ctx: lambda x, gy: x.dtype.type(3) * x * x * gy},
        gradient=lambda ctx: ctx.grad_graph(lambda x, gy, g, ggx: [x * gy * ggx * factor, ops.square(x) * ggx * 3.0]),
        examples=[Example(["f64[4]", "f64[4]"])],
    )


FX_CUBE_GRAD = _cube_grad_op("fx_cube_grad_internal", 6.0)
FX_CUBE_GRAD_BAD = _cube_grad_op("fx_cube_grad_bad_internal", 3.0)  # wrong: half of 6 x gy ggx
FX_CUBE = _unary("fx_cube", lambda x: x * x * x,
                 lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.fx_cube_grad_internal(x, gy)))
FX_CUBE_BAD2 = _unary("fx_cube_bad2", lambda x: x * x * x,
                      lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.fx_cube_grad_bad_internal(x, gy)))


def _scale_grad_kernel(ctx: NodeContext):
    half = ctx.input_types[0].dtype.itemsize == 2
    return lambda gy: gy.copy() if half else gy * gy.dtype.type(2)  # wrong in half precision: factor 2 dropped


FX_SCALE_GRAD = OpSchema("fx_scale_grad_internal", inputs=("gy",), shape_infer=_float_same,
                         kernels={"cpu": _scale_grad_kernel},
                         gradient=lambda ctx: ctx.grad_graph(lambda gy, g, ggx: ops.fx_scale_grad_internal(ggx)),
                         examples=[Example(["f32[3]"])])
FX_SCALE = _unary("fx_scale", lambda x: x * x.dtype.type(2),
                  lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.fx_scale_grad_internal(gy)))


def _no_half(ctx: NodeContext) -> list[TensorType]:
    (t,) = ctx.input_types
    if not t.dtype.is_float or t.dtype.itemsize == 2:
        raise ctx.error(f"takes float32 or float64, got {t}")
    return [t]


FX_F32_ONLY = _unary("fx_f32_only", lambda x: x * x.dtype.type(3),
                     lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * 3.0), shape=_no_half)


# right GradientFns, wrong declared JvpFns: the kit's dot-product test and its JvpFn-against-derived check catch them
FX_SIN_BAD_JVP = _unary("fx_sin_bad_jvp", np.sin, lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.cos(x)),
                        jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * ops.sin(x)))  # wrong: sin, not cos
FX_MUL_BAD_JVP = OpSchema("fx_mul_bad_jvp", inputs=("a", "b"), shape_infer=_pair_same,
                          kernels={"cpu": lambda ctx: np.multiply},
                          gradient=lambda ctx: ctx.grad_graph(lambda a, b, y, gy: [gy * b, gy * a]),
                          jvp=lambda ctx: ctx.jvp_graph(lambda a, b, y, da, db: da * b),  # wrong: forgets a * db
                          examples=[Example(["f64[2, 3]", "f64[2, 3]"])])

# forward-only internal ops (a JvpFn, no GradientFn): only central differences can check the JvpFn
FX_TANH_FWD = _unary("fx_tanh_fwd_internal", np.tanh,
                     jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * (1.0 - y * y)))
FX_TANH_FWD_BAD = _unary("fx_tanh_fwd_bad_internal", np.tanh,
                         jvp=lambda ctx: ctx.jvp_graph(lambda x, y, dx: dx * (1.0 - x * x)))  # wrong: x, not y


def _step(x: np.ndarray) -> np.ndarray:
    return (x > 0).astype(x.dtype)


_STEP_EXAMPLES = [Example(["f64[6]"], min_abs=0.05)]
# forward: step; GradientFn: d/dx tanh(x) = 1 - tanh(x)^2; surrogate: tanh (right) or the logistic function (wrong)
FX_STEP = _unary("fx_step", _step, lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * (1.0 - ops.square(ops.tanh(x)))),
                 examples=_STEP_EXAMPLES, gradient_surrogate=np.tanh)
FX_STEP_BAD_SURROGATE = _unary("fx_step_bad_surrogate", _step,
                               lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * (1.0 - ops.square(ops.tanh(x)))),
                               examples=_STEP_EXAMPLES, gradient_surrogate=lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)))

FX_SIGN = _unary("fx_sign_internal", np.sign)  # no GradientFn: breaks the closure of fx_abs at order 1
FX_ABS = _unary("fx_abs", np.abs, lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.fx_sign_internal(x) * gy),
                examples=[Example(["f64[5]"], min_abs=0.1)])

# -- right traits ------------------------------------------------------------------------------------
FX_ADD2 = OpSchema("fx_add2", inputs=("a", "b"), shape_infer=lambda ctx: [ctx.input_types[0].with_shape(
                       np.broadcast_shapes(*[t.shape for t in ctx.input_types]))],
                   kernels={"cpu": lambda ctx: np.add},
                   gradient=lambda ctx: ctx.grad_graph(lambda a, b, y, gy: [ops.reduce_to_shape_internal(gy, shape=a.shape),
                                                                         ops.reduce_to_shape_internal(gy, shape=b.shape)]),
                   traits=("elementwise", "broadcasting", "commutative", "accepts_out"),
                   examples=[Example(["f64[2, 3]", "f64[2, 3]"]), Example(["f32[2, 3]", "f32[3]"])])
FX_FLATTEN = _unary("fx_flatten", lambda x: x.reshape(-1),
                    lambda ctx: ctx.grad_graph(lambda x, y, gy: ops.reshape(gy, shape=x.shape)),
                    shape=lambda ctx: [ctx.input_types[0].with_shape((ctx.input_types[0].size,))], traits=("view",))

# -- trait liars (not differentiable: only their kernel checks matter) ---------------------------------
FX_NOT_ELEMENTWISE = _unary("fx_not_elementwise", lambda x: np.cumsum(x.reshape(-1)).reshape(x.shape),
                            traits=("elementwise",))
FX_IGNORES_OUT = _unary("fx_ignores_out", lambda x, out=None: x * x.dtype.type(2), traits=("accepts_out",))
FX_WRONG_SHAPE = _unary("fx_wrong_shape", lambda x: x.T.copy(), examples=[Example(["f64[2, 3]"])])
FX_MUTATES = _unary("fx_mutates", lambda x: np.negative(x, out=x))
FX_NOT_COMMUTATIVE = OpSchema("fx_not_commutative", inputs=("a", "b"), shape_infer=_pair_same,
                              kernels={"cpu": lambda ctx: np.subtract}, traits=("commutative",),
                              not_differentiable="a fixture", examples=[Example(["f64[4]", "f64[4]"])])
FX_BAD_VIEW = OpSchema("fx_bad_view", inputs=("a", "b"), shape_infer=_pair_same,
                       kernels={"cpu": lambda ctx: lambda a, b: b}, traits=("view",),
                       not_differentiable="a fixture", examples=[Example(["f64[4]", "f64[4]"])])


def _bad_slot_shape(ctx: NodeContext) -> list[TensorType]:
    return [ctx.input_types[0]]


# fx_bad_slot(x, n) = x * n with an integer n; its GradientFn puts ones (not zeros) in n's slot
FX_BAD_SLOT = OpSchema("fx_bad_slot", inputs=("x", "n"), shape_infer=_bad_slot_shape,
                       kernels={"cpu": lambda ctx: lambda x, n: x * n.astype(x.dtype)},
                       gradient=lambda ctx: ctx.grad_graph(lambda x, n, y, gy: [
                           gy * ops.fx_cast_internal(n), np.ones(n.shape, np.int64)]),
                       examples=[Example(["f64[3]", "i64[3]"], low=1, high=3)])
FX_CAST = OpSchema("fx_cast_internal", inputs=("n",), shape_infer=lambda ctx: [ctx.input_types[0].with_dtype("f64")],
                   kernels={"cpu": lambda ctx: lambda n: n.astype(np.float64)},
                   examples=[Example(["i64[3]"])])

SCHEMAS = [FX_SIN, FX_SIN_WRONG_SIGN, FX_SIN_IGNORES_GY, FX_SIN_BAD_JVP, FX_MUL_BAD_JVP, FX_TANH_FWD,
           FX_TANH_FWD_BAD, FX_CUBE, FX_CUBE_GRAD, FX_CUBE_BAD2, FX_CUBE_GRAD_BAD, FX_SCALE, FX_SCALE_GRAD,
           FX_F32_ONLY, FX_STEP, FX_STEP_BAD_SURROGATE, FX_SIGN, FX_ABS, FX_ADD2, FX_FLATTEN,
           FX_NOT_ELEMENTWISE, FX_IGNORES_OUT, FX_WRONG_SHAPE, FX_MUTATES, FX_NOT_COMMUTATIVE, FX_BAD_VIEW,
           FX_CAST]

#: Fixture ops whose every conformance case must pass.
RIGHT_OPS = ["fx_sin", "fx_tanh_fwd_internal", "fx_cube", "fx_cube_grad_internal", "fx_f32_only", "fx_step", "fx_add2", "fx_flatten"]


def _plugin_module() -> types.ModuleType:
    module = types.ModuleType("kit_fixture_plugin")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops():
        return SCHEMAS

    module.frame_register_ops = frame_register_ops
    return module


# fx_side_effect: has_side_effect *and* a GradientFn; the loader refuses that, so it is put in the registry by hand
FX_SIDE_EFFECT = _unary("fx_side_effect", lambda x: x.copy(), lambda ctx: ctx.grad_graph(lambda x, y, gy: gy),
                        traits=("has_side_effect",))


def load_kit_registry() -> Registry:
    """Core + frame-ops-basic + the fixture pack (through the loader), a pack that fails to import,
    and ``kit_side_effect`` and ``kit_bad_slot`` (one op each that the loader would refuse, added by hand)."""
    import frame_ops_basic.plugin

    entry_points = [
        FakeEntryPoint("ops_basic", frame_ops_basic.plugin, "frame-ops-basic"),
        FakeEntryPoint(PACK, _plugin_module(), "kit-fixture-pack"),
        FakeEntryPoint("kit_broken", None, "kit-broken-pack", error=ImportError("No module named 'kit_broken'")),
    ]
    reg = load_registry(entry_points, environ={}, strict=False)
    FX_SIDE_EFFECT.pack = "kit_side_effect"
    reg.schemas[FX_SIDE_EFFECT.name] = FX_SIDE_EFFECT
    reg.packs["kit_side_effect"] = PackRecord("kit_side_effect", "kit-side-effect", "1.0", "loaded",
                                              ops=[FX_SIDE_EFFECT.name])
    FX_BAD_SLOT.pack = PACK  # the kit still reports it per case, as it would for a pack that skipped the loader
    reg.schemas[FX_BAD_SLOT.name] = FX_BAD_SLOT
    reg.packs[PACK].ops.append(FX_BAD_SLOT.name)
    return reg
