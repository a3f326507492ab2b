"""Spectral derivative forward + backward, float32: frame against hand-written numpy.fft and torch eager.

The loss is sum(irfft(ik * rfft(x))^2) over the last axis of x f32[32, 64, 256], and a step computes it
and its gradient. frame runs the graph build_backward_graph makes from ``spectral_derivative``; numpy is
the same mathematics written by hand with numpy.fft and the hand-derived adjoint
(gx = irfft(conj(ik) * rfft(2 y))); torch is eager autograd. Issue 9's targets: frame at most 0.45x
numpy, and faster than torch. Prints medians of interleaved runs and the ratios.

    python benchmarks/fft_spectral.py [--shape 32 64 256] [--repeats 200]
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
from frame_ops_fft import spectral_derivative, wavenumbers  # noqa: E402


def frame_step(shape: tuple[int, ...]):
    forward = fc.trace(lambda x: ops.sum(ops.square(spectral_derivative(x, 1))), f"f32{list(shape)}")
    exe = fc.compile(fc.build_backward_graph(forward, 0, [0]))
    return exe, lambda x: exe.run([x])


def numpy_step(n: int):
    ik = (1j * wavenumbers(n)).astype(np.complex64)
    if n % 2 == 0:
        ik[-1] = 0  # the odd derivative of the Nyquist bin vanishes on the grid
    conj_ik = np.conj(ik)

    def step(x: np.ndarray):
        y = np.fft.irfft(np.fft.rfft(x) * ik, n=n)
        loss = np.sum(y * y)
        gx = np.fft.irfft(np.fft.rfft(2 * y) * conj_ik, n=n)  # the adjoint of irfft . ik . rfft, by hand
        return loss, gx
    return step


def torch_step(n: int):
    try:
        import torch
    except ImportError:
        return None
    ik = torch.from_numpy((1j * wavenumbers(n)).astype(np.complex64))
    if n % 2 == 0:
        ik[-1] = 0

    def step(x):
        x = x.detach().requires_grad_(True)
        y = torch.fft.irfft(torch.fft.rfft(x) * ik, n=n)
        loss = (y * y).sum()
        (gx,) = torch.autograd.grad(loss, [x])
        return loss, gx
    return step


def jax_step(n: int):
    """jax.jit of the loss and its gradient (jax.value_and_grad), or None when jax is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    ik = (1j * wavenumbers(n)).astype(np.complex64)
    if n % 2 == 0:
        ik[-1] = 0
    ik = jnp.asarray(ik)

    def loss(x):
        y = jnp.fft.irfft(jnp.fft.rfft(x) * ik, n=n)
        return jnp.sum(y * y)
    step = jax.jit(jax.value_and_grad(loss))
    return lambda x: jax.block_until_ready(step(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs="+", default=[32, 64, 256])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--profile", action="store_true", help="also print frame's per-node profile")
    parser.add_argument("--threads", type=int, help="threads for numpy's BLAS, scipy.fft, torch and jax alike")
    parser.add_argument("--backend", choices=["scipy", "ducc0"], help="frame's FFT library (default: ducc0 if "
                        "installed)")
    args = parser.parse_args()
    apply_threads()
    shape = tuple(args.shape)
    n = shape[-1]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    exe, frame = frame_step(shape)
    by_hand = numpy_step(n)
    (l_f, g_f), (l_n, g_n) = frame(x), by_hand(x)
    assert g_f.dtype == np.float32 and np.allclose(l_f, l_n, rtol=1e-4), (l_f, l_n)
    assert np.allclose(g_f, g_n, rtol=1e-3, atol=1e-3 * np.abs(g_n).max())
    variants = {"numpy": lambda: by_hand(x), "frame": lambda: frame(x)}
    to = torch_step(n)
    if to is not None:
        import torch

        tx = torch.from_numpy(x)
        variants["torch"] = lambda: to(tx)
    jx = jax_step(n)
    if jx is not None:
        import jax.numpy as jnp

        jax_x = jnp.asarray(x)
        l_j, g_j = jx(jax_x)
        assert np.allclose(g_f, np.asarray(g_j), rtol=1e-3, atol=1e-3 * np.abs(g_n).max())
        variants["jax.jit"] = lambda: jx(jax_x)
    print(machine_line())
    print(f"spectral derivative fwd+bwd, f32{list(shape)}: median of {args.repeats} interleaved runs")
    cpu: dict[str, float] = {}
    medians = interleaved(variants, args.repeats, cpu=cpu)
    print_table(medians, cpu, "numpy")
    print(f"  frame/numpy {medians['frame'] / medians['numpy']:.2f}x wall, {cpu['frame'] / cpu['numpy']:.2f}x cpu "
          "(target <= 0.45x)")
    for other in ("torch", "jax.jit"):
        if other in medians:
            print(f"  frame/{other} {medians['frame'] / medians[other]:.2f}x wall, {cpu['frame'] / cpu[other]:.2f}x "
                  "cpu (target < 1)")
    if args.profile:
        print(exe.profile([x], repeat=20))


if __name__ == "__main__":
    main()
