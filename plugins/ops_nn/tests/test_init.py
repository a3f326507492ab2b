"""Initialisers: torch.nn.init's fans, gains and bounds; statistics over many draws; orthogonality; trees."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from frame_core import ArgumentError
from frame_ops_nn import init


@pytest.mark.parametrize("shape", [(3, 5), (8, 4, 3), (6, 2, 3, 5)])
def test_fans_are_torchs(shape):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    assert init.fans(shape) == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))


@pytest.mark.parametrize("name, param", [("linear", None), ("tanh", None), ("relu", None), ("leaky_relu", 0.2),
                                         ("leaky_relu", None), ("selu", None), ("conv2d", None)])
def test_gains_are_torchs(name, param):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))


SHAPE = (400, 300, 3)  # fan_in 900, fan_out 1200; 360k draws
FAN_IN, FAN_OUT = 900, 1200


@pytest.mark.parametrize("fn, bound, std", [
    (functools.partial(init.xavier_uniform, gain=2.0), 2.0 * math.sqrt(6 / (FAN_IN + FAN_OUT)), None),
    (init.glorot_normal, None, math.sqrt(2 / (FAN_IN + FAN_OUT))),
    (init.kaiming_uniform, math.sqrt(2) * math.sqrt(3 / FAN_IN), None),
    (functools.partial(init.he_normal, mode="fan_out", nonlinearity="relu"), None, math.sqrt(2) / math.sqrt(FAN_OUT)),
    (functools.partial(init.kaiming_uniform, a=math.sqrt(5)), 1 / math.sqrt(FAN_IN), None),  # torch's Linear
    (functools.partial(init.normal, mean=0.0, std=0.02), None, 0.02),
    (functools.partial(init.uniform, low=-0.5, high=0.5), 0.5, None),
])
def test_scaled_initialisers_draw_torchs_distribution(fn, bound, std):
    w = fn(np.random.default_rng(0), SHAPE)
    assert w.dtype == np.float32 and w.shape == SHAPE
    n = w.size
    if bound is not None:  # U(-bound, bound): mean 0, variance bound^2 / 3, nothing outside
        assert np.abs(w).max() <= bound * (1 + 1e-6)
        assert np.abs(w).max() > 0.999 * bound
        sigma = bound / math.sqrt(3)
    else:
        sigma = std
    assert abs(w.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(w.var() / sigma**2 - 1) < 5 * math.sqrt(2 / n) * 1.5  # within 5 sigma of the variance estimate


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (3, 2, 2, 2)])
def test_orthogonal_rows_or_columns_are_orthonormal(shape):
    w = init.orthogonal(np.random.default_rng(1), shape, np.float64, gain=1.5).reshape(shape[0], -1)
    small = min(w.shape)
    gram = w @ w.T if w.shape[0] == small else w.T @ w
    np.testing.assert_allclose(gram, 1.5**2 * np.eye(small), atol=1e-12)


def test_same_seed_same_numbers_and_bad_arguments_are_named():
    a = init.kaiming_normal(np.random.default_rng(3), (5, 4))
    np.testing.assert_array_equal(a, init.kaiming_normal(np.random.default_rng(3), (5, 4)))
    with pytest.raises(ArgumentError, match=r"at least 2 axes, got shape \[5\]"):
        init.xavier_uniform(np.random.default_rng(0), (5,))
    with pytest.raises(ArgumentError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_uniform(np.random.default_rng(0), (5, 4), mode="fan")
    with pytest.raises(ArgumentError, match="unknown nonlinearity 'gelu'"):
        init.calculate_gain("gelu")
    with pytest.raises(ArgumentError, match="floating parameters, got dtype int64"):
        init.zeros(np.random.default_rng(0), (2,), np.int64)


def test_init_tree_fills_every_named_leaf_by_the_first_matching_rule():
    shapes = {"enc": {"w": (4, 3), "b": (3,)}, "head": {"w": (3, 2), "b": (2,)}}
    rules = {"*.b": init.zeros, "head.*": init.ones, "*": init.xavier_uniform}
    tree = init.init_tree(np.random.default_rng(0), shapes, rules)
    assert list(init.named_leaves(tree)) == ["enc.b", "enc.w", "head.b", "head.w"]
    assert not tree["enc"]["b"].any() and not tree["head"]["b"].any()
    np.testing.assert_array_equal(tree["head"]["w"], np.ones((3, 2), np.float32))
    assert tree["enc"]["w"].shape == (4, 3) and tree["enc"]["w"].std() > 0
    with pytest.raises(ArgumentError, match=r"no rule matches the parameters \['enc.b', 'enc.w'\]"):
        init.init_tree(np.random.default_rng(0), shapes, {"head.*": init.ones})
    with pytest.raises(ArgumentError, match="without '.'"):
        init.named_leaves({"a.b": np.zeros(2)})


def test_fractional_sizes_nan_options_and_bad_axes_are_refused_not_truncated():
    rng = np.random.default_rng(0)
    with pytest.raises(ArgumentError, match="tuple of ints, got \\(2.5, 3\\)"):
        init.zeros(rng, (2.5, 3))  # was silently a [2, 3] array
    for bad in (dict(std=float("nan")), dict(mean=float("inf"))):
        with pytest.raises(ArgumentError, match="finite"):
            init.normal(rng, (3,), **bad)
    with pytest.raises(ArgumentError, match="finite"):
        init.uniform(rng, (3,), low=-math.inf, high=0.0)
    with pytest.raises(ArgumentError, match="finite"):
        init.orthogonal(rng, (3, 3), gain=float("nan"))
    with pytest.raises(ArgumentError, match="two different axes"):
        init.fans((3, 4), in_axis=5)  # was read as axis 1
    with pytest.raises(ArgumentError, match="two different axes"):
        init.fans((3, 4, 5), in_axis=0, out_axis=0)
    with pytest.raises(ArgumentError, match="negative slope"):
        init.calculate_gain("leaky_relu", True)  # torch refuses a bool slope too
    with pytest.raises(ArgumentError, match="floating parameters, got dtype 'nope'"):
        init.normal(rng, (3,), "nope")
    with pytest.raises(ArgumentError, match="init_tree: parameter 'layers'"):
        init.init_tree(rng, {"layers": [{"w": (3, 4)}]}, {"*": init.zeros})
    assert init.fans((3, 4, 5), in_axis=-1, out_axis=0) == (20, 12)  # 5 * 4, 3 * 4


def test_bfloat16_by_name_and_other_dtypes_draw_the_same_numbers():
    for dtype in ("bfloat16", "bf16", np.float16, "float64"):
        a = init.kaiming_uniform(np.random.default_rng(3), (8, 5), dtype)
        b = init.kaiming_uniform(np.random.default_rng(3), (8, 5), np.float64)
        assert a.dtype.name in ("bfloat16", "float16", "float64")
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=1e-2, atol=1e-3)
    q = init.orthogonal(np.random.default_rng(0), (4, 6), "bf16").astype(np.float64)
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=3e-2)
