"""Forward mode, Hessians and the one-pass Laplacian against JAX in float64 (skipped without jax; the same
properties are checked without it in test_forward_mode.py, test_laplacian.py and the conformance kit)."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

RNG = np.random.default_rng(3)
TOL = 1e-10


def _run(graph, *arrays):
    return fc.compile(graph, cache=False).run(list(arrays))


def _packed(z):  # the FFT pack's packed complex layout: [..., 2] (re, im)
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1)


def _complex(p):
    return p[..., 0] + 1j * p[..., 1]


# (name, frame function, jax function, input shapes, low, high)
CASES = [
    ("add", lambda a, b: a + b, lambda a, b: a + b, [(3, 4), (4,)], -1, 1),
    ("sub", lambda a, b: a - b, lambda a, b: a - b, [(3, 4), (3, 1)], -1, 1),
    ("mul", lambda a, b: a * b, lambda a, b: a * b, [(3, 4), (3, 4)], -1, 1),
    ("div", lambda a, b: a / b, lambda a, b: a / b, [(3, 4), (4,)], 0.5, 2),
    ("neg", lambda x: -x, lambda x: -x, [(5,)], -1, 1),
    ("square", ops.square, jnp.square, [(5,)], -1, 1),
    ("exp", ops.exp, jnp.exp, [(2, 3)], -1, 1),
    ("log", ops.log, jnp.log, [(2, 3)], 0.5, 2),
    ("sqrt", ops.sqrt, jnp.sqrt, [(2, 3)], 0.5, 2),
    ("tanh", ops.tanh, jnp.tanh, [(2, 3)], -2, 2),
    ("sigmoid", ops.sigmoid, jax.nn.sigmoid, [(2, 3)], -2, 2),
    ("sin", ops.sin, jnp.sin, [(4,)], -2, 2),
    ("cos", ops.cos, jnp.cos, [(4,)], -2, 2),
    ("abs", ops.abs, jnp.abs, [(4,)], 0.2, 1),
    ("relu", ops.relu, jax.nn.relu, [(6,)], 0.1, 1),
    ("pow", ops.pow, jnp.power, [(3,), (3,)], 0.5, 2),
    ("maximum", ops.maximum, jnp.maximum, [(5,), (5,)], -1, 1),
    ("matmul", ops.matmul, jnp.matmul, [(2, 3, 4), (4, 5)], -1, 1),
    ("matvec", ops.matmul, jnp.matmul, [(3, 4), (4,)], -1, 1),
    ("sum", lambda x: ops.sum(x, axes=[1]), lambda x: jnp.sum(x, axis=1), [(3, 4)], -1, 1),
    ("mean", lambda x: ops.mean(x), jnp.mean, [(3, 4)], -1, 1),
    ("reshape", lambda x: ops.reshape(x, shape=[4, 3]), lambda x: jnp.reshape(x, (4, 3)), [(3, 4)], -1, 1),
    ("transpose", lambda x: ops.transpose(x, perm=[1, 0, 2]), lambda x: jnp.transpose(x, (1, 0, 2)),
     [(2, 3, 4)], -1, 1),
    ("slice", lambda x: x[1:, ::2], lambda x: x[1:, ::2], [(3, 5)], -1, 1),
    ("concat", lambda a, b: ops.concat(a, b, axis=1), lambda a, b: jnp.concatenate([a, b], axis=1),
     [(2, 3), (2, 2)], -1, 1),
    ("stack", lambda a, b: ops.stack(a, b, axis=0), lambda a, b: jnp.stack([a, b]), [(2, 3), (2, 3)], -1, 1),
    ("softmax", lambda x: ops.softmax(x, axis=-1), lambda x: jax.nn.softmax(x, axis=-1), [(3, 4)], -2, 2),
    ("log_softmax", lambda x: ops.log_softmax(x, axis=0), lambda x: jax.nn.log_softmax(x, axis=0), [(3, 4)], -2, 2),
    ("logsumexp", lambda x: ops.logsumexp(x, axes=[1]), lambda x: jax.nn.logsumexp(x, axis=1), [(3, 4)], -2, 2),
    ("where", lambda a, b: ops.where(ops.greater(a, b), a * b, a - b), lambda a, b: jnp.where(a > b, a * b, a - b),
     [(6,), (6,)], -1, 1),
    ("clip", lambda x: ops.clip(x, min=-0.5, max=0.5), lambda x: jnp.clip(x, -0.5, 0.5), [(8,)], -1, 1),
    ("mse_loss", ops.mse_loss, lambda a, b: jnp.mean((a - b) ** 2), [(3, 4), (3, 4)], -1, 1),
    ("softplus", ops.softplus, jax.nn.softplus, [(5,)], -2, 2),
    ("elu", ops.elu, jax.nn.elu, [(5,)], 0.1, 2),
    ("gelu", ops.gelu, lambda x: jax.nn.gelu(x, approximate=False), [(5,)], -2, 2),
    ("gelu_tanh", lambda x: ops.gelu(x, approximate="tanh"), lambda x: jax.nn.gelu(x, approximate=True), [(5,)], -2, 2),
    ("silu", ops.silu, jax.nn.silu, [(5,)], -3, 3),
    ("erf", ops.erf, jax.scipy.special.erf, [(5,)], -2, 2),
    ("log1p", ops.log1p, jnp.log1p, [(5,)], -0.5, 2),
    ("expm1", ops.expm1, jnp.expm1, [(5,)], -2, 2),
    ("logaddexp", ops.logaddexp, jnp.logaddexp, [(5,), (5,)], -2, 2),
    ("atan", ops.atan, jnp.arctan, [(5,)], -3, 3),
    ("asin", ops.asin, jnp.arcsin, [(5,)], -0.9, 0.9),
    ("acos", ops.acos, jnp.arccos, [(5,)], -0.9, 0.9),
    ("atan2", ops.atan2, jnp.arctan2, [(2, 5), (5,)], 0.2, 2),
    ("cumsum", lambda x: ops.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1), [(2, 5)], -1, 1),
    ("rfft", lambda x: ops.rfft(x), lambda x: _packed(jnp.fft.rfft(x)), [(3, 8)], -1, 1),
    ("irfft", lambda z: ops.irfft(z, n=8), lambda z: jnp.fft.irfft(_complex(z), n=8), [(3, 5, 2)], -1, 1),
    ("fft", lambda z: ops.fft(z, axis=0), lambda z: _packed(jnp.fft.fft(_complex(z), axis=0)), [(6, 3, 2)], -1, 1),
    ("ifft", lambda z: ops.ifft(z), lambda z: _packed(jnp.fft.ifft(_complex(z))), [(3, 6, 2)], -1, 1),
    ("complex_mul", ops.complex_mul, lambda a, b: _packed(_complex(a) * _complex(b)), [(3, 4, 2), (4, 2)], -1, 1),
    ("conj", ops.conj, lambda z: _packed(jnp.conj(_complex(z))), [(3, 2)], -1, 1),
]


def _sample(shapes, low, high):
    return [RNG.uniform(low, high, s) for s in shapes]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_jvp_matches_jax(case):
    _, frame_fn, jax_fn, shapes, low, high = case
    g = fc.trace(frame_fn, *(f"f64{list(s)}" for s in shapes))
    xs = _sample(shapes, low, high)
    ts = [RNG.standard_normal(s) for s in shapes]
    got = _run(fc.build_jvp_graph(g), *xs, *ts)
    k = len(xs)
    primal, tangent = jax.jit(lambda *a: jax.jvp(jax_fn, a[:k], a[k:]))(*xs, *ts)
    np.testing.assert_allclose(got[0], np.asarray(primal), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got[1], np.asarray(tangent), rtol=TOL, atol=TOL)
    # second order: the tangent of the tangent (forward over forward) against jax's
    g2 = fc.build_jvp_graph(fc.build_jvp_graph(g), list(range(len(shapes))))
    ss = [RNG.standard_normal(s) for s in shapes]
    got2 = _run(g2, *xs, *ts, *ss)[-1]

    def second(*a):
        def first(*x):
            return jax.jvp(jax_fn, x, a[k:2 * k])[1]
        return jax.jvp(first, a[:k], a[2 * k:])[1]
    want2 = jax.jit(second)(*xs, *ts, *ss)
    np.testing.assert_allclose(got2, np.asarray(want2), rtol=1e-9, atol=1e-9)


def _random_composition(seed):
    """A random chain of unary and binary ops over two inputs, and the same in jax."""
    rng = np.random.default_rng(seed)
    unary = [(ops.tanh, jnp.tanh), (ops.sin, jnp.sin), (lambda v: v * v, lambda v: v * v),
             (lambda v: ops.exp(v * 0.3), lambda v: jnp.exp(v * 0.3)), (ops.sigmoid, jax.nn.sigmoid),
             (lambda v: ops.softmax(v, axis=-1), lambda v: jax.nn.softmax(v, axis=-1))]
    binary = [(lambda a, b: a * b, lambda a, b: a * b), (lambda a, b: a + b, lambda a, b: a + b),
              (lambda a, b: a / (1.5 + b * b), lambda a, b: a / (1.5 + b * b)),
              (lambda a, b: a @ ops.transpose(b) @ a, lambda a, b: a @ b.T @ a)]
    steps = [(int(rng.integers(2)), int(rng.integers(len(unary))), int(rng.integers(len(binary))))
             for _ in range(6)]

    def build(lib):
        def f(x, y):
            a, b = x, y
            for kind, u, bi in steps:
                if kind == 0:
                    a = unary[u][lib](a)
                else:
                    a, b = binary[bi][lib](a, b), a
            return a
        return f
    return build(0), build(1)


@pytest.mark.parametrize("seed", range(4))
def test_random_compositions_jvp_and_hessian_match_jax(seed):
    frame_fn, jax_fn = _random_composition(seed)
    g = fc.trace(frame_fn, "f64[3, 3]", "f64[3, 3]")
    x, y, dx, dy = (RNG.uniform(-1, 1, (3, 3)) for _ in range(4))
    got = _run(fc.build_jvp_graph(g), x, y, dx, dy)[-1]
    want = jax.jit(lambda *a: jax.jvp(jax_fn, a[:2], a[2:])[1])(x, y, dx, dy)
    np.testing.assert_allclose(got, np.asarray(want), rtol=TOL, atol=TOL)
    scalar = fc.trace(lambda x, y: ops.sum(frame_fn(x, y)), "f64[3, 3]", "f64[3, 3]")
    hess = _run(fc.hessian(scalar, "x"), x, y)[-1]
    want_h = jax.jit(jax.hessian(lambda a, b: jnp.sum(jax_fn(a, b))))(x, y)
    np.testing.assert_allclose(hess, np.asarray(want_h), rtol=TOL, atol=TOL)
    lap = _run(fc.build_laplacian_graph(scalar, "x"), x, y)[-1]
    np.testing.assert_allclose(lap, np.trace(np.asarray(want_h).reshape(9, 9)), rtol=TOL, atol=TOL)


def test_control_flow_jvp_matches_jax():
    def f(s, xs, w):
        carry, ys = ops.scan(lambda c, x: (ops.tanh(c * w + x), c * x), s, xs)
        out = ops.if_else(ops.greater(ops.sum(carry), 0.0), lambda c: ops.sin(c) * w, lambda c: c * c, carry)
        final = ops.loop(lambda i, c: (True, c * 0.9 + ops.sin(c) * w), 3, True, out)
        return [final, ys]

    def jf(s, xs, w):
        def body(c, x):
            return jnp.tanh(c * w + x), c * x
        carry, ys = jax.lax.scan(body, s, xs)
        out = jax.lax.cond(jnp.sum(carry) > 0, lambda c: jnp.sin(c) * w, lambda c: c * c, carry)
        final = jax.lax.fori_loop(0, 3, lambda i, c: c * 0.9 + jnp.sin(c) * w, out)
        return final, ys
    g = fc.trace(f, "f64[2]", "f64[4, 2]", "f64[2]")
    xs = [RNG.standard_normal(2), RNG.standard_normal((4, 2)), RNG.standard_normal(2)]
    ts = [RNG.standard_normal(a.shape) for a in xs]
    got = _run(fc.build_jvp_graph(g), *xs, *ts)
    primal, tangent = jax.jit(lambda *a: jax.jvp(jf, a[:3], a[3:]))(*xs, *ts)
    for a, b in zip(got[2:], tangent):
        np.testing.assert_allclose(a, np.asarray(b), rtol=TOL, atol=TOL)


def test_hvp_forward_over_reverse_matches_jax():
    def f(x, w):
        return ops.sum(ops.tanh(x @ w) ** 2.0 * ops.sin(w[0:1, :]))

    def jf(x, w):
        return jnp.sum(jnp.tanh(x @ w) ** 2 * jnp.sin(w[0:1, :]))
    g = fc.trace(f, "f64[3, 4]", "f64[4, 2]")
    x, w, v = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal((4, 2))
    got = _run(fc.hvp(g, "w"), x, w, v)[-1]
    want = jax.jit(lambda w_, v_: jax.jvp(jax.grad(lambda a: jf(x, a)), (w_,), (v_,))[1])(w, v)
    np.testing.assert_allclose(got, np.asarray(want), rtol=TOL, atol=TOL)


def test_poisson_laplacian_matches_jax_trace_of_hessian():
    d, n, width = 5, 6, 16
    sizes = [d, width, width, width]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [RNG.standard_normal((a, b)) / np.sqrt(a), 0.1 * RNG.standard_normal(b)]
    params.append(RNG.standard_normal((width, 1)) / np.sqrt(width))

    def net(lib, x, *p):
        tanh = ops.tanh if lib == "frame" else jnp.tanh
        h = x
        for w, b in zip(p[:-1:2], p[1:-1:2]):
            h = tanh(h @ w + b)
        return h @ p[-1]
    g = fc.trace(lambda x, *p: net("frame", x, *p), f"f64[{n}, {d}]", *(f"f64{list(p.shape)}" for p in params))
    x = RNG.uniform(-1, 1, (n, d))
    got = _run(fc.build_laplacian_graph(g, 0, batch_dims=1), x, *params)

    def u(point):
        return net("jax", point[None, :], *params)[0, 0]
    want = jax.jit(jax.vmap(lambda p: jnp.trace(jax.hessian(u)(p))))(x)
    np.testing.assert_allclose(got[-1][:, 0], np.asarray(want), rtol=TOL, atol=TOL)
    want_grad = jax.jit(jax.vmap(jax.grad(u)))(x)
    np.testing.assert_allclose(got[1][:, :, 0].T, np.asarray(want_grad), rtol=TOL, atol=TOL)
