"""Gradients of random compositions of ops_basic ops against PyTorch autograd, to second order.

PyTorch (CPU) is the independent reference; it is the optional extra
``frame-core[compare]``, which CI installs. Without it these tests skip, and
say so; nothing else in the suite may skip.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")

SHAPE = (3, 4)
N_INPUTS = 3
LABELS = np.array([1, 3, 0])  # class labels of the three rows, for cross_entropy


# Each rule builds the same function in frame (module `ops`, tensors) and in torch. Domains are kept
# safe by construction: log, sqrt and div see values >= 1; exp sees tanh(.) in [-1, 1]; pow's base is
# >= 0.5. Ties (maximum(x, x), max over relu zeros) and kinks follow the same rules in both.
def _rules(m):
    if m == "frame":
        return {
            "neg": lambda a: -a, "square": lambda a: ops.square(a), "tanh": ops.tanh, "sigmoid": ops.sigmoid,
            "sin": ops.sin, "cos": ops.cos, "relu": ops.relu, "exp": lambda a: ops.exp(ops.tanh(a)),
            "log": lambda a: ops.log(ops.square(a) + 1.0), "sqrt": lambda a: ops.sqrt(ops.square(a) + 1.0),
            "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "div": lambda a, b: a / (ops.square(b) + 1.0),
            "add_row": lambda a, b: a + ops.mean(b, axes=[0]), "mul_col": lambda a, b: a * ops.sum(b, axes=[1], keepdims=True),
            "matmul": lambda a, b: ops.transpose(a @ ops.transpose(b)) @ a * 0.25,
            "reshape": lambda a: ops.reshape(ops.reshape(a, shape=[2, -1]) * 1.5, shape=list(SHAPE)),
            "stop": lambda a: a * ops.stop_gradient(a),
            "abs": lambda a: abs(a), "clip": lambda a: ops.clip(a, min=-0.5, max=0.5), "cube": lambda a: a ** 3,
            "pow": lambda a, b: ops.pow(ops.square(a) + 0.5, b), "maximum": ops.maximum, "minimum": ops.minimum,
            "where": lambda a, b: ops.where(a > b, a * b, a - b),
            "softmax": lambda a: ops.softmax(a, axis=0), "log_softmax": lambda a: ops.log_softmax(a),
            "lse_row": lambda a, b: a + ops.logsumexp(b, axes=[0]),
            "max_col": lambda a, b: a * ops.max(b, axes=[1], keepdims=True), "min_all": lambda a, b: a + ops.min(b),
            "cast": lambda a: ops.cast(ops.cast(a, to="f32"), to="f64") * a,
            "cross_entropy": lambda a, b: a * ops.cross_entropy(b, LABELS),
        }
    return {
        "neg": lambda a: -a, "square": lambda a: a * a, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
        "sin": torch.sin, "cos": torch.cos, "relu": torch.relu, "exp": lambda a: torch.exp(torch.tanh(a)),
        "log": lambda a: torch.log(a * a + 1.0), "sqrt": lambda a: torch.sqrt(a * a + 1.0),
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / (b * b + 1.0),
        "add_row": lambda a, b: a + b.mean(dim=0), "mul_col": lambda a, b: a * b.sum(dim=1, keepdim=True),
        "matmul": lambda a, b: (a @ b.T).T @ a * 0.25,
        "reshape": lambda a: (a.reshape(2, -1) * 1.5).reshape(SHAPE),
        "stop": lambda a: a * a.detach(),
        "abs": torch.abs, "clip": lambda a: torch.clamp(a, -0.5, 0.5), "cube": lambda a: a ** 3,
        "pow": lambda a, b: torch.pow(a * a + 0.5, b), "maximum": torch.maximum, "minimum": torch.minimum,
        "where": lambda a, b: torch.where(a > b, a * b, a - b),
        "softmax": lambda a: torch.softmax(a, 0), "log_softmax": lambda a: torch.log_softmax(a, -1),
        "lse_row": lambda a, b: a + torch.logsumexp(b, dim=0),
        "max_col": lambda a, b: a * torch.amax(b, dim=1, keepdim=True), "min_all": lambda a, b: a + torch.amin(b),
        "cast": lambda a: a.float().double() * a,
        "cross_entropy": lambda a, b: a * torch.nn.functional.cross_entropy(b, torch.from_numpy(LABELS)),
    }


UNARY = ["neg", "square", "tanh", "sigmoid", "sin", "cos", "relu", "exp", "log", "sqrt", "reshape", "stop",
         "abs", "clip", "cube", "softmax", "log_softmax", "cast"]
BINARY = ["add", "sub", "mul", "div", "add_row", "mul_col", "matmul",
          "pow", "maximum", "minimum", "where", "lse_row", "max_col", "min_all", "cross_entropy"]


def program(seed: int, length: int = 6) -> list[tuple[str, tuple[int, ...]]]:
    """A random straight-line program over a growing pool of values (indices into the pool)."""
    rng = np.random.default_rng(seed)
    steps, pool = [], N_INPUTS
    for _ in range(length):
        if rng.random() < 0.5:
            steps.append((str(rng.choice(UNARY)), (int(rng.integers(pool)),)))
        else:
            steps.append((str(rng.choice(BINARY)), (int(rng.integers(pool)), int(rng.integers(pool)))))
        pool += 1
    return steps


def evaluate(steps, inputs, rules, weights, loss_kind):
    values = list(inputs)
    for name, args in steps:
        values.append(rules[name](*(values[i] for i in args)))
    out = values[-1] + values[N_INPUTS - 1] * 0.5  # keep every input in play
    return out, weights, loss_kind


def frame_loss(steps, weights, loss_kind):
    rules = _rules("frame")

    def f(*xs):
        out, w, kind = evaluate(steps, xs, rules, weights, loss_kind)
        return ops.sum(out * w) if kind == "sum" else ops.mse_loss(out, w)
    return fc.trace(f, *[f"f64[{SHAPE[0]}, {SHAPE[1]}]"] * N_INPUTS)


def torch_loss(steps, xs, weights, loss_kind):
    out, w, kind = evaluate(steps, xs, _rules("torch"), torch.from_numpy(weights), loss_kind)
    return torch.sum(out * w) if kind == "sum" else torch.nn.functional.mse_loss(out, w)


@pytest.mark.parametrize("seed", range(40))
def test_random_composition_first_and_second_order_match_torch(seed):
    steps = program(seed)
    rng = np.random.default_rng(1000 + seed)
    xs = [rng.uniform(-1.0, 1.0, SHAPE) for _ in range(N_INPUTS)]
    weights = rng.standard_normal(SHAPE)
    direction = [rng.standard_normal(SHAPE) for _ in range(N_INPUTS)]
    loss_kind = "sum" if seed % 2 else "mse"
    wrt = list(range(N_INPUTS))

    forward = frame_loss(steps, weights, loss_kind)
    first = fc.build_backward_graph(forward, 0, wrt)
    # second order along `direction`: d/dx sum_i <v_i, dL/dx_i>
    def dot(*values):
        grads = values[-N_INPUTS:]
        total = ops.sum(grads[0] * direction[0])
        for g, d in zip(grads[1:], direction[1:]):
            total = total + ops.sum(g * d)
        return total
    with_dot, k = fc.extend_graph(first, dot)
    second = fc.build_backward_graph(with_dot, k, wrt)
    outs = fc.compile(second).run(xs)
    loss, grads, hvps = outs[0], outs[1:1 + N_INPUTS], outs[-N_INPUTS:]

    txs = [torch.tensor(x, requires_grad=True) for x in xs]
    t_loss = torch_loss(steps, txs, weights, loss_kind)
    t_grads = [g if g is not None else torch.zeros(SHAPE, dtype=torch.float64)
               for g in torch.autograd.grad(t_loss, txs, create_graph=True, allow_unused=True)]
    t_dot = sum((g * torch.from_numpy(d)).sum() for g, d in zip(t_grads, direction))
    linear = not t_dot.requires_grad  # the loss is linear in every input: all second derivatives vanish
    t_hvps = [None] * N_INPUTS if linear else torch.autograd.grad(t_dot, txs, allow_unused=True)

    where = f"program {steps}"
    np.testing.assert_allclose(loss, t_loss.item(), rtol=1e-10, atol=1e-12, err_msg=where)
    for g, tg in zip(grads, t_grads):
        np.testing.assert_allclose(g, tg.detach().numpy(), rtol=1e-9, atol=1e-11, err_msg=where)
    for h, th in zip(hvps, t_hvps):
        expected = np.zeros(SHAPE) if th is None else th.numpy(force=True)
        np.testing.assert_allclose(h, expected, rtol=1e-8, atol=1e-10, err_msg=where)
