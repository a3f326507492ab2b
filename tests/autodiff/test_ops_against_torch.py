"""Each differentiable op of the classification work against PyTorch autograd, to second order.

One row per op: the same function in frame and in torch, and the inputs. First order is compared on inputs
chosen to hit the documented rules (ties of maximum/max, abs at 0, clip at its bounds, pow at 0, logits of
+-1000); second order (a Hessian-vector product along a random direction) on generic random inputs. torch is
the independent reference; without it these tests skip (the optional extra ``frame-core[compare]``).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import torch_value_gradient_hvp, value_gradient_hvp

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
F = torch.nn.functional

LABELS = np.array([2, 0, 3])

#: name -> (frame fn, torch fn, special inputs for first order (ties, kinks, bounds), generic input ranges)
CASES = {
    "maximum": (ops.maximum, torch.maximum,
                [[1.0, 2.0, -3.0, 0.5], [1.0, 0.0, -3.0, 4.0]], [(-1, 1), (-1, 1)]),
    "minimum": (ops.minimum, torch.minimum,
                [[1.0, 2.0, -3.0, 0.5], [1.0, 0.0, -3.0, 4.0]], [(-1, 1), (-1, 1)]),
    "maximum_broadcast": (ops.maximum, torch.maximum,
                          [[[1.0, 2.0], [2.0, 0.0]], 2.0], [(-1, 1), (-1, 1)]),
    "abs": (lambda x: abs(x), torch.abs, [[-2.0, 0.0, -0.0, 3.0]], [(-1, 1)]),
    "clip": (lambda x: ops.clip(x, min=-0.5, max=0.5), lambda x: torch.clamp(x, -0.5, 0.5),
             [[-1.0, -0.5, 0.0, 0.5, 0.75]], [(-1, 1)]),
    "pow": (ops.pow, torch.pow, [[0.0, 0.0, 2.0, 1.5, -2.0], [0.0, 2.0, 0.0, -0.5, 3.0]], [(0.2, 2), (-2, 2)]),
    "pow_scalar": (lambda x: x ** 3, lambda x: x ** 3, [[-2.0, 0.0, 0.5]], [(-1, 1)]),
    "rpow": (lambda x: 2.0 ** x, lambda x: 2.0 ** x, [[-1.0, 0.0, 3.0]], [(-1, 1)]),
    "where": (lambda a, b: ops.where(a > b, a * b, ops.sin(a)), lambda a, b: torch.where(a > b, a * b, torch.sin(a)),
              [[1.0, 2.0, -1.0], [0.0, 2.0, 1.0]], [(-1, 1), (-1, 1)]),
    "max": (lambda x: ops.max(x, axes=[1], keepdims=True), lambda x: torch.amax(x, dim=1, keepdim=True),
            [[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]], [(-1, 1)]),
    "min_all": (lambda x: ops.min(x), lambda x: torch.amin(x), [[[1.0, -3.0], [-3.0, 0.0]]], [(-1, 1)]),
    "logsumexp": (lambda x: ops.logsumexp(x, axes=[0]), lambda x: torch.logsumexp(x, dim=0),
                  [[[1000.0, -1000.0], [1000.0, 0.0]]], [(-3, 3)]),
    "softmax": (lambda x: ops.softmax(x, axis=-1), lambda x: torch.softmax(x, -1),
                [[[1000.0, 999.0, -1000.0], [0.0, 0.0, 0.0]]], [(-3, 3)]),
    "log_softmax": (lambda x: ops.log_softmax(x, axis=0), lambda x: torch.log_softmax(x, 0),
                    [[[1000.0, 999.0], [-1000.0, 0.0]]], [(-3, 3)]),
    "cross_entropy": (lambda x: ops.cross_entropy(x, LABELS), lambda x: F.cross_entropy(x, torch.from_numpy(LABELS)),
                      [[[1000.0, -1000.0, 0.0, 0.0], [0.0] * 4, [-1000.0, 1000.0, 5.0, -5.0]]], [(-3, 3)]),
    "cast": (lambda x: ops.cast(ops.cast(x, to="f32"), to="f64") * x, lambda x: x.float().double() * x,
             [[0.1, -2.5, 1e-8]], [(-1, 1)]),
}
#: generic shapes for the second-order comparison, per number of inputs
SHAPES = {"cross_entropy": [(3, 4)], "maximum_broadcast": [(2, 3), (3,)], "softmax": [(2, 5)],
          "max": [(3, 4)], "min_all": [(3, 4)], "logsumexp": [(3, 4)], "log_softmax": [(3, 4)]}


def compare(name, xs, order, rng):
    fn, tfn = CASES[name][:2]
    with np.errstate(divide="ignore", invalid="ignore"):
        shape = np.shape(tfn(*[torch.tensor(x) for x in xs]).detach().numpy())
    w = rng.standard_normal(shape)
    direction = [rng.standard_normal(x.shape) for x in xs]
    loss, grads, hvps = value_gradient_hvp(fn, xs, w, direction)
    t_loss, t_grads, t_hvps = torch_value_gradient_hvp(tfn, xs, w, direction)
    np.testing.assert_allclose(loss, t_loss, rtol=1e-12)
    for g, tg in zip(grads, t_grads):
        np.testing.assert_allclose(g, tg, rtol=1e-10, atol=1e-12, err_msg=f"{name}: first order on {xs}")
    if order == 2:
        for h, th in zip(hvps, t_hvps):
            np.testing.assert_allclose(h, th, rtol=1e-9, atol=1e-11, err_msg=f"{name}: second order on {xs}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_order_matches_torch_at_ties_kinks_bounds_and_extremes(name):
    xs = [np.asarray(x, np.float64) for x in CASES[name][2]]
    compare(name, xs, 1, np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_order_match_torch_on_random_inputs(name):
    rng = np.random.default_rng(sorted(CASES).index(name))
    ranges = CASES[name][3]
    shapes = SHAPES.get(name, [(3, 4)] * len(ranges))
    xs = [rng.uniform(low, high, shape) for (low, high), shape in zip(ranges, shapes)]
    compare(name, xs, 2, rng)
