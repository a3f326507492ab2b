"""layer_norm, batch_norm, group_norm: values and gradients to second order against torch, running statistics,
bad input."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


@pytest.mark.parametrize("x_shape, k", [((4, 6), 1), ((2, 3, 4, 5), 2), ((5,), 1)])
def test_layer_norm_matches_torch_to_second_order(x_shape, k, against_torch):
    import torch.nn.functional as F

    rng = np.random.default_rng(k)
    x = rng.standard_normal(x_shape)
    w, b = rng.standard_normal(x_shape[-k:]), rng.standard_normal(x_shape[-k:])
    against_torch(lambda a, c, d: ops.layer_norm(a, c, d, eps=1e-3),
                  lambda a, c, d: F.layer_norm(a, x_shape[-k:], c, d, eps=1e-3), [x, w, b], [0, 1, 2])


@pytest.mark.parametrize("x_shape", [(6, 3), (2, 3, 4, 2)])
def test_batch_norm_training_matches_torch_to_second_order_and_updates_running_stats(x_shape, against_torch):
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(len(x_shape))
    x = rng.standard_normal(x_shape)
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    rm, rv = rng.standard_normal(3), rng.uniform(0.5, 2.0, 3)
    against_torch(lambda a, c, d: ops.batch_norm(a, c, d, rm, rv, momentum=0.2)[0],
                  lambda a, c, d: F.batch_norm(a, torch.tensor(rm), torch.tensor(rv), c, d, training=True,
                                               momentum=0.2), [x, w, b], [0, 1, 2])
    exe = fc.compile(fc.trace(lambda *t: ops.batch_norm(*t, momentum=0.2), *[fc.TensorType("f64", a.shape)
                                                                               for a in (x, w, b, rm, rv)]))
    _, new_rm, new_rv = exe.run([x, w, b, rm, rv])
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    F.batch_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b), training=True, momentum=0.2)
    np.testing.assert_allclose(new_rm, trm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(new_rv, trv.numpy(), rtol=1e-12)


def test_batch_norm_inference_matches_torch_to_second_order_in_every_input(against_torch):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5))
    w, b, rm, rv = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    against_torch(lambda *t: ops.batch_norm(*t, training=False)[0],
                  # torch's batch_norm does not differentiate the running statistics: its formula, by autograd
                  lambda a, c, d, e, f: (a - e[:, None]) / (f[:, None] + 1e-5).sqrt() * c[:, None] + d[:, None],
                  [x, w, b, rm, rv],
                  [0, 1, 2, 3, 4])


@pytest.mark.parametrize("x_shape, groups", [((2, 6, 5), 3), ((2, 4, 3, 3), 2), ((3, 4), 1), ((2, 4, 3), 4),
                                             ((2, 4), 4), ((3, 6, 1), 6)])  # (one value per group: torch's bias)
def test_group_norm_matches_torch_to_second_order(x_shape, groups, against_torch):
    import torch.nn.functional as F

    rng = np.random.default_rng(groups)
    x = rng.standard_normal(x_shape)
    w, b = rng.standard_normal(x_shape[1]), rng.standard_normal(x_shape[1])
    against_torch(lambda a, c, d: ops.group_norm(a, c, d, num_groups=groups),
                  lambda a, c, d: F.group_norm(a, groups, c, d), [x, w, b], [0, 1, 2])


@pytest.mark.parametrize("x_shape", [(2, 0), (3, 0, 4)])
def test_batch_norm_of_no_channels_is_empty_as_in_torch(x_shape):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    import torch.nn.functional as F

    x, per_channel = np.zeros(x_shape, np.float32), "f32[0]"
    graph = fc.trace(lambda *t: ops.sum(ops.batch_norm(*t)[0]), fc.TensorType("f32", x_shape), *[per_channel] * 4)
    for opt_level in (0, 2):
        exe = fc.compile(fc.build_backward_graph(graph, 0, [0, 1, 2, 3, 4]), opt_level=opt_level)
        outs = exe.run([x] + [np.zeros(0, np.float32)] * 4)
        assert [o.shape for o in outs] == [(), x_shape, (0,), (0,), (0,), (0,)]
    want = F.batch_norm(torch.tensor(x), torch.zeros(0), torch.ones(0), training=True)
    assert tuple(want.shape) == x_shape
    with pytest.raises(fc.ShapeError, match="more than one value per channel"):  # N * S = 1: as torch
        fc.trace(lambda *t: ops.batch_norm(*t)[0], "f32[1, 0]", *[per_channel] * 4)


def test_nan_stays_in_its_normalisation_group():
    x = np.arange(8.0).reshape(2, 4)
    x[0, 1] = np.nan
    exe = fc.compile(fc.trace(lambda a, c, d: ops.layer_norm(a, c, d), "f64[2, 4]", "f64[4]", "f64[4]"))
    y = exe.run([x, np.ones(4), np.zeros(4)])[0]
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


@pytest.mark.parametrize("build, message", [
    (lambda: fc.trace(lambda a, c, d: ops.layer_norm(a, c, d), "f32[2, 4]", "f32[3]", "f32[3]"),
     "must have the shape of x's last axes"),
    (lambda: fc.trace(lambda a, c, d: ops.group_norm(a, c, d, num_groups=3), "f32[2, 4, 5]", "f32[4]", "f32[4]"),
     "num_groups = 3 must be >= 1 and divide the 4 channels"),
    (lambda: fc.trace(lambda *t: ops.batch_norm(*t), "f32[1, 3]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"),
     "training mode needs more than one value per channel"),
    (lambda: fc.trace(lambda *t: ops.batch_norm(*t), "f32[4, 3]", "f32[3]", "f32[3]", "f32[2]", "f32[3]"),
     "running_mean must be [C] = [3]"),
    (lambda: fc.trace(lambda *t: ops.batch_norm(*t, momentum=1.5), "f32[4, 3]", *["f32[3]"] * 4),
     "momentum must lie in [0, 1], got 1.5"),
    (lambda: fc.trace(lambda a, c, d: ops.layer_norm(a, c, d, eps=-1e-3), "f32[2, 4]", "f32[4]", "f32[4]"),
     "eps must be a finite number >= 0, got -0.001"),
    (lambda: fc.trace(lambda *t: ops.batch_norm(*t, eps=float("nan")), "f32[4, 3]", *["f32[3]"] * 4),
     "eps must be a finite number >= 0, got nan"),
    (lambda: fc.trace(lambda a, c, d: ops.group_norm(a, c, d, num_groups=2, eps=float("inf")), "f32[2, 4, 5]",
                      "f32[4]", "f32[4]"),
     "eps must be a finite number >= 0, got inf"),
])
def test_bad_norm_input_is_a_named_shape_error(build, message):
    with pytest.raises(fc.ShapeError) as info:
        build()
    assert message in str(info.value), str(info.value)


# -- reuse_norm_statistics: a training graph's forward and gradient share the statistics ------------------
def _training_run(fn, inputs, opt_level):  # noqa: ANN001, ANN202
    """Ops of the compiled graph of sum(fn(x, w, b) * g) and its gradients for x, w, b, and its outputs."""
    graph = fc.trace(lambda *t: ops.sum(fn(*t[:3]) * t[3]), *[fc.TensorType(a.dtype, a.shape) for a in inputs])
    exe = fc.compile(fc.build_backward_graph(graph, 0, [0, 1, 2]), opt_level=opt_level)
    return [ins.op for ins in exe.instructions], [np.array(o) for o in exe.run(inputs)]


_BATCH = (lambda x, w, b: ops.batch_norm(x, w, b, np.zeros(3, x.type.dtype.np), np.ones(3, x.type.dtype.np),
                                         momentum=0.2)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn, x_shape, w_shape, pair", [
    (lambda x, w, b: ops.layer_norm(x, w, b), (8, 16), (16,), "layer_norm_grad_saved_internal"),
    (lambda x, w, b: ops.layer_norm(x, w, b, eps=1e-3), (2, 3, 4, 5), (4, 5), "layer_norm_grad_saved_internal"),
    (lambda x, w, b: ops.layer_norm(x, w, b), (7,), (7,), "layer_norm_grad_saved_internal"),
    (_BATCH, (6, 3), (3,), "batch_norm_grad_saved_internal"),
    (_BATCH, (2, 3, 4, 2), (3,), "batch_norm_grad_saved_internal"),
    (lambda x, w, b: ops.group_norm(x, w, b, num_groups=3), (2, 6, 5), (6,), "group_norm_grad_saved_internal"),
    (lambda x, w, b: ops.group_norm(x, w, b, num_groups=2), (2, 4, 3, 3), (4,), "group_norm_grad_saved_internal"),
])
def test_training_pair_reuses_the_statistics_with_the_same_bits(fn, x_shape, w_shape, pair, dtype):
    rng = np.random.default_rng(len(x_shape))
    inputs = [rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape, w_shape, x_shape)]
    plain_ops, plain = _training_run(fn, inputs, 0)  # opt level 0: no rewrite
    fused_ops, fused = _training_run(fn, inputs, 2)
    assert pair not in plain_ops and {pair, f"native_{pair}"} & set(fused_ops), fused_ops  # (frame-native's twin)
    assert not {"layer_norm_grad_internal", "batch_norm_grad_internal", "group_norm_grad_internal"} & set(fused_ops)
    for a, b in zip(plain, fused):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("fn, dtype", [
    (lambda x, w, b: ops.layer_norm(x, w, b), np.float16),  # computed in float32: xhat would be rounded to f16
    (lambda x, w, b: ops.batch_norm(x, w, b, np.zeros(3, np.float32), np.ones(3, np.float32),
                                    training=False)[0], np.float32),  # inference mode has no fused gradient
])
def test_pairs_the_pass_leaves_alone(fn, dtype):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(dtype) for s in ((6, 3), (3,), (3,), (6, 3))]
    names, _ = _training_run(fn, inputs, 2)
    assert not any(n.endswith("_saved_internal") or n.endswith("_train_internal") for n in names), names


def test_a_gradient_of_another_normalisation_is_not_paired():
    # the gradient is for eps=1e-3 while the forward used the default: two different normalisations
    def fn(x, w, b, g):  # noqa: ANN001, ANN202 - traced tensors
        return ops.layer_norm(x, w, b), ops.layer_norm_grad_internal(x, w, g, eps=1e-3)[0]
    graph = fc.trace(fn, "f64[4, 6]", "f64[6]", "f64[6]", "f64[4, 6]")
    names = [ins.op for ins in fc.compile(graph).instructions]
    assert "layer_norm" in names and "layer_norm_grad_internal" in names, names


@pytest.mark.parametrize("offset, bound", [(0.0, 1e-6), (1e3, 5e-4)])
def test_float32_norms_stay_close_to_a_float64_reference(offset, bound):
    # the means are BLAS products with ones, whose summation order is BLAS's: the last bits differ from
    # numpy's x.mean. Measured largest errors relative to each gradient's largest value: about 4e-7 with mean 0,
    # up to 1e-4 with mean 1000 (x - mean loses the low bits of x either way; numpy's mean gave 2e-4)
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    import torch.nn.functional as F

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 256)) + offset).astype(np.float32)
    w, b = rng.standard_normal(256).astype(np.float32), rng.standard_normal(256).astype(np.float32)
    g = rng.standard_normal((64, 256)).astype(np.float32)
    cases = [(lambda x, w, b: ops.layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (256,), w, b)),
             (lambda x, w, b: ops.batch_norm(x, w, b, np.zeros(256, np.float32), np.ones(256, np.float32))[0],
              lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
             (lambda x, w, b: ops.group_norm(x, w, b, num_groups=8), lambda x, w, b: F.group_norm(x, 8, w, b))]
    for frame_fn, torch_fn in cases:
        _, got = _training_run(frame_fn, [x, w, b, g], 2)
        tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
        y = torch_fn(tx, tw, tb)
        (y * torch.tensor(g, dtype=torch.float64)).sum().backward()
        for mine, exact in zip(got[1:], (tx.grad, tw.grad, tb.grad)):
            exact = exact.numpy()
            assert np.abs(mine - exact).max() <= bound * np.abs(exact).max()


def test_every_gradient_of_one_normalisation_starts_from_the_saved_statistics():
    # two cotangents of the same layer_norm: both gradient nodes are rewritten, with the bits of opt level 0
    def fn(x, w, b, g1, g2):  # noqa: ANN001, ANN202 - traced tensors
        y = ops.layer_norm(x, w, b)
        return [y, *ops.layer_norm_grad_internal(x, w, g1), *ops.layer_norm_grad_internal(x, w, g2)]
    graph = fc.trace(fn, "f64[4, 6]", "f64[6]", "f64[6]", "f64[4, 6]", "f64[4, 6]")
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s) for s in ((4, 6), (6,), (6,), (4, 6), (4, 6))]
    fused = fc.compile(graph)
    names = [ins.op.removeprefix("native_") for ins in fused.instructions]  # (frame-native's twins count too)
    assert names.count("layer_norm_grad_saved_internal") == 2 and "layer_norm_grad_internal" not in names, names
    for a, b in zip(fc.compile(graph, opt_level=0).run(inputs), fused.run(inputs)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.mark.parametrize("opt_level", [0, 1])
@pytest.mark.parametrize("fn, shapes", [
    (lambda x, w, b: ops.layer_norm(x, w, b), [(2, 0), (0,), (0,)]),                      # no features
    (lambda x, w, b: ops.group_norm(x, w, b, num_groups=2), [(0, 4, 3), (4,), (4,)]),     # an empty batch
    (lambda x, w, b: ops.group_norm(x, w, b, num_groups=1), [(2, 0, 3), (0,), (0,)]),     # no channels
], ids=["layer_norm", "group_norm batch", "group_norm channels"])
def test_an_empty_normalisation_has_zero_gradients_to_second_order(fn, shapes, opt_level):
    inputs = [np.zeros(s) for s in shapes]
    graph = fc.trace(lambda *t: ops.sum(fn(*t)), *[fc.TensorType("f64", s) for s in shapes])
    first = fc.build_backward_graph(graph, 0, [0, 1, 2])
    second_graph, s = fc.extend_graph(first, lambda *t: ops.sum(t[4]) + ops.sum(t[5]))
    with np.errstate(invalid="ignore"):  # the traced second order takes means over no values (NaN, of no one)
        outs = fc.compile(fc.build_backward_graph(second_graph, s, [0, 1, 2]), opt_level=opt_level,
                          cache=False).run(inputs)
    for got, want in zip(outs[1:4] + outs[5:], inputs + inputs):
        assert got.shape == want.shape and not got.any()


def test_inference_batch_norm_of_an_empty_batch_returns_the_running_statistics_as_given():
    exe = fc.compile(fc.trace(lambda *t: ops.batch_norm(*t, training=False), "f64[0, 3, 2]", "f64[3]", "f64[3]",
                              "f64[3]", "f64[3]"), cache=False)
    y, rm, rv = exe.run([np.zeros((0, 3, 2)), np.ones(3), np.zeros(3), np.array([1.0, 2, 3]), np.array([4.0, 5, 6])])
    assert y.shape == (0, 3, 2)
    np.testing.assert_array_equal(rm, [1, 2, 3])
    np.testing.assert_array_equal(rv, [4, 5, 6])


def test_batch_norm_momentum_none_is_refused_and_one_over_k_plus_one_is_torchs_cumulative_average():
    """torch's momentum=None is a cumulative average; frame refuses None (which elsewhere means the default)
    rather than silently use 0.1, and the message's recipe gives torch's averages."""
    from frame_core.errors import AttributeSpecError

    with pytest.raises(AttributeSpecError, match=r"momentum.*cannot be None.*1/\(k\+1\)"):
        fc.trace(lambda x, w, b: ops.batch_norm(x, w, b, np.zeros(3), np.ones(3), momentum=None)[1],
                 "f64[4, 3]", "f64[3]", "f64[3]")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((6, 3)) * (k + 1) + k for k in range(4)]
    w, b = np.ones(3), np.zeros(3)
    rm, rv = np.zeros(3), np.ones(3)
    bn = torch.nn.BatchNorm1d(3, momentum=None, dtype=torch.float64)
    for k, x in enumerate(batches):
        graph = fc.trace(lambda x, w, b, rm, rv, m=1.0 / (k + 1): ops.batch_norm(x, w, b, rm, rv, momentum=m),
                         "f64[6, 3]", "f64[3]", "f64[3]", "f64[3]", "f64[3]")
        _, rm, rv = fc.compile(graph).run([x, w, b, rm, rv])
        bn(torch.from_numpy(x))
    np.testing.assert_allclose(rm, bn.running_mean.numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(rv, bn.running_var.numpy(), rtol=1e-13, atol=1e-14)
