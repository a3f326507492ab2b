"""Train a small recurrent network with frame's ``scan``: a sequence task that needs memory.

    python examples/train_rnn.py [--steps 400] [--lr 0.3] [--delay 3]

The task is a delayed copy: the input is a random sequence of +1/-1 and the
target at step t is the input at step t - delay (zero before). A tanh RNN
(``h_t = tanh(x_t Wx + h_{t-1} Wh + b)``, readout ``y_t = h_t Wo + bo``)
must carry the last ``delay`` inputs in its state. The recurrence is one
``ops.scan``; ``build_backward_graph`` turns it into backpropagation through
time (a reverse scan over what the forward saved). frame_train.TrainStep inlines
the SGD update after it (one executable, one run per step; the parameters are a
named tree) and frame_train.fit runs the loop with a progress bar.
"""

from __future__ import annotations

import argparse

import numpy as np

from frame_core import ops
import frame_train as ft

HIDDEN, LENGTH, BATCH = 16, 20, 64


def rnn_loss(p, xs, targets):  # noqa: ANN001, ANN201 - traced tensors
    """Mean squared error of the readout at every step."""
    def step(h, x):  # noqa: ANN001, ANN202
        h = ops.tanh(x @ p["wx"] + h @ p["wh"] + p["b"])
        return h, h @ p["wo"] + p["bo"]
    _, ys = ops.scan(step, p["h0"], xs)
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
    params = {"h0": np.zeros((BATCH, HIDDEN), np.float32),  # the initial state (trained too)
              "wx": (rng.standard_normal((1, HIDDEN)) * 0.5).astype(np.float32),
              "wh": (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32),
              "b": np.zeros(HIDDEN, np.float32),
              "wo": (rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)).astype(np.float32),
              "bo": np.zeros(1, np.float32)}
    step = ft.TrainStep(rnn_loss, params, ft.sgd(args.lr))
    history = ft.fit(step, lambda epoch: (batch(rng, args.delay) for _ in range(args.steps)), epochs=1)
    losses = history.losses
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    print(f"delayed copy ({args.delay} steps back): loss {first:.4f} -> {last:.4f} (mean of the first and last 20 "
          f"steps) in {args.steps} steps, {history.seconds / args.steps * 1e3:.2f} ms/step (forward + backward + "
          f"update through a {LENGTH}-step scan, batch {BATCH}, hidden {HIDDEN}, one fused executable)")
    if not last < 0.5 * first:
        raise SystemExit("the loss did not fall by half: training failed")


if __name__ == "__main__":
    main()
