"""One training step of a 2-layer Fourier neural operator, float32: frame against torch eager.

Model (the same in both): lift 1 -> C channels (pointwise), two Fourier layers (spectral convolution over
the lowest M modes plus a pointwise path, tanh), projection C -> 1; loss mse against a target; plain
SGD. Batch 32, C = 64, N = 256, M = 16 by default (issue 9: frame no slower than torch). A step is
forward, backward and the parameter update. Prints medians of interleaved runs and the ratio.

    python benchmarks/fft_fno_step.py [--batch 32] [--width 64] [--n 256] [--modes 16] [--repeats 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fft_common import apply_threads, ensure_malloc_env, interleaved, machine_line, print_table  # noqa: E402

ensure_malloc_env()

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402
from frame_ops_fft import spectral_conv1d  # noqa: E402

LR = 1e-3


def init(rng: np.random.Generator, width: int, modes: int) -> list[np.ndarray]:
    def uniform(bound, *shape):
        return rng.uniform(-bound, bound, shape).astype(np.float32)
    layer = [lambda: (rng.uniform(0, 1, (modes, width, width, 2)) / (width * width)).astype(np.float32),
             lambda: uniform(1 / np.sqrt(width), width, width), lambda: uniform(1 / np.sqrt(width), width, 1)]
    return [uniform(1.0, width, 1), uniform(1.0, width, 1), *[make() for _ in range(2) for make in layer],
            uniform(1 / np.sqrt(width), 1, width), np.zeros((), np.float32)]


def fno(f, lift_w, lift_b, s1, p1, b1, s2, p2, b2, proj_w, proj_b):
    h = ops.expand_dims(f, axes=[1]) * lift_w + lift_b                   # [B, C, N]
    for s, p, b in ((s1, p1, b1), (s2, p2, b2)):
        h = ops.tanh(spectral_conv1d(h, s) + p @ h + b)
    return ops.reshape(proj_w @ h, shape=list(f.shape)) + proj_b


def frame_step(types: list[str]):
    forward = fc.trace(lambda f, t, *params: ops.mse_loss(fno(f, *params), t), *types)
    train = fc.compile(fc.build_backward_graph(forward, 0, list(range(2, len(types)))))
    update = fc.compile(fc.build_sgd_update_graph(types[2:], LR))

    def step(f, t, params):
        loss, *grads = train.run([f, t, *params])
        return loss, update.run([*params, *grads])
    return step, train


def torch_step(n: int, modes: int):
    try:
        import torch
    except ImportError:
        return None

    def spectral(h, w):
        z = torch.fft.rfft(h)
        out = torch.zeros(h.shape[0], w.shape[2], n // 2 + 1, dtype=z.dtype)
        out[:, :, :modes] = torch.einsum("bim,mio->bom", z[:, :, :modes], torch.view_as_complex(w))
        return torch.fft.irfft(out, n=n)

    def step(f, t, params):
        params = [p.detach().requires_grad_(True) for p in params]
        lift_w, lift_b, s1, p1, b1, s2, p2, b2, proj_w, proj_b = params
        h = f[:, None, :] * lift_w + lift_b
        for s, p, b in ((s1, p1, b1), (s2, p2, b2)):
            h = torch.tanh(spectral(h, s) + p @ h + b)
        loss = torch.nn.functional.mse_loss((proj_w @ h).reshape(f.shape) + proj_b, t)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            return loss, [p - LR * g for p, g in zip(params, grads)]
    return step


def numpy_step(n: int, modes: int):
    """The same step written by hand in numpy (scipy.fft for the transforms, numpy's float32 rfft widens):
    forward, backpropagation derived by hand, SGD update."""
    import scipy.fft

    m = n // 2 + 1
    w_bins = np.full(modes, 0.5, np.float32)  # rfft's adjoint: irfft(G * W, norm="forward"), W = 1/2 on inner bins
    w_bins[0] = 1.0
    c_bins = 1.0 / w_bins                     # irfft's adjoint: rfft(g, norm="forward") * C

    def step(f, t, params):
        lift_w, lift_b, s1, p1, b1, s2, p2, b2, proj_w, proj_b = params
        h0 = f[:, None, :] * lift_w + lift_b
        cache, h = [], h0
        for s, p, b in ((s1, p1, b1), (s2, p2, b2)):
            wc = s[..., 0] + 1j * s[..., 1]                                   # [M, Cin, Cout]
            z = scipy.fft.rfft(h, axis=-1, workers=1)[:, :, :modes]           # [B, Cin, M]
            mixed = (z.transpose(2, 0, 1) @ wc).transpose(1, 2, 0)            # per mode: [B, Cin] @ [Cin, Cout]
            full = np.zeros(mixed.shape[:2] + (m,), np.complex64)
            full[:, :, :modes] = mixed
            a = scipy.fft.irfft(full, n=n, axis=-1, workers=1) + p @ h + b
            nxt = np.tanh(a)
            cache.append((h, z, wc, nxt))
            h = nxt
        out = (proj_w @ h).reshape(f.shape) + proj_b
        diff = out - t
        loss = np.mean(diff * diff)
        g_out = (2.0 / diff.size) * diff
        g_proj_w = np.tensordot(g_out, h, axes=([0, 1], [0, 2]))[None, :]
        g_proj_b = g_out.sum()
        gh = proj_w[0][None, :, None] * g_out[:, None, :]
        grads = []
        for (hin, z, wc, nxt), p in zip(reversed(cache), (p2, p1)):
            ga = gh * (1 - nxt * nxt)
            gb = ga.sum(axis=(0, 2))[:, None]
            gp = np.tensordot(ga, hin, axes=([0, 2], [0, 2]))
            gfull = scipy.fft.rfft(ga, axis=-1, norm="forward", workers=1)[:, :, :modes] * c_bins
            g_modes = gfull.transpose(2, 0, 1)                                # [M, B, Cout]
            gz = (g_modes @ wc.conj().transpose(0, 2, 1)).transpose(1, 2, 0)  # [B, Cin, M]
            gw = z.conj().transpose(2, 1, 0) @ g_modes                        # [M, Cin, Cout]
            gs = np.stack([gw.real, gw.imag], axis=-1).astype(np.float32)
            spectrum = np.zeros(gz.shape[:2] + (m,), np.complex64)
            spectrum[:, :, :modes] = gz * w_bins
            gh = p.T @ ga + scipy.fft.irfft(spectrum, n=n, axis=-1, norm="forward", workers=1)
            grads = [gs, gp, gb, *grads]
        g_lift_w = (gh * f[:, None, :]).sum(axis=(0, 2))[:, None]
        g_lift_b = gh.sum(axis=(0, 2))[:, None]
        all_grads = [g_lift_w, g_lift_b, *grads, g_proj_w, np.asarray(g_proj_b)]
        return loss, [q - np.float32(LR) * g for q, g in zip(params, all_grads)]
    return step


def jax_step(n: int, modes: int):
    """jax.jit of the same step (value_and_grad and the update in one jitted function), or None."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def spectral(h, w):
        z = jnp.fft.rfft(h)[:, :, :modes]
        mixed = jnp.einsum("bim,mio->bom", z, w[..., 0] + 1j * w[..., 1])
        full = jnp.pad(mixed, ((0, 0), (0, 0), (0, n // 2 + 1 - modes)))
        return jnp.fft.irfft(full, n=n)

    def loss(params, f, t):
        lift_w, lift_b, s1, p1, b1, s2, p2, b2, proj_w, proj_b = params
        h = f[:, None, :] * lift_w + lift_b
        for s, p, b in ((s1, p1, b1), (s2, p2, b2)):
            h = jnp.tanh(spectral(h, s) + p @ h + b)
        return jnp.mean(((proj_w @ h).reshape(f.shape) + proj_b - t) ** 2)

    @jax.jit
    def step(f, t, params):
        value, grads = jax.value_and_grad(loss)(params, f, t)
        return value, [p - LR * g for p, g in zip(params, grads)]
    return lambda f, t, params: jax.block_until_ready(step(f, t, params))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--modes", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--profile", action="store_true", help="also print frame's per-node profile")
    parser.add_argument("--threads", type=int, help="threads for numpy's BLAS, scipy.fft, torch and jax alike")
    parser.add_argument("--backend", choices=["scipy", "ducc0"], help="frame's FFT library (default: ducc0 if "
                        "installed)")
    args = parser.parse_args()
    apply_threads()
    rng = np.random.default_rng(0)
    f = rng.standard_normal((args.batch, args.n)).astype(np.float32)
    t = rng.standard_normal((args.batch, args.n)).astype(np.float32)
    params = init(rng, args.width, args.modes)
    types = [f"f32{list(f.shape)}", f"f32{list(t.shape)}", *[f"f32{list(p.shape)}" for p in params]]
    step, train = frame_step(types)
    variants = {"frame": lambda: step(f, t, params)}
    by_hand = numpy_step(args.n, args.modes)
    l_numpy, new_numpy = by_hand(f, t, params)
    l_frame, new_frame = step(f, t, params)
    assert np.allclose(l_frame, l_numpy, rtol=1e-4), (l_frame, l_numpy)
    for a, b in zip(new_frame, new_numpy):
        assert np.allclose(a, b, rtol=1e-3, atol=1e-5)
    variants = {"numpy": lambda: by_hand(f, t, params), **variants}
    jx = jax_step(args.n, args.modes)
    if jx is not None:
        import jax.numpy as jnp

        jf, jt, jp = jnp.asarray(f), jnp.asarray(t), [jnp.asarray(p) for p in params]
        l_jax, new_jax = jx(jf, jt, jp)
        assert np.allclose(l_frame, float(l_jax), rtol=1e-4), (l_frame, float(l_jax))
        for a, b in zip(new_frame, new_jax):
            assert np.allclose(a, np.asarray(b), rtol=1e-3, atol=1e-5)
        variants["jax.jit"] = lambda: jx(jf, jt, jp)
    to = torch_step(args.n, args.modes)
    if to is not None:
        import torch

        tf, tt = torch.from_numpy(f), torch.from_numpy(t)
        tp = [torch.from_numpy(p.copy()) for p in params]
        l_frame, new_frame = step(f, t, params)
        l_torch, new_torch = to(tf, tt, tp)
        assert np.allclose(l_frame, l_torch.item(), rtol=1e-4), (l_frame, l_torch.item())
        for a, b in zip(new_frame, new_torch):
            assert np.allclose(a, b.numpy(), rtol=1e-3, atol=1e-5)
        variants["torch"] = lambda: to(tf, tt, tp)
    print(machine_line())
    print(f"FNO training step (2 layers, batch {args.batch}, width {args.width}, N {args.n}, {args.modes} modes, "
          f"f32): median of {args.repeats} interleaved runs; training graph {len(train.graph.nodes)} nodes")
    cpu: dict[str, float] = {}
    medians = interleaved(variants, args.repeats, cpu=cpu)
    print_table(medians, cpu, "numpy")
    for other in ("torch", "jax.jit"):
        if other in medians:
            print(f"  frame/{other} {medians['frame'] / medians[other]:.2f}x wall, {cpu['frame'] / cpu[other]:.2f}x "
                  "cpu (target < 1)")
    if args.profile:
        print(train.profile([f, t, *params], repeat=10))


if __name__ == "__main__":
    main()
