"""float16 / bfloat16 parameters: the per-step scalars (t, 1 - b^t, lr) are computed in float32.

In bfloat16, exp(1 * log 0.999) rounds to 1, so Adam's 1 - b2^t was 0 at the first step and the update
was nothing; t itself is exact only up to 256 (2048 in float16). torch computes these in float32 too.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_train as ft
from frame_core import ops
from frame_core.ir.dtypes import bfloat16

W0 = np.array([1.0, -0.5, 0.25, 2.0], np.float32)
G = np.array([0.3, -0.2, 0.1, 0.05], np.float32)


@pytest.mark.parametrize("dtype", [np.float16, bfloat16.np])
@pytest.mark.parametrize("make", [lambda lr: ft.adam(lr), lambda lr: ft.adagrad(lr, lr_decay=0.5)])
def test_half_precision_updates_equal_torchs(dtype, make):
    torch = pytest.importorskip("torch")
    tdt = torch.float16 if dtype == np.float16 else torch.bfloat16
    tw = torch.tensor(W0, dtype=tdt, requires_grad=True)
    reference = (torch.optim.Adam([tw], lr=1e-2) if make(1e-2).transforms[0].name == "adam"
                 else torch.optim.Adagrad([tw], lr=1e-2, lr_decay=0.5))
    opt = make(1e-2)
    p, s = {"w": W0.astype(dtype)}, opt.init({"w": W0.astype(dtype)})
    for _ in range(5):
        tw.grad = torch.tensor(G, dtype=tdt)
        reference.step()
        p, s = opt.apply(p, {"w": G.astype(dtype)}, s)
        assert p["w"].dtype == dtype
        np.testing.assert_array_equal(p["w"].astype(np.float32), tw.detach().float().numpy())


def test_bfloat16_train_step_moves_from_the_first_step_and_counts_past_256():
    step = ft.TrainStep(lambda p, x: ops.sum(ops.square(p["w"] - x)), {"w": np.ones(4, bfloat16.np)}, ft.adam(1e-2))
    x = np.full(4, 2.0, bfloat16.np)
    step(x)
    # Adam's first step is lr * sign(g): 1.01 rounded to bfloat16 (it stayed exactly 1.0: a zero bias correction)
    np.testing.assert_array_equal(step.params["w"], np.full(4, 1.01, np.float32).astype(bfloat16.np))
    for _ in range(299):
        step(x)
    assert step.count == 300 and str(step.graph.inputs[-1].type) == "f32[]"
