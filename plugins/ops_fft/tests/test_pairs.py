"""cancel_transform_pairs: rfft(c * irfft(Z)) and fft/ifft pairs become one multiply, with the values of the
transformed graph (to rounding) for every norm pair and parity, and only where the rule holds."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_ops_fft import spectral_derivative

NORMS = ["backward", "ortho", "forward"]


def compiled(fn, *types, opt_level=2):
    return fc.compile(fc.trace(fn, *types), opt_level=opt_level, cache=False)


def transforms(exe) -> list[str]:
    return [n.op for n in exe.graph.nodes if n.op in ("rfft", "irfft", "fft", "ifft")]


def numpy_complex(p: np.ndarray) -> np.ndarray:
    return p[..., 0] + 1j * p[..., 1]


@pytest.mark.parametrize("a", NORMS)
@pytest.mark.parametrize("b", NORMS)
@pytest.mark.parametrize("n", [7, 8])
def test_rfft_of_a_scaled_irfft_is_the_masked_spectrum_scaled(a, b, n):
    rng = np.random.default_rng(n)
    z = rng.standard_normal((3, n // 2 + 1, 2))  # junk Im at DC and Nyquist, which irfft ignores
    exe = compiled(lambda s: ops.rfft(ops.irfft(s, n=n, norm=a) * 3.0, norm=b), "f64[3, %d, 2]" % (n // 2 + 1))
    assert transforms(exe) == []
    (got,) = exe.run([z])
    want = np.fft.rfft(3.0 * np.fft.irfft(numpy_complex(z), n=n, norm=a), norm=b)
    np.testing.assert_allclose(numpy_complex(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("a", NORMS)
@pytest.mark.parametrize("b", NORMS)
def test_a_complex_transform_of_its_scaled_inverse_is_the_spectrum_scaled(forward, a, b):
    outer, inner = ("fft", "ifft") if forward else ("ifft", "fft")
    z = np.random.default_rng(1).standard_normal((2, 4, 5, 2))
    exe = compiled(lambda s: getattr(ops, outer)(-0.5 * getattr(ops, inner)(s, axis=1, norm=a), axis=1, norm=b),
                   "f64[2, 4, 5, 2]")
    assert transforms(exe) == []
    (got,) = exe.run([z])
    np_outer, np_inner = getattr(np.fft, outer), getattr(np.fft, inner)
    want = np_outer(-0.5 * np_inner(numpy_complex(z), axis=1, norm=a), axis=1, norm=b)
    np.testing.assert_allclose(numpy_complex(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, rtol", [("f32", 2e-5), ("f64", 1e-12)])
def test_a_spectral_derivative_gradient_keeps_three_transforms_and_its_values(dtype, rtol):
    def loss(x):
        return ops.sum(ops.square(spectral_derivative(x, 1)))
    graph = fc.build_backward_graph(fc.trace(loss, f"{dtype}[4, 3, 32]"), 0, [0])
    fast, plain = fc.compile(graph, cache=False), fc.compile(graph, cache=False, disable=["cancel_transform_pairs"])
    assert sorted(transforms(fast)) == ["irfft", "irfft", "rfft"] and len(transforms(plain)) == 4
    assert not any(n.op == "mul" and n.outputs[0].type.shape[-1] == 2 for n in fast.graph.nodes)  # no mask needed
    x = np.random.default_rng(2).standard_normal((4, 3, 32)).astype(fast.input_types[0].dtype.np)
    for got, want in zip(fast.run([x]), plain.run([x])):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


def test_pairs_that_do_not_cancel_are_left_alone():
    # another axis; a multiplier that varies along the signal; the inverse read elsewhere is fine, the pair
    # still cancels (the irfft stays for its other reader)
    cases = [
        (lambda z: ops.fft(ops.ifft(z, axis=0), axis=1), "f32[4, 6, 2]", 2),
        (lambda z: ops.rfft(ops.irfft(z, n=8) * np.arange(8, dtype=np.float32)), "f32[3, 5, 2]", 2),
        (lambda z: [ops.rfft(ops.irfft(z, n=8)), ops.irfft(z, n=8)], "f32[3, 5, 2]", 1),
    ]
    for fn, t, left in cases:
        assert len(transforms(compiled(fn, t))) == left
    assert len(transforms(compiled(cases[0][0], cases[0][1], opt_level=1))) == 2
