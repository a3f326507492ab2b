"""The transforms: rfft/irfft (real <-> half spectrum) and fft/ifft (complex <-> complex), all packed.

Scales follow numpy's ``norm``: a forward transform multiplies by s(norm), an
inverse one by t(norm), with s = 1, 1/sqrt(n), 1/n and t = 1/n, 1/sqrt(n), 1
for "backward", "ortho", "forward"; s(a) = t(swap(a)) where swap exchanges
"backward" and "forward". Write theta = 2 pi j k / n, m = n // 2 + 1.

Adjoints (derived here; the packed gradient of a complex value is
(dL/dRe, dL/dIm), which is torch's ``view_as_real`` of its complex gradient):

* rfft: X_k = s sum_j x_j e^{-i theta}. Then dL/dx_j = s sum_{k<m} Re(G_k e^{+i theta})
  (Im G_0 and Im G_{n/2} meet sin 0 = 0 and drop out). irfft(Y) with scale
  t = s counts every inner bin twice (its Hermitian mirror) and reads only
  Re Y at DC and Nyquist, so halving the inner bins reproduces the sum:
  ``gx = irfft(G * W, n, norm=swap(a))``, W = 1/2 on inner bins, 1 at DC and
  (for even n) Nyquist.
* irfft: y_j = t (Re Z_0 + 2 sum_inner Re(Z_k e^{+i theta}) + Re Z_{n/2} (-1)^j).
  Then dL/dRe Z_k = c_k t sum_j gy_j cos theta and dL/dIm Z_k = -c_k t sum_j
  gy_j sin theta, which is c_k times rfft(gy) with scale s(swap(a)) = t:
  ``gZ = rfft(gy, norm=swap(a)) * C``, C = 2 on inner bins, 1 at DC and
  Nyquist. Im Z_0 and Im Z_{n/2} never reach the output and their gradient is
  exactly 0: rfft of the real gy puts exact zeros there.
* fft: Y = s F z is complex-linear; its adjoint is s F^H = s n F^{-1}, the
  inverse transform with scale s = t(swap(a)): ``gz = ifft(G, norm=swap(a))``;
  likewise ``ifft``'s is ``fft(G, norm=swap(a))``.

Each adjoint is one of these four ops times a real constant per bin, and
W * C = 1, so the adjoint of an adjoint is the op again: every gradient is
closed, to any order (ARCH-068).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, ops

from . import _backends, config
from ._packed import SWAP, as_complex, as_packed, complex_axis, compute_dtype, norm_of, require_float, require_packed

_AXIS = AttrSpec("int", -1, "the transformed axis (negative counts from the end; the packed axis does not count)")
_NORM = AttrSpec("str", "backward", "'backward' (default), 'ortho' or 'forward', as in numpy.fft")


def bin_weights(n: int, trailing: int, inverse: bool, dtype: np.dtype) -> np.ndarray:
    """W (``inverse=False``: 1/2 on inner bins) or C (``inverse=True``: 2 on inner bins), 1 at DC and Nyquist.

    A real multiplier per bin, shaped ``[m] + [1] * trailing + [1]`` to scale re and im alike along the
    transformed axis of a packed half spectrum with ``trailing`` complex axes after it. (The Im parts of
    the DC and Nyquist bins need no mask: irfft never reads them, and rfft of a real signal makes them
    exactly 0.) Being a real per-bin multiplier, it folds into neighbouring spectral multipliers
    (``fold_spectral_multipliers``).
    """
    m = n // 2 + 1
    w = np.full(m, 2.0 if inverse else 0.5)
    w[[0, n // 2] if n % 2 == 0 else [0]] = 1.0  # bins a real signal's spectrum holds once: DC, Nyquist
    return w.reshape((m,) + (1,) * trailing + (1,)).astype(dtype)


def _points(ctx: NodeContext, t: TensorType, axis: int) -> int:
    """The length of the transformed ``axis`` of ``t``; a transform of no points is refused (scipy would fail)."""
    if t.shape[axis] == 0:
        raise ctx.error(f"got an empty axis {axis} in {t}; expected at least one point to transform")
    return t.shape[axis]


# rfft(x; axis, norm) -> X [..., n//2 + 1, ..., 2]        gx = irfft(gX * W, n, norm=swap(norm))
def _rfft_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    require_float(ctx, x, 0)
    if x.rank == 0:
        raise ctx.error(f"needs at least one axis to transform, got {x}")
    axis = complex_axis(ctx, x.rank)
    norm_of(ctx)
    n = _points(ctx, x, axis)
    return [x.with_shape(x.shape[:axis] + (n // 2 + 1,) + x.shape[axis + 1:] + (2,))]


def _library() -> _backends.Backend:
    """The FFT library to call now (``config.BACKEND``, read at every call)."""
    return _backends.get(config.backend_name())


def _rfft_kernel(ctx: NodeContext) -> Callable:
    (x_t,) = ctx.input_types
    axis, norm = complex_axis(ctx, x_t.rank), norm_of(ctx)
    real, dtype, size = compute_dtype(x_t), x_t.dtype.np, x_t.size

    def kernel(x: np.ndarray) -> np.ndarray:
        spectrum = _library().rfft(x.astype(real, copy=False), axis, norm, config.workers_for(size))
        return as_packed(spectrum, dtype)
    return kernel


def _rfft_gradient(ctx: NodeContext):
    (x,) = ctx.input_types
    axis, norm = complex_axis(ctx, x.rank), norm_of(ctx)
    # n and W read from x's shape (rfft_grad_like_internal), compiled as irfft(complex_mul(gy, W), n)
    return ctx.grad_graph(lambda x_, y, gy: ops.rfft_grad_like_internal(gy, x_, axis=axis, norm=norm))


# rfft_grad_like_internal(gy, x; axis, norm) = irfft(gy * W, n=x.shape[axis], norm=swap(norm)), x read for its
# shape only. Its adjoint is rfft(ggx, norm) * C * W = rfft(ggx, norm) (W C = 1, each a power of two)
def _rfft_grad_parts(ctx: NodeContext) -> tuple[int, int, str]:
    gy, x = ctx.input_types
    require_float(ctx, x, 1)
    axis, norm = complex_axis(ctx, x.rank), norm_of(ctx)
    n = _points(ctx, x, axis)
    want = x.shape[:axis] + (n // 2 + 1,) + x.shape[axis + 1:] + (2,)
    if gy.shape != want or gy.dtype is not x.dtype:
        raise ctx.error(f"gy must be the packed half spectrum {x.dtype.name}{list(want)} of x {x}, got {gy}")
    return axis, n, norm


def _rfft_grad_decomposition(ctx: NodeContext):
    axis, n, norm = _rfft_grad_parts(ctx)
    w = bin_weights(n, ctx.input_types[1].rank - 1 - axis, inverse=False, dtype=ctx.input_types[1].dtype.np)
    return ctx.decomposition_graph(lambda gy, x: ops.irfft(ops.complex_mul(gy, w), n=n, axis=axis, norm=SWAP[norm]))


def _by_decomposition(ctx: NodeContext) -> Callable:
    """The DecomposeFn compiled, as the kernel (every compile lowers the op to that graph first: bind_shapes)."""
    from frame_core import compile

    assert ctx.schema.decomposition is not None  # only ops declaring a DecomposeFn use this kernel
    run = compile(ctx.schema.decomposition(ctx)).run
    return lambda *arrays: run(list(arrays))[0]


RFFT_GRAD_LIKE = OpSchema(
    "rfft_grad_like_internal",
    inputs=("gy", "x"),
    attrs={"axis": _AXIS, "norm": _NORM},
    shape_infer=lambda ctx: [_rfft_grad_parts(ctx) and ctx.input_types[1]],
    kernels={"cpu": _by_decomposition},
    gradient=lambda ctx: ctx.grad_graph(lambda gy, x, gx, ggx: [
        ops.rfft(ggx, axis=_rfft_grad_parts(ctx)[0], norm=ctx.attrs["norm"]), None]),
    decomposition=_rfft_grad_decomposition,
    nondiff_inputs=(1,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="rfft's gradient: irfft(gy * W, n, norm=swap(norm)) with n = x's length along axis and W its bin weights "
        "(x read for its shape only).",
    examples=[Example(["f32[3, 5, 2]", "f32[3, 8]"], {"axis": 1}),
              Example(["f64[2, 4, 2]", "f64[2, 7]"], {"axis": 1, "norm": "ortho"}),
              Example(["f32[4, 3, 2]", "f32[6, 3]"], {"axis": 0, "norm": "forward"})],
)


def _linear_jvp(ctx: NodeContext):
    """A linear op's JVP is the op itself on the tangent (forward mode, docs/forward-mode.md)."""
    return ctx.jvp_graph(lambda x, y, dx: getattr(ops, ctx.schema.name)(dx, **ctx.attrs))


RFFT = OpSchema(
    "rfft",
    inputs=("x",),
    attrs={"axis": _AXIS, "norm": _NORM},
    shape_infer=_rfft_shape,
    kernels={"cpu": _rfft_kernel},
    gradient=_rfft_gradient,
    jvp=_linear_jvp,
    traits=("any_shape_gradient",),
    doc="The half spectrum (bins 0..n//2) of real x along `axis`, packed: [..., n//2 + 1, ..., 2] (re, im). "
        "numpy.fft.rfft's values and norms.",
    examples=[Example(["f32[3, 8]"]), Example(["f64[2, 7]"], {"norm": "ortho"}, note="odd n"),
              Example(["f32[6, 3]"], {"axis": 0, "norm": "forward"}), Example(["f64[1]"], note="n = 1")],
)


# irfft(Z; n, axis, norm) -> y [..., n, ...]              gZ = rfft(gy, norm=swap(norm)) * C
def _irfft_n(ctx: NodeContext) -> tuple[int, int]:
    (z,) = ctx.input_types
    require_packed(ctx, z, 0)
    axis = complex_axis(ctx, z.rank - 1)
    norm_of(ctx)
    m, n = _points(ctx, z, axis), ctx.attrs["n"]
    if n is None:
        if m < 2:
            raise ctx.error(f"cannot infer n: got {m} bin on axis {axis} of {z}; expected an explicit n (1 for one bin)")
        n = 2 * (m - 1)
    if n < 1 or n // 2 + 1 != m:
        valid = " or ".join(str(k) for k in (2 * m - 2, 2 * m - 1) if k >= 1)
        raise ctx.error(f"got n={n} for {m} bin{'s' if m != 1 else ''} on axis {axis} of {z}; a real signal of "
                        f"length n has n//2 + 1 bins, so expected n = {valid} (slice or pad the spectrum to change "
                        "the length, or leave n out, which follows the bins: n = 2 (bins - 1))")
    return axis, n


def _irfft_shape(ctx: NodeContext) -> list[TensorType]:
    (z,) = ctx.input_types
    axis, n = _irfft_n(ctx)
    return [z.with_shape(z.shape[:axis] + (n,) + z.shape[axis + 1:-1])]


def _irfft_kernel(ctx: NodeContext) -> Callable:
    (z_t,) = ctx.input_types
    axis, n = _irfft_n(ctx)
    norm = norm_of(ctx)
    real, dtype, size = compute_dtype(z_t), z_t.dtype.np, z_t.size

    def kernel(z: np.ndarray) -> np.ndarray:
        y = _library().irfft(as_complex(z, real), n, axis, norm, config.workers_for(size))
        return y if y.dtype == dtype else y.astype(dtype)
    return kernel


def _irfft_gradient(ctx: NodeContext):
    axis, _ = _irfft_n(ctx)
    norm = norm_of(ctx)
    # C read from gy's length (irfft_grad_like_internal), compiled as complex_mul(rfft(gy), C): a training graph
    # re-specialised at another bin count weights that count's bins
    return ctx.grad_graph(lambda z_, y, gy: ops.irfft_grad_like_internal(gy, z_, axis=axis, norm=norm))


# irfft_grad_like_internal(gy, z; axis, norm) = rfft(gy, norm=swap(norm)) * C with n = gy.shape[axis], z read for
# its shape only. Its adjoint is irfft(ggz * C * W, n, norm) = irfft(ggz, n, norm) (W C = 1), with n read from gy
# too (irfft_like_internal): an odd n cannot be inferred from the bins, and an n written down holds the traced size
def _signal_and_spectrum(ctx: NodeContext, signal: int, spectrum: int) -> tuple[int, int, str]:
    """(axis, n, norm) for a real signal (input ``signal``, its length n) and its packed half spectrum."""
    y, z = ctx.input_types[signal], ctx.input_types[spectrum]
    require_packed(ctx, z, spectrum)
    require_float(ctx, y, signal)
    axis, norm = complex_axis(ctx, z.rank - 1), norm_of(ctx)
    name = ctx.schema.inputs[signal]
    if y.rank != z.rank - 1:
        raise ctx.error(f"{name} must be irfft's real output for the packed z {z} (rank {z.rank - 1}), got {y}")
    n = _points(ctx, y, axis)
    want = y.shape[:axis] + (n // 2 + 1,) + y.shape[axis + 1:] + (2,)
    if z.shape != want or y.dtype is not z.dtype:
        raise ctx.error(f"z must be the packed half spectrum {y.dtype.name}{list(want)} of a signal like {name} "
                        f"{y}, got {z}")
    return axis, n, norm


def _irfft_grad_parts(ctx: NodeContext) -> tuple[int, int, str]:
    return _signal_and_spectrum(ctx, 0, 1)


def _irfft_grad_decomposition(ctx: NodeContext):
    axis, n, norm = _irfft_grad_parts(ctx)
    c = bin_weights(n, ctx.input_types[0].rank - 1 - axis, inverse=True, dtype=ctx.input_types[0].dtype.np)
    return ctx.decomposition_graph(lambda gy, z: ops.complex_mul(ops.rfft(gy, axis=axis, norm=SWAP[norm]), c))


def _irfft_grad_gradient(ctx: NodeContext):
    axis, _, norm = _irfft_grad_parts(ctx)
    return ctx.grad_graph(lambda gy, z, gz, ggz: [ops.irfft_like_internal(ggz, gy, axis=axis, norm=norm), None])


IRFFT_GRAD_LIKE = OpSchema(
    "irfft_grad_like_internal",
    inputs=("gy", "z"),
    attrs={"axis": _AXIS, "norm": _NORM},
    shape_infer=lambda ctx: [_irfft_grad_parts(ctx) and ctx.input_types[1]],
    kernels={"cpu": _by_decomposition},
    gradient=_irfft_grad_gradient,
    decomposition=_irfft_grad_decomposition,
    nondiff_inputs=(1,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="irfft's gradient: rfft(gy, norm=swap(norm)) * C with C its bin weights for n = gy's length along axis "
        "(z read for its shape only).",
    examples=[Example(["f32[3, 8]", "f32[3, 5, 2]"], {"axis": 1}),
              Example(["f64[2, 7]", "f64[2, 4, 2]"], {"axis": 1, "norm": "ortho"}),
              Example(["f32[6, 3]", "f32[4, 3, 2]"], {"axis": 0, "norm": "forward"}),
              Example(["f64[1]", "f64[1, 2]"], {"axis": 0}, note="n = 1")],
)


IRFFT = OpSchema(
    "irfft",
    inputs=("z",),
    attrs={"n": AttrSpec("int", None, "the output length; n//2 + 1 must equal the bins on `axis` (default "
                                      "2 * (bins - 1), numpy's)"),
           "axis": _AXIS, "norm": _NORM},
    shape_infer=_irfft_shape,
    kernels={"cpu": _irfft_kernel},
    gradient=_irfft_gradient,
    jvp=_linear_jvp,
    traits=("any_shape_gradient",),
    doc="The real signal of length n whose half spectrum is the packed z along `axis` (numpy.fft.irfft; "
        "Im of the DC and Nyquist bins is ignored). n must match the bins: no silent crop or pad.",
    examples=[Example(["f32[3, 5, 2]"], {"n": 8}), Example(["f64[2, 4, 2]"], {"n": 7, "norm": "ortho"}, note="odd n"),
              Example(["f32[4, 3, 2]"], {"n": 6, "axis": 0, "norm": "forward"}),
              Example(["f64[1, 2]"], {"n": 1}, note="n = 1")],
)


# irfft_like_internal(z, like; axis, norm) = irfft(z, n=like.shape[axis], norm), like read for its shape only: the
# gradient of irfft_grad_like_internal. Its gradient is irfft's, irfft_grad_like_internal(gy, z), which reads n
# from gy: closed, and every n follows the operand's length
def _irfft_like_decomposition(ctx: NodeContext):
    axis, n, norm = _signal_and_spectrum(ctx, 1, 0)
    return ctx.decomposition_graph(lambda z, like: ops.irfft(z, n=n, axis=axis, norm=norm))


IRFFT_LIKE = OpSchema(
    "irfft_like_internal",
    inputs=("z", "like"),
    attrs={"axis": _AXIS, "norm": _NORM},
    shape_infer=lambda ctx: [_signal_and_spectrum(ctx, 1, 0) and ctx.input_types[1]],
    kernels={"cpu": _by_decomposition},
    gradient=lambda ctx: ctx.grad_graph(lambda z, like, y, gy: [
        ops.irfft_grad_like_internal(gy, z, axis=_signal_and_spectrum(ctx, 1, 0)[0], norm=ctx.attrs["norm"]), None]),
    decomposition=_irfft_like_decomposition,
    nondiff_inputs=(1,),
    traits=("any_shape_gradient", "shape_operand"),
    doc="irfft(z, n, norm) with n = like's length along axis (like read for its shape only): the gradient of "
        "irfft_grad_like_internal, whose n an odd length cannot be inferred from the bins.",
    examples=[Example(["f32[3, 5, 2]", "f32[3, 8]"]), Example(["f64[2, 4, 2]", "f64[2, 7]"], {"norm": "ortho"}),
              Example(["f32[4, 3, 2]", "f32[6, 3]"], {"axis": 0, "norm": "forward"}),
              Example(["f64[1, 2]", "f64[1]"], note="n = 1")],
)


# fft(z; axis, norm) -> Z (packed, same shape)            gz = ifft(gZ, norm=swap(norm))
# ifft(Z; axis, norm) -> z                                gZ = fft(gz, norm=swap(norm))
def _c2c_shape(ctx: NodeContext) -> list[TensorType]:
    (z,) = ctx.input_types
    require_packed(ctx, z, 0)
    _points(ctx, z, complex_axis(ctx, z.rank - 1))
    norm_of(ctx)
    return [z]


def _c2c_kernel(forward: bool) -> Callable[[NodeContext], Callable]:
    def build(ctx: NodeContext) -> Callable:
        (z_t,) = ctx.input_types
        axis, norm = complex_axis(ctx, z_t.rank - 1), norm_of(ctx)
        real, dtype, size = compute_dtype(z_t), z_t.dtype.np, z_t.size

        def kernel(z: np.ndarray) -> np.ndarray:
            return as_packed(_library().fft(as_complex(z, real), axis, norm, config.workers_for(size), forward), dtype)
        return kernel
    return build


def _c2c_gradient(inverse_op: str) -> Callable:
    def gradient(ctx: NodeContext):
        (z,) = ctx.input_types
        axis, norm = complex_axis(ctx, z.rank - 1), norm_of(ctx)
        return ctx.grad_graph(lambda z_, y, gy: getattr(ops, inverse_op)(gy, axis=axis, norm=SWAP[norm]))
    return gradient


_C2C_EXAMPLES = [Example(["f32[3, 8, 2]"]), Example(["f64[5, 2]"], {"norm": "ortho"}, note="odd n"),
                 Example(["f32[4, 3, 2]"], {"axis": 0, "norm": "forward"})]

FFT = OpSchema(
    "fft",
    inputs=("z",),
    attrs={"axis": _AXIS, "norm": _NORM},
    shape_infer=_c2c_shape,
    kernels={"cpu": _c2c_kernel(forward=True)},
    gradient=_c2c_gradient("ifft"),
    jvp=_linear_jvp,
    traits=("any_shape_gradient",),
    doc="The discrete Fourier transform of packed complex z along `axis` (numpy.fft.fft), packed.",
    examples=_C2C_EXAMPLES,
)

IFFT = OpSchema(
    "ifft",
    inputs=("z",),
    attrs={"axis": _AXIS, "norm": _NORM},
    shape_infer=_c2c_shape,
    kernels={"cpu": _c2c_kernel(forward=False)},
    gradient=_c2c_gradient("fft"),
    jvp=_linear_jvp,
    traits=("any_shape_gradient",),
    doc="The inverse discrete Fourier transform of packed complex z along `axis` (numpy.fft.ifft), packed.",
    examples=_C2C_EXAMPLES,
)

SCHEMAS = [RFFT, RFFT_GRAD_LIKE, IRFFT, IRFFT_GRAD_LIKE, IRFFT_LIKE, FFT, IFFT]
