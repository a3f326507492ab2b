"""Hyper-parameters given as numpy scalars, and a fit that would train nothing.

A learning rate read from a config array (``np.float32(1e-3)``) or a count from ``np.arange`` is a number:
it must be accepted and give the same trajectory as the Python number. Booleans are still refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_train as ft
from frame_core import ops

P = {"w": np.array([1.0, -2.0, 0.5])}
G = {"w": np.array([0.3, -0.1, 0.2])}


def trajectory(opt, steps=3):
    p, s = P, opt.init(P)
    for _ in range(steps):
        p, s = opt.apply(p, G, s)
    return p["w"]


@pytest.mark.parametrize("make", [
    lambda v: ft.adam(v(1e-2), b1=v(0.8), b2=v(0.99), eps=v(1e-8), weight_decay=v(0.1)),
    lambda v: ft.adamw(v(1e-2), weight_decay=v(0.1)),
    lambda v: ft.sgd(v(1e-2), momentum=v(0.9), weight_decay=v(0.01)),
    lambda v: ft.rmsprop(v(1e-2), alpha=v(0.9), momentum=v(0.5)),
    lambda v: ft.adagrad(v(1e-2), lr_decay=v(0.1), initial_accumulator_value=v(0.5)),
    lambda v: ft.lion(v(1e-2), b1=v(0.9), b2=v(0.99), weight_decay=v(0.1)),
    lambda v: ft.sgd(ft.step_decay(v(0.1), np.int64(2), v(0.5))),
    lambda v: ft.sgd(ft.warmup_cosine(v(0.1), np.int64(1), np.int32(5), v(0.0), v(0.01))),
    lambda v: ft.chain(ft.clip_by_global_norm(v(0.1)), ft.scale(v(2.0)), ft.scale_by_learning_rate(v(0.1))),
])
def test_numpy_scalar_hyperparameters_equal_python_numbers(make):
    expected = trajectory(make(float))
    for kind in (np.float64, np.float32):
        got = trajectory(make(lambda x, kind=kind: kind(x)))
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_numpy_float32_learning_rate_is_a_number():
    assert ft.adam(np.float32(1e-3)).learning_rate(0) == pytest.approx(1e-3)
    assert ft.accumulate(ft.adam(), np.int64(2)).every == 2


def test_booleans_and_negative_numpy_scalars_are_still_refused():
    with pytest.raises(ft.OptimizerError, match="b1"):
        ft.adam(b1=np.float32(1.0))
    with pytest.raises(ft.OptimizerError, match="learning rate"):
        ft.sgd(np.float64(-0.1))
    with pytest.raises(ft.OptimizerError, match="momentum"):
        ft.sgd(0.1, momentum=np.bool_(True))
    with pytest.raises(ft.OptimizerError, match="step_size"):
        ft.step_decay(0.1, True)


def test_a_mask_returning_numpy_booleans_selects_like_python_booleans():
    plain = trajectory(ft.adamw(1e-2, weight_decay=0.5, mask=lambda n: n == "w"))
    numpy = trajectory(ft.adamw(1e-2, weight_decay=0.5, mask=lambda n: np.bool_(n == "w")))
    none = trajectory(ft.adamw(1e-2, weight_decay=0.5, mask=lambda n: np.bool_(False)))
    np.testing.assert_array_equal(numpy, plain)
    assert not np.array_equal(none, plain)


def test_fit_refuses_data_that_give_no_batch():
    step = ft.TrainStep(lambda p, x: ops.sum(p["w"] * x), {"w": np.ones(3)}, ft.sgd(0.1))
    with pytest.raises(ft.OptimizerError, match="no batch: 1 example, fewer than batch_size=2 with drop_last"):
        ft.fit(step, np.ones((1, 3)), 1, 2, drop_last=True, progress=False)
    with pytest.raises(ft.OptimizerError, match="no batch: 0 examples"):
        ft.fit(step, np.ones((0, 3)), 1, 2, progress=False)
    assert ft.fit(step, np.ones((1, 3)), 0, 2, drop_last=True, progress=False).losses == []  # no epoch asked
    history = ft.fit(step, np.ones((5, 3)), np.int64(2), np.int64(2), progress=False)
    assert len(history.losses) == 6


def test_non_finite_gradients_flow_through_as_documented():
    p = {"v": np.ones(2), "w": np.ones(3)}
    nan = {"v": np.ones(2), "w": np.array([np.nan, 1.0, 1.0])}
    new, _ = ft.adam(0.1).apply(p, nan, ft.adam(0.1).init(p))
    assert np.isnan(new["w"][0]) and np.isfinite(new["w"][1:]).all() and np.isfinite(new["v"]).all()
    clip = ft.chain(ft.clip_by_global_norm(1.0), ft.scale_by_learning_rate(0.1))
    new, _ = clip.apply(p, nan, clip.init(p))
    assert np.isnan(new["w"]).all() and np.isnan(new["v"]).all()
    with np.errstate(invalid="ignore"):
        new, _ = clip.apply(p, {"v": np.ones(2), "w": np.array([np.inf, 1.0, 1.0])}, clip.init(p))
    np.testing.assert_array_equal(new["w"], [np.nan, 1.0, 1.0])
    np.testing.assert_array_equal(new["v"], [1.0, 1.0])


def test_a_mask_pattern_that_selects_no_parameter_is_refused():
    # adamw(mask=['*.weight']) on parameters named '*.w' decayed nothing, silently
    params = {"fc": {"w": np.ones(3), "b": np.zeros(3)}}
    opt = ft.adamw(1e-2, mask=["*.w", "*.weight"])
    with pytest.raises(ft.OptimizerError, match=r"pattern \['\*.weight'\] matches no parameter.*'fc.b', 'fc.w'"):
        opt.apply(params, params, opt.init(params))
    with pytest.raises(ft.OptimizerError, match="matches no parameter"):
        ft.TrainStep(lambda p, x: ops.sum(p["fc"]["w"] * x), params, ft.adamw(mask="enc.*"))(np.ones(3))
    ok = ft.adamw(1e-2, mask=["fc.w"])
    ok.apply(params, params, ok.init(params))


def test_an_unwritable_metrics_path_is_named_before_training(tmp_path):
    step = ft.TrainStep(lambda p, x: ops.sum(p["w"] * x), {"w": np.ones(3)}, ft.sgd(0.1))
    for bad in (tmp_path / "missing" / "m.jsonl", tmp_path):  # raw FileNotFoundError / IsADirectoryError before
        with pytest.raises(ft.OptimizerError, match="cannot be written"):
            ft.fit(step, np.ones((4, 3)), 1, 2, metrics_path=bad, progress=False)
    assert step.count == 0
