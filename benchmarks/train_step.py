"""The fused training step (frame-train) against hand-written numpy, torch eager and jax.jit + optax.

1. One step of a 784-256-256-10 ReLU MLP, mse loss, Adam, float32, at batch 16, 128 and 1024: forward,
   backward and update. frame: ``frame_train.TrainStep`` (one executable, one run). numpy: the same
   mathematics written by hand with in-place Adam. torch (when installed): eager autograd and
   ``torch.optim.Adam(fused=True)``. jax (when installed): ``jax.jit`` of the whole step with ``optax.adam``,
   parameters and state donated. Interleaved rounds, medians, ratios.
2. A warm-up-cosine schedule over 1000 steps of epochs with a short last batch: compile-cache misses after
   the first step of each shape signature (must be 0).
3. The first run at a new batch size: the one training graph re-specialised and compiled (reuse) against
   re-specialising the loss graph and deriving backward + update again (the per-shape path, which graphs
   holding traced sizes still take), for TrainStep and value_and_grad, and a full re-trace + compile.
4. Steady state over batches 128, 128, 77, 128, 1 (every shape compiled) against batch 128 only.

One BLAS thread (and one torch/XLA thread) unless ``--blas-threads N`` says otherwise.

    python benchmarks/train_step.py [--batches 16 128 1024] [--rounds 7] [--blas-threads 1] [--new-batch-only]
"""

from __future__ import annotations

import os
import sys

if not any(a.startswith("--blas-threads") for a in sys.argv[1:]):
    sys.argv += ["--blas-threads", "1"]
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from _env import describe_environment  # noqa: E402  (before numpy: malloc settings, BLAS threads)

import numpy as np  # noqa: E402

import frame_core as fc  # noqa: E402
from frame_core import ops  # noqa: E402
import frame_train as ft  # noqa: E402

SIZES = (784, 256, 256, 10)
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8


def init(rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    return {f"fc{i}": {"w": (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
                       "b": np.zeros(b, np.float32)} for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:]), 1)}


def mlp_loss(p, x, t):
    h1 = ops.relu(x @ p["fc1"]["w"] + p["fc1"]["b"])
    h2 = ops.relu(h1 @ p["fc2"]["w"] + p["fc2"]["b"])
    return ops.mse_loss(h2 @ p["fc3"]["w"] + p["fc3"]["b"], t)


# -- numpy: forward, backward and Adam by hand -------------------------------------------------------------------
class NumpyAdam:
    def __init__(self, params: dict) -> None:
        self.p = [params[f"fc{i}"][k].copy() for i in (1, 2, 3) for k in ("w", "b")]
        self.m = [np.zeros_like(a) for a in self.p]
        self.v = [np.zeros_like(a) for a in self.p]
        self.t = 0

    def __call__(self, x: np.ndarray, t: np.ndarray) -> float:
        w1, b1, w2, b2, w3, b3 = self.p
        a1 = x @ w1 + b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2 + b2
        h2 = np.maximum(a2, 0)
        d = h2 @ w3 + b3 - t
        loss = float(np.mean(d * d))
        gy = d * np.float32(2.0 / d.size)
        gh2 = gy @ w3.T
        ga2 = gh2 * (a2 > 0)
        gh1 = ga2 @ w2.T
        ga1 = gh1 * (a1 > 0)
        grads = (x.T @ ga1, ga1.sum(axis=0), h1.T @ ga2, ga2.sum(axis=0), h2.T @ gy, gy.sum(axis=0))
        self.t += 1
        c1, c2 = 1 - B1 ** self.t, np.sqrt(1 - B2 ** self.t)
        for p, m, v, g in zip(self.p, self.m, self.v, grads):
            m *= B1
            m += (1 - B1) * g
            v *= B2
            v += (1 - B2) * g * g
            p -= (LR / c1) * m / (np.sqrt(v) / c2 + EPS)
        return loss


def torch_step(params: dict):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    tensors = [torch.tensor(params[f"fc{i}"][k], requires_grad=True) for i in (1, 2, 3) for k in ("w", "b")]
    opt = torch.optim.Adam(tensors, lr=LR, betas=(B1, B2), eps=EPS, fused=True)
    w1, b1, w2, b2, w3, b3 = tensors

    def step(x, t):
        opt.zero_grad(set_to_none=True)
        h1 = torch.relu(x @ w1 + b1)
        h2 = torch.relu(h1 @ w2 + b2)
        loss = torch.nn.functional.mse_loss(h2 @ w3 + b3, t)
        loss.backward()
        opt.step()
        return loss
    return step, lambda a: torch.from_numpy(a)


def jax_step(params: dict):
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError:
        return None
    tx = optax.adam(LR, b1=B1, b2=B2, eps=EPS)

    def loss_fn(p, x, t):
        h1 = jax.nn.relu(x @ p["fc1"]["w"] + p["fc1"]["b"])
        h2 = jax.nn.relu(h1 @ p["fc2"]["w"] + p["fc2"]["b"])
        return jnp.mean((h2 @ p["fc3"]["w"] + p["fc3"]["b"] - t) ** 2)

    def whole_step(p, state, x, t):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, t)
        updates, state = tx.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss
    update = jax.jit(whole_step, donate_argnums=(0, 1))  # parameters and state updated in place
    holder = {"p": jax.tree_util.tree_map(jnp.asarray, params)}
    holder["s"] = tx.init(holder["p"])

    def step(x, t):
        holder["p"], holder["s"], loss = update(holder["p"], holder["s"], x, t)
        return loss.block_until_ready()
    return step, jnp.asarray


def interleaved(variants: dict, steps: int, rounds: int) -> dict[str, float]:
    """Median seconds per step of each variant: every round runs each variant ``steps`` times in turn."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            for _ in range(steps):
                run()
            times[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(t) for name, t in times.items()}


def settle(step, x, t) -> None:
    try:
        import frame_native
    except ImportError:
        return
    for _ in range(3):
        step(x, t)
    frame_native.wait(60)


def step_table(batches: list[int], rounds: int) -> None:
    print("\n1. MLP 784-256-256-10 step with Adam (forward + backward + update), float32, median ms per step")
    header = f"{'batch':>6} {'numpy':>8} {'frame':>8} {'frame/numpy':>12}"
    rng = np.random.default_rng(0)
    params = init(rng)
    probe_torch, probe_jax = torch_step(params), jax_step(params)
    if probe_torch:
        header += f" {'torch':>8} {'frame/torch':>12}"
    if probe_jax:
        header += f" {'jax':>8} {'frame/jax':>10}"
    print(header)
    for batch in batches:
        steps = max(3, int(2000 / batch))
        x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
        t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
        frame = ft.TrainStep(mlp_loss, params, ft.adam(LR, B1, B2, EPS))
        reference = NumpyAdam(params)
        got, want = frame(x, t), reference(x, t)
        assert abs(got - want) <= 1e-4 * abs(want), (got, want)
        settle(frame, x, t)
        variants = {"numpy": lambda: reference(x, t), "frame": lambda: frame(x, t)}
        tv = torch_step(params)
        if tv:
            tstep, conv = tv
            tx_, tt_ = conv(x), conv(t)
            variants["torch"] = lambda: tstep(tx_, tt_)
        jv = jax_step(params)
        if jv:
            jstep, jconv = jv
            jx, jt = jconv(x), jconv(t)
            jstep(jx, jt)
            variants["jax"] = lambda: jstep(jx, jt)
        for run in variants.values():
            run()
        med = interleaved(variants, steps, rounds)
        line = f"{batch:6d} {med['numpy'] * 1e3:8.3f} {med['frame'] * 1e3:8.3f} {med['frame'] / med['numpy']:11.2f}x"
        if "torch" in med:
            line += f" {med['torch'] * 1e3:8.3f} {med['frame'] / med['torch']:11.2f}x"
        if "jax" in med:
            line += f" {med['jax'] * 1e3:8.3f} {med['frame'] / med['jax']:9.2f}x"
        print(line, flush=True)


def schedule_run(total_steps: int = 1000, batch: int = 128) -> None:
    print(f"\n2. warm-up cosine schedule over {total_steps} steps, batch {batch} with a short last batch per epoch")
    rng = np.random.default_rng(1)
    n = batch * 7 + 37  # 8 batches an epoch, the last of 37 rows
    x = rng.standard_normal((n, SIZES[0])).astype(np.float32)
    t = rng.standard_normal((n, SIZES[-1])).astype(np.float32)
    per_epoch = -(-n // batch)
    epochs = -(-total_steps // per_epoch)
    schedule = ft.warmup_cosine(1e-3, 50, epochs * per_epoch)
    step = ft.TrainStep(mlp_loss, init(rng), ft.adam(schedule))
    fc.compile_cache.clear()
    before = fc.compile_cache.info()
    misses_after_first: list[int] = []

    def record(number: int, loss: float) -> None:
        if number == per_epoch:  # both shape signatures have run once
            misses_after_first.append(fc.compile_cache.info().misses)
    history = ft.fit(step, (x, t), epochs=epochs, batch_size=batch, shuffle=np.random.default_rng(2),
                     progress=False, callback=record)
    after = fc.compile_cache.info()
    spec = step.executables()[0].specializations()
    print(f"   {history.steps} steps in {epochs} epochs, {history.seconds:.2f} s ({history.seconds / history.steps * 1e3:.3f}"
          f" ms/step with the loop); compile-cache misses: {misses_after_first[0] - before.misses} in the first epoch "
          f"(the traced and the short shape), {after.misses - misses_after_first[0]} after it; shape cache: "
          f"{spec.misses} miss, {spec.hits} hits; {len(set(round(schedule(k), 12) for k in range(history.steps)))} "
          "distinct learning rates, none compiled")


@contextlib.contextmanager
def per_shape_derivation():
    """The path before the one training graph was reused: every new shape signature specialises the loss graph
    and derives backward (+ update) again. (Replaces the two functions that choose, for the comparison only.)"""
    import frame_train._spine as spine
    import frame_core.autodiff.value_and_grad as vg

    saved = spine.respecialized, vg._respecialized
    spine.respecialized = lambda graph, types, rebuild: rebuild(types)
    vg._respecialized = lambda training, types, rederive: rederive(types)
    try:
        yield
    finally:
        spine.respecialized, vg._respecialized = saved


def new_batch_cost(batch: int = 128, other: int = 77, repeat: int = 9) -> None:
    print(f"\n3. first run at a new batch size ({other}, traced at {batch}): the one training graph re-specialised "
          "(reuse) against\n   deriving backward + update again for the shape (per shape, as before), and a full "
          "re-trace + compile; median ms (CPU ms)")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
    timings: dict[str, list[tuple[float, float]]] = {k: [] for k in ("step reuse", "step per shape", "step full",
                                                                     "vg reuse", "vg per shape")}

    def timed(label: str, run) -> None:
        fc.compile_cache.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        timings[label].append((time.perf_counter() - wall, time.process_time() - cpu))

    for _ in range(repeat):  # interleaved: each round times every variant once
        for per_shape in (False, True):
            step = ft.TrainStep(mlp_loss, init(rng), ft.adam(1e-3))
            vg = fc.value_and_grad(mlp_loss)
            params = init(rng)
            fc.compile_cache.clear()
            if per_shape:
                timed("step full", lambda: step(x, t))
            else:
                step(x, t)
            vg(params, x, t)
            suffix = "per shape" if per_shape else "reuse"
            with per_shape_derivation() if per_shape else contextlib.nullcontext():
                timed(f"step {suffix}", lambda: step(x[:other], t[:other]))
                timed(f"vg {suffix}", lambda: vg(params, x[:other], t[:other]))
            assert step.derivations == (2 if per_shape else 1), step.derivations
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in timings.items()}
    for what in ("step", "vg"):
        (rw, rc), (pw, pc) = med[f"{what} reuse"], med[f"{what} per shape"]
        name = "TrainStep" if what == "step" else "value_and_grad"
        print(f"   {name:>14}: reuse {rw * 1e3:7.1f} ({rc * 1e3:7.1f}), per shape {pw * 1e3:7.1f} ({pc * 1e3:7.1f}); "
              f"reuse / per shape {rw / pw:.2f} ({rc / pc:.2f} CPU)")
    fw, fcpu = med["step full"]
    print(f"   {'full trace':>14}: {fw * 1e3:7.1f} ({fcpu * 1e3:7.1f}) (trace + derive + compile + first run of a new "
          f"TrainStep); reuse / full {med['step reuse'][0] / fw:.2f} ({med['step reuse'][1] / fcpu:.2f} CPU)")


def variable_batch_rows(batch: int = 128, rounds: int = 7) -> None:
    print("\n4. steady state with variable batches (every shape compiled already), median ms per step")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    t = rng.standard_normal((batch, SIZES[-1])).astype(np.float32)
    sizes = (batch, batch, 77, batch, 1)
    params = init(rng)
    reused, derived, fixed = (ft.TrainStep(mlp_loss, params, ft.adam(1e-3)) for _ in range(3))
    for b in sizes:
        reused(x[:b], t[:b])
        with per_shape_derivation():
            derived(x[:b], t[:b])
    fixed(x, t)
    assert (reused.derivations, derived.derivations) == (1, 3)

    def cycle(step) -> Any:
        def run() -> None:
            for b in sizes:
                step(x[:b], t[:b])
        return run

    def same() -> None:
        for _ in sizes:
            fixed(x, t)
    med = interleaved({"reuse": cycle(reused), "per shape": cycle(derived), "fixed": same}, 3, rounds)
    r, d, f = (med[k] / len(sizes) * 1e3 for k in ("reuse", "per shape", "fixed"))
    print(f"   batches {sizes}: one graph re-specialised {r:.3f} ms a step, derived per shape {d:.3f} ms a step "
          f"(ratio {r / d:.2f}); batch {batch} only {f:.3f} ms a step (rows {sum(sizes)} against {batch * len(sizes)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--blas-threads", type=int, default=1, help="(read by _env before numpy loads)")
    parser.add_argument("--skip-steps", action="store_true", help="only parts 2, 3 and 4")
    parser.add_argument("--new-batch-only", action="store_true", help="only parts 3 and 4")
    args = parser.parse_args()
    print(describe_environment())
    if not (args.skip_steps or args.new_batch_only):
        step_table(args.batches, args.rounds)
    if not args.new_batch_only:
        schedule_run()
    new_batch_cost()
    variable_batch_rows()


if __name__ == "__main__":
    main()
