"""The digits CNN of examples/train_digits_cnn.py, trained by frame and by PyTorch eager side by side.

Same data split, model, initialisation scheme (torch's defaults), optimiser (Adam, lr 2e-3), batch 32 and
epochs; each framework starts from its own random initial parameters. Epochs are interleaved (one of frame,
one of torch, in turn) and timed without the test-set evaluation that follows each. Prints the test accuracy
after every epoch and the median wall and CPU seconds per epoch with the ratios frame / torch (goal: no
slower than torch eager) and the load average. One BLAS / torch thread by default.

    python benchmarks/digits_cnn.py [--epochs 15] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import sys
import time
from collections.abc import Callable

sys.argv += [] if any(a.startswith("--blas-threads") for a in sys.argv) else ["--blas-threads", "1"]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _env  # noqa: E402,F401 - malloc and BLAS settings before numpy loads

import numpy as np  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_digits_cnn.py"


def _example():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("train_digits_cnn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def frame_trainer(example, lr: float, seed: int) -> tuple[Callable[[], None], Callable[[], float]]:  # noqa: ANN001
    """(one epoch of examples/train_digits_cnn.py's loop, made of its own pieces; the test accuracy)."""
    from frame_ops_nn.init import named_leaves

    x_train, x_test, y_train, y_test = example.load_digits(seed)
    rng = np.random.default_rng(seed)
    params = example.init(rng)
    step, _ = example.compile_training(params)
    leaves = list(named_leaves(params).values())
    opt = example.Adam(leaves, lr)

    def epoch() -> None:
        order = rng.permutation(len(x_train))
        for i in range(0, len(order) - example.BATCH + 1, example.BATCH):
            batch = order[i:i + example.BATCH]
            _, *grads = step.run([*leaves, x_train[batch], y_train[batch]])
            opt.step(leaves, grads)
    return epoch, lambda: example.accuracy(params, x_test, y_test)


def torch_trainer(example, lr: float, seed: int) -> tuple[Callable[[], None], Callable[[], float]]:  # noqa: ANN001
    import torch
    from torch import nn

    torch.manual_seed(seed)
    x_train, x_test, y_train, y_test = (torch.tensor(a) for a in example.load_digits(seed))
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding="same"), nn.ReLU(), nn.Conv2d(16, 32, 3, padding="same"),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)

    def epoch() -> None:
        order = torch.tensor(rng.permutation(len(x_train)))
        for i in range(0, len(order) - example.BATCH + 1, example.BATCH):
            batch = order[i:i + example.BATCH]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            opt.step()

    def accuracy() -> float:
        with torch.no_grad():
            return float((model(x_test).argmax(1) == y_test).float().mean())
    return epoch, accuracy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--blas-threads", type=int, default=1)
    args = p.parse_args()
    example = _example()
    print(f"digits CNN, {args.epochs} epochs, batch {example.BATCH}, BLAS: {_env.blas_threads()}")
    trainers = {"frame": frame_trainer(example, args.lr, args.seed)}
    try:
        import torch
        torch.set_num_threads(args.blas_threads)
        trainers["torch eager"] = torch_trainer(example, args.lr, args.seed)
    except ImportError:
        print("(torch not installed: pip install 'frame-core[compare]' for the side-by-side run)")
    accuracy = {name: [] for name in trainers}
    wall = {name: [] for name in trainers}
    cpu = {name: [] for name in trainers}
    for _ in range(args.epochs):  # interleaved: one epoch of each in turn, so that both see the same load
        for name, (epoch, test) in trainers.items():
            c0, t0 = time.process_time(), time.perf_counter()
            epoch()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            accuracy[name].append(test())  # untimed, as the example times its epochs
    print(f"\n{'epoch':>5s}" + "".join(f"{name:>14s}" for name in trainers))
    for e in range(args.epochs):
        print(f"{e + 1:5d}" + "".join(f"{accuracy[name][e]:14.4f}" for name in trainers))
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"\nmedian seconds per epoch, wall and CPU (load average {load}):")
    base = "torch eager" if "torch eager" in trainers else None
    for name in trainers:
        w, c = float(np.median(wall[name])), float(np.median(cpu[name]))
        ratio = (f"   {w / np.median(wall[base]):.2f}x / {c / np.median(cpu[base]):.2f}x torch eager"
                 if base else "")
        print(f"  {name:12s} wall {w:8.3f} s   cpu {c:8.3f} s{ratio}")


if __name__ == "__main__":
    main()
