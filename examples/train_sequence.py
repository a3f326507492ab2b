"""Train a tiny sequence model with frame: embedding (gather) -> causal conv1d -> selective_scan -> cross-entropy.

    python examples/train_sequence.py [--steps 600] [--lr 0.3] [--delay 2]

The task needs memory (a delayed copy): tokens are drawn uniformly from 8
symbols and the target at step t is the token seen ``delay`` steps earlier.
Chance accuracy is 1/8, and a model that sees only the current token cannot
beat it. The causal convolution has a kernel of 2, so it reaches only one step
back; the selective scan (Mamba's recurrence, with B, C and delta computed from
the sequence itself) has to carry the token the rest of the way.

The training graph comes from ``build_backward_graph`` and the update from
``build_sgd_update_graph`` (plain SGD, ARCH-065); both compile once.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import frame_core as fc
from frame_core import ops

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


def model_loss(tokens, labels, embedding, conv, conv_bias, w_delta, delta_bias, a_log, w_b, w_c, skip, readout,
               delay: int = 2):
    x = ops.transpose(ops.gather(embedding, tokens), perm=[0, 2, 1])      # [batch, embed, L]
    u = ops.conv1d(x, conv, padding="causal") + conv_bias                   # [batch, channels, L]
    y = ops.selective_scan(u, w_delta @ u, -ops.exp(a_log), w_b @ u, w_c @ u, skip, delta_bias,
                           optional_inputs=["D", "delta_bias"], delta_softplus=True)
    logits = ops.transpose(readout @ y, perm=[0, 2, 1])                     # [batch, L, vocab]
    logits = ops.slice(logits, starts=[delay], stops=[LENGTH], axes=[1])    # steps that have a target
    return [ops.cross_entropy(logits, labels), logits]


def init(rng: np.random.Generator) -> list[np.ndarray]:
    params = []
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
        params.append(p.astype(np.float32))
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
    types = [f"i64[{BATCH}, {LENGTH}]", f"i64[{BATCH}, {LENGTH - delay}]"]
    types += [fc.TensorType("f32", s) for s in shapes().values()]
    forward = fc.trace(lambda *t: model_loss(*t, delay=delay), *types)
    step_graph = fc.compile(fc.build_backward_graph(forward, 0, list(range(2, len(types)))))
    evaluate = fc.compile(forward)
    update = fc.compile(fc.build_sgd_update_graph(types[2:], lr))
    params = init(rng)
    held_out = delayed_copy(np.random.default_rng(seed + 1), delay)

    def accuracy() -> float:
        _, logits = evaluate.run([*held_out, *params])
        return float(np.mean(np.argmax(logits, axis=-1) == held_out[1]))

    accuracies = [accuracy()]
    start = time.perf_counter()
    for step in range(1, steps + 1):
        loss, _, *grads = step_graph.run([*delayed_copy(rng, delay), *params])
        params = update.run([*params, *grads])
        if step % 100 == 0 or step == steps:
            accuracies.append(accuracy())
            if report is not None:
                report(f"step {step:4d}  loss {float(loss):.4f}  held-out accuracy {accuracies[-1]:.1%}  "
                       f"({time.perf_counter() - start:.1f} s)")
    return accuracies


if __name__ == "__main__":
    main()
