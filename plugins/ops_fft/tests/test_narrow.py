"""narrow_spectral_multipliers: a constant multiply next to a slice or a pad of a spectrum runs on the kept bins
only, with bitwise the same results."""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_ops_fft import spectral_conv1d


def spectrum_sizes(exe) -> list[tuple[int, ...]]:
    return [n.outputs[0].type.shape for n in exe.graph.nodes if n.op == "complex_mul"]


def test_multiplies_move_inside_the_slice_and_the_pad_and_give_the_same_bits():
    rng = np.random.default_rng(0)
    k1 = rng.standard_normal((9, 2))
    k2 = rng.standard_normal((4, 1, 2))

    def fn(x):
        low = ops.slice(ops.complex_mul(ops.rfft(x), k1), starts=[1], stops=[5], axes=[1])    # bins 1..4 kept
        return ops.irfft(ops.complex_mul(ops.pad(low, before=[1], after=[4], axes=[1]), k2), n=16)
    graph = fc.trace(fn, "f64[4, 16]")
    narrow = fc.compile(graph, cache=False)
    wide = fc.compile(graph, cache=False, disable=["narrow_spectral_multipliers"])
    assert spectrum_sizes(narrow) == [(4, 4, 2), (4, 4, 2)] and spectrum_sizes(wide) == [(4, 9, 2), (4, 9, 2)]
    x = rng.standard_normal((4, 16))
    (a,), (b,) = narrow.run([x]), wide.run([x])
    assert np.array_equal(a, b)


def test_an_fno_gradient_multiplies_only_the_kept_modes():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 2, 2)) / 10

    def loss(x, weights):
        return ops.sum(ops.square(spectral_conv1d(x, weights)))
    graph = fc.build_backward_graph(fc.trace(loss, "f64[2, 3, 32]", "f64[4, 3, 2, 2]"), 0, [0, 1])
    narrow = fc.compile(graph, cache=False)
    wide = fc.compile(graph, cache=False, disable=["narrow_spectral_multipliers"])
    assert all(shape[-2] == 4 for shape in spectrum_sizes(narrow)) and any(s[-2] == 17 for s in spectrum_sizes(wide))
    x = rng.standard_normal((2, 3, 32))
    for a, b in zip(narrow.run([x, w]), wide.run([x, w])):
        assert np.array_equal(a, b)


def test_a_multiply_read_elsewhere_or_an_infinite_multiplier_stays():
    def read_twice(x):
        z = ops.complex_mul(ops.rfft(x), np.ones((9, 2)))
        return [ops.slice(z, starts=[0], stops=[3], axes=[1]), z]

    def infinite(x):
        low = ops.slice(ops.rfft(x), starts=[0], stops=[3], axes=[1])
        k = np.full((9, 2), np.inf)
        return ops.complex_mul(ops.pad(low, before=[0], after=[6], axes=[1]), k)
    for fn in (read_twice, infinite):
        exe = fc.compile(fc.trace(fn, "f64[2, 16]"), cache=False)
        assert spectrum_sizes(exe) == [(2, 9, 2)]


def test_a_slice_of_the_packed_axis_is_no_complex_product_and_stays():
    k = np.random.default_rng(2).standard_normal((9, 2))

    def real_part(x):
        return ops.slice(ops.complex_mul(ops.rfft(x), k), starts=[0], stops=[1], axes=[-1])
    exe = fc.compile(fc.trace(real_part, "f64[2, 16]"), cache=False)
    assert spectrum_sizes(exe) == [(2, 9, 2)]
    x = np.random.default_rng(3).standard_normal((2, 16))
    (got,) = exe.run([x])
    np.testing.assert_allclose(got[..., 0], (np.fft.rfft(x) * (k[:, 0] + 1j * k[:, 1])).real, rtol=1e-12, atol=1e-12)
