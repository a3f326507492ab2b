"""What a new batch size costs a training step: re-specialise the training graph, or differentiate again.

``value_and_grad`` and frame-train's ``TrainStep`` compile one executable per shape signature. When every op
on the loss's chain declares ``any_shape_gradient`` they re-specialise the training graph itself
(``specialize(training, types)``); before, and still for other graphs, they specialised the forward graph and
ran ``build_backward_graph`` again (``derive(specialize(forward, types))``). Both give the same compiled program
(checked here, bit for bit); this times the graph work plus the compile for each, and the graph work alone, on
a 784-256-256-10 MLP and a small CNN (conv2d, group_norm, max_pool2d, layer_norm, cross_entropy): interleaved
rounds, medians of CPU time (the machine is shared) and wall time, and the ratios. One BLAS thread unless ``--blas-threads N`` says otherwise.

    python benchmarks/any_shape_rebuild.py [--rounds 9] [--blas-threads 1]
"""

from __future__ import annotations

import sys

if not any(a.startswith("--blas-threads") for a in sys.argv[1:]):
    sys.argv += ["--blas-threads", "1"]

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from _env import describe_environment  # noqa: E402  (before numpy: BLAS threads)

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402


def mlp(batch: int) -> tuple[fc.Graph, list]:
    sizes = (784, 256, 256, 10)

    def loss(x, t, *ws):
        h = x
        for i in range(3):
            h = h @ ws[2 * i] + ws[2 * i + 1]
            h = ops.relu(h) if i < 2 else h
        return ops.mse_loss(h, t)
    types = [f"f32[{batch}, 784]", f"f32[{batch}, 10]"]
    for a, b in zip(sizes[:-1], sizes[1:]):
        types += [f"f32[{a}, {b}]", f"f32[{b}]"]
    return fc.trace(loss, *types), list(range(2, 8))


def cnn(batch: int) -> tuple[fc.Graph, list]:
    def loss(x, labels, w1, gw, gb, w2, lw, lb, fcw):
        h = ops.group_norm(ops.relu(ops.conv2d(x, w1, stride=2, padding="same")), gw, gb, num_groups=4)
        h = ops.max_pool2d(h, kernel_size=3, stride=2, padding="same")
        h = ops.mean(ops.conv2d(h, w2, padding=1), axes=[2, 3])
        return ops.cross_entropy(ops.layer_norm(ops.tanh(h), lw, lb) @ fcw, labels)
    types = [f"f32[{batch}, 3, 32, 32]", f"i64[{batch}]", "f32[16, 3, 3, 3]", "f32[16]", "f32[16]",
             "f32[32, 16, 3, 3]", "f32[32]", "f32[32]", "f32[32, 10]"]
    return fc.trace(loss, *types), list(range(2, 9))


def timed(fn) -> tuple[float, float]:  # noqa: ANN001
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def compare(name: str, build, traced: int, other: int, rounds: int) -> None:  # noqa: ANN001
    forward, wrt = build(traced)
    training = fc.build_backward_graph(forward, 0, wrt)
    types = build(other)[0].input_types

    def respecialise() -> fc.Executable:
        return fc.compile(fc.specialize(training, types), cache=False)

    def derive_again() -> fc.Executable:
        return fc.compile(fc.build_backward_graph(fc.specialize(forward, types), 0, wrt), cache=False)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(t.shape).astype(t.dtype.np) if t.dtype.is_float else
            rng.integers(0, 10, t.shape) for t in types]
    same = all(a.tobytes() == b.tobytes() for a, b in zip(respecialise().run(args), derive_again().run(args)))
    variants = {"respecialise": respecialise, "derive": derive_again,  # graph work + compile
                "respecialise graph": lambda: fc.specialize(training, types),  # graph work only
                "derive graph": lambda: fc.build_backward_graph(fc.specialize(forward, types), 0, wrt)}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(rounds):  # interleaved
        for key, fn in variants.items():
            times[key].append(timed(fn))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    (rw, rc), (dw, dc) = med["respecialise"], med["derive"]
    (gw, gc), (ew, ec) = med["respecialise graph"], med["derive graph"]
    print(f"{name:4s} {len(training.nodes):6d} {traced:4d}->{other:<4d} {dc * 1e3:9.1f} {rc * 1e3:9.1f} {rc / dc:7.2f}x"
          f" {ec * 1e3:9.2f} {gc * 1e3:9.2f} {gc / ec:7.2f}x  wall {dw * 1e3:.1f} -> {rw * 1e3:.1f} ms  "
          f"{'same bits' if same else 'BITS DIFFER'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--blas-threads", type=int, default=1, help="(read by _env before numpy loads)")
    args = parser.parse_args()
    print(describe_environment())
    print("CPU ms, medians: graph work + compile (derive again, re-specialise, ratio), then graph work alone")
    print("model nodes  batch     derive    respec   ratio   derive g  respec g   ratio")
    compare("mlp", mlp, 128, 77, args.rounds)
    compare("cnn", cnn, 32, 13, args.rounds)


if __name__ == "__main__":
    main()
