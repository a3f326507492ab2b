"""Sequence ops of frame-ops-sequence: conv1d, selective_scan and gather's backward, against numpy and torch.

- conv1d forward+backward, x[32, 64, 512] * w[64, 64, 5], padding "same":
  frame's compiled training graph (and the same graph without the pass merge_conv1d_multiply), a hand-written
  numpy im2col reference, and torch's native conv1d given the output gradient (goal: frame no slower than
  torch), torch computing frame's loss ``sum(y * g)`` and its gradient too (the same work as frame's graph), and
  the three products alone. Both torch comparisons are printed as ratios at the end.
- selective_scan forward+backward, batch 8, D 64, N 16, L 256 (variable B and
  C, D, z, delta_bias, softplus): frame, a hand-written numpy loop (the same
  backward written by hand), and torch autograd through the reference loop of
  Mamba's ``selective_scan_ref`` (goal: frame faster). Also a torch loop that
  indexes time-major tensors (cheaper autograd) for context.
- gather's backward (a scatter-add of 1M rows of 64 into a 50k x 64 table):
  frame's ``scatter_add`` against np.add.at, bincount per column and
  sort + np.add.reduceat (goal: no slower than np.add.at).

Each variant runs in turn inside every repetition (interleaved), and medians
are printed with ratios. The process re-executes itself once with the malloc
settings of the team's benchmark rules and ``--threads`` BLAS/torch threads
(default 1: the machine has 2 cores shared by everyone).

    python benchmarks/sequence_ops.py [--repeat 7] [--threads 1] [--only conv|scan|gather] [--fast]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

_ENV = {"MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "67108864", "MALLOC_MMAP_THRESHOLD_": "67108864"}


def _reexec_with_env(threads: int) -> None:
    """Malloc settings are read at process start, so set them (and the thread counts) and start again."""
    want = {**_ENV, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads)}
    if all(os.environ.get(k) == v for k, v in want.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **want})


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", choices=["conv", "scan", "gather"])
    p.add_argument("--fast", action="store_true", help="leave out the slowest reference (torch's selective_scan_ref)")
    return p.parse_args()


ARGS = _args()
_reexec_with_env(ARGS.threads)

import numpy as np  # noqa: E402 - after the re-exec, so that the thread settings apply

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402

try:
    import torch
    torch.set_num_threads(ARGS.threads)
except ImportError:  # the comparison is optional
    torch = None


def interleaved(variants: dict[str, Callable[[], object]], repeat: int,
                cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Median seconds of each variant, running every variant once per repetition (after one warm-up); with
    ``cpu``, also the median CPU seconds of this process per variant (steadier than wall time under load)."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu_times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeat):
        for name, fn in variants.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu_times[name].append(time.process_time() - c0)
    if cpu is not None:
        cpu.update({k: statistics.median(v) for k, v in cpu_times.items()})
    return {k: statistics.median(v) for k, v in times.items()}


def report(title: str, medians: dict[str, float], base: str, cpu: dict[str, float] | None = None) -> None:
    print(f"\n{title}  (load average {' '.join(f'{v:.1f}' for v in os.getloadavg())})")
    for name, t in medians.items():
        line = f"  {name:42s} {t * 1e3:9.2f} ms   {t / medians[base]:6.2f}x {base}"
        if cpu:
            line += f"   cpu {cpu[name] * 1e3:8.2f} ms {cpu[name] / cpu[base]:5.2f}x"
        print(line)


# -- conv1d ---------------------------------------------------------------------------------------
def bench_conv(repeat: int) -> None:
    b, c, length, k = 32, 64, 512, 5
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, c, length)).astype(np.float32)
    w = (rng.standard_normal((c, c, k)) / np.sqrt(c * k)).astype(np.float32)
    g = rng.standard_normal((b, c, length)).astype(np.float32)
    forward = fc.trace(lambda x_, w_, g_: ops.sum(ops.conv1d(x_, w_, padding="same") * g_),
                       f"f32[{b}, {c}, {length}]", f"f32[{c}, {c}, {k}]", f"f32[{b}, {c}, {length}]")
    backward = fc.build_backward_graph(forward, 0, [0, 1])
    train = fc.compile(backward)
    apart = fc.compile(backward, disable=["merge_conv1d_multiply"])  # the convolution and the loss's product apart

    def numpy_im2col():  # the textbook way: one (B L, C K) matrix, one product each way
        pad = k // 2
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
        cols = np.lib.stride_tricks.sliding_window_view(xp, k, axis=-1).transpose(0, 2, 1, 3).reshape(b * length, c * k)
        wm = w.reshape(c, c * k)
        y = (cols @ wm.T).reshape(b, length, c).transpose(0, 2, 1)
        gm = g.transpose(0, 2, 1).reshape(b * length, c)
        gw = (gm.T @ cols).reshape(c, c, k)
        gcols = (gm @ wm).reshape(b, length, c, k)
        gxp = np.zeros_like(xp)
        for j in range(k):
            gxp[:, :, j:j + length] += gcols[:, :, :, j].transpose(0, 2, 1)
        return y, gxp[:, :, pad:pad + length], gw

    # the floor of any im2col kernel on this BLAS: its three products alone, one sample at a time, on columns
    # made beforehand
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2)))
    cols_b = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(xp, length, axis=-1)).reshape(
        b, c * k, length)
    wm, wt = w.reshape(c, c * k), np.ascontiguousarray(w.reshape(c, c * k).T)

    def products_only():
        for i in range(b):
            wm @ cols_b[i], wt @ g[i], g[i] @ cols_b[i].T

    variants = {"frame (compiled training graph)": lambda: train.run([x, w, g]),
                "frame, conv1d and y * g apart": lambda: apart.run([x, w, g]),
                "numpy im2col by hand": numpy_im2col, "numpy: the 3 products alone (floor)": products_only}
    if torch is not None:
        tx, tw, tg = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True), torch.tensor(g)

        def torch_native():
            tx.grad = tw.grad = None
            torch.nn.functional.conv1d(tx, tw, padding="same").backward(tg)
        variants["torch conv1d (native)"] = torch_native

        def torch_same_loss():  # the work of frame's graph: the loss sum(y * g) and its gradient too
            tx.grad = tw.grad = None
            (torch.nn.functional.conv1d(tx, tw, padding="same") * tg).sum().backward()
        variants["torch conv1d, frame's loss sum(y * g)"] = torch_same_loss
        check = train.run([x, w, g])
        torch_native()
        err = max(np.abs(a - b.numpy()).max() / np.abs(b.numpy()).max() for a, b in zip(check[1:], (tx.grad, tw.grad)))
        print(f"\nconv1d: largest gradient difference frame vs torch, relative to the largest entry: {err:.1e}")
    cpu: dict[str, float] = {}
    medians = interleaved(variants, repeat, cpu)
    report(f"conv1d forward+backward, x[{b}, {c}, {length}] * w[{c}, {c}, {k}] (float32)", medians,
           "torch conv1d (native)" if torch is not None else "numpy im2col by hand", cpu)
    if torch is not None:
        frame = "frame (compiled training graph)"
        for label, row in (("torch's native conv1d, handed g (skips the loss)", "torch conv1d (native)"),
                           ("torch computing frame's loss sum(y * g) and its gradient", "torch conv1d, frame's loss "
                                                                                          "sum(y * g)")):
            print(f"  frame / {label}: {medians[frame] / medians[row]:.2f}x wall, {cpu[frame] / cpu[row]:.2f}x cpu")


# -- selective_scan ---------------------------------------------------------------------------------
def _scan_inputs(batch, dim, n, length):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((batch, dim, length)), 0.5 * rng.random((batch, dim, length)), -0.5 * rng.random((dim, n)),
          rng.standard_normal((batch, n, length)), rng.standard_normal((batch, n, length)), rng.standard_normal(dim),
          rng.standard_normal((batch, dim, length)), 0.5 * rng.random(dim)]
    return [a.astype(np.float32) for a in xs], rng.standard_normal((batch, dim, length)).astype(np.float32)


def numpy_selective_scan_grad(u, delta, A, B, C, D, z, bias, g):
    """Forward and Mamba's backward by hand, time-major, one loop over time each way."""
    raw = delta + bias[:, None]
    dt = np.logaddexp(np.float32(0), raw)
    tm = lambda a: np.ascontiguousarray(a.transpose(2, 0, 1))  # noqa: E731 - (batch, D, L) -> (L, batch, D)
    dt_t, u_t, z_t, g_t = tm(dt), tm(u), tm(z), tm(g)
    b_t, c_t = tm(B), tm(C)                                     # (L, batch, N)
    a = np.exp(dt_t[..., None] * A)
    h = (dt_t * u_t)[..., None] * b_t[:, :, None, :]
    for t in range(1, h.shape[0]):
        h[t] += a[t] * h[t - 1]
    y_pre = np.einsum("lbdn,lbn->lbd", h, c_t) + u_t * D
    s = 0.5 * np.tanh(0.5 * z_t) + 0.5
    gz = g_t * y_pre * s * (1 + z_t * (1 - s))
    gy = g_t * z_t * s
    lam = gy[..., None] * c_t[:, :, None, :]
    for t in range(lam.shape[0] - 2, -1, -1):
        lam[t] += a[t + 1] * lam[t + 1]
    gc = np.einsum("lbd,lbdn->lbn", gy, h)
    h_prev = np.concatenate([np.zeros_like(h[:1]), h[:-1]])
    ga_a = lam * h_prev * a
    lam_b = np.einsum("lbdn,lbn->lbd", lam, b_t)
    g_dt = np.einsum("lbdn,dn->lbd", ga_a, A) + lam_b * u_t
    g_raw = g_dt * (0.5 * np.tanh(0.5 * tm(raw)) + 0.5)
    back = lambda a_: a_.transpose(1, 2, 0)  # noqa: E731
    return (back(y_pre * z_t * s), back(lam_b * dt_t + gy * D), back(g_raw), np.einsum("lbdn,lbd->dn", ga_a, dt_t),
            back(np.einsum("lbdn,lbd->lbn", lam, dt_t * u_t)), back(gc), (gy * u_t).sum((0, 1)), back(gz),
            g_raw.sum((0, 1)))


def torch_selective_scan_ref(u, delta, A, B, C, D, z, bias):
    """Mamba's selective_scan_ref (real A, variable B and C), in torch."""
    delta = torch.nn.functional.softplus(delta + bias[..., None])
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    delta_bu = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_bu[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
    out = torch.stack(ys, dim=2) + u * D[:, None]
    return out * torch.nn.functional.silu(z)


def torch_selective_scan_time_major(u, delta, A, B, C, D, z, bias):
    """The same recurrence with time-major tensors unbound once: autograd's indexing costs drop."""
    delta = torch.nn.functional.softplus(delta + bias[..., None])
    delta_a = torch.exp(torch.einsum("bdl,dn->lbdn", delta, A)).unbind(0)
    delta_bu = torch.einsum("bdl,bnl,bdl->lbdn", delta, B, u).unbind(0)
    cs = C.permute(2, 0, 1).unbind(0)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for da, dbu, c in zip(delta_a, delta_bu, cs):
        x = da * x + dbu
        ys.append((x * c[:, None, :]).sum(-1))
    out = torch.stack(ys, dim=2) + u * D[:, None]
    return out * torch.nn.functional.silu(z)


def bench_scan(repeat: int) -> None:
    batch, dim, n, length = 8, 64, 16, 256
    xs, g = _scan_inputs(batch, dim, n, length)
    types = [fc.TensorType(a.dtype, a.shape) for a in xs]
    forward = fc.trace(lambda *t: ops.sum(ops.selective_scan(*t[:8], delta_softplus=True) * t[8]),
                       *types, fc.TensorType(g.dtype, g.shape))
    train = fc.compile(fc.build_backward_graph(forward, 0, list(range(8))))
    variants = {"frame (compiled training graph)": lambda: train.run([*xs, g]),
                "numpy loop by hand": lambda: numpy_selective_scan_grad(*xs, g)}
    if torch is not None:
        ts = [torch.tensor(a, requires_grad=True) for a in xs]
        tg = torch.tensor(g)

        def through(fn):
            def run():
                for t in ts:
                    t.grad = None
                fn(*ts).backward(tg)
            return run
        if not ARGS.fast:  # the reference loop takes seconds per run
            variants["torch autograd, selective_scan_ref loop"] = through(torch_selective_scan_ref)
        variants["torch autograd, time-major loop"] = through(torch_selective_scan_time_major)
        through(torch_selective_scan_ref)()
        ref = [t.grad.numpy().copy() for t in ts]
        got = train.run([*xs, g])[1:]
        by_hand = numpy_selective_scan_grad(*xs, g)[1:]
        errs = [np.abs(a - b).max() / (1 + np.abs(b).max()) for a, b in zip(got, ref)]
        errs_hand = [np.abs(a - b).max() / (1 + np.abs(b).max()) for a, b in zip(by_hand, ref)]
        print(f"\nselective_scan: worst relative gradient difference against torch (float32): frame "
              f"{max(errs):.1e}, numpy by hand {max(errs_hand):.1e}")
    cpu: dict[str, float] = {}
    wall = interleaved_cpu(variants, repeat, cpu)
    title = f"selective_scan forward+backward, batch {batch}, D {dim}, N {n}, L {length} (float32, all inputs)"
    print(f"\n{title}\n  {'':42s} {'wall ms':>9s} {'cpu ms':>9s} {'wall x':>7s} {'cpu x':>7s}   (x = time / numpy "
          "loop by hand, the goal's base)")
    base = "numpy loop by hand"
    for name, t in wall.items():
        print(f"  {name:42s} {t * 1e3:9.2f} {cpu[name] * 1e3:9.2f} {t / wall[base]:6.2f}x "
              f"{cpu[name] / cpu[base]:6.2f}x")


def interleaved_cpu(variants: dict[str, Callable[[], object]], repeat: int, cpu: dict[str, float]) -> dict[str, float]:
    """``interleaved`` that also fills ``cpu`` with each variant's median CPU seconds of this process (on a machine
    with more runnable processes than cores, wall time also counts the waits for a core)."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeat):
        for name, fn in variants.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
    cpu.update({k: statistics.median(v) for k, v in cpus.items()})
    return {k: statistics.median(v) for k, v in times.items()}


# -- gather backward ---------------------------------------------------------------------------------
def bench_gather(repeat: int) -> None:
    vocab, width, count = 50_000, 64, 1_000_000
    rng = np.random.default_rng(2)
    g = rng.standard_normal((count, width)).astype(np.float32)
    for label, indices in (("uniform", rng.integers(0, vocab, count)),
                           ("Zipf(1.3)", np.minimum(rng.zipf(1.3, count) - 1, vocab - 1))):
        scatter = fc.compile(fc.trace(lambda g_, i_: ops.scatter_add(g_, i_, size=vocab),
                                      f"f32[{count}, {width}]", f"i64[{count}]"))

        def add_at():
            out = np.zeros((vocab, width), np.float32)
            np.add.at(out, indices, g)
            return out

        def bincount_per_column():
            cols = np.ascontiguousarray(g.T, np.float64)  # bincount sums float64 weights
            out = np.empty((vocab, width), np.float32)
            for j in range(width):
                out[:, j] = np.bincount(indices, weights=cols[j], minlength=vocab)
            return out

        def sort_reduceat():
            order = np.argsort(indices, kind="stable")
            ordered = indices[order]
            starts = np.concatenate(([0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1))
            out = np.zeros((vocab, width), np.float32)
            out[ordered[starts]] = np.add.reduceat(g[order], starts, axis=0)
            return out

        want = add_at()
        got = scatter.run([g, indices])[0]
        print(f"\ngather backward ({label}): max |frame - np.add.at| = {np.abs(got - want).max():.1e} "
              f"(both sum in float32; largest entry {np.abs(want).max():.0f})")
        variants = {"frame scatter_add (sort + rank levels)": lambda: scatter.run([g, indices]),
                    "np.add.at": add_at, "bincount per column": bincount_per_column,
                    "sort + np.add.reduceat": sort_reduceat}
        report(f"gather backward: scatter-add of {count:,} rows of {width} into [{vocab:,}, {width}], {label} "
               f"indices (one-hot matmul: a {vocab:,} x {count:,} matrix, 200 GB in float32, not run)",
               interleaved(variants, max(3, repeat // 2)), "np.add.at")


def main() -> None:
    print(f"threads: BLAS (OPENBLAS_NUM_THREADS) {os.environ.get('OPENBLAS_NUM_THREADS')}, torch "
          f"{torch.get_num_threads() if torch is not None else '-'}; numpy {np.__version__}; "
          f"torch {torch.__version__ if torch is not None else 'not installed'}; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    if ARGS.only in (None, "conv"):
        bench_conv(ARGS.repeat)
    if ARGS.only in (None, "scan"):
        bench_scan(ARGS.repeat)
    if ARGS.only in (None, "gather"):
        bench_gather(ARGS.repeat)


if __name__ == "__main__":
    main()
