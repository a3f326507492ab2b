"""Training graphs through control flow (scan, loop, if_else, nested) at any batch size.

A training graph traced at batch 4 and compiled once with ``dynamic_shapes=True`` runs at batches 1, 3 and 0
and gives, bit for bit, the training graph traced at that batch, when every op in the bodies has a shape-free
gradient; its gradients agree with central differences of the loss. A body whose gradient holds traced sizes (an
op without ``any_shape_gradient``, or a shape read off a value made inside the body) is refused by name
(docs/design-parameters-and-shapes.md, "Training graphs at any batch size").
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

TRACED = 4
SIZES = (1, 3, 0)


def t(dtype, *shape):
    return f"{dtype}[{', '.join(map(str, shape))}]"


# -- models: fn(*inputs) -> scalar loss, and their input types at batch b ------------------------------------------
def elman(h0, wx, wh, xs):  # the batch is axis 0 of h0 and axis 1 of xs
    def step(h, x):
        h = ops.tanh(x @ wx + h @ wh)
        return h, h
    _, ys = ops.scan(step, h0, xs)
    return ops.sum(ys * ys)


def elman_types(dt, b):
    return [t(dt, b, 5), t(dt, 3, 5), t(dt, 5, 5), t(dt, 7, b, 3)]


def with_invariants(h0, wh, bias, xs):  # a per-sample bias (its shape holds the batch) as an invariant, reversed
    def step(h, x, w, c):
        h = ops.tanh(x + h @ w + c)
        return h, ops.sin(h) * x
    h, ys = ops.scan(step, h0, xs, invariants=(wh, bias), reverse=True)
    return ops.sum(h * h) + ops.sum(ys)


def with_invariants_types(dt, b):
    return [t(dt, b, 5), t(dt, 5, 5), t(dt, b, 5), t(dt, 6, b, 5)]


def looped(h0, w, xs):
    def body(i, h, x, w_):
        h = ops.tanh(h @ w_ + x)
        return ops.less(i, 100), h, h * x
    h, ys = ops.loop(body, 6, True, h0, xs=xs, invariants=w)
    return ops.sum(h) + ops.sum(ys * ys)


def looped_types(dt, b):
    return [t(dt, b, 3), t(dt, 3, 3), t(dt, 6, b, 3)]


def branched(p, x, w):
    out = ops.if_else(ops.greater(ops.sum(p), 0.0), lambda a, v: ops.tanh(a @ v), lambda a, v: ops.sin(a) @ v, x, w)
    return ops.sum(out * out)


def branched_types(dt, b):
    return [t(dt, 2), t(dt, b, 3), t(dt, 3, 3)]


def nested(h0, w, xs):
    def outer(c, x):
        ci, ysi = ops.scan(lambda a, xi: (ops.tanh(a @ w + xi), a * xi), c, ops.stack(x, x * 2.0, axis=0))
        return ci, ysi
    h, ys = ops.scan(outer, h0, xs)
    return ops.sum(h) + ops.sum(ys * ys)


def nested_types(dt, b):
    return [t(dt, b, 3), t(dt, 3, 3), t(dt, 4, b, 3)]


def if_in_scan(h0, w, xs):
    def step(h, x):
        n = ops.tanh(h @ w + x)
        return ops.if_else(ops.greater(ops.sum(n), 0.0), lambda a: a * 0.5, ops.sin, n), n
    h, ys = ops.scan(step, h0, xs)
    return ops.sum(h) + ops.sum(ys * ys)


def checkpointed(h0, wx, wh, xs):  # segments of 3 steps: xs regrouped to [3, 3, B, 3] and back (-1 for the batch)
    def step(h, x):
        h = ops.tanh(x @ wx + h @ wh)
        return h, h
    _, ys = ops.scan(step, h0, xs, checkpoint_every=3)
    return ops.sum(ys * ys)


MODELS = {"elman": (elman, elman_types), "scan with invariants": (with_invariants, with_invariants_types),
          "loop": (looped, looped_types), "if_else": (branched, branched_types), "nested scan": (nested, nested_types),
          "if_else in a scan": (if_in_scan, nested_types), "checkpointed scan": (checkpointed, elman_types)}


def _wrt(types):
    return [k for k, s in enumerate(types) if s.startswith("f")]


def _training(fn, types):
    return fc.build_backward_graph(fc.trace(fn, *types), 0, _wrt(types))


def _arrays(types, rng, flip=False):
    arrays = [rng.uniform(-1.0, 1.0, fc.as_type(s).shape).astype(fc.as_type(s).dtype.np) for s in types]
    if flip:  # (the other branch of if_else: p's sign)
        arrays[0] = -np.abs(arrays[0])
    return arrays


@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_graph_through_control_flow_runs_at_any_batch_bit_for_bit(name):
    fn, types_at = MODELS[name]
    exe = fc.compile(_training(fn, types_at("f32", TRACED)), dynamic_shapes=True, cache=False)
    rng = np.random.default_rng(0)
    for size in (TRACED, *SIZES):
        types = types_at("f32", size)
        fresh = fc.compile(_training(fn, types), cache=False)
        for flip in (False, True):
            arrays = _arrays(types, rng, flip)
            want = fresh.run([a.copy() for a in arrays])
            got = exe.run([a.copy() for a in arrays])
            assert len(got) == len(want) == 1 + len(_wrt(types))
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.tobytes() == w.tobytes(), (name, size, flip)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_gradient_at_another_batch_agrees_with_central_differences(name):
    fn, types_at = MODELS[name]
    exe = fc.compile(_training(fn, types_at("f64", TRACED)), dynamic_shapes=True, cache=False)
    types = types_at("f64", 3)
    loss = fc.compile(fc.trace(fn, *types), cache=False)
    rng = np.random.default_rng(1)
    arrays = _arrays(types, rng)
    grads = exe.run([a.copy() for a in arrays])[1:]
    eps = 1e-6
    for k, g in zip(_wrt(types), grads):
        direction = rng.standard_normal(arrays[k].shape)
        plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
        plus[k] += eps * direction
        minus[k] -= eps * direction
        numeric = (float(loss.run(plus)[0]) - float(loss.run(minus)[0])) / (2 * eps)
        assert abs(float(np.sum(g * direction)) - numeric) <= 1e-6 * max(1.0, abs(numeric)), (name, k)


def test_second_order_through_a_scan_runs_at_another_batch_bit_for_bit():
    def vjp2(types):
        vjp = fc.build_vjp_graph(fc.trace(elman, *types), _wrt(types))
        return fc.build_vjp_graph(vjp, [k for k, v in enumerate(vjp.inputs) if v.type.dtype.is_float])
    exe = fc.compile(vjp2(elman_types("f32", TRACED)), dynamic_shapes=True, cache=False)
    for size in (1, 3):
        graph = vjp2(elman_types("f32", size))
        arrays = _arrays([str(v.type) for v in graph.inputs], np.random.default_rng(size))
        want = fc.compile(graph, cache=False).run([a.copy() for a in arrays])
        got = exe.run([a.copy() for a in arrays])
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_the_forward_mode_graph_through_a_scan_runs_at_another_batch_bit_for_bit():
    types = elman_types("f32", TRACED)
    exe = fc.compile(fc.build_jvp_graph(fc.trace(elman, *types), _wrt(types)), dynamic_shapes=True, cache=False)
    graph = fc.build_jvp_graph(fc.trace(elman, *elman_types("f32", 3)), _wrt(types))
    arrays = _arrays([str(v.type) for v in graph.inputs], np.random.default_rng(5))
    want = fc.compile(graph, cache=False).run([a.copy() for a in arrays])
    assert [g.tobytes() for g in exe.run(arrays)] == [w.tobytes() for w in want]


# -- bodies whose gradient holds the traced sizes: refused by name -------------------------------------------------
def linear_scan_body(h0, xs):  # linear_scan has no any_shape_gradient trait
    def step(h, x):
        h = ops.tanh(ops.linear_scan(h, x, axis=0) + h)
        return h, h
    _, ys = ops.scan(step, h0, xs)
    return ops.sum(ys)


def mean_in_body(h0, xs):  # the mean's 1/N is read off a value made inside the body: written down
    def step(h, x):
        h = ops.tanh(h + x)
        return h - ops.mean(h * h), h
    _, ys = ops.scan(step, h0, xs)
    return ops.sum(ys)


@pytest.mark.parametrize("fn, why", [
    (linear_scan_body, r"the gradient of scan may hold the traced sizes: the gradient of linear_scan"),
    (mean_in_body, r"the gradient of scan may hold the traced sizes: a control-flow body's gradient holds its "
                   r"traced shapes \(its inverse_count_internal"),
], ids=["linear_scan", "mean"])
def test_a_body_whose_gradient_holds_traced_sizes_is_refused_by_name(fn, why):
    exe = fc.compile(_training(fn, [t("f32", TRACED, 3), t("f32", 5, TRACED, 3)]), dynamic_shapes=True, cache=False)
    rng = np.random.default_rng(2)
    traced = exe.run(_arrays([t("f32", TRACED, 3), t("f32", 5, TRACED, 3)], rng))  # at the traced batch it runs
    assert len(traced) == 3
    with pytest.raises(fc.ShapeError, match=why):
        exe.run(_arrays([t("f32", 2, 3), t("f32", 5, 2, 3)], rng))


def test_a_body_reshaping_to_the_traced_batch_is_refused_by_name():
    def fn(h0, xs):
        def step(h, x):
            h = ops.reshape(ops.tanh(ops.reshape(h, shape=[TRACED * 3]) + ops.reshape(x, shape=[TRACED * 3])),
                            shape=[TRACED, 3])
            return h, h
        _, ys = ops.scan(step, h0, xs)
        return ops.sum(ys)
    exe = fc.compile(_training(fn, [t("f32", TRACED, 3), t("f32", 5, TRACED, 3)]), dynamic_shapes=True, cache=False)
    with pytest.raises(fc.ShapeError, match=r"reshape"):
        exe.run(_arrays([t("f32", 2, 3), t("f32", 5, 2, 3)], np.random.default_rng(3)))


# -- frame-train: a TrainStep over a scan model reuses its one training graph at a short last batch ----------------
def rnn_loss(p, x, y):  # x: [B, T, 3], batch-major as a data loader slices it
    def step(h, xt):
        h = ops.tanh(xt @ p["wx"] + h @ p["wh"] + p["b"])
        return h, h
    h0 = ops.zeros_like(x[:, 0, :]) @ p["wx"]  # [B, 5] zeros, read off the batch (no size written down)
    h, _ = ops.scan(step, h0, ops.transpose(x, perm=[1, 0, 2]))
    return ops.mse_loss(h @ p["wo"], y)


def test_a_train_step_over_a_scan_reuses_its_training_graph_at_a_short_last_batch_bit_for_bit():
    ft = pytest.importorskip("frame_train")
    from frame_core.ir.graph import traced_sizes

    rng = np.random.default_rng(7)
    params = {"wx": (rng.standard_normal((3, 5)) * 0.4).astype(np.float32),
              "wh": (rng.standard_normal((5, 5)) * 0.4).astype(np.float32), "b": np.zeros(5, np.float32),
              "wo": (rng.standard_normal((5, 2)) * 0.4).astype(np.float32)}
    x = rng.standard_normal((16, 6, 3)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    optimizer = ft.adam(1e-2)
    step = ft.TrainStep(rnn_loss, params, optimizer)
    p, state = params, optimizer.init(params)
    for b in (16, 16, 5, 16, 1):
        got = step(x[:b], y[:b])
        fresh = ft.TrainStep(rnn_loss, p, optimizer, state=state)  # the per-shape path: traced at this batch
        want = fresh(x[:b], y[:b])
        p, state = fresh.params, fresh.state
        assert np.float64(got).tobytes() == np.float64(want).tobytes(), b
        for a, w in zip(fc.params.flatten(step.params)[1], fc.params.flatten(p)[1]):
            assert a.tobytes() == w.tobytes(), b
    assert traced_sizes(step.graph) is None
    assert step.derivations == 1  # the batches of 5 and 1 re-specialised the fused graph, derived nothing
