"""An Elman RNN (tanh, hidden 32, 50 steps, batch 8) through ``scan`` and ``loop`` (issue 10 acceptance).

Loss and gradients with respect to every input (the initial state, the
sequence and the three parameters, which the body captures) must equal those
of the same network unrolled into a flat graph to 1e-12 in float64, and
torch autograd's to 1e-6. The closed-over parameters are the case PyTorch's
scan got wrong (pytorch#184528): their gradients accumulate over the steps.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from .helpers import run

STEPS, BATCH, INPUT, HIDDEN = 50, 8, 6, 32
TYPES = [f"f64[{BATCH}, {HIDDEN}]", f"f64[{STEPS}, {BATCH}, {INPUT}]", f"f64[{INPUT}, {HIDDEN}]",
         f"f64[{HIDDEN}, {HIDDEN}]", f"f64[{HIDDEN}]"]


def _readout(steps_out, last, r):  # noqa: ANN001, ANN202
    return ops.sum(steps_out * r) / float(STEPS) + ops.sum(last * last)


def rnn_scan(h0, xs, wx, wh, b):  # noqa: ANN001, ANN201 - traced tensors
    def step(h, x):  # noqa: ANN001, ANN202
        new = ops.tanh(x @ wx + h @ wh + b)
        return new, new
    last, hs = ops.scan(step, h0, xs)
    return _readout(hs, last, R)


def rnn_loop(h0, xs, wx, wh, b):  # noqa: ANN001, ANN201
    def body(i, h, x):  # noqa: ANN001, ANN202
        new = ops.tanh(x @ wx + h @ wh + b)
        return True, new, new
    last, hs = ops.loop(body, STEPS, True, h0, xs=[xs])
    return _readout(hs, last, R)


def rnn_unrolled(h0, xs, wx, wh, b):  # noqa: ANN001, ANN201
    h, rows = h0, []
    for t in range(STEPS):
        x = ops.reshape(ops.slice(xs, starts=[t], stops=[t + 1], axes=[0]), shape=(BATCH, INPUT))
        h = ops.tanh(x @ wx + h @ wh + b)
        rows.append(h)
    return _readout(ops.stack(*rows, axis=0), h, R)


R = np.random.default_rng(7).standard_normal((STEPS, BATCH, HIDDEN))


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((BATCH, HIDDEN)) * 0.5, rng.standard_normal((STEPS, BATCH, INPUT)),
            rng.standard_normal((INPUT, HIDDEN)) * 0.4, rng.standard_normal((HIDDEN, HIDDEN)) * 0.2,
            rng.standard_normal(HIDDEN) * 0.1]


@pytest.fixture(scope="module")
def unrolled(inputs):
    return run(fc.build_backward_graph(fc.trace(rnn_unrolled, *TYPES), 0, range(5)), *inputs)


@pytest.mark.parametrize("model", [rnn_scan, rnn_loop], ids=["scan", "loop"])
def test_rnn_equals_the_unrolled_network(model, inputs, unrolled):
    got = run(fc.build_backward_graph(fc.trace(model, *TYPES), 0, range(5)), *inputs)
    names = ["loss", "h0", "xs", "wx", "wh", "b"]
    for name, a, b in zip(names, got, unrolled):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("model", [rnn_scan, rnn_loop], ids=["scan", "loop"])
def test_rnn_matches_torch_autograd(model, inputs):
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(x, requires_grad=True) for x in inputs]
    h, rows = ts[0], []
    for t in range(STEPS):
        h = torch.tanh(ts[1][t] @ ts[2] + h @ ts[3] + ts[4])
        rows.append(h)
    loss = (torch.stack(rows) * torch.tensor(R)).sum() / STEPS + (h * h).sum()
    grads = torch.autograd.grad(loss, ts)
    got = run(fc.build_backward_graph(fc.trace(model, *TYPES), 0, range(5)), *inputs)
    np.testing.assert_allclose(got[0], loss.item(), rtol=1e-6)
    for a, g in zip(got[1:], grads):
        np.testing.assert_allclose(a, g.numpy(), rtol=1e-6, atol=1e-9)
