"""One training step of a 1-D PINN whose loss uses u'': frame against hand-written numpy, jax.jit and torch.

The network is u(x) = tanh(tanh(x W1 + b1) W2 + b2) W3 with 64 hidden units, on
256 collocation points and 2 boundary points, float32. The loss is
mean((u'' - f)^2) + 10 mean(u(xb)^2), and a step computes it and its gradient
for the five parameters (every variant returns just those).

* frame Taylor: u'' by one univariate Taylor pass (``build_taylor_graph``,
  order 2), the parameter gradients by ``build_backward_graph``; one compiled
  executable. This is frame's formulation of the step.
* frame reverse^3: u'' by two applications of ``build_backward_graph`` (a
  full-ones contraction of du/dx in between), the parameter gradients by a
  third, as in ``tests/autodiff/test_pinn.py``.
* numpy: Taylor-mode forward (value, first and second derivative of every
  layer) and its reverse pass written out by hand, one array expression per
  line: what a careful person writes without a framework.
* jax.jit (when installed): jvp-of-jvp and grad-of-grad, the faster is the
  base of the "x jax" column; torch eager autograd (``create_graph=True``) and
  torch.func's jvp-of-jvp (when installed).

Prints medians of interleaved rounds (each round runs every variant for about
10 ms, in a shuffled order), the ratios to numpy and to the best jax, the compile times,
then the same in process CPU time (every thread of the process counts: jax's too), the
measure to quote when the shared machine is loaded;
``--profile`` adds the Taylor step's per-instruction profile
(``Executable.profile``) and the floating-point work of its matrix products.

Matrix products: Taylor mode needs 9 of the [n, h] x [h, h] size (a1, a1' and
a1'' times W2 forward; per product one gradient for each operand), reverse mode
applied three times 12 (the first derivative is a backward pass through the
second layer, a product with W2^T, and every use of W2 adds two products to
the parameter gradient), and jax's jit of jvp-of-jvp 12, of grad-of-grad 13
(counted in the optimised HLO). A [256, 64] x [64, 64] product runs at about
50-85 GFLOP/s on one core here, ~25-40 us.

    python benchmarks/pinn_step.py [--points 256] [--hidden 64] [--rounds 60] [--blas-threads 1] [--profile]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

# One thread for every framework, as the comparison asks: BLAS (numpy, frame) through _env, XLA's
# Eigen pool for jax, torch.set_num_threads below. Pass --blas-threads N to change it.
sys.argv += [] if any(a.startswith("--blas-threads") for a in sys.argv) else ["--blas-threads", "1"]
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

from _env import describe_environment  # noqa: E402 - BLAS settings before numpy loads

import numpy as np

import frame_core as fc
from frame_core import ops

BOUNDARY_WEIGHT = 10.0


def network(z, w1, b1, w2, b2, w3):
    return ops.tanh(ops.tanh(z @ w1 + b1) @ w2 + b2) @ w3


def frame_training_graph(n: int, h: int) -> tuple[fc.Graph, int]:
    types = [f"f32[{n}, 1]", "f32[2, 1]", f"f32[{n}, 1]", f"f32[1, {h}]", f"f32[{h}]", f"f32[{h}, {h}]", f"f32[{h}]",
             f"f32[{h}, 1]"]
    forward = fc.trace(lambda x, xb, f, *p: [ops.sum(network(x, *p)), network(xb, *p)], *types)
    first = fc.build_backward_graph(forward, 0, [0])                     # [sum u, u(xb), du/dx]
    contracted, k = fc.extend_graph(first, lambda *v: ops.sum(v[-1]))  # sum(du/dx)
    second = fc.build_backward_graph(contracted, k, [0])                # [..., d2u/dx2]

    def physics(*v):
        f, ub, d2u = v[2], v[len(types) + 1], v[-1]
        return ops.mse_loss(d2u, f) + ops.mean(ops.square(ub)) * BOUNDARY_WEIGHT
    with_loss, loss_index = fc.extend_graph(second, physics)
    return fc.build_backward_graph(with_loss, loss_index, list(range(3, 8))), loss_index


def frame_taylor_graph(n: int, h: int) -> fc.Graph:
    """The step by frame's Taylor pass, returning [loss, 5 gradients]."""
    from forward_laplacian import only_outputs

    types = [f"f32[{n}, 1]", "f32[2, 1]", f"f32[{n}, 1]", f"f32[1, {h}]", f"f32[{h}]", f"f32[{h}, {h}]", f"f32[{h}]",
             f"f32[{h}, 1]"]
    forward = fc.trace(lambda x, xb, f, *p: [network(x, *p), network(xb, *p)], *types)
    taylor = fc.build_taylor_graph(forward, 0, order=2, outputs=[0])

    def physics(*v):
        f, ub, d2u = v[2], v[len(types) + 1], v[-1]
        return ops.mse_loss(d2u, f) + ops.mean(ops.square(ub)) * BOUNDARY_WEIGHT
    with_loss, k = fc.extend_graph(taylor, physics)
    return only_outputs(fc.build_backward_graph(with_loss, k, list(range(3, 8))), [k, *range(-5, 0)])


def numpy_step(x, xb, f, w1, b1, w2, b2, w3):
    """Loss and gradients for (w1, b1, w2, b2, w3), by hand: Taylor-mode forward, reverse pass.

    Written as a careful person would: outer products ([n, 1] x [1, h]) as broadcast multiplies, common
    factors computed once, plain array expressions (no out= bookkeeping).
    """
    n = x.shape[0]
    # forward: value, d/dx and d2/dx2 of each layer (dz1/dx = w1, d2z1/dx2 = 0)
    a1 = np.tanh(x * w1 + b1)
    t1 = 1 - a1 * a1
    q1 = w1 * w1
    da1 = t1 * w1
    a1t1 = a1 * t1
    dda1 = -2 * q1 * a1t1
    a2 = np.tanh(a1 @ w2 + b2)
    dz2 = da1 @ w2
    ddz2 = dda1 @ w2
    t2 = 1 - a2 * a2
    s2 = dz2 * dz2
    inner = ddz2 - 2 * a2 * s2
    dda2 = t2 * inner
    r = dda2 @ w3 - f
    # boundary: a plain forward pass
    c1 = np.tanh(xb * w1 + b1)
    c2 = np.tanh(c1 @ w2 + b2)
    ub = c2 @ w3
    loss = np.mean(r * r) + BOUNDARY_WEIGHT * np.mean(ub * ub)
    # reverse through the u'' path
    g_ddu = r * (2.0 / n)
    gw3 = dda2.T @ g_ddu
    g_dda2 = g_ddu * w3.T
    g_ddz2 = g_dda2 * t2
    g_t2 = g_dda2 * inner
    g_dz2 = -4 * g_ddz2 * a2 * dz2
    g_z2 = -2 * (g_ddz2 * s2 + a2 * g_t2) * t2
    gw2 = dda1.T @ g_ddz2 + da1.T @ g_dz2 + a1.T @ g_z2
    gb2 = g_z2.sum(axis=0)
    g_dda1 = g_ddz2 @ w2.T
    g_da1 = g_dz2 @ w2.T
    g_t1 = g_da1 * w1 - 2 * q1 * g_dda1 * a1
    g_z1 = (g_z2 @ w2.T - 2 * q1 * g_dda1 * t1 - 2 * a1 * g_t1) * t1
    gw1 = x.T @ g_z1 + (g_da1 * t1 - 4 * w1 * g_dda1 * a1t1).sum(axis=0, keepdims=True)
    gb1 = g_z1.sum(axis=0)
    # reverse through the boundary term
    g_ub = ub * (2.0 * BOUNDARY_WEIGHT / ub.size)
    gw3 = gw3 + c2.T @ g_ub
    g_c2 = (g_ub * w3.T) * (1 - c2 * c2)
    gw2 = gw2 + c1.T @ g_c2
    gb2 = gb2 + g_c2.sum(axis=0)
    g_c1 = (g_c2 @ w2.T) * (1 - c1 * c1)
    gw1 = gw1 + xb.T @ g_c1
    gb1 = gb1 + g_c1.sum(axis=0)
    return loss, [gw1, gb1, gw2, gb2, gw3]


#: The hand-written step's large products (see numpy_step): a1@w2, da1@w2, dda1@w2; dda1.T@g_ddz2, da1.T@g_dz2,
#: a1.T@g_z2; g_ddz2@w2.T, g_dz2@w2.T, g_z2@w2.T -- nine [n, h] x [h, h] products.
NUMPY_LARGE_PRODUCTS = 9
MATMUL_OPS = ("matmul", "matmul_grad_lhs_internal", "matmul_grad_rhs_internal")


def product_flops(exe: fc.Executable) -> list[int]:
    """The floating-point operations (2 m n k) of each matrix product the executable runs."""
    flops = []
    for ins in exe.instructions:
        if ins.op not in MATMUL_OPS:
            continue
        a, b = (v.type.shape for v in ins.node.inputs)
        if ins.op == "matmul":
            m, k, n = a[-2] if len(a) > 1 else 1, a[-1], b[-1] if len(b) > 1 else 1
        elif ins.op == "matmul_grad_lhs_internal":  # gy[m, n] @ b[k, n]^T
            m, n, k = a[-2] if len(a) > 1 else 1, a[-1], b[-2] if len(b) > 1 else 1
        else:  # a[k, m]^T @ gy[k, n]
            k, m, n = a[-2] if len(a) > 1 else 1, a[-1], b[-1]
        flops.append(2 * m * n * k)
    return flops


def torch_step_fn():
    try:
        import torch
    except ImportError:
        return None

    def step(x, xb, f, *params):
        for p in params:
            p.requires_grad_(True)
        w1, b1, w2, b2, w3 = params
        x = x.detach().requires_grad_(True)

        def net(z):
            return torch.tanh(torch.tanh(z @ w1 + b1) @ w2 + b2) @ w3
        u = net(x)
        (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
        (ddu,) = torch.autograd.grad(du.sum(), x, create_graph=True)
        loss = torch.mean((ddu - f) ** 2) + BOUNDARY_WEIGHT * torch.mean(net(xb) ** 2)
        return loss, torch.autograd.grad(loss, params)
    return step


def interleaved(variants: dict, rounds: int, batch_seconds: float = 0.01,
                cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Median seconds per call: each round runs every variant for about ``batch_seconds``, in an order shuffled
    per round (jax keeps a thread busy for a while after ``block_until_ready``, so in a fixed order whichever
    variant follows jax looked 50-80 us slower). ``cpu``, when given, receives the median CPU seconds per call
    (the process's, every thread of it: a loaded machine stretches wall time, not CPU time)."""
    calls = {}
    for name, fn in variants.items():
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(batch_seconds / max(time.perf_counter() - t0, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in variants}
    cpu_samples: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            fn = variants[name]
            k = calls[name]
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(k):
                fn()
            samples[name].append((time.perf_counter() - t0) / k)
            cpu_samples[name].append((time.process_time() - c0) / k)
    if cpu is not None:
        cpu.update({name: statistics.median(s) for name, s in cpu_samples.items()})
    return {name: statistics.median(s) for name, s in samples.items()}


def _compiled(graph: fc.Graph) -> tuple[fc.Executable, float]:
    t0 = time.perf_counter()
    exe = fc.compile(graph, cache=False)
    return exe, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--blas-threads", type=int, default=None, help="(read by _env before numpy loads)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.blas_threads is not None:  # XLA's CPU client: one intra-op thread, like the BLAS
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    print(describe_environment())
    n, h = args.points, args.hidden
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, n, dtype=np.float32).reshape(n, 1)
    xb = np.array([[0.0], [1.0]], np.float32)
    f = (-np.pi**2 * np.sin(np.pi * x)).astype(np.float32)
    params = [rng.standard_normal((1, h)).astype(np.float32), np.zeros(h, np.float32),
              (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32), np.zeros(h, np.float32),
              (rng.standard_normal((h, 1)) / np.sqrt(h)).astype(np.float32)]
    inputs = [x, xb, f, *params]
    loss, grads = numpy_step(*inputs)
    fc.compile(fc.trace(lambda a: a + 1.0, "f32[1]"), cache=False)  # the registry and passes load once, untimed

    t0 = time.perf_counter()
    taylor_graph = frame_taylor_graph(n, h)
    taylor, taylor_compile = _compiled(taylor_graph)
    compile_times = {"frame Taylor": time.perf_counter() - t0}
    t0 = time.perf_counter()
    reverse_graph, loss_index = frame_training_graph(n, h)
    from forward_laplacian import only_outputs
    reverse, _ = _compiled(only_outputs(reverse_graph, [loss_index, *range(-5, 0)]))
    compile_times["frame reverse^3"] = time.perf_counter() - t0
    for exe in (taylor, reverse):
        outs = exe.run(inputs)
        np.testing.assert_allclose(outs[0], loss, rtol=2e-4)
        for got, want in zip(outs[1:], grads):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4 * float(np.max(np.abs(want))))
    try:  # with frame-native installed: time the steady state, its kernels compiled
        import frame_native
    except ImportError:
        frame_native = None
    if frame_native is not None:
        for _ in range(3):
            taylor.run(inputs), reverse.run(inputs)
        frame_native.wait(120)
        tiers = frame_native.tier_of(taylor)
        print(f"frame-native: {tiers.count('native')} of {len(tiers)} tiered groups of the Taylor step compiled")
    print(f"frame Taylor: {len(taylor_graph.nodes)} nodes -> {len(taylor.instructions)} instructions, transforms + "
          f"compile {compile_times['frame Taylor']:.3f} s (compile {taylor_compile:.3f} s); frame reverse^3: "
          f"{len(reverse.instructions)} instructions; both agree with the hand-written numpy")

    variants = {"numpy": lambda: numpy_step(*inputs), "frame Taylor": lambda: taylor.run(inputs),
                "frame reverse^3": lambda: reverse.run(inputs)}
    try:
        import jax
    except ImportError:
        jax = None
    if jax is not None:
        import jax.numpy as jnp
        from forward_laplacian import jax_pinn

        jp = [jnp.asarray(p) for p in params]
        jx, jxb, jf = jnp.asarray(x), jnp.asarray(xb), jnp.asarray(f)
        for name, step in jax_pinn().items():
            t0 = time.perf_counter()
            value, jgrads = jax.block_until_ready(step(jp, jx, jxb, jf))
            compile_times[name] = time.perf_counter() - t0
            np.testing.assert_allclose(float(value), loss, rtol=2e-4)
            variants[name] = (lambda s: lambda: jax.block_until_ready(s(jp, jx, jxb, jf)))(step)
    torch_step = torch_step_fn()
    if torch_step is not None:
        import torch
        from forward_laplacian import torch_pinn

        targs = [torch.from_numpy(a) for a in (x, xb, f)] + [torch.from_numpy(p.copy()) for p in params]
        variants["torch eager"] = lambda: torch_step(*targs)
        func_step = torch_pinn()
        tparams = [torch.from_numpy(p.copy()) for p in params]
        variants["torch.func jvp-of-jvp"] = lambda: func_step(tparams, *targs[:3])
    cpu: dict[str, float] = {}
    times = interleaved(variants, args.rounds, cpu=cpu)
    base = times["numpy"]
    jax_names = [name for name in times if name.startswith("jax")]
    best_jax = min(jax_names, key=times.get) if jax_names else None
    print(f"PINN u'' step, {n} points, {h} hidden, float32; median of {args.rounds} interleaved rounds; "
          f"load avg {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end; wall time, then CPU time")
    for name, t in times.items():
        extra = f"  {t / times[best_jax]:5.2f}x {best_jax}" if best_jax else ""
        extra += f"   compile {compile_times[name]:.2f} s" if name in compile_times else ""
        print(f"  {name:22} {t * 1e6:9.1f} us   {t / base:5.2f}x numpy{extra}")
    best_cpu = min(jax_names, key=cpu.get) if jax_names else None
    for name, t in cpu.items():
        extra = f"  {t / cpu[best_cpu]:5.2f}x {best_cpu}" if best_cpu else ""
        print(f"  {name:22} {t * 1e6:9.1f} us   {t / cpu['numpy']:5.2f}x numpy{extra}   (CPU)")
    if args.profile:
        flops = product_flops(taylor)
        large = [f for f in flops if f >= 2 * n * h * h]
        print(f"Taylor step's matrix products: {len(flops)} ({len(large)} of [n, h] x [h, h] size, "
              f"{sum(flops) / 1e6:.1f} MFLOP); hand numpy {NUMPY_LARGE_PRODUCTS} of that size "
              f"({NUMPY_LARGE_PRODUCTS * 2 * n * h * h / 1e6:.1f} MFLOP) plus small ones")
        report = taylor.profile(inputs, repeat=200)
        print(report.top(15))
        print({k: round(v * 1e6, 1) for k, v in report.by_op().items()})


if __name__ == "__main__":
    main()
