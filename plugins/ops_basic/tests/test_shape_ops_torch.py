"""slice, pad, concat, stack, expand_dims, squeeze, broadcast_to against PyTorch autograd, to second order.

PyTorch (the optional ``frame-core[compare]`` extra) is the independent reference; without it this module
skips, and says so. torch has no negative slice steps, so a strided slice is an ``index_select`` there.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")

BIG = 2**62


def frame_slice(x, start, stop, step, axis):
    return ops.slice(x, starts=[start], stops=[stop], steps=[step], axes=[axis])


def torch_slice(x, start, stop, step, axis):
    index = np.arange(x.shape[axis])[start:stop:step]
    return torch.index_select(x, axis, torch.from_numpy(index.astype(np.int64)))


def frame_pad(x, before, after):
    return ops.pad(x, before=before, after=after)


def torch_pad(x, before, after):
    widths = [w for b, a in zip(reversed(before), reversed(after)) for w in (b, a)]  # last axis first
    return torch.nn.functional.pad(x, widths)


CASES = {  # name -> (frame fn, torch fn) of two [4, 6] inputs, returning one tensor
    "slice": (lambda a, b: frame_slice(a, 1, -1, 1, 0) * frame_slice(b, -3, BIG, 1, 1).sum(),
              lambda a, b: torch_slice(a, 1, -1, 1, 0) * torch_slice(b, -3, BIG, 1, 1).sum()),
    "strided slice": (lambda a, b: (frame_slice(frame_slice(a, -1, -BIG, -2, 1), 3, 0, -2, 0)
                                    + frame_slice(frame_slice(b, 0, 3, 2, 0), 0, 3, 1, 1)),
                      lambda a, b: (torch_slice(torch_slice(a, -1, -BIG, -2, 1), 3, 0, -2, 0)
                                    + torch_slice(torch_slice(b, 0, 3, 2, 0), 0, 3, 1, 1))),
    "pad": (lambda a, b: frame_pad(ops.slice(a * b, starts=[1, 2], stops=[3, 4]), [1, 0], [1, 4]) + b,
            lambda a, b: torch_pad((a * b)[1:3, 2:4], [1, 0], [1, 4]) + b),
    "concat": (lambda a, b: ops.concat(a, ops.sin(b), a * b, axis=1),
               lambda a, b: torch.cat([a, torch.sin(b), a * b], dim=1)),
    "stack": (lambda a, b: ops.stack(a, b * b, axis=-1) * ops.stack(b, a, axis=2),
              lambda a, b: torch.stack([a, b * b], dim=-1) * torch.stack([b, a], dim=2)),
    "expand_dims/squeeze": (lambda a, b: ops.squeeze(ops.expand_dims(a, axes=[0, 2]) * b, axes=[0]),
                            lambda a, b: (a[None, :, None, :] * b).squeeze(0)),
    "broadcast_to": (lambda a, b: ops.broadcast_to(ops.sum(a, axes=[0], keepdims=True), shape=[3, 4, 6]) * b,
                     lambda a, b: torch.broadcast_to(a.sum(0, keepdim=True), (3, 4, 6)) * b),
}


@pytest.mark.parametrize("name", CASES)
def test_first_and_second_order_gradients_match_torch(name):
    frame_fn, torch_fn = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xs = [rng.uniform(-1, 1, (4, 6)) for _ in range(2)]
    shape = torch_fn(*[torch.from_numpy(x) for x in xs]).shape
    w = rng.standard_normal(tuple(shape))
    directions = [rng.standard_normal((4, 6)) for _ in range(2)]

    # loss = sum(w * f(a, b)^2); second order along `directions`
    forward = fc.trace(lambda a, b: ops.sum(ops.square(frame_fn(a, b)) * w), "f64[4, 6]", "f64[4, 6]")
    first = fc.build_backward_graph(forward, 0, [0, 1])
    dotted, k = fc.extend_graph(first, lambda *v: ops.sum(v[-2] * directions[0]) + ops.sum(v[-1] * directions[1]))
    second = fc.build_backward_graph(dotted, k, [0, 1])
    fc.verify(second)
    runs = [fc.compile(second, opt_level=level).run(xs) for level in (0, 1, 2)]
    for other in runs[1:]:
        for x, y in zip(runs[0], other):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-13)
    loss, ga, gb, _, ha, hb = runs[0]

    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    t_loss = (torch_fn(*ts) ** 2 * torch.from_numpy(w)).sum()
    t_grads = torch.autograd.grad(t_loss, ts, create_graph=True)
    t_dot = sum((g * torch.from_numpy(d)).sum() for g, d in zip(t_grads, directions))
    t_hvp = torch.autograd.grad(t_dot, ts)
    np.testing.assert_allclose(loss, t_loss.item(), rtol=1e-12)
    for got, want in zip([ga, gb, ha, hb], [*t_grads, *t_hvp]):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-12)
