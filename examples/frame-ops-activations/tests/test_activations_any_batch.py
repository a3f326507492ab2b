"""The pack's training graphs run at any batch size: every op declares ``any_shape_gradient`` (its GradientFn
writes no size down), so a graph compiled once with ``dynamic_shapes=True`` gives at a new batch, bit for bit, what
a graph traced at that batch gives (frame's docs/writing-a-pack.md, "Gradients at any batch size")."""

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

RNG = np.random.default_rng(3)
W1, W2 = RNG.standard_normal((5, 8)) * 0.5, RNG.standard_normal((8, 3)) * 0.5


def loss(x, w1, w2):
    h = ops.elu(x @ w1, alpha=0.7) + ops.leaky_relu(x @ w1, slope=0.1)
    y = ops.gelu_tanh(h) @ w2
    return ops.sum(ops.softplus(y))


def training_graph(batch, order=1):
    graph = fc.trace(loss, f"f64[{batch}, 5]", "f64[5, 8]", "f64[8, 3]")
    first = fc.build_backward_graph(graph, 0, [0, 1, 2])
    if order == 1:
        return first
    # second order: the gradient of sum(dL/dw1) (a Hessian-vector product with ones), through the _internal ops
    extended, total = fc.extend_graph(first, lambda *outs: ops.sum(outs[2]))
    return fc.build_backward_graph(extended, total, [0, 1, 2])


@pytest.mark.parametrize("order", [1, 2])
def test_a_training_graph_through_every_op_runs_at_a_new_batch_bit_for_bit(order):
    exe = fc.compile(training_graph(4, order), dynamic_shapes=True)
    for batch in (4, 7, 1):
        args = [RNG.standard_normal((batch, 5)), W1, W2]
        want = fc.compile(training_graph(batch, order)).run(args)
        got = exe.run(args)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}"
    assert exe.specializations().misses == 2


def test_every_op_of_the_pack_declares_the_trait():
    schemas = [s for s in fc.registry().schemas.values() if s.pack == "activations"]
    assert len(schemas) >= 4
    assert [s.name for s in schemas if "any_shape_gradient" not in s.traits] == []
