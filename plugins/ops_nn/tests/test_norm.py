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


@pytest.mark.parametrize("x_shape, groups", [((2, 6, 5), 3), ((2, 4, 3, 3), 2), ((3, 4), 1), ((2, 4, 3), 4)])
def test_group_norm_matches_torch_to_second_order(x_shape, groups, against_torch):
    import torch.nn.functional as F

    rng = np.random.default_rng(groups)
    x = rng.standard_normal(x_shape)
    w, b = rng.standard_normal(x_shape[1]), rng.standard_normal(x_shape[1])
    against_torch(lambda a, c, d: ops.group_norm(a, c, d, num_groups=groups),
                  lambda a, c, d: F.group_norm(a, groups, c, d), [x, w, b], [0, 1, 2])


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
])
def test_bad_norm_input_is_a_named_shape_error(build, message):
    with pytest.raises(fc.ShapeError) as info:
        build()
    assert message in str(info.value), str(info.value)
