"""The pass pool_before_monotone: max_pool2d moves before a ReLU and a window-constant add, with the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

POOLS = [{"kernel_size": 2}, {"kernel_size": 3, "stride": 1, "padding": 1}, {"kernel_size": [2, 3], "stride": [2, 1]}]


def _ops(exe) -> list[str]:  # noqa: ANN001 - an Executable
    ops_ = []
    for node in exe.graph.nodes:
        body = node.attrs.get("body")
        ops_ += [n.op for n in body.nodes] if body is not None else [node.op]
    return ops_


def _both(fn, *types) -> tuple:  # noqa: ANN001
    graph = fc.trace(fn, *types)
    return fc.compile(graph, cache=False), fc.compile(graph, cache=False, disable=["pool_before_monotone"])


def _inputs(rng: np.random.Generator, dtype) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    x = rng.standard_normal((2, 3, 6, 6)).astype(dtype)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]      # NaN, +inf and -inf inside windows
    x[1, 2, 2:4, 2:4] = -np.inf                        # a window of -inf only
    x[1, 1, 4, 4] = -0.0
    return x, rng.standard_normal((3, 1, 1)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("pool", POOLS, ids=[str(p) for p in POOLS])
def test_the_pool_moves_before_bias_and_relu_with_the_same_bits(pool, dtype):
    name = np.dtype(dtype).name.replace("float", "f")
    moved, kept = _both(lambda x, b: ops.max_pool2d(ops.relu(ops.add(b, x)), **pool), f"{name}[2, 3, 6, 6]",
                        f"{name}[3, 1, 1]")
    assert _ops(moved).index("max_pool2d") < _ops(moved).index("add")
    assert _ops(kept).index("max_pool2d") > _ops(kept).index("add")
    with np.errstate(invalid="ignore"):
        got, want = moved.run(list(_inputs(np.random.default_rng(0), dtype)))[0], \
            kept.run(list(_inputs(np.random.default_rng(0), dtype)))[0]
    assert got.tobytes() == want.tobytes()
    assert np.isnan(got[0, 0, 0, 0])


@pytest.mark.parametrize("bias_shape", [(3, 1, 6), (6,), (2, 3, 6, 6)], ids=["varies along W", "a row", "full"])
def test_an_operand_that_varies_within_a_window_keeps_the_order(bias_shape):
    moved, _ = _both(lambda x, b: ops.max_pool2d(ops.relu(x + b), kernel_size=2), "f64[2, 3, 6, 6]",
                     f"f64{list(bias_shape)}")
    assert _ops(moved).index("max_pool2d") > _ops(moved).index("add")


def test_a_chain_read_elsewhere_or_a_training_graph_keeps_the_order():
    def net(x, w, b):
        return ops.sum(ops.max_pool2d(ops.relu(ops.conv2d(x, w, padding=1) + b), kernel_size=2))

    types = ("f64[2, 2, 6, 6]", "f64[3, 2, 3, 3]", "f64[3, 1, 1]")
    train = fc.compile(fc.build_backward_graph(fc.trace(net, *types), 0, [0, 1, 2]), cache=False)
    assert _ops(train).index("max_pool2d") > _ops(train).index("add")  # the gradient reads the ReLU output
    both = fc.compile(fc.trace(lambda x, b: [ops.relu(x + b), ops.max_pool2d(ops.relu(x + b), kernel_size=2)],
                               "f64[2, 3, 6, 6]", "f64[3, 1, 1]"), cache=False)
    assert _ops(both).index("max_pool2d") > _ops(both).index("add")
