"""Initialisers: numpy arrays for parameters, drawn from a ``numpy.random.Generator``.

Every initialiser has the signature ``init(rng, shape, dtype=np.float32, **options) -> ndarray`` and follows
``torch.nn.init``'s definitions:

- ``zeros``, ``ones``, ``normal(mean=0, std=1)``, ``uniform(low=0, high=1)``;
- ``xavier_uniform`` / ``glorot_uniform``: ``U(-a, a)`` with ``a = gain sqrt(6 / (fan_in + fan_out))``;
  ``xavier_normal`` / ``glorot_normal``: ``N(0, std^2)`` with ``std = gain sqrt(2 / (fan_in + fan_out))``;
- ``kaiming_uniform`` / ``he_uniform``: ``U(-b, b)`` with ``b = gain sqrt(3 / fan)``; ``kaiming_normal`` /
  ``he_normal``: ``std = gain / sqrt(fan)``; ``fan`` is ``fan_in`` (``mode="fan_in"``, the default) or
  ``fan_out``, and ``gain = calculate_gain(nonlinearity, a)`` (default ``"leaky_relu"`` with ``a = 0``, i.e.
  ``sqrt(2)``, as torch);
- ``orthogonal(gain=1)``: the Q of a QR decomposition of a normal matrix ``[shape[0], prod(shape[1:])]``, signs
  fixed by R's diagonal, so rows (or columns, whichever are fewer) are orthonormal.

Fans are torch's: for a weight of shape ``[out, in, *kernel]``, ``fan_in = in * prod(kernel)`` and ``fan_out =
out * prod(kernel)``. A weight stored the other way round (``x @ w`` with ``w[in, out]``, as
``frame_ops_nn.layers.Linear`` does) passes ``in_axis=0, out_axis=1``.

``init_tree(rng, shapes, rules)`` fills a whole named parameter tree: ``shapes`` is a nested dict whose leaves
are shapes (tuples), ``rules`` maps a glob pattern over the leaf's path name (``"enc.0.w"``, see
docs/design-parameters-and-shapes.md) to an initialiser; the first matching rule wins. The leaves are
filled in name order, so one seed gives one tree whatever order the dict was written in.
"""

from __future__ import annotations

import fnmatch
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from frame_core import ArgumentError

Initializer = Callable[..., np.ndarray]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """torch.nn.init.calculate_gain: the gain that keeps activations' variance for ``nonlinearity``."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is not None and (isinstance(param, (bool, np.bool_)) or not isinstance(param, numbers.Real)
                                  or not math.isfinite(param)):
            raise ArgumentError(f"leaky_relu's negative slope is a finite number, got {param!r}")
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ArgumentError(f"unknown nonlinearity {nonlinearity!r}; use one of {', '.join(_LINEAR)}, tanh, relu, "
                        "leaky_relu or selu")


def fans(shape: tuple[int, ...], in_axis: int = 1, out_axis: int = 0) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of ``shape``: the in/out axis sizes times the other (kernel) axes."""
    shape = tuple(shape)
    if len(shape) < 2:
        raise ArgumentError(f"fan_in and fan_out need a weight with at least 2 axes, got shape {list(shape)}; "
                            "initialise biases and norms with zeros, ones, normal or uniform")
    rank = len(shape)
    if not -rank <= in_axis < rank or not -rank <= out_axis < rank or in_axis % rank == out_axis % rank:
        raise ArgumentError(f"in_axis={in_axis} and out_axis={out_axis} must be two different axes of the weight's "
                            f"{rank} axes (shape {list(shape)}); torch's layout [out, in, *kernel] is in_axis=1, "
                            "out_axis=0, a Linear weight [in, out] is in_axis=0, out_axis=1")
    in_axis, out_axis = in_axis % rank, out_axis % rank
    receptive = math.prod(n for i, n in enumerate(shape) if i not in (in_axis, out_axis))
    return shape[in_axis] * receptive, shape[out_axis] * receptive


def _fan(shape: tuple[int, ...], mode: str, in_axis: int, out_axis: int) -> int:
    fan_in, fan_out = fans(shape, in_axis, out_axis)
    if mode not in ("fan_in", "fan_out"):
        raise ArgumentError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return fan_in if mode == "fan_in" else fan_out


def _real(shape: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    sizes = [shape] if isinstance(shape, (int, np.integer)) else shape
    try:
        sizes = list(sizes)
    except TypeError:
        sizes = None
    # a size of 2.5 was truncated to 2 by int(): only integers are sizes
    if sizes is None or not all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))
                                for n in sizes):
        raise ArgumentError(f"a shape is an int or a tuple of ints, got {shape!r:.60}")
    shape = tuple(int(n) for n in sizes)
    if any(n < 0 for n in shape):
        raise ArgumentError(f"a shape has non-negative sizes, got {list(shape)}")
    from frame_core import as_dtype

    try:
        resolved = as_dtype(dtype).np  # frame's names too: "bfloat16", "bf16", "f32"
    except Exception:  # noqa: BLE001 - the dtype parser's error; the message below says what is accepted
        resolved = None
    if resolved is None or not (np.issubdtype(resolved, np.floating) or resolved.name == "bfloat16"):
        given = resolved.name if resolved is not None else f"{dtype!r:.40}"
        raise ArgumentError(f"initialisers draw floating parameters, got dtype {given}; use float16, bfloat16, "
                            "float32 or float64")
    dtype = resolved
    return shape, dtype


def _finite(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ArgumentError(f"{name} must be a finite number, got {value!r:.40}")


def zeros(rng: np.random.Generator, shape: Any, dtype: Any = np.float32) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    return np.zeros(shape, dtype)


def ones(rng: np.random.Generator, shape: Any, dtype: Any = np.float32) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    return np.ones(shape, dtype)


def normal(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, mean: float = 0.0,
           std: float = 1.0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    _finite(mean=mean, std=std)
    if std < 0:
        raise ArgumentError(f"std must be >= 0, got {std}")
    return rng.normal(mean, std, shape).astype(dtype)


def uniform(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, low: float = 0.0,
            high: float = 1.0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    _finite(low=low, high=high)
    if not low <= high:
        raise ArgumentError(f"uniform needs low <= high, got low={low}, high={high}")
    return rng.uniform(low, high, shape).astype(dtype)


def xavier_uniform(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, gain: float = 1.0,
                   in_axis: int = 1, out_axis: int = 0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    fan_in, fan_out = fans(shape, in_axis, out_axis)
    bound = gain * math.sqrt(6.0 / max(fan_in + fan_out, 1))
    return uniform(rng, shape, dtype, low=-bound, high=bound)


def xavier_normal(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, gain: float = 1.0,
                  in_axis: int = 1, out_axis: int = 0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    fan_in, fan_out = fans(shape, in_axis, out_axis)
    return normal(rng, shape, dtype, std=gain * math.sqrt(2.0 / max(fan_in + fan_out, 1)))


def kaiming_uniform(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, a: float = 0.0,
                    mode: str = "fan_in", nonlinearity: str = "leaky_relu", in_axis: int = 1,
                    out_axis: int = 0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / max(_fan(shape, mode, in_axis, out_axis), 1))
    return uniform(rng, shape, dtype, low=-bound, high=bound)


def kaiming_normal(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, a: float = 0.0,
                   mode: str = "fan_in", nonlinearity: str = "leaky_relu", in_axis: int = 1,
                   out_axis: int = 0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    std = calculate_gain(nonlinearity, a) / math.sqrt(max(_fan(shape, mode, in_axis, out_axis), 1))
    return normal(rng, shape, dtype, std=std)


def orthogonal(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, *, gain: float = 1.0) -> np.ndarray:
    shape, dtype = _real(shape, dtype)
    _finite(gain=gain)
    if len(shape) < 2:
        raise ArgumentError(f"orthogonal needs a weight with at least 2 axes, got shape {list(shape)}")
    rows, cols = shape[0], math.prod(shape[1:])
    flat = rng.standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))  # a unique Q: uniform over the orthogonal group
    if rows < cols:
        q = q.T
    return (gain * q).reshape(shape).astype(dtype)


glorot_uniform, glorot_normal = xavier_uniform, xavier_normal
he_uniform, he_normal = kaiming_uniform, kaiming_normal


# -- named parameter trees ----------------------------------------------------------------------------
def named_leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{path name: leaf}`` of a nested dict, keys joined with ``.`` and sorted (the design note's names)."""
    out: dict[str, Any] = {}
    for key in sorted(tree):
        if not isinstance(key, str) or "." in key or not key:
            raise ArgumentError(f"parameter tree keys are non-empty strings without '.', got {key!r} under "
                                f"{prefix or 'the root'!r}")
        name = f"{prefix}.{key}" if prefix else key
        value = tree[key]
        if isinstance(value, Mapping):
            out.update(named_leaves(value, name))
        else:
            out[name] = value
    return out


def init_tree(rng: np.random.Generator, shapes: Mapping[str, Any],
              rules: Mapping[str, Initializer | Callable[..., np.ndarray]], dtype: Any = np.float32) -> dict:
    """A parameter tree of ``shapes``' structure, each leaf drawn by the first rule whose glob matches its name.

    ``rules`` maps patterns such as ``"*.w"`` or ``"enc.*.b"`` to initialisers (``functools.partial`` them for
    options). A leaf no rule matches is an ``ArgumentError`` listing every such name.
    """
    names = named_leaves(shapes)
    unmatched = [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in rules)]
    if unmatched:
        raise ArgumentError(f"no rule matches the parameters {unmatched}; rules: {list(rules)} (add a '*' rule "
                            "for a default)")
    out: dict = {}
    for name, shape in names.items():
        init = next(fn for pattern, fn in rules.items() if fnmatch.fnmatchcase(name, pattern))
        node = out
        *parents, leaf = name.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        try:
            node[leaf] = init(rng, shape, dtype)
        except ArgumentError as exc:  # say which leaf: a list of layers or a misspelt shape is easy to miss
            raise ArgumentError(f"init_tree: parameter {name!r} (shape {shape!r:.60}): {exc}") from None
    return out
