"""float16 and bfloat16 reductions accumulate in float32 (sum, mean, and every broadcast gradient).

Each result is compared with a float64 reference computed from the same
half-precision inputs. The tolerance is one unit in the last place of the
result's dtype: rounding the float32 accumulator to the half dtype costs at
most half of one. Accumulating a few thousand terms in the half dtype itself
is far worse (summing 4096 bfloat16 ones stalls at 256).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

N = 4096
HALF = ["f16", "bf16"]
ULP = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}  # spacing of the dtype at 1.0, relative


def sample(type_: str, seed: int = 0) -> np.ndarray:
    """Values in [0.5, 1.5), rounded to the type's dtype: positive, so sums have no cancellation."""
    t = fc.TensorType.parse(type_)
    return np.random.default_rng(seed).uniform(0.5, 1.5, t.shape).astype(t.dtype.np)


def run(graph: fc.Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return fc.compile(graph, cache=False).run(inputs)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.dtype == fc.TensorType.parse(f"{dtype}[]").dtype.np
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=ULP[dtype], atol=0)


# (id, function, input shape, float64 reference of the input)
REDUCTIONS = [
    ("sum", lambda x: x.sum(), [N], lambda x: x.sum()),
    ("sum axis 0", lambda x: x.sum(axes=[0]), [N, 2], lambda x: x.sum(axis=0)),
    ("mean", lambda x: x.mean(), [N], lambda x: x.mean()),
    ("mean axis 0 keepdims", lambda x: x.mean(axes=[0], keepdims=True), [N, 2], lambda x: x.mean(axis=0, keepdims=True)),
]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case, fn, shape, reference", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reductions_accumulate_in_float32(dtype, case, fn, shape, reference):
    type_ = f"{dtype}[{', '.join(map(str, shape))}]"
    x = sample(type_)
    (got,) = run(fc.trace(fn, type_), [x])
    assert_close(got, reference(x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_summing_ones_counts_them(dtype):
    (got,) = run(fc.trace(lambda x: x.sum(), f"{dtype}[{N}]"), [np.ones(N, fc.TensorType.parse(f"{dtype}[]").dtype.np)])
    assert float(got) == N


# (id, loss of x: [N, 2] and b: [2], float64 reference of d loss / d b)
BIAS_GRADIENTS = [
    ("(x + b).sum()", lambda x, b: (x + b).sum(), lambda x, b: np.full(2, float(N))),
    ("(x * b).sum()", lambda x, b: (x * b).sum(), lambda x, b: x.sum(axis=0)),
    ("(x - b).mean()", lambda x, b: (x - b).mean(), lambda x, b: np.full(2, -1.0 / 2)),
]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case, loss, reference", BIAS_GRADIENTS, ids=[r[0] for r in BIAS_GRADIENTS])
def test_broadcast_gradients_accumulate_in_float32(dtype, case, loss, reference):
    forward = fc.trace(loss, f"{dtype}[{N}, 2]", f"{dtype}[2]")
    x, b = sample(f"{dtype}[{N}, 2]"), sample(f"{dtype}[2]", seed=1)
    _, gb = run(fc.build_backward_graph(forward, 0, [1]), [x, b])
    assert_close(gb, reference(x.astype(np.float64), b.astype(np.float64)), dtype)
