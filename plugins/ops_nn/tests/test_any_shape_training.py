"""A small CNN's training graph, compiled once with dynamic_shapes=True, runs at any batch size.

conv2d (strided, 'same'), max_pool2d ('same', strided), layer_norm, group_norm and cross_entropy all declare
any_shape_gradient: their gradients read the sizes they need from operands. One graph traced at batch 4 and run
at 4, 7 and 1 gives, bit for bit, what a graph traced at that batch gives, and torch's gradients at batch 7; at
another image size too (the 'same' pads and the strided conv's dropped positions follow the input).
batch_norm declares it too; its running averages are outputs the loss does not read, whose zero cotangents are
read off their types (zeros_like_internal), so its training graph runs at any batch as well.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

RNG = np.random.default_rng(5)
C, CLASSES = 3, 4
PARAMS = {"w1": RNG.standard_normal((6, C, 3, 3)) * 0.3, "gn_w": 1 + RNG.standard_normal(6) * 0.1,
          "gn_b": RNG.standard_normal(6) * 0.1, "w2": RNG.standard_normal((6, 6, 2, 2)) * 0.3,
          "ln_w": 1 + RNG.standard_normal(6) * 0.1, "ln_b": RNG.standard_normal(6) * 0.1,
          "fc": RNG.standard_normal((6, CLASSES)) * 0.3}
NAMES = sorted(PARAMS)


def cnn_loss(x, labels, *weights):
    p = dict(zip(NAMES, weights))
    h = ops.conv2d(x, p["w1"], stride=2, padding="same")
    h = ops.group_norm(ops.relu(h), p["gn_w"], p["gn_b"], num_groups=2)
    h = ops.max_pool2d(h, kernel_size=3, stride=2, padding="same")
    h = ops.conv2d(h, p["w2"], padding=[1, 0, 0, 1])
    h = ops.mean(h, axes=[2, 3])                                      # [B, 6]
    h = ops.layer_norm(ops.tanh(h), p["ln_w"], p["ln_b"])
    return ops.cross_entropy(h @ p["fc"], labels)


def training_graph(batch, size):
    types = [f"f64[{batch}, {C}, {size}, {size}]", f"i64[{batch}]",
             *(fc.TensorType(fc.as_dtype("f64"), PARAMS[n].shape) for n in NAMES)]
    return fc.build_backward_graph(fc.trace(cnn_loss, *types), 0, [0, *range(2, 2 + len(NAMES))])


def arguments(batch, size):
    x = RNG.standard_normal((batch, C, size, size))
    return [x, RNG.integers(0, CLASSES, batch), *(PARAMS[n] for n in NAMES)]


def torch_gradients(args):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = torch.tensor(args[0], requires_grad=True)
    p = {n: torch.tensor(PARAMS[n], requires_grad=True) for n in NAMES}
    h = F.conv2d(x, p["w1"], stride=2, padding=1)                       # 'same' at stride 2 on 9: 1 and 1
    h = F.group_norm(F.relu(h), 2, p["gn_w"], p["gn_b"])
    h = F.max_pool2d(F.pad(h, (1, 1, 1, 1), value=-float("inf")), 3, stride=2)
    h = F.conv2d(F.pad(h, (0, 1, 1, 0)), p["w2"])
    h = F.layer_norm(torch.tanh(h.mean((2, 3))), (6,), p["ln_w"], p["ln_b"])
    loss = F.cross_entropy(h @ p["fc"], torch.tensor(args[1]))
    loss.backward()
    return [loss.detach().numpy(), x.grad.numpy(), *(p[n].grad.numpy() for n in NAMES)]


def test_a_cnn_training_graph_runs_at_any_batch_bit_for_bit():
    exe = fc.compile(training_graph(4, 9), dynamic_shapes=True)
    for batch in (4, 7, 1):
        args = arguments(batch, 9)
        got = exe.run(args)
        want = fc.compile(training_graph(batch, 9)).run(args)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}"
        if batch == 7:
            for a, b in zip(got, torch_gradients(args)):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert exe.specializations().misses == 2


def test_the_same_graph_at_another_image_size():
    # at 8 the strided 'same' conv pads 0 before and 1 after, at 9 and 11 1 and 1
    exe = fc.compile(training_graph(2, 9), dynamic_shapes=True)
    for size in (8, 11):
        args = arguments(3, size)
        want = fc.compile(training_graph(3, size)).run(args)
        for a, b in zip(exe.run(args), want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"size {size}"


def test_batch_norm_running_averages_do_not_pin_the_batch():
    def loss(x, w, b):
        y, _, _ = ops.batch_norm(x, w, b, np.zeros(3), np.ones(3))
        return ops.sum(ops.square(y))

    def training(batch):
        return fc.build_backward_graph(fc.trace(loss, f"f64[{batch}, 3]", "f64[3]", "f64[3]"), 0, [1, 2])
    exe = fc.compile(training(4), dynamic_shapes=True)
    w, b = np.ones(3) + RNG.standard_normal(3) * 0.1, RNG.standard_normal(3) * 0.1
    for batch in (4, 5, 2):
        x = RNG.standard_normal((batch, 3))
        want = fc.compile(training(batch)).run([x, w, b])
        for got, ref in zip(exe.run([x, w, b]), want):
            assert got.tobytes() == ref.tobytes(), f"batch {batch}"
