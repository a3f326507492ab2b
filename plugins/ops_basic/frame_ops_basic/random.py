"""Random numbers inside graphs: a counter-based generator whose key is a graph input.

A **key** is an ``i64[2]`` tensor: the two 64-bit words of the key of
Philox-4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011; the Random123 generator, which ``numpy.random.Philox`` implements and
checks against the published known-answer vectors). The bits an op draws are a
pure function of (key, counter): element ``i`` of a sampling op reads the
64-bit word ``i`` of the block sequence of its key (a normal sample's pair of
elements ``2j, 2j + 1`` reads the pair of words ``2j, 2j + 1``). So the same
key gives the same numbers on every run, opt level, backend and machine, and
the nodes are as pure as ``add`` (CSE may merge two draws with the same key and
shape, which are equal anyway).

A training loop advances the key explicitly: ``fold_in(key, step)`` (in numpy,
or ``ops.random_fold_in`` inside a graph) derives the step's key, ``split``
derives independent keys for several ops. Derived keys come from counter
ranges that sampling never reads (the counter's top word says what the block
is for: 0 sampling, 1 split, 2 fold_in), so a key and the keys derived from it
never share bits.

Samples are computed in float64 from the bits and rounded once to the output
dtype, so a float16 and a float32 draw with one key hold the same numbers up to
rounding; ``bernoulli`` and ``dropout`` compare the raw 64-bit words with
``p * 2**64``, so their masks do not depend on the dtype at all. ``dropout``'s
gradient is ``dropout(gy, key)``: the same key and shape regenerate the same
mask, so nothing is saved between the forward and backward passes, and the
gradient differentiates again (dropout is linear in ``x``).

See ``docs/random.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from frame_core import ArgumentError, AttrSpec, Example, NodeContext, OpSchema, TensorType, float64, int64, ops

#: What the counter's top word says a block is for.
_SAMPLE, _SPLIT, _FOLD_IN = 0, 1, 2
_KEY_HINT = "make one with frame_ops_basic.random.key(seed) (numpy int64[2]) and feed it to an 'i64[2]' graph input"
_WORD = 2**64


# -- the generator ------------------------------------------------------------------------------------
def _bits(key: np.ndarray, n: int, purpose: int = _SAMPLE, start: int = 0) -> np.ndarray:
    """``n`` uint64 words of Philox-4x64-10 under ``key``, from the block with counter ``(start, 0, 0, purpose)``
    on (four words per block, counter word 0 counting up)."""
    words = np.ascontiguousarray(key, np.int64).view(np.uint64)
    # numpy's Philox adds one to the counter before it computes a block: start one below the first block
    counter = ((purpose << 192) + start - 1) % 2**256
    return np.random.Philox(key=words, counter=counter).random_raw(n)


def _check_key_array(key: Any, what: str) -> np.ndarray:
    array = np.asarray(key)
    if array.shape != (2,) or array.dtype != np.int64:
        raise ArgumentError(f"{what}: a key is a numpy int64 array of shape (2,), got {array.dtype} of shape "
                            f"{array.shape}; {_KEY_HINT}")
    return array


def key(seed: int) -> np.ndarray:
    """The key of ``seed`` (an int in ``[-2**63, 2**64)``): ``int64[2]`` holding the seed's 64 bits and 0."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not -2**63 <= int(seed) < _WORD:
        raise ArgumentError(f"key: seed must be an int in [-2**63, 2**64), got {seed!r}")
    return np.array([int(seed) % _WORD, 0], np.uint64).view(np.int64)


def split(key: np.ndarray, num: int = 2) -> np.ndarray:
    """``num`` new keys derived from ``key`` (``int64[num, 2]``), independent of each other and of ``key``'s own
    draws. The same as ``ops.random_split(key, num=num)`` inside a graph."""
    key = _check_key_array(key, "split")
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 0:
        raise ArgumentError(f"split: num must be an int >= 0, got {num!r}")
    return _bits(key, 2 * int(num), _SPLIT).view(np.int64).reshape(int(num), 2)


def fold_in(key: np.ndarray, data: int) -> np.ndarray:
    """A new key derived from ``key`` and the integer ``data`` (a step, a rank, a layer index; any int in
    ``[-2**63, 2**64)``): different data give independent keys. The same as ``ops.random_fold_in``."""
    key = _check_key_array(key, "fold_in")
    if isinstance(data, bool) or not isinstance(data, (int, np.integer)) or not -2**63 <= int(data) < _WORD:
        raise ArgumentError(f"fold_in: data must be an int in [-2**63, 2**64), got {data!r}")
    return _bits(key, 2, _FOLD_IN, int(data) % _WORD).view(np.int64)


#: significand bits (the implicit one included) per float dtype name
_SIGNIFICAND = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def uniform_from_bits(bits: np.ndarray, dtype: str = "float64") -> np.ndarray:
    """Floats in [0, 1) from uint64 words: the top p bits (p = the significand of ``dtype``, a dtype name, 53
    for float64) over 2**p, exact in float64 and in ``dtype``, so rounding can never reach 1."""
    p = _SIGNIFICAND[dtype]
    return (bits >> np.uint64(64 - p)).astype(np.float64) * (2.0 ** -p)


def normal_from_bits(bits: np.ndarray) -> np.ndarray:
    """Standard normal float64 samples by Box-Muller: words ``2j`` and ``2j + 1`` give samples ``2j`` (the cosine
    branch) and ``2j + 1`` (the sine branch), two independent normals (an even number of words)."""
    u1 = 1.0 - uniform_from_bits(bits[0::2])  # (0, 1]: the logarithm stays finite
    angle = uniform_from_bits(bits[1::2]) * (2.0 * math.pi)
    radius = np.sqrt(-2.0 * np.log(u1))
    z = np.empty(len(bits))
    np.multiply(radius, np.cos(angle), out=z[0::2])
    np.multiply(radius, np.sin(angle), out=z[1::2])
    return z


def threshold(p: float) -> int:
    """``p * 2**64`` as an int (exact): a uniform 64-bit word is below it with probability ``p``."""
    return int(p * _WORD)


# -- shape inference ------------------------------------------------------------------------------------
def _check_key(ctx: NodeContext, position: int) -> None:
    t = ctx.input_types[position]
    if t.dtype is not int64 or t.shape != (2,):
        raise ctx.error(f"input {position} ({ctx.schema.inputs[position]!r}) is the key, an i64[2] tensor, got {t}; "
                        f"{_KEY_HINT}")


def _sample_type(ctx: NodeContext) -> TensorType:
    _check_key(ctx, 0)
    dtype = ctx.attrs["dtype"] or float64
    if not dtype.is_float:
        raise ctx.error(f"dtype must be a float dtype (f16, bf16, f32, f64), got {dtype}; draw floats and cast them, "
                        "or use bernoulli for booleans")
    return TensorType(dtype, ctx.attrs["shape"])


def _uniform_shape(ctx: NodeContext) -> list[TensorType]:
    low, high = ctx.attrs["low"], ctx.attrs["high"]
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ctx.error(f"needs finite low < high, got low={low!r}, high={high!r}")
    return [_sample_type(ctx)]


def _normal_shape(ctx: NodeContext) -> list[TensorType]:
    mean, std = ctx.attrs["mean"], ctx.attrs["std"]
    if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
        raise ctx.error(f"needs a finite mean and a finite std >= 0, got mean={mean!r}, std={std!r}")
    return [_sample_type(ctx)]


def _bernoulli_shape(ctx: NodeContext) -> list[TensorType]:
    _check_key(ctx, 0)
    p = ctx.attrs["p"]
    if not 0.0 <= p <= 1.0:
        raise ctx.error(f"p={p!r} is not a probability; give 0 <= p <= 1")
    return [TensorType(ctx.attrs["dtype"], ctx.attrs["shape"])]


def _dropout_shape(ctx: NodeContext) -> list[TensorType]:
    x = ctx.input_types[0]
    _check_key(ctx, 1)
    rate = ctx.attrs["rate"]
    if not 0.0 <= rate < 1.0:
        raise ctx.error(f"rate={rate!r} is outside [0, 1); give the probability of dropping an element, at least 0 "
                        "and below 1")
    if not x.dtype.is_float:
        raise ctx.error(f"needs a floating x, got {x}; cast it to a float dtype first")
    return [x]


# -- kernels --------------------------------------------------------------------------------------------
def _uniform_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    n, dtype = math.prod(t.shape), t.dtype.np
    low, width = ctx.attrs["low"], ctx.attrs["high"] - ctx.attrs["low"]

    def kernel(key: np.ndarray) -> np.ndarray:
        u = uniform_from_bits(_bits(key, n), t.dtype.name)
        return (u * width + low).astype(dtype).reshape(t.shape)
    return kernel


def _normal_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    n, dtype = math.prod(t.shape), t.dtype.np
    mean, std = ctx.attrs["mean"], ctx.attrs["std"]

    def kernel(key: np.ndarray) -> np.ndarray:
        z = normal_from_bits(_bits(key, n + n % 2))[:n]  # an odd count draws one pair more and drops its sine
        return (z * std + mean).astype(dtype).reshape(t.shape)
    return kernel


def _bernoulli_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    n, dtype, p = math.prod(t.shape), t.dtype.np, ctx.attrs["p"]
    if p == 1.0:  # 2**64 does not fit a uint64 word: every draw is below it
        return lambda key: np.ones(t.shape, dtype)
    below = np.uint64(threshold(p))

    def kernel(key: np.ndarray) -> np.ndarray:
        return (_bits(key, n) < below).astype(dtype).reshape(t.shape)
    return kernel


def _dropout_kernel(ctx: NodeContext) -> Callable:
    (t,) = ctx.output_types
    n, dtype, rate = math.prod(t.shape), t.dtype.np, ctx.attrs["rate"]
    keep_from = np.uint64(threshold(rate))
    scale = np.asarray(1.0 / (1.0 - rate), dtype)

    def kernel(x: np.ndarray, key: np.ndarray) -> np.ndarray:
        mask = (_bits(key, n) >= keep_from).reshape(t.shape).astype(dtype)
        np.multiply(mask, scale, out=mask)
        return np.multiply(x, mask, out=mask)  # NaN and inf in x stay NaN where dropped, as x * 0
    return kernel


def _split_shape(ctx: NodeContext) -> list[TensorType]:
    _check_key(ctx, 0)
    if ctx.attrs["num"] < 0:
        raise ctx.error(f"num={ctx.attrs['num']} is negative; give how many keys to derive")
    return [TensorType(int64, (ctx.attrs["num"], 2))]


def _split_kernel(ctx: NodeContext) -> Callable:
    num = ctx.attrs["num"]
    return lambda key: _bits(key, 2 * num, _SPLIT).view(np.int64).reshape(num, 2)


def _fold_in_shape(ctx: NodeContext) -> list[TensorType]:
    _check_key(ctx, 0)
    data = ctx.input_types[1]
    if not data.dtype.is_int or data.shape != ():
        raise ctx.error(f"data (input 1) is an integer scalar (i32[] or i64[]: a step, a rank), got {data}")
    return [TensorType(int64, (2,))]


def _fold_in_kernel(ctx: NodeContext) -> Callable:
    return lambda key, data: _bits(key, 2, _FOLD_IN, int(data) % _WORD).view(np.int64)


# -- schemas --------------------------------------------------------------------------------------------
_NO_KEY_GRADIENT = "keys are integers and carry no gradient"
_SHAPE = AttrSpec("shape", doc="the shape of the sample")
_FLOAT = AttrSpec("dtype", None, "a float dtype (default float64)")


def _sampler(name: str, attrs: dict[str, AttrSpec], shape_infer: Callable, kernel: Callable, doc: str,
             examples: list[dict[str, Any]]) -> OpSchema:
    return OpSchema(
        name,
        inputs=("key",),
        attrs=attrs,
        shape_infer=shape_infer,
        kernels={"cpu": kernel},
        gradient=lambda ctx: ctx.grad_graph(lambda key, y, gy: None),  # the key is an integer: no gradient
        doc=doc,
        examples=[Example(["i64[2]"], a) for a in examples],
    )


RANDOM_UNIFORM = _sampler(
    "random_uniform",
    {"shape": _SHAPE, "dtype": _FLOAT, "low": AttrSpec("float", 0.0, "lower bound (included)"),
     "high": AttrSpec("float", 1.0, "upper bound (excluded before rounding to dtype)")},
    _uniform_shape, _uniform_kernel,
    "Uniform samples in [low, high) drawn from key (an i64[2] input), the same for the same key everywhere.",
    [{"shape": [3, 4]}, {"shape": [5], "dtype": "f32", "low": -2.0, "high": 3.0}])

RANDOM_NORMAL = _sampler(
    "random_normal",
    {"shape": _SHAPE, "dtype": _FLOAT, "mean": AttrSpec("float", 0.0, "the mean"),
     "std": AttrSpec("float", 1.0, "the standard deviation")},
    _normal_shape, _normal_kernel,
    "Normal samples (Box-Muller: each pair of 64-bit words gives a pair of samples) drawn from key (an i64[2] input).",
    [{"shape": [3, 4]}, {"shape": [5], "dtype": "f32", "mean": 1.0, "std": 0.5}])

BERNOULLI = OpSchema(
    "bernoulli",
    inputs=("key",),
    attrs={"shape": _SHAPE, "p": AttrSpec("float", 0.5, "the probability of a 1 (True)"),
           "dtype": AttrSpec("dtype", "bool", "the output dtype (bool, or a number type for 0/1)")},
    shape_infer=_bernoulli_shape,
    kernels={"cpu": _bernoulli_kernel},
    gradient=lambda ctx: ctx.grad_graph(lambda key, y, gy: None),
    doc="True (1) with probability p, else False (0), drawn from key (an i64[2] input).",
    examples=[Example(["i64[2]"], {"shape": [3, 4]}), Example(["i64[2]"], {"shape": [6], "p": 0.25, "dtype": "f32"})],
)


def _dropout_gradient(ctx: NodeContext):
    rate = ctx.attrs["rate"]
    # dropout is linear in x: gx = dropout(gy, key), the same key and shape give the same mask
    return ctx.grad_graph(lambda x, key, y, gy: [ops.dropout(gy, key, rate=rate), None])


DROPOUT = OpSchema(
    "dropout",
    inputs=("x", "key"),
    attrs={"rate": AttrSpec("float", 0.5, "the probability of zeroing an element, in [0, 1)")},
    shape_infer=_dropout_shape,
    kernels={"cpu": _dropout_kernel},
    gradient=_dropout_gradient,
    nondiff_inputs=("key",),
    traits=("any_shape_gradient",),
    doc="Training-mode dropout: each element of x is zeroed with probability rate, the rest scaled by "
        "1 / (1 - rate); the mask is drawn from key (an i64[2] input). Gradient: dropout(gy, key), the same mask. "
        "For inference, leave the op out (it is the identity in expectation).",
    examples=[Example(["f32[3, 4]", "i64[2]"], {"rate": 0.5}), Example(["f64[8]", "i64[2]"], {"rate": 0.25}),
              Example(["f32[5]", "i64[2]"], {"rate": 0.0}, note="rate 0: the identity")],
)

RANDOM_SPLIT = OpSchema(
    "random_split",
    inputs=("key",),
    attrs={"num": AttrSpec("int", 2, "how many keys")},
    shape_infer=_split_shape,
    kernels={"cpu": _split_kernel},
    not_differentiable=_NO_KEY_GRADIENT,
    doc="num new keys (i64[num, 2]) derived from key, independent of each other and of key's own draws; "
        "the same as frame_ops_basic.random.split.",
    examples=[Example(["i64[2]"]), Example(["i64[2]"], {"num": 3})],
)

RANDOM_FOLD_IN = OpSchema(
    "random_fold_in",
    inputs=("key", "data"),
    shape_infer=_fold_in_shape,
    kernels={"cpu": _fold_in_kernel},
    not_differentiable=_NO_KEY_GRADIENT,
    doc="A new key derived from key and the integer scalar data (a step, a rank); the same as "
        "frame_ops_basic.random.fold_in.",
    examples=[Example(["i64[2]", "i64[]"]), Example(["i64[2]", "i32[]"], low=-9, high=9)],
)

SCHEMAS = [RANDOM_UNIFORM, RANDOM_NORMAL, BERNOULLI, DROPOUT, RANDOM_SPLIT, RANDOM_FOLD_IN]
