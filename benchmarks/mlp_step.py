"""One training step of a 784-256-256-10 ReLU MLP with mse loss, float32: frame against hand-written numpy.

A step is forward, backward and SGD. frame runs the training graph from
``build_backward_graph`` and the update graph from ``build_sgd_update_graph``
(two compiled executables); numpy is the same mathematics written by hand;
PyTorch eager (CPU) is timed too when installed. Prints median step times
and ratios to numpy.

    python benchmarks/mlp_step.py [--batches 16 128 1024] [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _env import describe_environment  # sets the malloc thresholds before numpy loads (see _env.py)

import numpy as np

import frame_core as fc
from frame_core import ops

SIZES = (784, 256, 256, 10)
LR = 0.01


def init(rng: np.random.Generator) -> list[np.ndarray]:
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params.append((rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32))
        params.append(np.zeros(fan_out, np.float32))
    return params


def mlp_loss(x, t, w1, b1, w2, b2, w3, b3):
    h1 = ops.relu(x @ w1 + b1)
    h2 = ops.relu(h1 @ w2 + b2)
    return ops.mse_loss(h2 @ w3 + b3, t)


def frame_step_fn(batch: int):
    types = [f"f32[{batch}, {SIZES[0]}]", f"f32[{batch}, {SIZES[-1]}]"]
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        types += [f"f32[{fan_in}, {fan_out}]", f"f32[{fan_out}]"]
    forward = fc.trace(mlp_loss, *types)
    train = fc.compile(fc.build_backward_graph(forward, 0, list(range(2, 8))))
    update = fc.compile(fc.build_sgd_update_graph(types[2:], LR))

    def step(x, t, params):
        loss, *grads = train.run([x, t, *params])
        return loss, update.run([*params, *grads])
    return step, train, update


def numpy_step(x, t, params):
    w1, b1, w2, b2, w3, b3 = params
    a1 = x @ w1 + b1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ w2 + b2
    h2 = np.maximum(a2, 0)
    y = h2 @ w3 + b3
    d = y - t
    loss = np.mean(d * d)
    gy = d * (2.0 / d.size)
    gw3 = h2.T @ gy
    gb3 = gy.sum(axis=0)
    gh2 = gy @ w3.T
    ga2 = gh2 * (a2 > 0)
    gw2 = h1.T @ ga2
    gb2 = ga2.sum(axis=0)
    gh1 = ga2 @ w2.T
    ga1 = gh1 * (a1 > 0)
    gw1 = x.T @ ga1
    gb1 = ga1.sum(axis=0)
    grads = (gw1, gb1, gw2, gb2, gw3, gb3)
    return loss, [p - LR * g for p, g in zip(params, grads)]


def torch_step_fn():
    try:
        import torch
    except ImportError:
        return None

    def step(x, t, params):
        for p in params:
            p.requires_grad_(True)
        w1, b1, w2, b2, w3, b3 = params
        h1 = torch.relu(x @ w1 + b1)
        h2 = torch.relu(h1 @ w2 + b2)
        loss = torch.nn.functional.mse_loss(h2 @ w3 + b3, t)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            return loss, [(p - LR * g).detach() for p, g in zip(params, grads)]
    return step


def settle_native(step, x, t, params) -> None:
    """With frame-native installed, run a few steps and wait until its compiled kernels are swapped in."""
    try:
        import frame_native
    except ImportError:
        return
    for _ in range(3):
        step(x, t, params)
    frame_native.wait(60)


def timed(step, x, t, params, steps: int) -> float:
    for _ in range(5):
        step(x, t, params)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        _, params = step(x, t, params)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--blas-threads", type=int, default=None, help="(read by _env before numpy loads)")
    args = parser.parse_args()
    print(describe_environment())
    rng = np.random.default_rng(0)
    torch_step = torch_step_fn()
    print(f"{'batch':>6} {'numpy ms':>9} {'frame ms':>9} {'frame/numpy':>12} {'torch ms':>9} {'frame/torch':>12}")
    for batch in args.batches:
        x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
        t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
        params = init(rng)
        step, train, _ = frame_step_fn(batch)
        l_frame, _ = step(x, t, params)
        settle_native(step, x, t, params)
        l_numpy, _ = numpy_step(x, t, params)
        assert np.allclose(l_frame, l_numpy, rtol=1e-4), (l_frame, l_numpy)
        t_np = timed(numpy_step, x, t, params, args.steps)
        t_fr = timed(step, x, t, params, args.steps)
        line = f"{batch:6d} {t_np * 1e3:9.3f} {t_fr * 1e3:9.3f} {t_fr / t_np:11.2f}x"
        if torch_step is not None:
            import torch

            tx, tt = torch.from_numpy(x), torch.from_numpy(t)
            tp = [torch.from_numpy(p.copy()) for p in params]
            t_to = timed(torch_step, tx, tt, tp, args.steps)
            line += f" {t_to * 1e3:9.3f} {t_fr / t_to:11.2f}x"
        print(line)
        if batch == max(args.batches):
            mem = train.memory
            print(f"       training graph memory at batch {batch}: planned peak {mem['peak_bytes'] / 2**20:.2f} MiB, "
                  f"unplanned {mem['unplanned_bytes'] / 2**20:.2f} MiB "
                  f"({mem['peak_bytes'] / max(mem['unplanned_bytes'], 1):.0%})")


if __name__ == "__main__":
    main()
