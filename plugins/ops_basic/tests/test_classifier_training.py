"""A softmax-regression classifier trained with cross_entropy and SGD on a synthetic separable set.

Four Gaussian blobs in 2-D, far enough apart to be linearly separable; the model is ``logits = x @ w + b``.
Settings are written in the test: the loss must fall at every step, end below ``LOSS``, and the held-out
accuracy (argmax of the logits, computed by the graph) must exceed ``ACCURACY``.
"""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops

SEED, STEPS, LR, LOSS, ACCURACY = 20260714, 150, 0.5, 0.05, 0.97
CLASSES, N = 4, 128
CENTRES = np.array([[2.0, 2.0], [-2.0, 2.0], [-2.0, -2.0], [2.0, -2.0]])


def blobs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, CLASSES, n)
    x = CENTRES[labels] + rng.normal(0.0, 0.6, (n, 2))
    return x.astype(np.float32), labels.astype(np.int64)


def test_softmax_regression_trains_to_high_accuracy():
    rng = np.random.default_rng(SEED)
    x, labels = blobs(rng, N)
    x_test, labels_test = blobs(rng, N)
    types = [f"f32[{N}, 2]", f"i64[{N}]", f"f32[2, {CLASSES}]", f"f32[{CLASSES}]"]
    loss_graph = fc.trace(lambda x, t, w, b: ops.cross_entropy(x @ w + b, t), *types)
    train = fc.compile(fc.build_backward_graph(loss_graph, 0, [2, 3]))
    update = fc.compile(fc.build_sgd_update_graph(types[2:], LR))
    predict = fc.compile(fc.trace(lambda x, w, b: ops.argmax(x @ w + b, axis=1), types[0], *types[2:]))

    params = [np.zeros((2, CLASSES), np.float32), np.zeros(CLASSES, np.float32)]
    losses = []
    for _ in range(STEPS):
        loss, *grads = train.run([x, labels, *params])
        params = update.run([*params, *grads])
        losses.append(float(loss))

    assert abs(losses[0] - np.log(CLASSES)) < 1e-6  # zero weights: the uniform prediction
    assert all(b < a for a, b in zip(losses, losses[1:])), "the loss must fall at every step"
    assert losses[-1] < LOSS, losses[-1]
    (predicted,) = predict.run([x_test, *params])
    assert predicted.dtype == np.int64
    accuracy = float(np.mean(predicted == labels_test))
    assert accuracy > ACCURACY, accuracy
