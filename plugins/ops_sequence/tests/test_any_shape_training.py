"""A sequence model's training graph, compiled once with dynamic_shapes=True, runs at any batch size and length.

conv1d ('same' and strided, 'causal'), selective_scan, max_pool1d and avg_pool1d ('same', strided), cumsum,
gather over the batch, concat and dropout all declare any_shape_gradient. One graph traced at batch 3, length 12
and run at batches 3, 6, 1 (and length 9) gives, bit for bit, what a graph traced there gives, and its gradient
agrees with a central difference of the loss along a random direction.
"""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_ops_basic.random import key

RNG = np.random.default_rng(8)
D, N = 4, 3
PARAMS = {"w_in": RNG.standard_normal((D, 2, 3)) * 0.4, "w_b": RNG.standard_normal((N, 2, 3)) * 0.4,
          "w_c": RNG.standard_normal((N, 2, 3)) * 0.4, "a": -np.exp(RNG.standard_normal((D, N)) * 0.3),
          "w_out": RNG.standard_normal((2, D, 3)) * 0.4}
NAMES = sorted(PARAMS)


def sequence_loss(x, dropout_key, *weights):
    p = dict(zip(NAMES, weights))
    h = ops.conv1d(x, p["w_in"], padding="same")                      # [B, D, L]
    bm = ops.conv1d(x, p["w_b"], padding="causal")                    # [B, N, L]
    cm = ops.conv1d(x, p["w_c"], padding="causal")
    y = ops.selective_scan(h, h, p["a"], bm, cm, delta_softplus=True)
    y = ops.dropout(y, dropout_key, rate=0.25)
    pooled = ops.concat(ops.max_pool1d(y, kernel_size=3, stride=2, padding="same"),
                        ops.avg_pool1d(y, kernel_size=2, stride=2, padding="same", count_include_pad=False), axis=1)
    z = ops.conv1d(ops.tanh(pooled), ops.concat(p["w_out"], p["w_out"], axis=1), stride=2, padding="same")
    z = ops.cumsum(z, axis=2)
    first = ops.gather(z, np.array([0]), axis=0)                      # the first sample, at any batch
    return ops.mean(ops.square(z)) + ops.mean(first)


def training_graph(batch, length):
    types = [f"f64[{batch}, 2, {length}]", "i64[2]", *(fc.TensorType(fc.as_dtype("f64"), PARAMS[n].shape)
                                                      for n in NAMES)]
    return fc.build_backward_graph(fc.trace(sequence_loss, *types), 0, [0, *range(2, 2 + len(NAMES))])


def arguments(batch, length):
    return [RNG.standard_normal((batch, 2, length)), key(7), *(PARAMS[n] for n in NAMES)]


def test_a_sequence_training_graph_runs_at_any_batch_and_length_bit_for_bit():
    exe = fc.compile(training_graph(3, 12), dynamic_shapes=True)
    for batch, length in ((3, 12), (6, 12), (1, 12), (2, 9)):
        args = arguments(batch, length)
        want = fc.compile(training_graph(batch, length)).run(args)
        got = exe.run(args)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}, length {length}"
    assert exe.specializations().misses == 3


def test_its_gradient_at_another_batch_matches_a_central_difference():
    exe = fc.compile(training_graph(3, 12), dynamic_shapes=True)
    forward = fc.compile(fc.trace(sequence_loss, "f64[5, 2, 12]", "i64[2]",
                                  *(fc.TensorType(fc.as_dtype("f64"), PARAMS[n].shape) for n in NAMES)))
    args = arguments(5, 12)
    grads = exe.run(args)[1:]
    directions = [RNG.standard_normal(args[0].shape)] + [RNG.standard_normal(PARAMS[n].shape) for n in NAMES]
    primal = [args[0], *args[2:]]

    def loss(t):
        moved = [p + t * d for p, d in zip(primal, directions)]
        return float(forward.run([moved[0], args[1], *moved[1:]])[0])
    along = sum(float(np.sum(g * d)) for g, d in zip(grads, directions))
    np.testing.assert_allclose(along, (loss(1e-6) - loss(-1e-6)) / 2e-6, rtol=1e-6)
