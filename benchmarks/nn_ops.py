"""frame-ops-nn ops forward+backward against a hand-written numpy reference and torch eager (one BLAS thread).

- conv2d, x[32, 32, 32, 32] * w[64, 32, 3, 3], padding "same" (goal: within 1.5x torch's native conv);
- layer_norm over the last axis of x[256, 1024] (goal: no slower than torch eager);
- batch_norm (training) of x[256, 1024] (goal: no slower than torch eager);
- group_norm of x[32, 64, 128] in 8 groups (no goal of its own; it shares the norms' kernels).

frame runs its compiled training graph (value and the gradients of sum(y * g) for every input; with frame-native
installed, after waiting for its background compiler, so the norms run their compiled kernels: FRAME_NATIVE=0
times numpy's); numpy the same maths by hand; torch autograd. Variants run in turn in every repetition (interleaved); medians and minima in
ms, with the ratio of medians to torch, and the median CPU time with its ratio (steadier on a loaded machine).

    python benchmarks/nn_ops.py [--repeat 15] [--only conv|layer_norm|batch_norm|group_norm] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

sys.argv += [] if any(a.startswith("--blas-threads") for a in sys.argv) else ["--blas-threads", "1"]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _env  # noqa: E402,F401 - malloc and BLAS settings before numpy loads

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402

try:
    import torch
except ImportError:  # the comparison is optional
    torch = None


def interleaved(variants: dict[str, Callable[[], object]], repeat: int,
                cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Wall seconds of each variant per repetition; also this process's CPU seconds into ``cpu`` when given."""
    for _ in range(3):  # frame-native queues a kernel after its second run: time the code a program settles on
        for fn in variants.values():
            fn()
    _native_settled()
    times: dict[str, list[float]] = {k: [] for k in variants}
    if cpu is not None:
        cpu.update({k: [] for k in variants})
    for _ in range(repeat):
        for name, fn in variants.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            if cpu is not None:
                cpu[name].append(time.process_time() - c0)
    return times


def _native_settled() -> None:
    """Wait for frame-native's background compiler (when the pack is installed), so that its compile time is not
    counted in a variant's CPU time and the timed runs use the compiled kernels."""
    try:
        import frame_native
    except ImportError:
        return
    frame_native.wait(60)


def report(title: str, times: dict[str, list[float]], cpu: dict[str, list[float]] | None = None) -> None:
    """Medians, minima and ratios; with ``cpu``, CPU-time medians and ratios too (steadier when the machine is
    loaded: wall time counts the waits for a core, CPU time does not)."""
    print(f"\n{title}  (load average {' '.join(f'{v:.1f}' for v in os.getloadavg())})")
    base = "torch eager" if "torch eager" in times else "numpy by hand"
    ref = statistics.median(times[base])
    cpu_ref = statistics.median(cpu[base]) if cpu else None
    for name, ts in times.items():
        med = statistics.median(ts)
        line = f"  {name:34s} median {med * 1e3:9.2f} ms   min {min(ts) * 1e3:9.2f} ms   {med / ref:5.2f}x {base}"
        if cpu:
            c = statistics.median(cpu[name])
            line += f"   cpu {c * 1e3:8.2f} ms {c / cpu_ref:5.2f}x"
        print(line)


def training(fn: Callable, *types: str) -> fc.Executable:
    """The compiled graph of sum(fn(*inputs) * g) and its gradients for every input but g (the last)."""
    n = len(types) - 1
    graph = fc.trace(lambda *t: ops.sum(fn(*t[:n]) * t[n]), *types)
    return fc.compile(fc.build_backward_graph(graph, 0, list(range(n))))


def check(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    for i, (a, b) in enumerate(zip(got, want)):
        scale = float(np.abs(b).max()) or 1.0
        err = float(np.abs(a - b).max()) / scale
        assert err < 1e-3, f"{what}: output {i} differs from the reference by {err:.2e} (relative to its max)"


def bench_conv(repeat: int) -> None:
    b, ci, co, hw, k = 32, 32, 64, 32, 3
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, ci, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((co, ci, k, k)) / np.sqrt(ci * k * k)).astype(np.float32)
    g = rng.standard_normal((b, co, hw, hw)).astype(np.float32)
    train = training(lambda a, c: ops.conv2d(a, c, padding="same"), f"f32[{b}, {ci}, {hw}, {hw}]",
                     f"f32[{co}, {ci}, {k}, {k}]", f"f32[{b}, {co}, {hw}, {hw}]")

    def numpy_im2col():  # the textbook way: the window view reshaped (one copy), one product each way
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))  # [b, ci, hw, hw, k, k]
        cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(b * hw * hw, ci * k * k)
        wm = w.reshape(co, ci * k * k)
        y = (cols @ wm.T).reshape(b, hw, hw, co).transpose(0, 3, 1, 2)
        gm = g.transpose(0, 2, 3, 1).reshape(b * hw * hw, co)
        gw = (gm.T @ cols).reshape(co, ci, k, k)
        gcols = (gm @ wm).reshape(b, hw, hw, ci, k, k)
        gxp = np.zeros_like(xp)
        for i in range(k):
            for j in range(k):
                gxp[:, :, i:i + hw, j:j + hw] += gcols[..., i, j].transpose(0, 3, 1, 2)
        return y, gxp[:, :, 1:-1, 1:-1], gw

    # the floor of any im2col kernel on this BLAS: its three products alone, on columns made beforehand
    cols_b = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (k, k), axis=(2, 3)).transpose(0, 1, 4, 5, 2, 3)).reshape(
        b, ci * k * k, hw * hw)
    wm, wt, g_b = w.reshape(co, ci * k * k), np.ascontiguousarray(w.reshape(co, ci * k * k).T), g.reshape(b, co, -1)

    def products_only():
        for i in range(b):
            wm @ cols_b[i], wt @ g_b[i], g_b[i] @ cols_b[i].T

    variants = {"frame (compiled training graph)": lambda: train.run([x, w, g]), "numpy by hand": numpy_im2col,
                "numpy: the 3 products alone (floor)": products_only}
    if torch is not None:
        tx, tw, tg = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True), torch.tensor(g)

        def torch_native():
            tx.grad = tw.grad = None
            torch.nn.functional.conv2d(tx, tw, padding=1).backward(tg)
            return tx.grad, tw.grad
        variants["torch eager"] = torch_native
        torch_native()
        check(train.run([x, w, g])[1:], [tx.grad.numpy(), tw.grad.numpy()], "conv2d")
    cpu: dict[str, list[float]] = {}
    times = interleaved(variants, repeat, cpu)
    report(f"conv2d forward+backward, x[{b}, {ci}, {hw}, {hw}] * w[{co}, {ci}, {k}, {k}], padding same", times, cpu)


def bench_group_norm(repeat: int) -> None:
    n, c, s, groups, eps = 32, 64, 128, 8, 1e-5
    rng = np.random.default_rng(2)
    x, g = rng.standard_normal((2, n, c, s)).astype(np.float32)
    w, bias = rng.standard_normal((2, c)).astype(np.float32)
    train = training(lambda a, e, f: ops.group_norm(a, e, f, num_groups=groups), f"f32[{n}, {c}, {s}]",
                     f"f32[{c}]", f"f32[{c}]", f"f32[{n}, {c}, {s}]")

    def numpy_by_hand():  # the textbook formulas over [n, groups, c / groups * s]
        xg, gw = x.reshape(n, groups, -1), (g * w[:, None]).reshape(n, groups, -1)
        xc = xg - xg.mean(axis=2, keepdims=True)
        rstd = 1.0 / np.sqrt((xc * xc).mean(axis=2, keepdims=True) + eps)
        xhat = xc * rstd
        y = xhat.reshape(x.shape) * w[:, None] + bias[:, None]
        gx = rstd * (gw - gw.mean(axis=2, keepdims=True) - xhat * (gw * xhat).mean(axis=2, keepdims=True))
        return y, gx.reshape(x.shape), (g * xhat.reshape(x.shape)).sum(axis=(0, 2)), g.sum(axis=(0, 2))

    variants = {"frame (compiled training graph)": lambda: train.run([x, w, bias, g]), "numpy by hand": numpy_by_hand}
    if torch is not None:
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, bias))
        tg = torch.tensor(g)

        def torch_eager():
            tx.grad = tw.grad = tb.grad = None
            torch.nn.functional.group_norm(tx, groups, tw, tb, eps).backward(tg)
            return tx.grad, tw.grad, tb.grad
        variants["torch eager"] = torch_eager
        check(train.run([x, w, bias, g])[1:], [t.numpy() for t in torch_eager()], "group_norm")
    cpu: dict[str, list[float]] = {}
    times = interleaved(variants, repeat, cpu)
    report(f"group_norm forward+backward, x[{n}, {c}, {s}], {groups} groups", times, cpu)


def bench_norm(kind: str, repeat: int) -> None:
    n, d, eps = 256, 1024, 1e-5
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w, bias = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    g = rng.standard_normal((n, d)).astype(np.float32)
    stats = (np.zeros(d, np.float32), np.ones(d, np.float32))
    axis = 1 if kind == "layer_norm" else 0
    if kind == "layer_norm":
        train = training(lambda a, c, e: ops.layer_norm(a, c, e), f"f32[{n}, {d}]", f"f32[{d}]", f"f32[{d}]",
                         f"f32[{n}, {d}]")
        args = [x, w, bias, g]
    else:
        train = training(lambda a, c, e: ops.batch_norm(a, c, e, *stats)[0], f"f32[{n}, {d}]", f"f32[{d}]",
                         f"f32[{d}]", f"f32[{n}, {d}]")
        args = [x, w, bias, g]

    def numpy_by_hand():  # the textbook fused formulas
        mean = x.mean(axis=axis, keepdims=True)
        xc = x - mean
        rstd = 1.0 / np.sqrt((xc * xc).mean(axis=axis, keepdims=True) + eps)
        xhat = xc * rstd
        y = xhat * w + bias
        gx_hat = g * w
        gx = rstd * (gx_hat - gx_hat.mean(axis=axis, keepdims=True)
                     - xhat * (gx_hat * xhat).mean(axis=axis, keepdims=True))
        return y, gx, (g * xhat).sum(axis=0), g.sum(axis=0)

    variants = {"frame (compiled training graph)": lambda: train.run(args), "numpy by hand": numpy_by_hand}
    if torch is not None:
        tx = torch.tensor(x, requires_grad=True)
        tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(bias, requires_grad=True)
        tg = torch.tensor(g)
        trm, trv = torch.tensor(stats[0]), torch.tensor(stats[1])

        def torch_eager():
            tx.grad = tw.grad = tb.grad = None
            if kind == "layer_norm":
                y = torch.nn.functional.layer_norm(tx, (d,), tw, tb, eps)
            else:
                y = torch.nn.functional.batch_norm(tx, trm, trv, tw, tb, training=True, eps=eps)
            y.backward(tg)
            return tx.grad, tw.grad, tb.grad
        variants["torch eager"] = torch_eager
        check(train.run(args)[1:], [t.numpy() for t in torch_eager()], kind)
    cpu: dict[str, list[float]] = {}
    times = interleaved(variants, repeat, cpu)
    report(f"{kind} forward+backward, x[{n}, {d}]", times, cpu)
    native = [f"{i.op}: {i.kernel.native.state}" for i in train.instructions if hasattr(i.kernel, "native")]
    print(f"  frame instructions: {[i.op for i in train.instructions]}" + (f"; tiers {native}" if native else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--only", choices=["conv", "layer_norm", "batch_norm", "group_norm"])
    p.add_argument("--blas-threads", type=int, default=1)
    args = p.parse_args()
    if torch is not None:
        torch.set_num_threads(args.blas_threads)
    print(f"BLAS: {_env.blas_threads()}; torch: {'not installed' if torch is None else torch.__version__}")
    if args.only in (None, "conv"):
        bench_conv(max(3, args.repeat // 3))
    for kind in ("layer_norm", "batch_norm"):
        if args.only in (None, kind):
            bench_norm(kind, args.repeat)
    if args.only in (None, "group_norm"):
        bench_group_norm(args.repeat)


if __name__ == "__main__":
    main()
