"""selective_scan's forward mode: its JvpFn against the rule derived from its GradientFn, and jax.jit of jax.jvp.

Batch 8, D 64, N 16, L 256, float32, variable B and C, D, z, delta_bias and softplus; every input has a tangent.
Rows, each run in turn inside every repetition (interleaved): frame's compiled JVP graph with selective_scan's
JvpFn (the default), the same graph built with the rule derived from the GradientFn (what frame used before the
JvpFn, which held the traced batch), and, when jax is installed, ``jax.jit(jax.jvp(selective_scan_ref))`` written
as Mamba's reference (``lax.scan`` over time). Prints CPU-time and wall medians, ratios, the largest difference of
the tangents against the derived rule's, the load average and the BLAS thread count (pinned to 1 by default).

    python benchmarks/selective_scan_jvp.py [--repeat 9] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--repeat", type=int, default=9)
parser.add_argument("--threads", type=int, default=1)
ARGS = parser.parse_args()
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402 - after the thread settings

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402

BATCH, DIM, N, LENGTH = 8, 64, 16, 256


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    shapes = [(BATCH, DIM, LENGTH), (BATCH, DIM, LENGTH), (DIM, N), (BATCH, N, LENGTH), (BATCH, N, LENGTH), (DIM,),
              (BATCH, DIM, LENGTH), (DIM,)]
    ranges = [(-1, 1), (-0.5, 0.5), (-1.5, -0.2)] + [(-1, 1)] * 5
    return [rng.uniform(lo, hi, s).astype(np.float32) for s, (lo, hi) in zip(shapes, ranges)]


def _frame_jvp(derived: bool):  # noqa: ANN202
    reg = fc.registry()
    schema = reg.schemas["selective_scan"]
    graph = fc.trace(lambda *xs: ops.selective_scan(*xs, delta_softplus=True),
                     *[f"f32{list(x.shape)}".replace(" ", "") for x in _inputs(np.random.default_rng(0))])
    saved = schema.jvp
    try:
        if derived:
            schema.jvp = None
        return fc.compile(fc.build_jvp_graph(graph), cache=False)
    finally:
        schema.jvp = saved


def _jax_jvp():  # noqa: ANN202
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def ref(u, delta, A, B, C, D, z, bias):  # noqa: ANN001, ANN202 - Mamba's selective_scan_ref, real A
        delta = jax.nn.softplus(delta + bias[:, None])
        da = jnp.exp(jnp.einsum("bdl,dn->lbdn", delta, A))
        dbu = jnp.einsum("bdl,bnl,bdl->lbdn", delta, B, u)

        def step(h, t):  # noqa: ANN001, ANN202
            a_t, b_t, c_t = t
            h = a_t * h + b_t
            return h, jnp.einsum("bdn,bn->bd", h, c_t)
        _, ys = jax.lax.scan(step, jnp.zeros((u.shape[0], u.shape[1], A.shape[1]), u.dtype),
                             (da, dbu, jnp.moveaxis(C, 2, 0)))
        return (jnp.moveaxis(ys, 0, 2) + u * D[:, None]) * jax.nn.silu(z)

    fn = jax.jit(lambda xs, ts: jax.jvp(ref, xs, ts))
    return lambda arrays: [np.asarray(a) for a in jax.block_until_ready(fn(tuple(arrays[:8]), tuple(arrays[8:])))]


def main() -> None:
    rng = np.random.default_rng(0)
    arrays = _inputs(rng)
    arrays += [rng.uniform(-1, 1, a.shape).astype(np.float32) for a in arrays]
    rows = {"frame JvpFn": _frame_jvp(False).run, "frame derived rule": _frame_jvp(True).run}
    jax_row = _jax_jvp()
    if jax_row is not None:
        rows["jax.jit(jax.jvp(ref))"] = jax_row
    results = {name: run([a.copy() for a in arrays]) for name, run in rows.items()}  # (first runs: compile, warm)
    cpu: dict[str, list[float]] = {name: [] for name in rows}
    wall: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(ARGS.repeat):
        for name, run in rows.items():
            copies = [a.copy() for a in arrays]
            c, w = time.process_time(), time.perf_counter()
            run(copies)
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - w)
    print(f"selective_scan JVP, batch {BATCH}, D {DIM}, N {N}, L {LENGTH}, float32; {ARGS.repeat} interleaved runs; "
          f"load average {os.getloadavg()[0]:.1f}; BLAS threads {ARGS.threads}")
    base = "frame derived rule"
    for name in rows:
        c, w = statistics.median(cpu[name]) * 1e3, statistics.median(wall[name]) * 1e3
        print(f"  {name:24s} CPU {c:8.1f} ms  wall {w:8.1f} ms   / derived: CPU "
              f"{c / (statistics.median(cpu[base]) * 1e3):.2f}x, wall {w / (statistics.median(wall[base]) * 1e3):.2f}x")
    got, want = results["frame JvpFn"][-1], results[base][-1]
    print(f"  tangent, JvpFn against the derived rule: largest difference "
          f"{np.max(np.abs(got - want)) / np.max(np.abs(want)):.2e} of the largest entry")
    if jax_row is not None:
        ref = results["jax.jit(jax.jvp(ref))"][1]
        print(f"  tangent, JvpFn against jax: largest difference {np.max(np.abs(got - ref)) / np.max(np.abs(ref)):.2e}")


if __name__ == "__main__":
    main()
