"""The digits CNN of examples/train_digits_cnn.py, trained by frame and by PyTorch eager side by side.

Same data split, model, initialisation scheme (torch's defaults), optimiser (Adam, lr 2e-3), batch 32 and
epochs; each framework starts from its own random initial parameters. Prints the test accuracy after every
epoch and the median seconds per epoch with the ratio frame / torch (goal: no slower than torch eager).
One BLAS / torch thread by default.

    python benchmarks/digits_cnn.py [--epochs 15] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time

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


def torch_train(example, epochs: int, lr: float, seed: int) -> dict:  # noqa: ANN001
    import torch
    from torch import nn

    torch.manual_seed(seed)
    x_train, x_test, y_train, y_test = (torch.tensor(a) for a in example.load_digits(seed))
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding="same"), nn.ReLU(), nn.Conv2d(16, 32, 3, padding="same"),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    history, seconds = [], []
    for _ in range(epochs):
        start = time.perf_counter()
        order = torch.tensor(rng.permutation(len(x_train)))
        for i in range(0, len(order) - example.BATCH + 1, example.BATCH):
            batch = order[i:i + example.BATCH]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            opt.step()
        seconds.append(time.perf_counter() - start)
        with torch.no_grad():
            history.append(float((model(x_test).argmax(1) == y_test).float().mean()))
    return {"accuracy": history, "seconds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--blas-threads", type=int, default=1)
    args = p.parse_args()
    example = _example()
    print(f"digits CNN, {args.epochs} epochs, batch {example.BATCH}, BLAS: {_env.blas_threads()}")
    frame = example.train(epochs=args.epochs, lr=args.lr, seed=args.seed)
    results = {"frame": frame}
    try:
        import torch
        torch.set_num_threads(args.blas_threads)
        results["torch eager"] = torch_train(example, args.epochs, args.lr, args.seed)
    except ImportError:
        print("(torch not installed: pip install 'frame-core[compare]' for the side-by-side run)")
    print(f"\n{'epoch':>5s}" + "".join(f"{name:>14s}" for name in results))
    for e in range(args.epochs):
        print(f"{e + 1:5d}" + "".join(f"{r['accuracy'][e]:14.4f}" for r in results.values()))
    medians = {name: float(np.median(r["seconds"])) for name, r in results.items()}
    print("\nmedian seconds per epoch:")
    for name, t in medians.items():
        ratio = f"   {t / medians['torch eager']:.2f}x torch eager" if "torch eager" in medians else ""
        print(f"  {name:12s} {t:8.3f} s{ratio}")


if __name__ == "__main__":
    main()
