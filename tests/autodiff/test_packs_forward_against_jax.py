"""Forward mode and Hessian-vector products of the sequence, nn and FFT packs' ops against JAX, float64, to 1e-10.

For each op: the JVP (``build_jvp_graph``) against ``jax.jvp`` with respect to every floating input, the second
directional derivative (forward over forward) against jax's jvp of jvp, and the Hessian-vector product (``hvp``,
forward over reverse) of ``sum(sin(op(...)))`` against ``jax.hessian`` contracted with the same vector. The JAX
functions are written from the ops' documented semantics (torch's layouts) with ``jax.lax`` primitives:
``conv_general_dilated``, ``reduce_window``, ``scan``, ``take``, ``.at[].add``. Skipped without jax; the kit's
dot-product test checks the same rules without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
lax = jax.lax

TOL = 1e-10


def _packed(z):
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1)


def _complex(p):
    return p[..., 0] + 1j * p[..., 1]


# -- JAX references, from each op's documented semantics ------------------------------------------------------
def j_conv(x, w, stride=1, padding=(0, 0), dilation=1, groups=1):
    nd = x.ndim - 2
    spec = ("NCH", "OIH", "NCH") if nd == 1 else ("NCHW", "OIHW", "NCHW")
    pads = [tuple(padding)] if nd == 1 else [tuple(p) for p in padding]
    return lax.conv_general_dilated(x, w, (stride,) * nd if np.isscalar(stride) else stride, pads,
                                    rhs_dilation=(dilation,) * nd, dimension_numbers=spec,
                                    feature_group_count=groups)


def j_conv_transpose(x, w, stride=1, padding=0, output_padding=0, dilation=1):
    """torch's conv_transpose (groups 1): the input dilated by the stride, correlated with the flipped kernel."""
    nd = x.ndim - 2
    k = w.shape[2:]
    wt = jnp.flip(jnp.swapaxes(w, 0, 1), axis=tuple(range(2, 2 + nd)))  # [C_out, C_in, K...]
    pads = [(dilation * (kk - 1) - padding, dilation * (kk - 1) - padding + output_padding) for kk in k]
    spec = ("NCH", "OIH", "NCH") if nd == 1 else ("NCHW", "OIHW", "NCHW")
    return lax.conv_general_dilated(x, wt, (1,) * nd, pads, lhs_dilation=(stride,) * nd,
                                    rhs_dilation=(dilation,) * nd, dimension_numbers=spec)


def j_pool(x, kernel, stride, padding, kind):
    nd = len(kernel)
    lead = x.ndim - nd
    window, strides = (1,) * lead + kernel, (1,) * lead + stride
    pads = [(0, 0)] * lead + list(padding)
    if kind == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, pads)
    return lax.reduce_window(x, 0.0, lax.add, window, strides, pads) / np.prod(kernel)


def j_linear_scan(a, b, axis, reverse=False):
    a, b = jnp.moveaxis(a, axis, 0), jnp.moveaxis(b, axis, 0)

    def step(h, ab):
        h = ab[0] * h + ab[1]
        return h, h
    _, hs = lax.scan(step, jnp.zeros_like(b[0]), (a, b), reverse=reverse)
    return jnp.moveaxis(hs, 0, axis)


def j_selective_scan(u, delta, A, B, C, D, z, delta_bias):
    """Mamba's selective_scan_ref for real A, variable B and C, with D, z, delta_bias and softplus."""
    delta = jax.nn.softplus(delta + delta_bias[:, None])
    da = jnp.exp(jnp.einsum("bdl,dn->bdln", delta, A))
    dbu = jnp.einsum("bdl,bnl,bdl->bdln", delta, B, u)

    def step(h, t):
        a_t, b_t, c_t = t
        h = a_t * h + b_t
        return h, jnp.einsum("bdn,bn->bd", h, c_t)
    time_major = (jnp.moveaxis(da, 2, 0), jnp.moveaxis(dbu, 2, 0), jnp.moveaxis(jnp.asarray(C), 2, 0))
    _, ys = lax.scan(step, jnp.zeros(u.shape[:2] + A.shape[1:]), time_major)
    y = jnp.moveaxis(ys, 0, 2) + u * D[:, None]
    return y * jax.nn.silu(z)


def j_layer_norm(x, w, b, eps=1e-5):
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    mu = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=axes, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * w + b


def j_group_norm(x, w, b, groups, eps=1e-5):
    shape = x.shape
    g = x.reshape(shape[0], groups, -1)
    mu = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.mean((g - mu) ** 2, axis=-1, keepdims=True)
    y = ((g - mu) / jnp.sqrt(var + eps)).reshape(shape)
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    return y * w.reshape(bshape) + b.reshape(bshape)


def j_batch_norm(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    mu = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=axes, keepdims=True)
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mu) / jnp.sqrt(var + eps) * w.reshape(bshape) + b.reshape(bshape)


RNG = np.random.default_rng(17)
IDX = np.array([3, 0, 4, 3, 1])                    # a repeated index: gathers and scatters that accumulate
IDX2 = np.array([[1, 0, 2], [2, 2, 0]], np.int32)
SS = [(2, 3, 5), (2, 3, 5), (3, 4), (2, 4, 5), (2, 4, 5), (3,), (2, 3, 5), (3,)]  # selective_scan: all inputs


def _f(*shape, low=-1.0, high=1.0):
    return ("f", shape, low, high)


# (name, frame function, jax function, inputs: ("f", shape, low, high) or an integer array, hvp input position)
CASES = [
    ("conv1d", lambda x, w: ops.conv1d(x, w), j_conv, [_f(2, 3, 7), _f(4, 3, 3)], 0),
    ("conv1d_strided_grouped", lambda x, w: ops.conv1d(x, w, stride=2, padding=[2, 1], groups=2, dilation=2),
     lambda x, w: j_conv(x, w, 2, (2, 1), 2, 2), [_f(2, 4, 9), _f(6, 2, 3)], 1),
    ("conv1d_causal", lambda x, w: ops.conv1d(x, w, padding="causal", dilation=3),
     lambda x, w: j_conv(x, w, 1, (6, 0), 3), [_f(1, 2, 8), _f(3, 2, 3)], 0),
    ("gather", lambda t, i: ops.gather(t, i), lambda t, i: jnp.take(t, i, axis=0), [_f(5, 3), IDX], 0),
    ("gather_axis1", lambda t, i: ops.gather(t, i, axis=1), lambda t, i: jnp.take(t, i, axis=1),
     [_f(2, 4, 3), IDX2], 0),
    ("scatter_add", lambda u, i: ops.scatter_add(u, i, size=6),
     lambda u, i: jnp.zeros((6, 3)).at[i].add(u), [_f(5, 3), IDX], 0),
    ("cumsum_axis0", lambda x: ops.cumsum(x, axis=0), lambda x: jnp.cumsum(x, axis=0), [_f(4, 3)], 0),
    ("max_pool1d", lambda x: ops.max_pool1d(x, kernel_size=3, stride=2, padding=[1, 1]),
     lambda x: j_pool(x, (3,), (2,), [(1, 1)], "max"), [_f(2, 3, 8)], 0),
    ("avg_pool1d", lambda x: ops.avg_pool1d(x, kernel_size=3, stride=2, padding=[1, 1]),
     lambda x: j_pool(x, (3,), (2,), [(1, 1)], "avg"), [_f(2, 3, 8)], 0),
    ("linear_scan", lambda a, b: ops.linear_scan(a, b, axis=1), lambda a, b: j_linear_scan(a, b, 1),
     [_f(2, 5, 3, low=0.3, high=1.1), _f(2, 5, 3)], 0),
    ("linear_scan_reverse", lambda a, b: ops.linear_scan(a, b, axis=0, reverse=True),
     lambda a, b: j_linear_scan(a, b, 0, reverse=True), [_f(6, 2, low=-1.1, high=1.1), _f(6, 2)], 0),
    ("selective_scan", lambda *v: ops.selective_scan(*v, delta_softplus=True), j_selective_scan,
     [_f(*SS[0]), _f(*SS[1], low=-0.5, high=0.5), _f(*SS[2], low=-1.5, high=-0.2), *(_f(*s) for s in SS[3:])], 1),
    ("conv2d", lambda x, w: ops.conv2d(x, w, stride=[2, 1], padding=[1, 1, 0, 1]),
     lambda x, w: j_conv(x, w, (2, 1), [(1, 1), (0, 1)]), [_f(2, 3, 5, 4), _f(4, 3, 3, 2)], 0),
    ("conv_transpose1d", lambda x, w: ops.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1),
     lambda x, w: j_conv_transpose(x, w, 2, 1, 1), [_f(2, 4, 5), _f(4, 3, 3)], 0),
    ("conv_transpose2d", lambda x, w: ops.conv_transpose2d(x, w, stride=2),
     lambda x, w: j_conv_transpose(x, w, 2), [_f(1, 2, 3, 3), _f(2, 3, 2, 2)], 1),
    ("max_pool2d", lambda x: ops.max_pool2d(x, kernel_size=2), lambda x: j_pool(x, (2, 2), (2, 2), [(0, 0)] * 2, "max"),
     [_f(2, 2, 4, 6)], 0),
    ("avg_pool2d", lambda x: ops.avg_pool2d(x, kernel_size=[2, 3], stride=1),
     lambda x: j_pool(x, (2, 3), (1, 1), [(0, 0)] * 2, "avg"), [_f(1, 2, 4, 5)], 0),
    ("adaptive_avg_pool2d", lambda x: ops.adaptive_avg_pool2d(x, output_size=[2, 3]),
     lambda x: j_pool(x, (2, 2), (2, 2), [(0, 0)] * 2, "avg"), [_f(2, 3, 4, 6)], 0),
    ("embedding", lambda t, i: ops.embedding(t, i), lambda t, i: jnp.take(t, i, axis=0), [_f(6, 4), IDX2], 0),
    ("layer_norm", lambda x, w, b: ops.layer_norm(x, w, b), j_layer_norm, [_f(3, 4, 5), _f(4, 5), _f(4, 5)], 0),
    ("group_norm", lambda x, w, b: ops.group_norm(x, w, b, num_groups=2),
     lambda x, w, b: j_group_norm(x, w, b, 2), [_f(2, 4, 3, 2), _f(4), _f(4)], 0),
    ("batch_norm", lambda x, w, b, m, v: ops.batch_norm(x, w, b, m, v)[0], lambda x, w, b, m, v: j_batch_norm(x, w, b),
     [_f(4, 3, 5), _f(3), _f(3), _f(3), _f(3, low=0.5, high=1.5)], 0),
    ("complex_matmul", ops.complex_matmul, lambda a, b: _packed(_complex(a) @ _complex(b)),
     [_f(3, 4, 2), _f(4, 5, 2)], 0),
    ("rfft_axis0", lambda x: ops.rfft(x, axis=0), lambda x: _packed(jnp.fft.rfft(x, axis=0)), [_f(8, 3)], 0),
]


def _inputs(case):
    arrays = []
    for spec in case[3]:
        if isinstance(spec, tuple):
            _, shape, low, high = spec
            arrays.append(RNG.uniform(low, high, shape))
        else:
            arrays.append(spec)
    return arrays


def _type(a):
    return f"{'f64' if a.dtype.kind == 'f' else a.dtype.name.replace('int', 'i')}{list(a.shape)}"


def _jax_reference(jax_fn, arrays, wrt, position):
    """One jitted function (one compile per case): the primal, the JVP along ``ts``, its derivative along ``ss``
    (jvp of jvp), and the Hessian of ``sum(sin(op))`` with respect to input ``position`` (``jax.hessian``)."""
    def floats_to_output(*floats):
        full = list(arrays)
        for i, v in zip(wrt, floats):
            full[i] = v
        return jax_fn(*full)

    def loss(p):
        full = list(arrays)
        full[position] = p
        return jnp.sum(jnp.sin(jax_fn(*full)))

    def reference(primals, ts, ss):
        primal, tangent = jax.jvp(floats_to_output, primals, ts)
        second = jax.jvp(lambda *p: jax.jvp(floats_to_output, p, ts)[1], primals, ss)[1]
        return primal, tangent, second, jax.hessian(loss)(primals[wrt.index(position)])
    return jax.jit(reference)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_jvp_second_directional_derivative_and_hvp_match_jax(case):
    _, frame_fn, jax_fn, _, position = case
    xs = _inputs(case)
    wrt = [i for i, a in enumerate(xs) if a.dtype.kind == "f"]
    assert position in wrt
    types = [_type(a) for a in xs]
    g = fc.trace(frame_fn, *types)
    ts = tuple(RNG.standard_normal(xs[i].shape) for i in wrt)
    ss = tuple(RNG.standard_normal(xs[i].shape) for i in wrt)
    v = RNG.standard_normal(xs[position].shape)
    primal, tangent, second, hess = _jax_reference(jax_fn, xs, wrt, position)(tuple(xs[i] for i in wrt), ts, ss)

    got = fc.compile(fc.build_jvp_graph(g, wrt), cache=False).run([*xs, *ts])
    np.testing.assert_allclose(got[0], np.asarray(primal), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got[1], np.asarray(tangent), rtol=TOL, atol=TOL)
    # forward over forward: the tangent's derivative along a second direction
    got2 = fc.compile(fc.build_jvp_graph(fc.build_jvp_graph(g, wrt), wrt), cache=False).run([*xs, *ts, *ss])[-1]
    np.testing.assert_allclose(got2, np.asarray(second), rtol=1e-9, atol=1e-9)
    # forward over reverse: the Hessian-vector product of sum(sin(op)) against jax's Hessian times v
    scalar = fc.trace(lambda *a: ops.sum(ops.sin(frame_fn(*a))), *types)
    hv = fc.compile(fc.hvp(scalar, position), cache=False).run([*xs, v])[-1]
    np.testing.assert_allclose(hv, np.tensordot(np.asarray(hess), v, axes=v.ndim), rtol=TOL, atol=TOL)
