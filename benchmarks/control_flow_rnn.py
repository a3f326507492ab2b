"""An Elman RNN (tanh) trained through ``scan``: forward + backward against hand-written numpy BPTT and torch eager.

The model: ``h_t = tanh(x_t Wx + h_{t-1} Wh + b)``, loss ``sum_t <h_t, R_t>``,
gradients with respect to ``h0, Wx, Wh, b``. frame runs the training graph
``build_backward_graph`` makes from the traced ``scan`` (one compiled
executable); numpy is backpropagation through time derived by hand (it keeps
the hidden states, as frame's trajectory does); torch is eager autograd.
"frame fast_math" is the same graph compiled with ``fast_math=True``: float32
tanh approximated (within 7 ulp; jax.jit's within 5) and compiled by frame-native,
inside the scan bodies (docs/fast-math.md).

Also reported:
- the runtime's overhead per loop iteration: a scan whose body is one scalar
  add, its time per step minus the add's own kernel time;
- the compile time of the training graph (the loop bodies are compiled once
  each, inside it);
- the gradient of a data-dependent ``loop`` (a while loop: jax has no reverse
  mode for ``lax.while_loop``, which needs static bounds; jax is not
  installed here, so only frame's numbers are printed).

    python benchmarks/control_flow_rnn.py [--hidden 64] [--steps 100] [--batch 32] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# One BLAS thread for every contestant (set before numpy loads OpenBLAS): small matrices on a shared 2-core
# machine only thrash with more; FRAME_BENCH_THREADS=N changes it.
THREADS = os.environ.get("FRAME_BENCH_THREADS", "1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, THREADS)
if THREADS == "1":  # jax (XLA's CPU backend) on one thread too
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402

INPUT = 32


def rnn_loss(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN201 - traced tensors
    _, hs = ops.scan(lambda h, x: (lambda n: (n, n))(ops.tanh(x @ wx + h @ wh + b)), h0, xs)
    return ops.sum(hs * r)


def frame_step(hidden: int, steps: int, batch: int, dtype: str, fast_math: bool = False) -> tuple[fc.Executable, float]:
    d = dtype
    types = [f"{d}[{batch}, {hidden}]", f"{d}[{steps}, {batch}, {INPUT}]", f"{d}[{INPUT}, {hidden}]",
             f"{d}[{hidden}, {hidden}]", f"{d}[{hidden}]", f"{d}[{steps}, {batch}, {hidden}]"]
    t0 = time.perf_counter()
    training = fc.build_backward_graph(fc.trace(rnn_loss, *types), 0, [0, 2, 3, 4])
    exe = fc.compile(training, cache=False, fast_math=fast_math)
    return exe, time.perf_counter() - t0


def numpy_step(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN201
    hs = np.empty((xs.shape[0], *h0.shape), h0.dtype)
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ wx + h @ wh + b)
        hs[t] = h
    loss = np.sum(hs * r)
    gwx, gwh, gb = np.zeros_like(wx), np.zeros_like(wh), np.zeros_like(b)
    gh = np.zeros_like(h0)
    for t in range(xs.shape[0] - 1, -1, -1):
        ga = (gh + r[t]) * (1.0 - hs[t] * hs[t])
        prev = hs[t - 1] if t else h0
        gwx += xs[t].T @ ga
        gwh += prev.T @ ga
        gb += ga.sum(axis=0)
        gh = ga @ wh.T
    return loss, gh, gwx, gwh, gb


def torch_step_fn():  # noqa: ANN201
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(int(THREADS))

    def step(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN202
        leaves = [h0.requires_grad_(True), wx.requires_grad_(True), wh.requires_grad_(True), b.requires_grad_(True)]
        h, rows = h0, []
        for t in range(xs.shape[0]):
            h = torch.tanh(xs[t] @ wx + h @ wh + b)
            rows.append(h)
        loss = (torch.stack(rows) * r).sum()
        return loss, *torch.autograd.grad(loss, leaves)
    return step


def jax_step_fn():  # noqa: ANN201
    """jax.jit of the loss and its gradients through ``lax.scan``, or None when jax is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def loss(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN202
        def body(h, x):  # noqa: ANN001, ANN202
            n = jnp.tanh(x @ wx + h @ wh + b)
            return n, n
        _, hs = jax.lax.scan(body, h0, xs)
        return jnp.sum(hs * r)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 2, 3, 4)))
    return lambda *args: jax.block_until_ready(step(*args))


def interleaved(fns: dict, repeat: int, cpu: dict | None = None) -> dict[str, float]:
    """Median seconds per call of each function, timed in turn so machine noise hits all alike; ``cpu`` (a dict)
    gets the median CPU seconds of this process (``process_time``: on a machine with more runnable processes
    than cores, wall time also counts the waits for a core)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpus: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeat):
        for name, fn in fns.items():
            c0 = time.process_time()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
    if cpu is not None:
        cpu.update({k: statistics.median(v) for k, v in cpus.items()})
    return {k: statistics.median(v) for k, v in times.items()}


def overhead_per_iteration(steps: int = 20000) -> tuple[float, float]:
    """(seconds per scan step of a one-add body, seconds of the add kernel alone)."""
    exe = fc.compile(fc.trace(lambda c: ops.scan(lambda s, _: (s + 1.0, None), c, length=steps)[0], "f64[]"))
    x = np.array(0.0)
    add = np.add
    one = np.array(1.0)
    out = np.empty(())
    per_step = min(_time(lambda: exe.run([x])) for _ in range(5)) / steps
    kernel = min(_time(lambda: [add(x, one, out) for _ in range(steps)]) for _ in range(5)) / steps
    return per_step, kernel


def _time(fn) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def while_loop_gradient(repeat: int) -> tuple[float, int]:
    """A fixed-point iteration s = tanh(s W + b) run until it converges (a data-dependent trip count, at most
    500 steps), differentiated with respect to s0, W and b: (median seconds of forward + gradient, steps)."""
    def f(x, w, b):  # noqa: ANN001, ANN202
        def body(i, s):  # noqa: ANN001, ANN202
            new = ops.tanh(s @ w + b)
            change = ops.sum((new - s) * (new - s))
            return ops.less(1e-12, change), new
        return ops.sum(ops.loop(body, 500, True, x))
    exe = fc.compile(fc.build_backward_graph(fc.trace(f, "f64[8, 64]", "f64[64, 64]", "f64[64]"), 0, [0, 1, 2]))
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 64))
    w *= 0.9 / np.linalg.norm(w, 2)  # a contraction: the iteration converges, in about a hundred steps
    args = [rng.standard_normal((8, 64)), w, rng.standard_normal(64) * 0.3]
    steps, s = 0, args[0]
    while steps < 500:
        new = np.tanh(s @ args[1] + args[2])
        steps, change, s = steps + 1, np.sum((new - s) ** 2), new
        if not 1e-12 < change:
            break
    return interleaved({"loop": lambda: exe.run(args)}, repeat)["loop"], steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--dtype", default="f32", choices=["f32", "f64"])
    args = parser.parse_args()
    load = " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"machine: {os.cpu_count()} cores, load average {load}; BLAS threads: {_blas_threads()}; "
          f"MALLOC_TRIM_THRESHOLD_={os.environ.get('MALLOC_TRIM_THRESHOLD_', 'unset')}")
    rng = np.random.default_rng(0)
    dt = np.float32 if args.dtype == "f32" else np.float64
    h, s, bsz = args.hidden, args.steps, args.batch
    inputs = [rng.standard_normal((bsz, h)) * 0.1, rng.standard_normal((s, bsz, INPUT)),
              rng.standard_normal((INPUT, h)) / np.sqrt(INPUT), rng.standard_normal((h, h)) / np.sqrt(h) * 0.9,
              np.zeros(h), rng.standard_normal((s, bsz, h)) / (s * bsz)]
    inputs = [x.astype(dt) for x in inputs]
    fc.registry()  # load the packs first: the compile time below is the graph's own
    exe, first_compile = frame_step(h, s, bsz, args.dtype)
    compile_s = statistics.median(frame_step(h, s, bsz, args.dtype)[1] for _ in range(5))
    got = exe.run(inputs)
    want = numpy_step(*inputs)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-3 if dt == np.float32 else 1e-9, atol=1e-5)
    fns = {"numpy": lambda: numpy_step(*inputs), "frame": lambda: exe.run(inputs)}
    # compile(fast_math=True): float32 tanh approximated (<= 7 ulp; jax.jit's <= 5) and compiled by frame-native
    fast, _ = frame_step(h, s, bsz, args.dtype, fast_math=True)
    for a, b in zip(fast.run(inputs), want):
        np.testing.assert_allclose(a, b, rtol=2e-3 if dt == np.float32 else 1e-9, atol=1e-5)
    fns["frame fast_math"] = lambda: fast.run(inputs)
    try:  # with frame-native installed: time the steady state, its kernels compiled
        import frame_native
    except ImportError:
        frame_native = None
    if frame_native is not None:
        for _ in range(3):
            exe.run(inputs), fast.run(inputs)
        frame_native.wait(120)
    torch_step = torch_step_fn()
    if torch_step is not None:
        import torch

        tin = [torch.from_numpy(x.copy()) for x in inputs]
        fns["torch"] = lambda: torch_step(*[t.detach() for t in tin])
    jax_step = jax_step_fn()
    if jax_step is not None:
        import jax.numpy as jnp

        jin = [jnp.asarray(x) for x in inputs]
        for a, b in zip(jax_step(*jin)[1], [got[1], *got[2:]]):
            np.testing.assert_allclose(np.asarray(a), b, rtol=2e-3 if dt == np.float32 else 1e-9, atol=1e-5)
        fns["jax.jit"] = lambda: jax_step(*jin)
    cpu: dict[str, float] = {}
    med = interleaved(fns, args.repeat, cpu)
    print(f"RNN hidden {h}, {s} steps, batch {bsz}, {args.dtype}: forward + backward, median of {args.repeat}")
    jax_t = med.get("jax.jit")
    print(f"  {'':15s} {'wall ms':>9s} {'cpu ms':>9s} {'wall x':>7s} {'cpu x':>7s}   (x = time / numpy)"
          + ("   wall / jax.jit" if jax_t else ""))
    for name, t in med.items():
        print(f"  {name:15s} {t * 1e3:9.2f} {cpu[name] * 1e3:9.2f} {t / med['numpy']:6.2f}x "
              f"{cpu[name] / cpu['numpy']:6.2f}x" + (f"   {t / jax_t:6.2f}x" if jax_t else ""))
    print(f"  training graph (trace + build_backward_graph + compile, bodies included): {compile_s * 1e3:.1f} ms "
          f"(median of 5; the first in the process {first_compile * 1e3:.1f} ms, with imports)")
    per_step, kernel = overhead_per_iteration()
    print(f"loop overhead: {per_step * 1e6:.2f} us per scan step with a one-add body "
          f"(the add kernel itself {kernel * 1e6:.2f} us): {(per_step - kernel) * 1e6:.2f} us per iteration")
    t, trips = while_loop_gradient(max(5, args.repeat // 3))
    print(f"while loop (a fixed point, converged after {trips} of at most 500 steps, batch 8, hidden 64): forward + "
          f"gradient in {t * 1e3:.2f} ms, {t / trips * 1e6:.1f} us per step (jax: lax.while_loop has no reverse "
          "mode, it needs static bounds; not installed here)")


def _blas_threads() -> str:
    return f"OpenBLAS {os.environ['OPENBLAS_NUM_THREADS']} (numpy), torch {THREADS}"


if __name__ == "__main__":
    main()
