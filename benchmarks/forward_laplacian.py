"""One-pass differential operators: a Poisson residual and its parameter gradient, and the seed's PINN u'' step,
frame against hand-written numpy, jax.jit and torch.func (each when installed), float32.

Poisson: u(x) = MLP(x) (width 128, depth 4, tanh) at 1024 collocation points in d = 2, 8, 32 dimensions; a
step computes the residual Laplacian(u) - f, the loss mean(residual^2) and its gradient for every parameter.

* frame one-pass: ``build_laplacian_graph`` (value, gradient and Laplacian in one forward pass), the loss
  appended, ``build_backward_graph`` for the parameters; one compiled executable.
* jax.jit, two formulations, the faster reported as "jax": ``trace(hessian(u))`` per point (vmap), and a loop
  of ``jvp(grad(u))`` over the d unit vectors (vmap over them); ``value_and_grad`` over the parameters.
* folx (when installed, ``pip install folx``): ``folx.forward_laplacian`` per point (vmap), jitted with
  ``value_and_grad``: the same one-pass method in JAX.
* torch.func: ``vmap(hessian(u))`` traced, ``torch.func.grad`` over the parameters (eager: no compile).
* numpy: the forward-Laplacian recurrences and their reverse pass written out by hand (the reference).

PINN: the seed's 1-D network (tests/autodiff/test_pinn.py, 256 points, 64 hidden), the loss
mean((u'' - f)^2) + 10 mean(u(xb)^2) and its parameter gradient: frame's Taylor pass
(``build_taylor_graph``) against jax.jit of jvp-of-jvp and of grad-of-grad (the faster reported), and
torch.func's jvp-of-jvp; every step returns the loss and the parameter gradients only.

Prints medians of interleaved rounds and the ratio to jax, and the compile times (frame: graph transforms +
compile; jax: the first call's trace, lowering and compile).

    python benchmarks/forward_laplacian.py [--dims 2 8 32] [--points 1024] [--width 128] [--depth 4]
                                          [--rounds 15] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _env import describe_environment

import numpy as np

import frame_core as fc
from frame_core import ops


def mlp(x, *params):
    h = x
    for w, b in zip(params[:-1:2], params[1:-1:2]):
        h = ops.tanh(h @ w + b)
    return h @ params[-1]


def init_params(d: int, width: int, depth: int, rng: np.random.Generator) -> list[np.ndarray]:
    sizes = [d] + [width] * depth
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
                   (0.1 * rng.standard_normal(b)).astype(np.float32)]
    return params + [(rng.standard_normal((width, 1)) / np.sqrt(width)).astype(np.float32)]


def frame_poisson(n: int, d: int, params: list[np.ndarray]) -> tuple[fc.Executable, float, int]:
    t0 = time.perf_counter()
    types = [f"f32[{n}, {d}]", f"f32[{n}, 1]", *(f"f32{list(p.shape)}" for p in params)]
    forward = fc.trace(lambda x, f, *p: mlp(x, *p), *types)
    lap = fc.build_laplacian_graph(forward, 0, batch_dims=1)
    with_loss, k = fc.extend_graph(lap, lambda *v: ops.mean(ops.square(v[len(types) + 2] - v[1])))
    training = fc.build_backward_graph(with_loss, k, list(range(2, len(types))))
    exe = fc.compile(training, cache=False)
    return exe, time.perf_counter() - t0, k


def numpy_poisson(x, f, *params):
    """The forward-Laplacian recurrences by hand (each layer's gradient carried as [d, n, h]; the first layer's is
    w1's rows, broadcast over points), then the reverse pass of the loss through them."""
    ws, bs, w_out = params[:-1:2], params[1:-1:2], params[-1]
    saved = []
    h, g, lap = x, None, None
    for layer, (w, b) in enumerate(zip(ws, bs)):
        gz = w[:, None, :] if layer == 0 else g @ w           # [d, 1 or n, h]
        lz = None if lap is None else lap @ w
        y = np.tanh(h @ w + b)
        s = 1 - y * y                                         # tanh'
        s2 = -2 * y * s                                       # tanh''
        q = np.sum(gz * gz, axis=0)                           # sum_k (d_k z)^2
        saved.append((h, g, lap, y, s, s2, gz, lz, q))
        h, g, lap = y, s * gz, (s2 * q if lz is None else s * lz + s2 * q)
    r = lap @ w_out - f
    loss = np.mean(r * r)
    r_bar = 2 * r / r.size
    w_out_bar = lap.T @ r_bar
    lap_bar, g_bar, y_bar = r_bar @ w_out.T, None, None
    grads = []
    for layer in range(len(ws) - 1, -1, -1):
        h_in, g_in, lap_in, y, s, s2, gz, lz, q = saved[layer]
        w = ws[layer]
        s_bar = (0 if lz is None else lap_bar * lz) + (0 if g_bar is None else np.sum(g_bar * gz, axis=0))
        s2_bar = lap_bar * q
        q_bar = lap_bar * s2
        gz_bar = 2 * gz * q_bar + (0 if g_bar is None else g_bar * s)
        lz_bar = lap_bar * s
        s_bar = s_bar + s2_bar * (-2 * y)
        yb = s2_bar * (-2 * s) + s_bar * (-2 * y) + (0 if y_bar is None else y_bar)
        z_bar = yb * s
        w_bar = h_in.T @ z_bar
        if layer == 0:
            w_bar = w_bar + np.sum(gz_bar, axis=1)
        else:
            w_bar = w_bar + np.einsum("kna,knh->ah", g_in, gz_bar)
            if lap_in is not None:
                w_bar = w_bar + lap_in.T @ lz_bar
        grads.append((w_bar, np.sum(z_bar, axis=0)))
        y_bar, g_bar, lap_bar = z_bar @ w.T, gz_bar @ w.T, lz_bar @ w.T
    flat = []
    for w_bar, b_bar in reversed(grads):
        flat += [w_bar, b_bar]
    return loss, flat + [w_out_bar]


def jax_poisson(d: int):
    import jax
    import jax.numpy as jnp

    def u(params, point):
        h = point[None, :]
        for w, b in zip(params[:-1:2], params[1:-1:2]):
            h = jnp.tanh(h @ w + b)
        return (h @ params[-1])[0, 0]

    def lap_hessian(params, x):
        return jax.vmap(lambda p: jnp.trace(jax.hessian(u, argnums=1)(params, p)))(x)

    def lap_jvp_grad(params, x):
        eye = jnp.eye(x.shape[1], dtype=x.dtype)

        def one(p):
            grad = jax.grad(u, argnums=1)
            return jnp.sum(jax.vmap(lambda e: jax.jvp(lambda q: grad(params, q), (p,), (e,))[1] @ e)(eye))
        return jax.vmap(one)(x)

    def step(lap_fn):
        def loss(params, x, f):
            r = lap_fn(params, x)[:, None] - f
            return jnp.mean(r * r)
        return jax.jit(jax.value_and_grad(loss))
    variants = {"jax trace(hessian)": step(lap_hessian), "jax jvp(grad) loop": step(lap_jvp_grad)}
    try:  # folx (pip install folx): the forward Laplacian of Li et al. for JAX, the same method as frame's
        import folx
    except ImportError:
        return variants

    def lap_folx(params, x):
        return jax.vmap(lambda p: folx.forward_laplacian(lambda q: u(params, q))(p).laplacian)(x)
    variants["folx forward_laplacian"] = step(lap_folx)
    return variants


def torch_poisson():
    try:
        import torch
        from torch.func import functional_call, grad, hessian, vmap  # noqa: F401
    except ImportError:
        return None
    torch.set_num_threads(1)

    def u(params, point):
        h = point[None, :]
        for w, b in zip(params[:-1:2], params[1:-1:2]):
            h = torch.tanh(h @ w + b)
        return (h @ params[-1])[0, 0]

    def loss(params, x, f):
        lap = vmap(lambda p: torch.trace(hessian(u, argnums=1)(params, p)))(x)
        r = lap[:, None] - f
        return torch.mean(r * r)

    def step(params, x, f):
        return torch.func.grad_and_value(loss)(params, x, f)
    return step


# -- the seed's PINN ----------------------------------------------------------------------------------------
def pinn_net(z, w1, b1, w2, b2, w3):
    return ops.tanh(ops.tanh(z @ w1 + b1) @ w2 + b2) @ w3


def frame_pinn(n: int, h: int) -> tuple[fc.Executable, float, int]:
    t0 = time.perf_counter()
    types = [f"f32[{n}, 1]", "f32[2, 1]", f"f32[{n}, 1]", f"f32[1, {h}]", f"f32[{h}]", f"f32[{h}, {h}]", f"f32[{h}]",
             f"f32[{h}, 1]"]
    forward = fc.trace(lambda x, xb, f, *p: [pinn_net(x, *p), pinn_net(xb, *p)], *types)
    taylor = fc.build_taylor_graph(forward, 0, order=2, outputs=[0])

    def physics(*v):
        f, ub, d2u = v[2], v[len(types) + 1], v[-1]
        return ops.mse_loss(d2u, f) + ops.mean(ops.square(ub)) * 10.0
    with_loss, k = fc.extend_graph(taylor, physics)
    training = only_outputs(fc.build_backward_graph(with_loss, k, list(range(3, 8))), [k, *range(-5, 0)])
    exe = fc.compile(training, cache=False)
    return exe, time.perf_counter() - t0, 0


def only_outputs(graph: fc.Graph, positions: list[int]) -> fc.Graph:
    """``graph`` returning only the outputs at ``positions`` (the step's loss and gradients, what jax's
    ``value_and_grad`` returns): u', u(x) and the other outputs of the transforms are then not computed."""
    names = graph.output_names
    positions = [p % len(graph.outputs) for p in positions]
    for i in range(len(graph.outputs)):
        graph.name_output(i, None)
    graph.outputs[:] = [graph.outputs[p] for p in positions]
    for j, p in enumerate(positions):
        graph.name_output(j, names[p])
    return graph


def jax_pinn():
    import jax
    import jax.numpy as jnp

    def u(params, x):  # x: [n, 1]
        w1, b1, w2, b2, w3 = params
        return jnp.tanh(jnp.tanh(x @ w1 + b1) @ w2 + b2) @ w3

    def d2_jvp(params, x):  # jvp of jvp along the all-ones direction (points are independent)
        ones = jnp.ones_like(x)
        first = lambda z: jax.jvp(lambda q: u(params, q), (z,), (ones,))[1]  # noqa: E731
        return jax.jvp(first, (x,), (ones,))[1]

    def d2_grad(params, x):  # grad of grad of the summed output, per point
        du = jax.grad(lambda z: jnp.sum(u(params, z)))
        return jax.grad(lambda z: jnp.sum(du(z)))(x)

    def step(d2):
        def loss(params, x, xb, f):
            return jnp.mean((d2(params, x) - f) ** 2) + 10.0 * jnp.mean(u(params, xb) ** 2)
        return jax.jit(jax.value_and_grad(loss))
    return {"jax jvp-of-jvp": step(d2_jvp), "jax grad-of-grad": step(d2_grad)}


def torch_pinn():
    """torch.func: jvp of jvp along the all-ones direction, ``grad_and_value`` over the parameters (eager)."""
    try:
        import torch
        from torch.func import grad_and_value, jvp
    except ImportError:
        return None
    torch.set_num_threads(1)

    def u(params, x):
        w1, b1, w2, b2, w3 = params
        return torch.tanh(torch.tanh(x @ w1 + b1) @ w2 + b2) @ w3

    def loss(params, x, xb, f):
        ones = torch.ones_like(x)
        d2 = jvp(lambda z: jvp(lambda q: u(params, q), (z,), (ones,))[1], (x,), (ones,))[1]
        return torch.mean((d2 - f) ** 2) + 10.0 * torch.mean(u(params, xb) ** 2)
    return grad_and_value(loss)


# -- timing -----------------------------------------------------------------------------------------------
def _settle() -> None:
    """With frame-native installed, wait until its tiered kernels are compiled (timings are of the steady state)."""
    try:
        import frame_native
    except ImportError:
        return
    frame_native.wait(120)


def interleaved(variants: dict, rounds: int, batch_seconds: float = 0.05) -> dict[str, float]:
    calls = {}
    for name, fn in variants.items():
        for _ in range(3):
            fn()
    _settle()
    for name, fn in variants.items():
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(batch_seconds / max(time.perf_counter() - t0, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            k = calls[name]
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            samples[name].append((time.perf_counter() - t0) / k)
    return {name: statistics.median(s) for name, s in samples.items()}


def _first_call(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _block(result):
    import jax

    return jax.block_until_ready(result)


def poisson(d: int, args: argparse.Namespace, have_jax: bool) -> None:
    n, width, depth = args.points, args.width, args.depth
    rng = np.random.default_rng(d)
    params = init_params(d, width, depth, rng)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    f = np.sum(np.sin(np.pi * x), axis=1, keepdims=True).astype(np.float32)
    exe, frame_compile, k = frame_poisson(n, d, params)
    inputs = [x, f, *params]
    outs = exe.run(inputs)
    loss_np, grads_np = numpy_poisson(x.astype(np.float64), f.astype(np.float64), *(p.astype(np.float64) for p in params))
    np.testing.assert_allclose(outs[k], loss_np, rtol=2e-3)
    for a, b in zip(outs[-len(params):], grads_np):
        np.testing.assert_allclose(a, b, rtol=5e-2, atol=2e-3 * float(np.max(np.abs(b))))
    variants = {"frame one-pass": lambda: exe.run(inputs)}
    compile_times = {"frame one-pass": frame_compile}
    if have_jax:
        import jax.numpy as jnp

        jparams = [jnp.asarray(p) for p in params]
        jx, jf = jnp.asarray(x), jnp.asarray(f)
        for name, step in jax_poisson(d).items():
            if name == "jax jvp(grad) loop" and args.skip_jvp_loop:
                continue
            compile_times[name] = _first_call(lambda: _block(step(jparams, jx, jf)))
            value, grads = step(jparams, jx, jf)
            np.testing.assert_allclose(float(value), outs[k], rtol=2e-3)
            for a, b in zip(outs[-len(params):], grads):
                np.testing.assert_allclose(a, np.asarray(b), rtol=5e-2, atol=2e-3 * float(np.max(np.abs(a))))
            variants[name] = (lambda s: lambda: _block(s(jparams, jx, jf)))(step)
    torch_step = torch_poisson() if not args.no_torch else None
    if torch_step is not None:
        import torch

        tparams = [torch.from_numpy(p.copy()) for p in params]
        tx, tf = torch.from_numpy(x), torch.from_numpy(f)
        compile_times["torch.func"] = _first_call(lambda: torch_step(tparams, tx, tf))
        variants["torch.func"] = lambda: torch_step(tparams, tx, tf)
    variants["numpy (hand-written)"] = lambda: numpy_poisson(x, f, *params)
    times = interleaved(variants, args.rounds)
    jax_names = [name for name in times if name.startswith("jax")]  # folx is reported, not the base
    base_name = min(jax_names, key=times.get) if jax_names else "numpy (hand-written)"
    base = times[base_name]
    print(f"\nPoisson d={d}: {n} points, MLP width {width} depth {depth} tanh, float32 (residual + parameter "
          f"gradient); median of {args.rounds} interleaved rounds; ratios to {base_name}")
    for name, t in times.items():
        extra = f"   compile {compile_times[name]:.2f} s" if name in compile_times else ""
        print(f"  {name:22} {t * 1e3:9.2f} ms  {t / base:6.2f}x{extra}")


def pinn(args: argparse.Namespace, have_jax: bool) -> None:
    n, h = 256, 64
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, n, dtype=np.float32).reshape(n, 1)
    xb = np.array([[0.0], [1.0]], np.float32)
    f = (-np.pi**2 * np.sin(np.pi * x)).astype(np.float32)
    params = [rng.standard_normal((1, h)).astype(np.float32), np.zeros(h, np.float32),
              (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32), np.zeros(h, np.float32),
              (rng.standard_normal((h, 1)) / np.sqrt(h)).astype(np.float32)]
    exe, frame_compile, k = frame_pinn(n, h)
    inputs = [x, xb, f, *params]
    outs = exe.run(inputs)
    variants = {"frame Taylor pass": lambda: exe.run(inputs)}
    compile_times = {"frame Taylor pass": frame_compile}
    if have_jax:
        import jax.numpy as jnp

        jp = [jnp.asarray(p) for p in params]
        jx, jxb, jf = jnp.asarray(x), jnp.asarray(xb), jnp.asarray(f)
        for name, step in jax_pinn().items():
            compile_times[name] = _first_call(lambda: _block(step(jp, jx, jxb, jf)))
            value, grads = step(jp, jx, jxb, jf)
            np.testing.assert_allclose(float(value), outs[k], rtol=2e-3)
            for a, b in zip(outs[-5:], grads):
                np.testing.assert_allclose(a, np.asarray(b), rtol=5e-2, atol=2e-3 * float(np.max(np.abs(a))))
            variants[name] = (lambda s: lambda: _block(s(jp, jx, jxb, jf)))(step)
    torch_step = torch_pinn() if not args.no_torch else None
    if torch_step is not None:
        import torch

        tp = [torch.from_numpy(p.copy()) for p in params]
        tx, txb, tf = (torch.from_numpy(a) for a in (x, xb, f))
        compile_times["torch.func jvp-of-jvp"] = _first_call(lambda: torch_step(tp, tx, txb, tf))
        grads, value = torch_step(tp, tx, txb, tf)
        np.testing.assert_allclose(float(value), outs[k], rtol=2e-3)
        variants["torch.func jvp-of-jvp"] = lambda: torch_step(tp, tx, txb, tf)
    times = interleaved(variants, args.rounds * 2)
    jax_names = [name for name in times if name.startswith("jax")]
    base_name = min(jax_names, key=times.get) if jax_names else "frame Taylor pass"
    base = times[base_name]
    print(f"\nseed PINN u'' step: {n} points, {h} hidden, float32; median of {args.rounds * 2} rounds; ratios to "
          f"{base_name}")
    for name, t in times.items():
        extra = f"   compile {compile_times[name]:.2f} s" if name in compile_times else ""
        print(f"  {name:22} {t * 1e6:9.1f} us  {t / base:6.2f}x{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="*", default=[2, 8, 32])
    parser.add_argument("--points", type=int, default=1024)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--blas-threads", type=int, default=None, help="(read by _env before numpy loads)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--skip-jvp-loop", action="store_true")
    parser.add_argument("--no-pinn", action="store_true")
    args = parser.parse_args()
    if args.blas_threads is not None:  # XLA's CPU client: one intra-op thread, like the BLAS
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    print(describe_environment())
    try:
        import jax

        have_jax = True
        print(f"jax {jax.__version__}")
    except ImportError:
        have_jax = False
        print("jax not installed: frame and numpy only (pip install jax jaxlib)")
    for d in args.dims:
        poisson(d, args, have_jax)
    if not args.no_pinn:
        pinn(args, have_jax)


if __name__ == "__main__":
    main()
