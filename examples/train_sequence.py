"""Train a tiny sequence model with frame: embedding (gather) -> causal conv1d -> selective_scan -> cross-entropy.

    python examples/train_sequence.py [--steps 600] [--lr 0.3] [--delay 2]

The task needs memory (a delayed copy): tokens are drawn uniformly from 8
symbols and the target at step t is the token seen ``delay`` steps earlier.
Chance accuracy is 1/8, and a model that sees only the current token cannot
beat it. The causal convolution has a kernel of 2, so it reaches only one step
back; the selective scan (Mamba's recurrence, with B, C and delta computed from
the sequence itself) has to carry the token the rest of the way.

The parameters are a named tree; frame_train.TrainStep compiles forward, backward and the SGD update as
one executable and frame_train.fit runs the loop.
"""

from __future__ import annotations

import argparse

import numpy as np

import frame_core as fc
from frame_core import ops
import frame_train as ft

VOCAB, LENGTH, BATCH = 8, 16, 32
EMBED, CHANNELS, STATE = 16, 24, 8


def shapes() -> dict[str, tuple[int, ...]]:
    return {
        "embedding": (VOCAB, EMBED),            # gather's table
        "conv": (CHANNELS, EMBED, 2),           # causal, one step back
        "conv_bias": (CHANNELS, 1),
        "w_delta": (CHANNELS, CHANNELS),        # delta_t = softplus(w_delta @ u_t + delta_bias)
        "delta_bias": (CHANNELS,),
        "a_log": (CHANNELS, STATE),             # A = -exp(a_log) < 0: a decaying state
        "w_b": (STATE, CHANNELS),               # B_t = w_b @ u_t (what to write)
        "w_c": (STATE, CHANNELS),               # C_t = w_c @ u_t (what to read)
        "skip": (CHANNELS,),                    # D
        "readout": (VOCAB, CHANNELS),
    }


def model_logits(p, tokens, delay: int = 2):  # noqa: ANN001, ANN201 - traced tensors
    x = ops.transpose(ops.gather(p["embedding"], tokens), perm=[0, 2, 1])          # [batch, embed, L]
    u = ops.conv1d(x, p["conv"], padding="causal") + p["conv_bias"]                 # [batch, channels, L]
    y = ops.selective_scan(u, p["w_delta"] @ u, -ops.exp(p["a_log"]), p["w_b"] @ u, p["w_c"] @ u, p["skip"],
                           p["delta_bias"], optional_inputs=["D", "delta_bias"], delta_softplus=True)
    logits = ops.transpose(p["readout"] @ y, perm=[0, 2, 1])                        # [batch, L, vocab]
    return ops.slice(logits, starts=[delay], stops=[LENGTH], axes=[1])              # steps that have a target


def model_loss(p, tokens, labels, delay: int = 2):  # noqa: ANN001, ANN201
    return ops.cross_entropy(model_logits(p, tokens, delay), labels)


def init(rng: np.random.Generator) -> dict[str, np.ndarray]:
    params = {}
    for name, shape in shapes().items():
        if name == "a_log":  # S4D-real: decay rates 1..N, so the state remembers on several time scales
            p = np.log(np.tile(np.arange(1, STATE + 1), (CHANNELS, 1)))
        elif name == "delta_bias":
            p = np.full(shape, np.log(np.expm1(0.3)))  # softplus(bias) = 0.3: the state's first step size
        elif name == "conv_bias":
            p = np.zeros(shape)
        elif name == "skip":
            p = np.ones(shape)
        else:
            p = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        params[name] = p.astype(np.float32)
    return params


def delayed_copy(rng: np.random.Generator, delay: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = rng.integers(0, VOCAB, (BATCH, LENGTH))
    return tokens, tokens[:, :LENGTH - delay]  # labels for steps delay..L-1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--delay", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.steps < 0 or not 0 <= args.delay < LENGTH:
        parser.error(f"--steps must be >= 0 and --delay in 0..{LENGTH - 1}, got {args.steps} and {args.delay}")
    accuracies = train(args.steps, args.lr, args.delay, args.seed, report=print)
    print(f"accuracy {accuracies[0]:.1%} -> {accuracies[-1]:.1%} (chance {1 / VOCAB:.1%})")


def train(steps: int, lr: float, delay: int, seed: int = 0, report=None) -> list[float]:
    """Train with SGD; return the held-out accuracy before training and after every 100 steps (and at the end)."""
    rng = np.random.default_rng(seed)
    params = init(rng)
    held_out = delayed_copy(np.random.default_rng(seed + 1), delay)
    step = ft.TrainStep(lambda p, tokens, labels: model_loss(p, tokens, labels, delay), params, ft.sgd(lr))
    evaluate = fc.compile(fc.trace_params(lambda p, tokens: model_logits(p, tokens, delay), params, held_out[0]))

    def accuracy() -> float:
        logits, = evaluate.run([*fc.params.flatten(step.params)[1], held_out[0]])
        return float(np.mean(np.argmax(logits, axis=-1) == held_out[1]))

    accuracies = [accuracy()]

    def every_hundred(number: int, loss: float) -> None:
        if number % 100 == 0 or number == steps:
            accuracies.append(accuracy())
            if report is not None:
                report(f"step {number:4d}  loss {loss:.4f}  held-out accuracy {accuracies[-1]:.1%}")
    ft.fit(step, lambda epoch: (delayed_copy(rng, delay) for _ in range(steps)), epochs=1, progress=False,
           callback=every_hundred)
    return accuracies


if __name__ == "__main__":
    main()
