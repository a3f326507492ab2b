"""Train a small MLP regression with frame: trace, differentiate, compile, run SGD.

    python examples/train_mlp.py [--steps 600] [--lr 0.02]

The model fits y = sin(x @ a) on 256 random points with a 8-64-64-1 ReLU
network. The training graph comes from build_backward_graph, the update graph
from build_sgd_update_graph (ARCH-065); both compile once and hit the compile
cache on every later step.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import frame_core as fc
from frame_core import ops

SIZES = (8, 64, 64, 1)
BATCH = 256


def mlp_loss(x, t, w1, b1, w2, b2, w3, b3):
    h = ops.relu(x @ w1 + b1)
    h = ops.relu(h @ w2 + b2)
    return ops.mse_loss(h @ w3 + b3, t)


def coverage_summary(reg: fc.Registry) -> str:
    # the census counts as `frame ops list` and `frame audit gradients` do; the coverage is of the packs' ops
    user = reg.user_ops()
    with_grad = sum(s.differentiable == "yes" for s in user)
    declared = sum(s.differentiable == "no" for s in user)
    missing = len(user) - with_grad - declared
    closed = sum(reg.closure[s.name].closed for s in user)
    return (f"{reg.op_census()}\ngradient coverage of the packs' {len(user)} ops: {with_grad} with a GradientFn, "
            f"{declared} declared not differentiable, {missing} missing; {closed} closed under differentiation "
            "(any order)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, (BATCH, SIZES[0])).astype(np.float32)
    t = np.sin(x @ rng.standard_normal((SIZES[0], 1))).astype(np.float32)
    params, types = [], [f"f32[{BATCH}, {SIZES[0]}]", f"f32[{BATCH}, {SIZES[-1]}]"]
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params += [(rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32),
                   np.zeros(fan_out, np.float32)]
        types += [f"f32[{fan_in}, {fan_out}]", f"f32[{fan_out}]"]

    forward = fc.trace(mlp_loss, *types)
    training = fc.build_backward_graph(forward, 0, list(range(2, len(types))))
    update = fc.build_sgd_update_graph(types[2:], args.lr)
    print(f"forward graph: {len(forward.nodes)} nodes; training graph: {len(training.nodes)} nodes "
          f"(outputs: loss + {len(types) - 2} gradients)")

    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        loss, *grads = fc.compile(training).run([x, t, *params])
        params = fc.compile(update).run([*params, *grads])
        losses.append(float(loss))
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            bar = "#" * max(1, int(30 * losses[-1] / losses[0]))
            print(f"step {step:5d}  loss {losses[-1]:.6f}  {bar}")
    elapsed = time.perf_counter() - start
    info = fc.compile_cache.info()
    print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} ({losses[0] / losses[-1]:.1f}x lower) in {args.steps} steps, "
          f"{elapsed / args.steps * 1e3:.3f} ms/step; compile cache: {info.misses} misses, {info.hits} hits")
    print(coverage_summary(fc.registry()))


if __name__ == "__main__":
    main()
