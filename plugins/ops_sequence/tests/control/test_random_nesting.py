"""Random nestings of if_else, loop and scan against torch autograd, to second order.

Each seed draws a program: elementwise ops, branches on data, loops (one or two states, a data-dependent
exit or none, 0 to 4 steps, per-step outputs, ``checkpoint_every``) and scans (forward or reverse,
checkpointed or not), nested in any order, whose bodies read values of every enclosing level. The same
program runs on frame (traced, differentiated twice with ``build_backward_graph``, compiled at opt levels
0 and 2) and on torch eager (Python control flow, ``create_graph=True``): values, gradients and
Hessian-vector products must agree, whatever the nesting.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def draw(r: random.Random, n_env: int, depth: int) -> tuple:
    """A program tree over ``n_env`` values in scope (all ``[3]`` vectors)."""
    k = r.random()
    if depth <= 0 or k < 0.25:
        return ("var", r.randrange(n_env))
    if k < 0.45:
        return ("unary", r.choice(["sin", "tanh", "square", "affine"]), draw(r, n_env, depth - 1))
    if k < 0.6:
        return ("binary", r.choice(["mul", "add"]), draw(r, n_env, depth - 1), draw(r, n_env, depth - 1))
    if k < 0.73:
        ins = [draw(r, n_env, depth - 1) for _ in range(r.randint(0, 2))]
        return ("if", draw(r, n_env, depth - 2), r.uniform(0.5, 2.5), ins,
                draw(r, n_env + len(ins), depth - 1), draw(r, n_env + len(ins), depth - 1))
    if k < 0.88:
        n_states = r.randint(1, 2)
        inner = n_env + 1 + n_states  # scope + [step as a float] + states
        return ("loop", r.randint(0, 4), [draw(r, n_env, depth - 1) for _ in range(n_states)],
                [draw(r, inner, depth - 1) for _ in range(n_states)],
                draw(r, inner, depth - 1) if r.random() < 0.6 else None,
                r.choice([None, r.uniform(1.0, 3.0)]), r.choice([None, None, 1, 2, 3]), r.randrange(n_states))
    rows = [draw(r, n_env, depth - 1) for _ in range(r.randint(1, 3))]
    return ("scan", rows, draw(r, n_env, depth - 1), draw(r, n_env + 2, depth - 1),
            draw(r, n_env + 2, depth - 1) if r.random() < 0.6 else None, r.random() < 0.3, r.choice([None, None, 1, 2]))


class Frame:
    sin, tanh = staticmethod(ops.sin), staticmethod(ops.tanh)
    less = staticmethod(ops.less)

    @staticmethod
    def sum(x: Any) -> Any:
        return ops.sum(x)

    @staticmethod
    def step(i: Any) -> Any:
        return ops.cast(i, to="float64")

    @staticmethod
    def if_else(cond: Any, then: Any, other: Any, *xs: Any) -> Any:
        return ops.if_else(cond, then, other, *xs)

    @staticmethod
    def loop(body: Any, m: int, states: list, every: Any) -> list:
        out = ops.loop(body, m, True, *states, checkpoint_every=every)
        return list(out) if isinstance(out, tuple) else [out]

    @staticmethod
    def scan(f: Any, init: Any, rows: list, reverse: bool, every: Any) -> Any:
        return ops.scan(f, init, ops.stack(*rows, axis=0), reverse=reverse, checkpoint_every=every)


class Torch:
    """The same constructs in torch eager: Python control flow over tensors."""

    def __init__(self) -> None:
        import torch

        self.t = torch
        self.sin, self.tanh = torch.sin, torch.tanh

    def less(self, a: Any, b: float) -> Any:
        return a < b

    def sum(self, x: Any) -> Any:
        return x.sum()

    def step(self, i: Any) -> Any:
        return i.to(self.t.float64)

    def if_else(self, cond: Any, then: Any, other: Any, *xs: Any) -> Any:
        return then(*xs) if bool(cond) else other(*xs)

    def loop(self, body: Any, m: int, states: list, every: Any) -> list:
        steps, go, rows = 0, True, []
        while go and steps < m:
            cond, *out = body(self.t.tensor(steps), *states)
            go = bool(cond)
            states, rest = out[:len(states)], out[len(states):]
            rows.append(rest)
            steps += 1
        if len(rows) < m or m == 0:  # the per-step outputs' shapes, for the rows not run
            with self.t.no_grad():
                _, *out = body(self.t.tensor(0), *[s.detach() for s in states])
            like = out[len(states):]
        else:
            like = rows[0]
        ys = [self.t.stack([r[k] for r in rows] + [self.t.zeros_like(like[k])] * (m - len(rows)))
              if m else self.t.zeros((0, *like[k].shape), dtype=like[k].dtype) for k in range(len(like))]
        return [*states, *ys]

    def scan(self, f: Any, init: Any, rows: list, reverse: bool, every: Any) -> Any:
        xs = self.t.stack(rows)
        ys: list = [None] * len(rows)
        c = init
        for t in (range(len(rows) - 1, -1, -1) if reverse else range(len(rows))):
            c, ys[t] = f(c, xs[t])
        return c, (None if ys[0] is None else self.t.stack(ys))


def evaluate(b: Any, tree: tuple, env: list) -> Any:
    kind = tree[0]
    if kind == "var":
        return env[tree[1]]
    if kind == "unary":
        x = evaluate(b, tree[2], env)
        return {"sin": b.sin, "tanh": b.tanh, "square": lambda v: v * v, "affine": lambda v: v * 0.7 + 0.1}[tree[1]](x)
    if kind == "binary":
        x, y = evaluate(b, tree[2], env), evaluate(b, tree[3], env)
        return x * y if tree[1] == "mul" else x + y
    if kind == "if":
        _, cond, bound, ins, then, other = tree
        return b.if_else(b.less(b.sum(evaluate(b, cond, env)), bound), lambda *a: evaluate(b, then, env + list(a)),
                         lambda *a: evaluate(b, other, env + list(a)), *[evaluate(b, t, env) for t in ins])
    if kind == "loop":
        _, m, init, updates, per_step, bound, every, pick = tree

        def body(i: Any, *states: Any) -> tuple:
            scope = env + [b.step(i) * env[0] * 0.1, *states]
            cond = True if bound is None else b.less(b.sum(states[0]), bound)
            new = [b.tanh(evaluate(b, u, scope)) for u in updates]
            return (cond, *new, *([] if per_step is None else [evaluate(b, per_step, scope)]))
        out = b.loop(body, m, [evaluate(b, s, env) for s in init], every)
        return out[pick] + (0.0 if per_step is None else b.sum(out[len(init)]) * 0.3)
    _, rows, init, update, per_step, reverse, every = tree
    carry, ys = b.scan(lambda c, x: (b.tanh(evaluate(b, update, env + [c, x])),
                                     None if per_step is None else evaluate(b, per_step, env + [c, x])),
                       evaluate(b, init, env), [evaluate(b, r, env) for r in rows], reverse, every)
    return carry if ys is None else carry + b.sum(ys) * 0.3


@pytest.mark.parametrize("seed", [2, 5, 6, 9, 12, 15, 24, 26, 36, 40])
def test_random_nestings_match_torch_to_second_order(seed):
    torch = pytest.importorskip("torch")
    tree = draw(random.Random(seed), 3, 4)
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(0.1, 0.8, 3) for _ in range(3)]
    vs = [rng.standard_normal(3) for _ in range(3)]

    forward = fc.trace(lambda *t: ops.sum(evaluate(Frame, tree, list(t))), "f64[3]", "f64[3]", "f64[3]")
    first = fc.build_backward_graph(forward, 0, [0, 1, 2])  # [loss, g0, g1, g2]
    contracted, s = fc.extend_graph(first, lambda *t: sum(ops.sum(t[4 + k] * vs[k]) for k in range(3)))
    second = fc.build_backward_graph(contracted, s, [0, 1, 2])  # [loss, g.., s, Hv..]

    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    loss = evaluate(Torch(), tree, ts).sum()
    grads = [torch.zeros(3, dtype=torch.float64) if g is None else g
             for g in torch.autograd.grad(loss, ts, create_graph=True, allow_unused=True)]
    dot = sum((g * torch.tensor(v)).sum() for g, v in zip(grads, vs))
    hv = [np.zeros(3) if h is None else h.numpy()
          for h in (torch.autograd.grad(dot, ts, allow_unused=True) if dot.requires_grad else [None] * 3)]
    want = [loss.detach().numpy(), *(g.detach().numpy() for g in grads), *hv]
    for opt_level in (0, 2):
        out = fc.compile(second, opt_level=opt_level).run(xs)
        got = [out[0], *out[1:4], *out[5:8]]
        for k, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=f"opt_level {opt_level}, result {k}")
