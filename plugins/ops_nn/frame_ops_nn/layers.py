"""Small model helpers: each one screen, each ``init(rng) -> params`` and ``apply(params, x) -> y``.

A layer is a frozen dataclass of its hyper-parameters. ``init`` draws a parameter tree (nested dicts of numpy
arrays, named as in docs/design-parameters-and-shapes.md: ``{"w": ..., "b": ...}``, a layer inside another
under its own key) and ``apply`` traces the layer with frame ops, so it runs inside ``frame_core.trace`` on the
traced tensors of that tree. Nothing else is kept: no hidden state, no registry of modules.

Layouts: ``Linear.w`` is ``[in, out]`` (``y = x @ w + b``); conv weights are torch's ``[out, in / groups,
*kernel]``. Initialisation follows torch's defaults (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for linear and conv
weights and biases, ones/zeros for norms, ``N(0, 1)`` for embeddings), so a model started from the same
numbers trains the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from frame_core import ArgumentError, ops

from . import init as initializers


def _fan_in_uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, dtype) -> np.ndarray:  # noqa: ANN001
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    return initializers.uniform(rng, shape, dtype, low=-bound, high=bound)


def _sizes(layer, **sizes: int) -> None:  # noqa: ANN001
    """Each of ``sizes`` is an int >= 0 (a feature or channel count; torch allows 0)."""
    for what, n in sizes.items():
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ArgumentError(f"{type(layer).__name__}: {what} is an int >= 0, got {n!r:.40}")


def _kernel(layer, rank: int) -> tuple[int, ...]:  # noqa: ANN001
    """``kernel_size`` as ``rank`` ints >= 1 (one int stands for every spatial axis)."""
    k = layer.kernel_size
    ks = (k,) * rank if isinstance(k, (int, np.integer)) and not isinstance(k, bool) else k
    if not isinstance(ks, (tuple, list)) or len(ks) != rank or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)) and n >= 1 for n in ks):
        raise ArgumentError(f"{type(layer).__name__}: kernel_size is an int >= 1 or {rank} of them, got {k!r:.40}")
    return tuple(int(n) for n in ks)


def _check_groups(conv) -> None:  # noqa: ANN001 - a Conv1d or Conv2d
    groups, cin, cout = conv.groups, conv.in_channels, conv.out_channels
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1 or cin % groups \
            or cout % groups:
        raise ArgumentError(f"{type(conv).__name__}: groups={groups!r} must be an int >= 1 dividing both "
                            f"in_channels={cin} and out_channels={cout}")


@dataclass(frozen=True)
class Linear:
    """``y = x @ w + b`` over the last axis of ``x[..., in_features]``."""

    in_features: int
    out_features: int
    bias: bool = True
    dtype: str = "float32"

    def init(self, rng: np.random.Generator) -> dict:
        _sizes(self, in_features=self.in_features, out_features=self.out_features)
        shape = (self.in_features, self.out_features)
        params = {"w": _fan_in_uniform(rng, shape, self.in_features, self.dtype)}
        if self.bias:
            params["b"] = _fan_in_uniform(rng, (self.out_features,), self.in_features, self.dtype)
        return params

    def apply(self, params: dict, x):  # noqa: ANN001, ANN201 - traced tensors
        y = ops.matmul(x, params["w"])
        return y + params["b"] if self.bias else y


def _conv_init(layer, rng: np.random.Generator, rank: int) -> dict:  # noqa: ANN001 - a Conv1d or Conv2d
    """w[C_out, C_in / groups, *kernel] and b[C_out], uniform in +-1/sqrt(fan_in) as torch's Conv layers."""
    _sizes(layer, in_channels=layer.in_channels, out_channels=layer.out_channels)
    _check_groups(layer)
    kernel = _kernel(layer, rank)
    per_group = layer.in_channels // layer.groups
    fan_in = per_group * math.prod(kernel)
    params = {"w": _fan_in_uniform(rng, (layer.out_channels, per_group, *kernel), fan_in, layer.dtype)}
    if layer.bias:
        params["b"] = _fan_in_uniform(rng, (layer.out_channels,), fan_in, layer.dtype)
    return params


@dataclass(frozen=True)
class Conv1d:
    """``conv1d(x[B, C_in, L], w[C_out, C_in / groups, K]) + b[C_out]`` (frame-ops-sequence's conv1d)."""

    in_channels: int
    out_channels: int
    kernel_size: int
    stride: int = 1
    padding: str | int | tuple[int, int] = "valid"
    dilation: int = 1
    groups: int = 1
    bias: bool = True
    dtype: str = "float32"

    def init(self, rng: np.random.Generator) -> dict:
        return _conv_init(self, rng, 1)

    def apply(self, params: dict, x):  # noqa: ANN001, ANN201
        y = ops.conv1d(x, params["w"], stride=self.stride, padding=self.padding, dilation=self.dilation,
                       groups=self.groups)
        return y + ops.reshape(params["b"], shape=[self.out_channels, 1]) if self.bias else y


@dataclass(frozen=True)
class Conv2d:
    """``conv2d(x[B, C_in, H, W], w[C_out, C_in / groups, kh, kw]) + b[C_out]``."""

    in_channels: int
    out_channels: int
    kernel_size: int | tuple[int, int]
    stride: int | tuple[int, int] = 1
    padding: str | int | tuple[int, ...] = "valid"
    dilation: int | tuple[int, int] = 1
    groups: int = 1
    bias: bool = True
    dtype: str = "float32"

    def init(self, rng: np.random.Generator) -> dict:
        return _conv_init(self, rng, 2)

    def apply(self, params: dict, x):  # noqa: ANN001, ANN201
        y = ops.conv2d(x, params["w"], stride=self.stride, padding=self.padding, dilation=self.dilation,
                       groups=self.groups)
        return y + ops.reshape(params["b"], shape=[self.out_channels, 1, 1]) if self.bias else y


@dataclass(frozen=True)
class LayerNorm:
    """``layer_norm`` over the last ``len(shape)`` axes, with a learned scale ``w`` and shift ``b``."""

    shape: tuple[int, ...]
    eps: float = 1e-5
    dtype: str = "float32"

    def init(self, rng: np.random.Generator) -> dict:
        shape = (self.shape,) if isinstance(self.shape, int) else tuple(self.shape)
        return {"w": initializers.ones(rng, shape, self.dtype), "b": initializers.zeros(rng, shape, self.dtype)}

    def apply(self, params: dict, x):  # noqa: ANN001, ANN201
        return ops.layer_norm(x, params["w"], params["b"], eps=self.eps)


@dataclass(frozen=True)
class Embedding:
    """Rows of ``table[num, dim]`` at integer indices; the ``padding_idx`` row starts at zero and never trains."""

    num: int
    dim: int
    padding_idx: int | None = None
    dtype: str = "float32"

    def _padding_row(self) -> int | None:
        """``padding_idx`` as a row number; a negative one counts from the end, as torch's."""
        idx = self.padding_idx
        if idx is None:
            return None
        if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, (int, np.integer)) or not -self.num <= idx < self.num:
            raise ArgumentError(f"Embedding(num={self.num}): padding_idx must be a row of the table, an int in "
                                f"[{-self.num}, {self.num}), got {idx!r}")
        return int(idx) % self.num

    def init(self, rng: np.random.Generator) -> dict:
        _sizes(self, num=self.num, dim=self.dim)
        row = self._padding_row()
        table = initializers.normal(rng, (self.num, self.dim), self.dtype)
        if row is not None:
            table[row] = 0
        return {"table": table}

    def apply(self, params: dict, indices):  # noqa: ANN001, ANN201
        return ops.embedding(params["table"], indices, padding_idx=self._padding_row())


@dataclass(frozen=True)
class MLP:
    """Linear layers of ``sizes`` (``[in, hidden..., out]``) with ``activation`` (an ``ops`` name) between them."""

    sizes: tuple[int, ...]
    activation: str = "relu"
    dtype: str = "float32"

    def layers(self) -> list[Linear]:
        return [Linear(a, b, dtype=self.dtype) for a, b in zip(self.sizes[:-1], self.sizes[1:])]

    def init(self, rng: np.random.Generator) -> dict:
        return {str(i): layer.init(rng) for i, layer in enumerate(self.layers())}

    def apply(self, params: dict, x):  # noqa: ANN001, ANN201
        layers = self.layers()
        for i, layer in enumerate(layers):
            x = layer.apply(params[str(i)], x)
            if i < len(layers) - 1:
                x = getattr(ops, self.activation)(x)
        return x


@dataclass(frozen=True)
class CausalSelfAttention:
    """Multi-head self-attention over ``x[B, T, dim]`` where position ``t`` sees positions ``<= t`` only.

    One ``qkv`` projection to ``3 * dim``, per head ``softmax(q k^T / sqrt(dim / heads))`` with the future masked
    by ``where`` (to -inf, as torch's ``is_causal``), times ``v``, heads joined and projected by ``proj``. A traced
    block runs at any batch size (``value_and_grad``, ``TrainStep``); the sequence length is the traced one.
    """

    dim: int
    heads: int
    dtype: str = "float32"

    def init(self, rng: np.random.Generator) -> dict:
        if self.dim % self.heads:
            raise ArgumentError(f"dim = {self.dim} must be a multiple of heads = {self.heads}")
        return {"qkv": Linear(self.dim, 3 * self.dim, dtype=self.dtype).init(rng),
                "proj": Linear(self.dim, self.dim, dtype=self.dtype).init(rng)}

    def apply(self, params: dict, x):  # noqa: ANN001, ANN201
        _, t, d = x.shape  # the batch may change between calls; T is fixed per trace (the causal mask)
        h, dh = self.heads, self.dim // self.heads
        qkv = Linear(d, 3 * d).apply(params["qkv"], x)                        # [B, T, 3 D]
        # -1 for the batch, never the traced size b: value_and_grad and TrainStep re-specialise for any batch
        qkv = ops.transpose(ops.reshape(qkv, shape=[-1, t, 3, h, dh]), perm=[2, 0, 3, 1, 4])  # [3, B, H, T, Dh]
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = ops.matmul(q, ops.transpose(k, perm=[0, 1, 3, 2])) * (1.0 / math.sqrt(dh))  # [B, H, T, T]
        causal = np.tril(np.ones((t, t), bool))
        att = ops.softmax(ops.where(causal, scores, -np.inf), axis=-1)
        out = ops.reshape(ops.transpose(ops.matmul(att, v), perm=[0, 2, 1, 3]), shape=[-1, t, d])
        return Linear(d, d).apply(params["proj"], out)


def trace_with_params(fn, params: dict, *data_types, name: str = "model"):  # noqa: ANN001, ANN201
    """Trace ``fn(params, *data)`` into a graph whose first inputs are ``params``' leaves, named by path.

    Returns ``(graph, names)``; ``names`` (sorted path names such as ``"conv1.w"``) are the graph inputs to pass
    to ``build_backward_graph`` as ``wrt`` and the order to pass the leaves to ``run`` in (``named_leaves(params)``'s
    order), followed by the data. A bridge until ``frame_core.value_and_grad`` takes parameter trees itself.
    """
    from frame_core import TensorType, trace

    leaves = initializers.named_leaves(params)
    names = list(leaves)
    types = [TensorType(np.asarray(v).dtype.name, np.shape(v)) for v in leaves.values()]

    def flat(*tensors):  # noqa: ANN002, ANN202
        tree: dict = {}
        for path, t in zip(names, tensors):
            node = tree
            *parents, leaf = path.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = t
        return fn(tree, *tensors[len(names):])

    graph = trace(flat, *types, *data_types, name=name)
    for value, path in zip(graph.inputs, names):
        value.name = path
    return graph, names
