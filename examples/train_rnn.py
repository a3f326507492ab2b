"""Train a small recurrent network with frame's ``scan``: a sequence task that needs memory.

    python examples/train_rnn.py [--steps 400] [--lr 0.3] [--delay 3]

The task is a delayed copy: the input is a random sequence of +1/-1 and the
target at step t is the input at step t - delay (zero before). A tanh RNN
(``h_t = tanh(x_t Wx + h_{t-1} Wh + b)``, readout ``y_t = h_t Wo + bo``)
must carry the last ``delay`` inputs in its state. The recurrence is one
``ops.scan``; ``build_backward_graph`` turns it into backpropagation through
time (a reverse scan over what the forward saved), and the SGD update graph
is ``build_sgd_update_graph``. Both compile once.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import frame_core as fc
from frame_core import ops

HIDDEN, LENGTH, BATCH = 16, 20, 64


def rnn_loss(xs, targets, h0, wx, wh, b, wo, bo):  # noqa: ANN001, ANN201 - traced tensors
    """Mean squared error of the readout at every step."""
    def step(h, x):  # noqa: ANN001, ANN202
        h = ops.tanh(x @ wx + h @ wh + b)
        return h, h @ wo + bo
    _, ys = ops.scan(step, h0, xs)
    return ops.mse_loss(ys, targets)


def batch(rng: np.random.Generator, delay: int) -> tuple[np.ndarray, np.ndarray]:
    xs = rng.choice(np.array([-1.0, 1.0], np.float32), size=(LENGTH, BATCH, 1))
    targets = np.zeros_like(xs)
    targets[delay:] = xs[:-delay]
    return xs, targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--delay", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    params = [np.zeros((BATCH, HIDDEN), np.float32),  # h0 (trained too)
              (rng.standard_normal((1, HIDDEN)) * 0.5).astype(np.float32),
              (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32),
              np.zeros(HIDDEN, np.float32),
              (rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)).astype(np.float32),
              np.zeros(1, np.float32)]
    types = [f"f32[{LENGTH}, {BATCH}, 1]", f"f32[{LENGTH}, {BATCH}, 1]"] + [f"f32{list(p.shape)}" for p in params]
    training = fc.compile(fc.build_backward_graph(fc.trace(rnn_loss, *types), 0, list(range(2, len(types)))))
    update = fc.compile(fc.build_sgd_update_graph(types[2:], args.lr))

    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        xs, targets = batch(rng, args.delay)
        loss, *grads = training.run([xs, targets, *params])
        params = update.run([*params, *grads])
        losses.append(float(loss))
        if step % max(1, args.steps // 8) == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.4f}  " + "#" * max(1, int(40 * losses[-1] / losses[0])))
    elapsed = time.perf_counter() - start
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    print(f"delayed copy ({args.delay} steps back): loss {first:.4f} -> {last:.4f} (mean of the first and last 20 "
          f"steps) in {args.steps} steps, {elapsed / args.steps * 1e3:.2f} ms/step (forward + backward through a "
          f"{LENGTH}-step scan, batch {BATCH}, hidden {HIDDEN})")
    if not last < 0.5 * first:
        raise SystemExit("the loss did not fall by half: training failed")


if __name__ == "__main__":
    main()
