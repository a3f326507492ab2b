"""Causal self-attention forward + backward: frame's composition of existing ops against hand-written numpy and torch.

The block is ``plugins/ops_basic/tests/test_attention.py``'s: projections, heads split by reshape/transpose,
``q @ kᵀ / sqrt(dh)``, a causal mask through ``where``, ``softmax`` along the last axis, ``@ v``, heads merged,
output projection; the loss is ``sum(y * w)``, gradients for x and the four weights. The hand-written numpy
version is the same mathematics with the backward written out: what a fused ``scaled_dot_product_attention``
kernel would run in numpy, so it bounds what such an op could gain over the composition. torch eager (the
written-out composition and ``F.scaled_dot_product_attention``) is timed when installed. Variants are
interleaved round by round; medians and ratios to numpy are printed, with the BLAS thread count.

    python benchmarks/attention.py [--batch 16] [--seq 64] [--dim 128] [--heads 4] [--rounds 30]
"""

from __future__ import annotations

import _env  # noqa: F401 - before numpy: malloc settings, BLAS threads

import argparse
import math
import pathlib
import statistics
import sys
import time

import numpy as np

import frame_core as fc
from frame_core import ops

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "plugins" / "ops_basic" / "tests"))
from test_attention import causal_self_attention  # noqa: E402 - the block the test checks against torch


def numpy_step(x, wq, wk, wv, wo, w, heads):
    """Loss and gradients of sum(attention(x) * w), forward and backward by hand."""
    b, t, d = x.shape
    dh = d // heads
    scale = 1.0 / math.sqrt(dh)
    split = lambda m: m.reshape(b, t, heads, dh).transpose(0, 2, 1, 3)  # noqa: E731
    merge = lambda m: m.transpose(0, 2, 1, 3).reshape(b, t, d)  # noqa: E731
    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    s = (q @ k.transpose(0, 1, 3, 2)) * scale
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = merge(p @ v)
    y = o @ wo
    loss = np.sum(y * w)
    gy = w
    gwo = o.reshape(-1, d).T @ gy.reshape(-1, d)
    go = split(gy @ wo.T)
    gp = go @ v.transpose(0, 1, 3, 2)
    gv = p.transpose(0, 1, 3, 2) @ go
    gs = p * (gp - np.sum(gp * p, -1, keepdims=True)) * scale
    gq, gk = gs @ k, gs.transpose(0, 1, 3, 2) @ q
    x2 = x.reshape(-1, d)
    grads = [merge(gq).reshape(-1, d), merge(gk).reshape(-1, d), merge(gv).reshape(-1, d)]
    gx = (grads[0] @ wq.T + grads[1] @ wk.T + grads[2] @ wv.T).reshape(b, t, d)
    return loss, gx, x2.T @ grads[0], x2.T @ grads[1], x2.T @ grads[2], gwo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--blas-threads", default=None)
    args = parser.parse_args()
    b, t, d, h = args.batch, args.seq, args.dim, args.heads
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, t, d)).astype(np.float32)
    ws = [(rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32) for _ in range(4)]
    w = rng.standard_normal((b, t, d)).astype(np.float32)
    types = [f"f32[{b}, {t}, {d}]"] + [f"f32[{d}, {d}]"] * 4
    forward = fc.trace(lambda *a: ops.sum(causal_self_attention(*a, heads=h) * w), *types)
    exe = fc.compile(fc.build_backward_graph(forward, 0, list(range(5))))
    inputs = [x, *ws]

    ref = numpy_step(x, *ws, w, h)
    got = exe.run(inputs)
    for a, r in zip(got, ref):
        np.testing.assert_allclose(a, r, rtol=2e-3, atol=2e-3)
    variants = {"numpy (by hand)": lambda: numpy_step(x, *ws, w, h), "frame (composition)": lambda: exe.run(inputs)}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tx = [torch.tensor(a, requires_grad=True) for a in inputs]
        tw = torch.from_numpy(w)
        causal = torch.ones(t, t, dtype=torch.bool).tril()

        def torch_step(fused):
            xx, wq, wk, wv, wo = tx
            split = lambda m: m.reshape(b, t, h, d // h).transpose(1, 2)  # noqa: E731
            q, k, v = split(xx @ wq), split(xx @ wk), split(xx @ wv)
            if fused:
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
                o = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ v
            loss = ((o.transpose(1, 2).reshape(b, t, d) @ wo) * tw).sum()
            return torch.autograd.grad(loss, tx)
        variants["torch eager (composition)"] = lambda: torch_step(False)
        variants["torch eager (F.scaled_dot_product_attention)"] = lambda: torch_step(True)

    times = {name: [] for name in variants}
    for fn in variants.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["numpy (by hand)"])
    print(f"causal self-attention fwd+bwd, f32, batch {b}, seq {t}, dim {d}, heads {h}; BLAS threads: "
          f"{_env.blas_threads()}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:46s} median {m * 1e3:8.2f} ms   ratio to numpy {m / base:5.2f}")


if __name__ == "__main__":
    main()
