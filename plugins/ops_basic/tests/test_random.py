"""Random ops: the generator against published vectors, statistics over 10^6 draws, reproducibility across
opt levels and frame-native on/off, dropout's gradient and mask, keys, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ArgumentError, InputError, ShapeError, ops
from frame_ops_basic import random as fr
from frame_ops_basic.random import _bits

N = 10**6  # draws for the mean/variance checks
M = 2 * 10**5  # draws for the correlation checks (5 sigma is 0.011)


def draw(fn, key, *more):
    graph = fc.trace(fn, "i64[2]", *[f"f64[{', '.join(map(str, m.shape))}]" for m in more])
    return fc.compile(graph).run([key, *more])


def within_sigmas(value, expected, sigma, k=5.0):
    assert abs(value - expected) < k * sigma, (value, expected, sigma)


# -- the generator --------------------------------------------------------------------------------------
@pytest.mark.parametrize("counter, key, expected", [
    # Random123's known-answer vectors for philox4x64_10 (kat_vectors: counter words, key words, output)
    ([0, 0, 0, 0], [0, 0], [0x16554d9eca36314c, 0xdb20fe9d672d0fdc, 0xd7e772cee186176b, 0x7e68b68aec7ba23b]),
    ([2**64 - 1] * 4, [2**64 - 1] * 2,
     [0x87b092c3013fe90b, 0x438c3c67be8d0224, 0x9cc7d7c69cd777b6, 0xa09caebf594f0ba0]),
    ([0x243f6a8885a308d3, 0x13198a2e03707344, 0xa4093822299f31d0, 0x082efa98ec4e6c89],
     [0x452821e638d01377, 0xbe5466cf34e90c6c],
     [0xa528f45403e61d95, 0x38c72dbd566e9788, 0xa5a1610e72fd18b5, 0x57bd43b5e52b7fe6]),
])
def test_the_generator_is_philox4x64_10(counter, key, expected):
    k = np.array(key, np.uint64).view(np.int64)
    if counter[1:] == [0, 0, 0]:
        got = _bits(k, 4, purpose=0, start=counter[0])
    else:  # a counter with high words: go through numpy's Philox as _bits does
        c = sum(w << (64 * i) for i, w in enumerate(counter))
        got = np.random.Philox(key=k.view(np.uint64), counter=(c - 1) % 2**256).random_raw(4)
    assert [int(v) for v in got] == expected


def test_sampling_reads_consecutive_blocks_from_counter_zero():
    k = fr.key(123)
    bits = _bits(k, 10)
    assert np.array_equal(bits[4:8], _bits(k, 4, start=1))  # block 1 holds words 4..7
    u = draw(lambda key: ops.random_uniform(key, shape=(10,)), k)[0]
    assert np.array_equal(u, (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53)


# -- statistics -----------------------------------------------------------------------------------------
def test_uniform_mean_and_variance_over_a_million_draws():
    (u,) = draw(lambda key: ops.random_uniform(key, shape=(1000, 1000), low=-1.0, high=3.0), fr.key(1))
    assert u.dtype == np.float64 and u.shape == (1000, 1000) and u.min() >= -1.0 and u.max() < 3.0
    # uniform on [a, b): mean (a+b)/2, variance (b-a)^2/12; var of the sample variance: (mu4 - sigma^4)/n
    within_sigmas(u.mean(), 1.0, np.sqrt(16 / 12 / N))
    mu4 = 4.0**4 / 80
    within_sigmas(u.var(), 16 / 12, np.sqrt((mu4 - (16 / 12) ** 2) / N))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_normal_mean_and_variance_over_a_million_draws(dtype):
    (z,) = draw(lambda key: ops.random_normal(key, shape=(N,), dtype=dtype, mean=2.0, std=3.0), fr.key(2))
    assert z.dtype == np.dtype(np.float64 if dtype == "f64" else np.float32)
    z = z.astype(np.float64)
    within_sigmas(z.mean(), 2.0, 3.0 / np.sqrt(N))
    within_sigmas(z.var(), 9.0, 9.0 * np.sqrt(2.0 / N))  # var of the sample variance: 2 sigma^4 / n
    kurtosis = np.mean(((z - 2.0) / 3.0) ** 4)
    within_sigmas(kurtosis, 3.0, np.sqrt(96.0 / N))  # mu8 - mu4^2 = 105 - 9 = 96


def test_bernoulli_frequency_over_a_million_draws():
    (b,) = draw(lambda key: ops.bernoulli(key, shape=(N,), p=0.3), fr.key(3))
    assert b.dtype == np.bool_
    within_sigmas(b.mean(), 0.3, np.sqrt(0.3 * 0.7 / N))
    ones, zeros = draw(lambda key: (ops.bernoulli(key, shape=(5,), p=1.0), ops.bernoulli(key, shape=(5,), p=0.0)),
                       fr.key(3))
    assert ones.all() and not zeros.any()


def test_dropout_keeps_the_right_fraction_and_the_mean():
    x = np.full((N,), 2.0)
    (y,) = draw(lambda key, x: ops.dropout(x, key, rate=0.2), fr.key(4), x)
    kept = y != 0
    within_sigmas(kept.mean(), 0.8, np.sqrt(0.2 * 0.8 / N))
    assert np.all(y[kept] == 2.0 / 0.8)
    within_sigmas(y.mean(), 2.0, 2.0 / 0.8 * np.sqrt(0.2 * 0.8 / N))


@pytest.mark.parametrize("other", ["split", "fold_in", "next_seed"])
def test_two_keys_draw_independent_numbers(other):
    k = fr.key(5)
    k2 = {"split": fr.split(k)[1], "fold_in": fr.fold_in(k, 0), "next_seed": fr.key(6)}[other]
    first = fr.split(k)[0] if other == "split" else k
    a, b = (draw(lambda key: ops.random_uniform(key, shape=(M,), low=-1.0), kk)[0] for kk in (first, k2))
    within_sigmas(np.corrcoef(a, b)[0, 1], 0.0, 1.0 / np.sqrt(M))
    # neighbours too (a lag of one element), and the sign agreement of the raw draws
    within_sigmas(np.corrcoef(a[1:], b[:-1])[0, 1], 0.0, 1.0 / np.sqrt(M))
    within_sigmas(np.mean(np.sign(a) == np.sign(b)), 0.5, 0.5 / np.sqrt(M))


def test_draws_are_uncorrelated_along_the_sample():
    (z,) = draw(lambda key: ops.random_normal(key, shape=(M,)), fr.key(7))
    for lag in (1, 2, 3, 4, 5):
        within_sigmas(np.corrcoef(z[lag:], z[:-lag])[0, 1], 0.0, 1.0 / np.sqrt(M))


# -- reproducibility ------------------------------------------------------------------------------------
def _sampler_graph():
    def f(key, x):
        k1 = ops.random_fold_in(key, np.int64(3))
        u = ops.random_uniform(k1, shape=(4, 8), dtype="f32", low=-1.0)
        z = ops.random_normal(key, shape=(4, 8), dtype="f32")
        return (ops.dropout(x * u + z * 0.5, key, rate=0.3) * 2.0 + 1.0, ops.bernoulli(k1, shape=(7,)),
                ops.random_split(key, num=3))
    return fc.trace(f, "i64[2]", "f32[4, 8]")


def test_the_same_key_gives_the_same_bits_on_every_opt_level_and_with_native_on_and_off(monkeypatch):
    graph = _sampler_graph()
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    k = fr.key(2026)
    results = []
    for native in ("1", "0"):
        monkeypatch.setenv("FRAME_NATIVE", native)
        for level in (0, 1, 2):
            exe = fc.compile(graph, opt_level=level)
            for _ in range(3):  # frame-native swaps its kernels in after the first runs
                results.append([o.tobytes() for o in exe.run([k, x])])
    assert all(r == results[0] for r in results)
    other = fc.compile(graph).run([fr.key(2027), x])
    assert other[0].tobytes() != results[0][0]


def test_a_constant_key_folds_to_the_same_numbers():
    k = fr.key(9)
    graph = fc.trace(lambda x: x + ops.random_normal(fc.constant(k), shape=(6,)), "f64[6]")
    folded = fc.compile(graph, opt_level=2).run([np.zeros(6)])[0]
    assert np.array_equal(folded, draw(lambda key: ops.random_normal(key, shape=(6,)), k)[0])


def test_half_precision_draws_are_the_float64_draws_rounded_once():
    k = fr.key(10)
    wide, half, bf = draw(lambda key: (ops.random_normal(key, shape=(1000,)),
                                       ops.random_normal(key, shape=(1000,), dtype="f16"),
                                       ops.random_normal(key, shape=(1000,), dtype="bf16")), k)
    assert np.array_equal(half, wide.astype(np.float16))
    assert np.allclose(bf.astype(np.float64), wide, rtol=2**-8)
    for dtype in ("f16", "bf16"):
        (u,) = draw(lambda key: ops.random_uniform(key, shape=(M,), dtype=dtype), k)
        assert u.astype(np.float64).max() < 1.0 and u.astype(np.float64).min() >= 0.0


def test_helpers_and_ops_derive_the_same_keys():
    k = fr.key(11)
    split, folded = draw(lambda key: (ops.random_split(key, num=4), ops.random_fold_in(key, np.int32(-5))), k)
    assert np.array_equal(split, fr.split(k, 4)) and np.array_equal(folded, fr.fold_in(k, -5))
    keys = {fr.fold_in(k, step).tobytes() for step in range(1000)} | {r.tobytes() for r in fr.split(k, 1000)}
    assert len(keys) == 2000 and k.tobytes() not in keys
    assert np.array_equal(fr.key(2**64 - 1), fr.key(-1))


def test_per_rank_keys_differ_and_are_reproducible():
    base = fr.key(12)
    per_rank = [draw(lambda key: ops.random_uniform(key, shape=(16,)), fr.fold_in(base, rank))[0] for rank in range(4)]
    again = draw(lambda key: ops.random_uniform(key, shape=(16,)), fr.fold_in(base, 2))[0]
    assert np.array_equal(per_rank[2], again)
    assert len({p.tobytes() for p in per_rank}) == 4


# -- dropout's gradient ---------------------------------------------------------------------------------
def test_dropout_gradient_uses_the_forward_mask_to_second_order():
    x = np.random.default_rng(0).uniform(-1, 1, (6, 5))
    w = np.random.default_rng(1).uniform(-1, 1, (6, 5))
    forward = fc.trace(lambda key, x: ops.sum(ops.square(ops.dropout(x, key, rate=0.4)) * w), "i64[2]", "f64[6, 5]")
    first = fc.build_backward_graph(forward, 0, [1])
    dot, k = fc.extend_graph(first, lambda *v: ops.sum(v[-1]))
    second = fc.build_backward_graph(dot, k, [1])
    key = fr.key(13)
    y = draw(lambda key, x: ops.dropout(x, key, rate=0.4), key, x)[0]
    scale = np.where(y != 0, 1 / 0.6, 0.0)  # the forward's mask, read back from its output
    outs = fc.compile(second).run([key, x])
    np.testing.assert_allclose(outs[1], 2 * y * scale * w, rtol=1e-13)  # d/dx sum(w (m x)^2) = 2 w m^2 x
    np.testing.assert_allclose(outs[-1], 2 * scale**2 * w, rtol=1e-13)  # d/dx sum of that gradient


def test_dropout_gradient_against_torch_with_the_same_mask():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    x = np.random.default_rng(2).uniform(-1, 1, (4, 7))
    key = fr.key(14)
    graph = fc.build_backward_graph(fc.trace(lambda key, x: ops.sum(ops.tanh(ops.dropout(x, key, rate=0.25))),
                                             "i64[2]", "f64[4, 7]"), 0, [1])
    loss, gx = fc.compile(graph).run([key, x])
    mask = draw(lambda key, x: ops.dropout(x, key, rate=0.25), key, np.ones_like(x))[0] * 0.75
    tx = torch.tensor(x, requires_grad=True)
    tloss = torch.tanh(tx * torch.from_numpy(mask) / 0.75).sum()  # torch's dropout formula with frame's mask
    tloss.backward()
    np.testing.assert_allclose(loss, tloss.item(), rtol=1e-14)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-14)


def test_no_gradient_flows_into_a_key_and_samples_are_constants_for_autodiff():
    forward = fc.trace(lambda key, x: ops.sum(x * ops.random_normal(key, shape=(3,))), "i64[2]", "f64[3]")
    graph = fc.build_backward_graph(forward, 0, [1])
    key = fr.key(15)
    _, gx = fc.compile(graph).run([key, np.ones(3)])
    assert np.array_equal(gx, draw(lambda key: ops.random_normal(key, shape=(3,)), key)[0])


# -- bad input ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, float("nan")])
def test_dropout_rate_outside_0_1_is_a_named_error(rate):
    with pytest.raises(ShapeError, match=r"dropout: rate=.* is outside \[0, 1\)"):
        fc.trace(lambda key, x: ops.dropout(x, key, rate=rate), "i64[2]", "f32[3]")


@pytest.mark.parametrize("key_type", ["i32[2]", "i64[3]", "f64[2]", "i64[]", "i64[1, 2]"])
def test_a_key_of_the_wrong_dtype_or_shape_is_a_named_error(key_type):
    for fn in (lambda k: ops.random_uniform(k, shape=(2,)), lambda k: ops.random_split(k),
               lambda k: ops.dropout(np.ones(2), k)):
        with pytest.raises(ShapeError, match=r"is the key, an i64\[2\] tensor, got " + key_type.replace("[", r"\[")):
            fc.trace(fn, key_type)


def test_running_with_a_key_of_the_wrong_dtype_names_the_input():
    exe = fc.compile(fc.trace(lambda key: ops.random_uniform(key, shape=(2,)), "i64[2]"))
    with pytest.raises(InputError):
        exe.run([np.array([1, 2], np.int32)])


@pytest.mark.parametrize("bad", [np.array([1, 2], np.int32), np.zeros(3, np.int64), [1.0, 2.0]])
def test_helpers_refuse_a_bad_key(bad):
    with pytest.raises(ArgumentError, match="a key is a numpy int64 array of shape"):
        fr.split(bad)
    with pytest.raises(ArgumentError, match="a key is a numpy int64 array of shape"):
        fr.fold_in(bad, 1)


def test_bad_attributes_are_named_errors():
    with pytest.raises(ShapeError, match="low=1.0, high=1.0"):
        fc.trace(lambda k: ops.random_uniform(k, shape=(2,), low=1.0, high=1.0), "i64[2]")
    with pytest.raises(ShapeError, match="std=-1.0"):
        fc.trace(lambda k: ops.random_normal(k, shape=(2,), std=-1.0), "i64[2]")
    with pytest.raises(ShapeError, match="p=1.5"):
        fc.trace(lambda k: ops.bernoulli(k, shape=(2,), p=1.5), "i64[2]")
    with pytest.raises(ShapeError, match="dtype must be a float dtype"):
        fc.trace(lambda k: ops.random_normal(k, shape=(2,), dtype="i32"), "i64[2]")
    with pytest.raises(ArgumentError, match="seed must be an int"):
        fr.key(2**64)


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")  # inf * 0, as numpy warns
def test_nan_in_x_stays_nan_through_dropout():
    x = np.array([np.nan, np.inf, 1.0, -np.inf] * 8)
    (y,) = draw(lambda key, x: ops.dropout(x, key, rate=0.5), fr.key(16), x)
    assert np.isnan(y[0::4]).all()
    assert np.all(np.isnan(y[1::4]) | (y[1::4] == np.inf))
