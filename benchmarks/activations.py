"""gelu (exact and tanh) and silu forward + backward: frame against hand-written numpy/scipy and torch eager.

The loss is ``sum(act(x) * w)`` on float32 ``[rows, cols]``; numpy computes the activation and its
derivative by hand (``scipy.special.erf`` for the exact gelu), torch with autograd. Variants are
interleaved round by round; medians and ratios to numpy are printed.

    python benchmarks/activations.py [--rows 256] [--cols 1024] [--rounds 30]
"""

from __future__ import annotations

import _env  # noqa: F401 - before numpy: malloc settings, BLAS threads

import argparse
import math
import statistics
import time

import numpy as np
from scipy import special

import frame_core as fc
from frame_core import ops


def numpy_gelu(x, w):
    cdf = 0.5 * (1.0 + special.erf(x * np.float32(1 / math.sqrt(2))))
    pdf = np.exp(-0.5 * x * x) * np.float32(1 / math.sqrt(2 * math.pi))
    return np.sum(x * cdf * w), w * (cdf + x * pdf)


def numpy_gelu_tanh(x, w):
    c, a = np.float32(math.sqrt(2 / math.pi)), np.float32(0.044715)
    t = np.tanh(c * (x + a * x ** 3))
    return np.sum(0.5 * x * (1 + t) * w), w * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x))


def numpy_silu(x, w):
    s = 1 / (1 + np.exp(-x))
    return np.sum(x * s * w), w * s * (1 + x * (1 - s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--blas-threads", default=None)
    args = parser.parse_args()
    shape = (args.rows, args.cols)
    x = np.random.default_rng(0).uniform(-4, 4, shape).astype(np.float32)
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    t = f"f32[{args.rows}, {args.cols}]"
    cases = {"gelu": (lambda v: ops.gelu(v), numpy_gelu, "gelu", {}),
             "gelu tanh": (lambda v: ops.gelu(v, approximate="tanh"), numpy_gelu_tanh, "gelu", {"approximate": "tanh"}),
             "silu": (ops.silu, numpy_silu, "silu", {})}
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print(f"BLAS threads: {_env.blas_threads()}")
    for title, (fn, by_hand, torch_name, torch_kw) in cases.items():
        exe = fc.compile(fc.build_backward_graph(fc.trace(lambda v: ops.sum(fn(v) * w), t), 0, [0]))
        loss, gx = exe.run([x])
        ref_loss, ref_gx = by_hand(x, w)
        np.testing.assert_allclose(gx, ref_gx, rtol=1e-3, atol=1e-4)
        variants = {"numpy (by hand)": lambda: by_hand(x, w), "frame": lambda: exe.run([x])}
        if torch is not None:
            tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w)
            act = getattr(torch.nn.functional, torch_name)

            def torch_step(act=act, kw=torch_kw, tx=tx, tw=tw):
                return torch.autograd.grad((act(tx, **kw) * tw).sum(), [tx])
            variants["torch eager"] = torch_step
        times = {name: [] for name in variants}
        for v in variants.values():
            v()
        for _ in range(args.rounds):
            for name, v in variants.items():
                t0 = time.perf_counter()
                v()
                times[name].append(time.perf_counter() - t0)
        base = statistics.median(times["numpy (by hand)"])
        print(f"{title} fwd+bwd f32{list(shape)}")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"  {name:20s} median {m * 1e3:8.2f} ms   ratio to numpy {m / base:5.2f}")


if __name__ == "__main__":
    main()
