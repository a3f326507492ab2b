"""Column sums of x[N, C] (a bias gradient): numpy's add.reduce over axis 0 against frame-native's compiled sum.

``reduce_to_shape_internal(x[N, C], shape=[C])`` runs numpy's kernel until
frame-native has compiled it (``compile_column_sums``), then an in-order
column sum with numpy's bits. Prints, per shape, the median of interleaved
rounds (each round runs both kernels for about 5 ms, in a random order) and
their ratio, the load average, BLAS and thread count.

    python benchmarks/column_sums.py [--rounds 40] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.argv += [] if any(a.startswith("--blas-threads") for a in sys.argv) else ["--blas-threads", "1"]

from _env import describe_environment  # noqa: E402 - BLAS settings before numpy loads

import numpy as np

import frame_core as fc
from frame_core import ops

SHAPES = [((8, 64), "f32"), ((256, 64), "f32"), ((256, 64), "f64"), ((1024, 256), "f32"), ((4096, 16), "f32")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--blas-threads", type=int, default=None, help="(read by _env before numpy loads)")
    args = parser.parse_args()
    print(describe_environment())
    import frame_native

    rng = np.random.default_rng(0)
    kernels = {}
    for shape, dtype in SHAPES:
        exe = fc.compile(fc.trace(lambda x: ops.reduce_to_shape_internal(x, shape=[shape[1]]),
                                  fc.TensorType(dtype, shape)), cache=False)
        x = rng.standard_normal(shape).astype(np.float32 if dtype == "f32" else np.float64)
        for _ in range(3):
            exe.run([x])
        frame_native.wait(60)
        kernel = exe.instructions[0].kernel
        assert frame_native.tier_of(exe) == ["native"], frame_native.status()["notes"]
        assert kernel(x).tobytes() == np.add.reduce(x, axis=0).tobytes()
        kernels[(shape, dtype)] = {"numpy": (lambda k, a: lambda: k.numpy(a))(kernel, x),
                                   "compiled": (lambda k, a: lambda: k(a))(kernel, x)}
    print(f"column sums of x[N, C]; median of {args.rounds} rounds, each in a random order")
    for key, variants in kernels.items():
        calls = {}
        for name, fn in variants.items():
            fn()
            t0 = time.perf_counter()
            fn()
            calls[name] = max(1, int(0.005 / max(time.perf_counter() - t0, 1e-7)))
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for name in np.random.default_rng(r).permutation(list(variants)):
                t0 = time.perf_counter()
                for _ in range(calls[name]):
                    variants[name]()
                samples[name].append((time.perf_counter() - t0) / calls[name])
        med = {name: statistics.median(s) for name, s in samples.items()}
        (shape, dtype) = key
        print(f"  {dtype}[{shape[0]}, {shape[1]}]  numpy {med['numpy'] * 1e6:7.2f} us  compiled "
              f"{med['compiled'] * 1e6:7.2f} us  {med['compiled'] / med['numpy']:5.2f}x numpy")
    print(f"load avg {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
