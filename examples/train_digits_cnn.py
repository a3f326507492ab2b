"""A small CNN on scikit-learn's bundled digits (8x8 images, 10 classes, no download), trained with frame.

    pip install -e 'plugins/ops_nn[examples]'      # scikit-learn
    python examples/train_digits_cnn.py            # about 98-99% test accuracy after 15 epochs

The model is conv(1->16, 3x3, same) - relu - conv(16->32, 3x3, same) - relu - max_pool 2x2 - linear(512->64) -
relu - linear(64->10), written with frame_ops_nn.layers. Training: the loss is traced once over the named
parameter tree (trace_with_params), build_backward_graph adds the gradients with respect to the parameter inputs,
and Adam updates the numpy arrays between steps (frame-train's optimizers will replace these ten lines).
benchmarks/digits_cnn.py trains the same model in PyTorch side by side.
"""

from __future__ import annotations

import time

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_ops_nn import layers as nn
from frame_ops_nn.init import named_leaves

BATCH = 32
LAYERS = {
    "conv1": nn.Conv2d(1, 16, 3, padding="same"),
    "conv2": nn.Conv2d(16, 32, 3, padding="same"),
    "fc1": nn.Linear(32 * 4 * 4, 64),
    "fc2": nn.Linear(64, 10),
}


def load_digits(seed: int = 0):  # noqa: ANN201
    """(x_train, y_train, x_test, y_test): images [N, 1, 8, 8] scaled to [0, 1], a stratified 80/20 split."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    data = sk_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(x, data.target.astype(np.int64), test_size=0.2, random_state=seed, stratify=data.target)


def init(rng: np.random.Generator) -> dict:
    return {name: layer.init(rng) for name, layer in LAYERS.items()}


def logits(params: dict, x):  # noqa: ANN001, ANN201 - traced tensors
    h = ops.relu(LAYERS["conv1"].apply(params["conv1"], x))
    h = ops.relu(LAYERS["conv2"].apply(params["conv2"], h))
    h = ops.max_pool2d(h, kernel_size=2)                              # [B, 32, 4, 4]
    h = ops.reshape(h, shape=[x.shape[0], 32 * 4 * 4])
    return LAYERS["fc2"].apply(params["fc2"], ops.relu(LAYERS["fc1"].apply(params["fc1"], h)))


def compile_training(params: dict, batch: int = BATCH) -> tuple[fc.Executable, list[str]]:
    """The training graph: outputs [loss, grad(loss, name) for each parameter name]."""
    graph, names = nn.trace_with_params(lambda p, x, y: ops.cross_entropy(logits(p, x), y), params,
                                        fc.TensorType("f32", (batch, 1, 8, 8)), fc.TensorType("i64", (batch,)))
    return fc.compile(fc.build_backward_graph(graph, 0, names)), names


def accuracy(params: dict, x: np.ndarray, y: np.ndarray) -> float:
    graph, _ = nn.trace_with_params(logits, params, fc.TensorType("f32", x.shape))
    out = fc.compile(graph).run([*named_leaves(params).values(), x])[0]
    return float(np.mean(out.argmax(axis=1) == y))


class Adam:
    """Adam (Kingma & Ba; torch.optim.Adam's defaults) over a flat list of numpy arrays, updated in place."""

    def __init__(self, leaves: list[np.ndarray], lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8) -> None:  # noqa: ANN001
        self.lr, (self.b1, self.b2), self.eps, self.t = lr, betas, eps, 0
        self.m = [np.zeros_like(p) for p in leaves]
        self.v = [np.zeros_like(p) for p in leaves]

    def step(self, leaves: list[np.ndarray], grads: list[np.ndarray]) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for p, g, m, v in zip(leaves, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


def train(epochs: int = 15, lr: float = 2e-3, seed: int = 0, log: bool = False) -> dict:
    """Train from scratch; returns test accuracy per epoch, seconds per epoch and the final parameters."""
    x_train, x_test, y_train, y_test = load_digits(seed)
    rng = np.random.default_rng(seed)
    params = init(rng)
    step, names = compile_training(params)
    leaves = list(named_leaves(params).values())  # the arrays inside params, in the graph's input order
    opt = Adam(leaves, lr)
    history, seconds = [], []
    for epoch in range(epochs):
        start = time.perf_counter()
        order = rng.permutation(len(x_train))
        for i in range(0, len(order) - BATCH + 1, BATCH):  # the short last batch is dropped
            batch = order[i:i + BATCH]
            loss, *grads = step.run([*leaves, x_train[batch], y_train[batch]])
            opt.step(leaves, grads)
        seconds.append(time.perf_counter() - start)
        history.append(accuracy(params, x_test, y_test))
        if log:
            print(f"epoch {epoch + 1:2d}  loss {float(loss):.4f}  test accuracy {history[-1]:.4f}  "
                  f"{seconds[-1]:.2f} s")
    return {"accuracy": history, "seconds": seconds, "params": params}


if __name__ == "__main__":
    result = train(log=True)
    print(f"final test accuracy {result['accuracy'][-1]:.4f}, median epoch {np.median(result['seconds']):.2f} s")
