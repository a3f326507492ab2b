"""A classifier's training step with cross_entropy, float32: frame against hand-written numpy (and torch eager).

The model is ``logits = relu(x @ w1 + b1) @ w2 + b2`` with ``cross_entropy(logits, labels)``; a step is
forward, backward and SGD. frame runs the training graph from ``build_backward_graph`` and the update graph
from ``build_sgd_update_graph``; numpy is the same mathematics written by hand (a stable log-softmax, the
gradient ``(softmax - one_hot) / N``); PyTorch eager (CPU) is timed when installed. Variants are interleaved
round by round, so a busy machine slows them alike; medians and ratios to numpy are printed, with the BLAS
thread count.

    python benchmarks/classification_step.py [--batch 256] [--hidden 256] [--classes 10 1000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# glibc's malloc returning memory to the OS between steps would be timed too (TEAM.md); set before start-up
_MALLOC = {"MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "67108864", "MALLOC_MMAP_THRESHOLD_": "67108864"}
if any(os.environ.get(k) != v for k, v in _MALLOC.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **_MALLOC})

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402

FEATURES, LR = 784, 0.05


def blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        pinned = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
        return pinned or f"not pinned (BLAS default: up to {os.cpu_count()} cores)"
    return ", ".join(f"{i['internal_api']} {i['num_threads']}" for i in threadpool_info() if i["user_api"] == "blas")


def frame_step_fn(batch: int, hidden: int, classes: int):
    types = [f"f32[{batch}, {FEATURES}]", f"i64[{batch}]", f"f32[{FEATURES}, {hidden}]", f"f32[{hidden}]",
             f"f32[{hidden}, {classes}]", f"f32[{classes}]"]
    loss = fc.trace(lambda x, t, w1, b1, w2, b2: ops.cross_entropy(ops.relu(x @ w1 + b1) @ w2 + b2, t), *types)
    train = fc.compile(fc.build_backward_graph(loss, 0, [2, 3, 4, 5]))
    update = fc.compile(fc.build_sgd_update_graph(types[2:], LR))

    def step(x, t, params):
        value, *grads = train.run([x, t, *params])
        return value, update.run([*params, *grads])
    return step


def numpy_step(x, t, params):
    w1, b1, w2, b2 = params
    a1 = x @ w1 + b1
    h1 = np.maximum(a1, 0)
    z = h1 @ w2 + b2
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(t))
    loss = np.mean(np.log(s[:, 0]) - z[rows, t])
    gz = e / s
    gz[rows, t] -= 1.0
    gz /= len(t)
    gw2, gb2 = h1.T @ gz, gz.sum(axis=0)
    ga1 = (gz @ w2.T) * (a1 > 0)
    gw1, gb1 = x.T @ ga1, ga1.sum(axis=0)
    return loss, [p - LR * g for p, g in zip(params, (gw1, gb1, gw2, gb2))]


def torch_step_fn():
    try:
        import torch
    except ImportError:
        return None

    def step(x, t, params):
        for p in params:
            p.requires_grad_(True)
        w1, b1, w2, b2 = params
        loss = torch.nn.functional.cross_entropy(torch.relu(x @ w1 + b1) @ w2 + b2, t)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            return loss, [(p - LR * g).detach() for p, g in zip(params, grads)]
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--classes", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"BLAS threads: {blas_threads()}; batch {args.batch}, {FEATURES}-{args.hidden}-C, float32")
    rng = np.random.default_rng(0)
    torch_step = torch_step_fn()
    print(f"{'C':>5} {'numpy ms':>9} {'frame ms':>9} {'frame/numpy':>12} {'torch ms':>9} {'frame/torch':>12}")
    for classes in args.classes:
        x = rng.standard_normal((args.batch, FEATURES)).astype(np.float32)
        t = rng.integers(0, classes, args.batch)
        params = [(rng.standard_normal((FEATURES, args.hidden)) * 0.05).astype(np.float32),
                  np.zeros(args.hidden, np.float32),
                  (rng.standard_normal((args.hidden, classes)) * 0.05).astype(np.float32), np.zeros(classes, np.float32)]
        variants = {"numpy": (numpy_step, x, t, params), "frame": (frame_step_fn(args.batch, args.hidden, classes), x, t,
                                                                    params)}
        if torch_step is not None:
            import torch

            variants["torch"] = (torch_step, torch.from_numpy(x), torch.from_numpy(t),
                                 [torch.from_numpy(p.copy()) for p in params])
        l_frame, _ = variants["frame"][0](x, t, params)
        l_numpy, _ = numpy_step(x, t, params)
        assert np.allclose(l_frame, l_numpy, rtol=1e-4), (l_frame, l_numpy)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(3):  # warm-up
            for step, *data in variants.values():
                step(*data)
        for _ in range(args.rounds):
            for name, (step, *data) in variants.items():
                t0 = time.perf_counter()
                step(*data)
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        line = f"{classes:5d} {med['numpy'] * 1e3:9.3f} {med['frame'] * 1e3:9.3f} {med['frame'] / med['numpy']:11.2f}x"
        if "torch" in med:
            line += f" {med['torch'] * 1e3:9.3f} {med['frame'] / med['torch']:11.2f}x"
        print(line)


if __name__ == "__main__":
    main()
