"""Train a small MLP regression with frame: one fused training step, driven by frame_train.fit.

    python examples/train_mlp.py [--epochs 150] [--lr 0.01] [--batch 64]

The model fits y = sin(x @ a) on 256 random points with a 8-64-64-1 ReLU network whose parameters are a
named tree ({"fc1": {"w", "b"}, ...}). frame_train.TrainStep traces the loss once, differentiates it and
inlines Adam's update into the same graph: one executable and one run per step, any batch size (the short
last batch of an epoch compiles once), the learning rate (a cosine schedule) a runtime input that never
recompiles. fit shuffles with a seeded generator, shows a progress bar and writes metrics.jsonl for
`frame plot metrics.jsonl -o curve.png`.
"""

from __future__ import annotations

import argparse

import numpy as np

import frame_core as fc
from frame_core import ops
import frame_train as ft

SIZES = (8, 64, 64, 1)
POINTS = 256


def mlp_loss(params, x, t):  # noqa: ANN001, ANN201 - traced tensors
    h = x
    for i in range(1, len(params) + 1):
        h = h @ params[f"fc{i}"]["w"] + params[f"fc{i}"]["b"]
        if i < len(params):
            h = ops.relu(h)
    return ops.mse_loss(h, t)


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
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metrics", default=None, help="write JSON-lines metrics here (for `frame plot`)")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, (POINTS, SIZES[0])).astype(np.float32)
    t = np.sin(x @ rng.standard_normal((SIZES[0], 1))).astype(np.float32)
    params = {f"fc{i}": {"w": (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32),
                         "b": np.zeros(fan_out, np.float32)}
              for i, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:]), 1)}

    steps_per_epoch = -(-POINTS // args.batch)
    step = ft.TrainStep(mlp_loss, params, ft.adam(ft.cosine(args.lr, args.epochs * steps_per_epoch, alpha=0.05)))
    history = ft.fit(step, (x, t), epochs=args.epochs, batch_size=args.batch, shuffle=np.random.default_rng(args.seed),
                     metrics_path=args.metrics, progress=True)
    exe = step.executables()[0]
    shapes = exe.specializations()
    print(f"fused step graph: {len(step.graph.nodes)} nodes, inputs {[v.name for v in step.graph.inputs][:6]}...")
    first, last = history.epoch_losses[0], history.epoch_losses[-1]
    print(f"loss {first:.6f} -> {last:.6f} ({first / last:.1f}x lower, epoch means) in {history.steps} steps, "
          f"{history.seconds / history.steps * 1e3:.3f} ms/step with the loop; batch {args.batch} and a short last "
          f"batch of {POINTS % args.batch or args.batch}: {shapes.misses} extra compile(s), {shapes.hits} runs served "
          "from the shape cache")
    if not last < 0.2 * first:
        raise SystemExit("the loss did not fall five-fold: training failed")
    print(coverage_summary(fc.registry()))


if __name__ == "__main__":
    main()
