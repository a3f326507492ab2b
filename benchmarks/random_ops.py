"""Random ops: dropout forward + backward and random_normal, frame against hand-written numpy and torch eager.

frame's dropout regenerates its mask from the key in the backward pass (nothing is stored), so a step draws
the bits twice; the numpy reference draws them once from the same generator (Philox-4x64 through
``numpy.random.Philox.random_raw``) and keeps the mask, as torch does. ``random_normal`` is compared with
numpy's ``Generator(Philox).standard_normal`` (a different algorithm, the ziggurat) and ``torch.randn``.
Variants are interleaved round by round; medians and ratios to numpy are printed.

    python benchmarks/random_ops.py [--rows 256] [--cols 1024] [--rounds 30]
"""

from __future__ import annotations

import _env  # noqa: F401 - before numpy: malloc settings, BLAS threads

import argparse
import statistics
import time

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_ops_basic import random as fr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--blas-threads", default=None)
    args = parser.parse_args()
    shape = (args.rows, args.cols)
    n = args.rows * args.cols
    rate = 0.1
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    key = fr.key(0)
    t = f"f32[{args.rows}, {args.cols}]"
    dropout = fc.compile(fc.build_backward_graph(
        fc.trace(lambda key, x: ops.sum(ops.dropout(x, key, rate=rate) * w), "i64[2]", t), 0, [1]))
    normal = fc.compile(fc.trace(lambda key: ops.random_normal(key, shape=shape, dtype="f32"), "i64[2]"))

    def numpy_dropout():
        bits = np.random.Philox(key=key.view(np.uint64)).random_raw(n).reshape(shape)
        mask = (bits >= np.uint64(fr.threshold(rate))).astype(np.float32) * np.float32(1 / (1 - rate))
        loss = np.sum(x * mask * w)
        return loss, w * mask

    groups = {
        f"dropout fwd+bwd f32{list(shape)}": {"numpy (mask kept)": numpy_dropout,
                                              "frame": lambda: dropout.run([key, x])},
        f"random_normal f32{list(shape)}": {
            "numpy (Generator(Philox).standard_normal)":
                lambda: np.random.Generator(np.random.Philox(0)).standard_normal(shape, np.float32),
            "frame": lambda: normal.run([key])},
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w)

        def torch_dropout():
            loss = (torch.nn.functional.dropout(tx, rate, training=True) * tw).sum()
            return torch.autograd.grad(loss, [tx])
        groups[f"dropout fwd+bwd f32{list(shape)}"]["torch eager"] = torch_dropout
        groups[f"random_normal f32{list(shape)}"]["torch eager (torch.randn)"] = lambda: torch.randn(*shape)

    print(f"BLAS threads: {_env.blas_threads()}")
    for title, variants in groups.items():
        times = {name: [] for name in variants}
        for fn in variants.values():
            fn()
        for _ in range(args.rounds):
            for name, fn in variants.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        base = statistics.median(next(iter(times.values())))
        print(title)
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"  {name:44s} median {m * 1e3:8.2f} ms   ratio to numpy {m / base:5.2f}")


if __name__ == "__main__":
    main()
