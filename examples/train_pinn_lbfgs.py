"""A physics-informed network for 1-D Poisson, trained with Adam and then L-BFGS (frame-train).

    python examples/train_pinn_lbfgs.py [--adam-steps 1000] [--lbfgs-iters 500] [--points 64] [--hidden 20]

Solves u''(x) = -pi^2 sin(pi x) on [0, 1] with u(0) = u(1) = 0, whose solution is sin(pi x). The network
u(x) = tanh(tanh(x W1 + b1) W2 + b2) W3 + b3 (float64) is trained on the residual at collocation points plus the
boundary values. u'' comes from two applications of build_backward_graph to the network (a sum of du/dx in
between), so the loss is one graph with the parameters as named inputs. frame_train.TrainStep runs Adam on it
(forward, second derivative, backward and update as one executable), then frame_train.lbfgs hands the same
graph's compiled value and gradient, over the flattened parameters, to scipy's L-BFGS-B. Prints the relative
L2 error against sin(pi x) on a fine grid; the run fails when it is not below 1e-3.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import frame_core as fc
from frame_core import ops
import frame_train as ft

PARAMS = ("w1", "b1", "w2", "b2", "w3", "b3")


def network(x, w1, b1, w2, b2, w3, b3):  # noqa: ANN001, ANN201 - traced tensors
    return ops.tanh(ops.tanh(x @ w1 + b1) @ w2 + b2) @ w3 + b3


def loss_graph(points: int, hidden: int) -> fc.Graph:
    """The PINN loss as a graph: inputs x, xb, f and the parameters (named), output 'loss'."""
    types = [f"f64[{points}, 1]", "f64[2, 1]", f"f64[{points}, 1]", f"f64[1, {hidden}]", f"f64[{hidden}]",
             f"f64[{hidden}, {hidden}]", f"f64[{hidden}]", f"f64[{hidden}, 1]", "f64[1]"]
    forward = fc.trace(lambda x, xb, f, w1, b1, w2, b2, w3, b3: [
        ops.sum(network(x, w1, b1, w2, b2, w3, b3)), network(xb, w1, b1, w2, b2, w3, b3)], *types)
    first = fc.build_backward_graph(forward, 0, ["x"])                  # [sum u, u(xb), du/dx]
    summed, k = fc.extend_graph(first, lambda *v: ops.sum(v[-1]))      # sum of du/dx: its gradient is u''
    second = fc.build_backward_graph(summed, k, ["x"])                   # [..., u'']
    n_in = len(types)

    def physics(*v):  # noqa: ANN002, ANN202
        f, ub, d2u = v[2], v[n_in + 1], v[-1]
        return ops.mse_loss(d2u, f) + ops.mean(ops.square(ub))
    return fc.extend_graph(second, physics, names="loss")[0]


def initial_params(hidden: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((1, hidden)), "b1": np.zeros(hidden),
            "w2": rng.standard_normal((hidden, hidden)) / np.sqrt(hidden), "b2": np.zeros(hidden),
            "w3": rng.standard_normal((hidden, 1)) / np.sqrt(hidden), "b3": np.zeros(1)}


def relative_error(params: dict[str, np.ndarray], grid: int = 1001) -> float:
    x = np.linspace(0.0, 1.0, grid)[:, None]
    u = fc.compile(fc.trace(network, f"f64[{grid}, 1]", *(f"f64{list(params[p].shape)}" for p in PARAMS)))
    predicted = u.run([x, *(params[p] for p in PARAMS)])[0]
    exact = np.sin(np.pi * x)
    return float(np.linalg.norm(predicted - exact) / np.linalg.norm(exact))


def solve(adam_steps: int = 1000, lbfgs_iters: int = 500, points: int = 64, hidden: int = 20, seed: int = 0,
          verbose: bool = True) -> tuple[dict[str, np.ndarray], float, dict[str, float]]:
    """Train; return the parameters, the relative L2 error and a few numbers about the run."""
    x = np.linspace(0.0, 1.0, points)[:, None]
    xb = np.array([[0.0], [1.0]])
    f = -np.pi ** 2 * np.sin(np.pi * x)
    graph = loss_graph(points, hidden)
    start = time.perf_counter()
    step = ft.TrainStep(graph, initial_params(hidden, seed), ft.adam(ft.cosine(1e-2, adam_steps, alpha=0.1)))
    history = ft.fit(step, lambda epoch: [(x, xb, f)] * adam_steps, epochs=1, progress=verbose)
    adam_seconds = time.perf_counter() - start
    after_adam = relative_error(step.params)
    start = time.perf_counter()
    params, result = ft.lbfgs(graph, step.params, x, xb, f, maxiter=lbfgs_iters,
                              options={"ftol": 1e-16, "gtol": 1e-12, "maxcor": 50})
    lbfgs_seconds = time.perf_counter() - start
    error = relative_error(params)
    stats = {"adam_loss": history.losses[-1], "adam_error": after_adam, "adam_seconds": adam_seconds,
             "lbfgs_loss": float(result.fun), "lbfgs_iterations": int(result.nit), "lbfgs_seconds": lbfgs_seconds}
    return params, error, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adam-steps", type=int, default=1000)
    parser.add_argument("--lbfgs-iters", type=int, default=500)
    parser.add_argument("--points", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _, error, s = solve(args.adam_steps, args.lbfgs_iters, args.points, args.hidden, args.seed)
    print(f"Adam:   {args.adam_steps} steps in {s['adam_seconds']:.2f} s, loss {s['adam_loss']:.3e}, "
          f"relative L2 error {s['adam_error']:.2e}")
    print(f"L-BFGS: {s['lbfgs_iterations']} iterations in {s['lbfgs_seconds']:.2f} s, loss {s['lbfgs_loss']:.3e}, "
          f"relative L2 error {error:.2e} against sin(pi x)")
    if not error < 1e-3:
        raise SystemExit(f"the relative L2 error {error:.2e} is not below 1e-3")


if __name__ == "__main__":
    main()
