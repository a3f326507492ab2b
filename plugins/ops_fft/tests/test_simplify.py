"""fold_spectral_multipliers: chains of constant multipliers on a packed spectrum become one multiply."""

from __future__ import annotations

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_ops_fft import spectral_derivative


def ops_of(exe) -> list[str]:
    return [n.op for n in exe.graph.nodes]


def test_the_gradient_of_a_spectral_derivative_multiplies_its_spectrum_once():
    forward = fc.trace(lambda x: ops.sum(ops.square(spectral_derivative(x, 1))), "f64[4, 16]")
    training = fc.build_backward_graph(forward, 0, [0])
    x = np.random.default_rng(0).standard_normal((4, 16))
    # cancel_transform_pairs would remove the gradient's rfft (test_pairs.py): this test is about the folding
    folded = fc.compile(training, opt_level=2, disable=["cancel_transform_pairs"])
    plain = fc.compile(training, opt_level=1)
    # forward: rfft, complex_mul(ik), irfft; backward: rfft, one complex_mul(C * conj(ik) * W), irfft
    def backward_spectrum_ops(exe):  # the ops between the gradient's rfft and its irfft, constants left out
        names = [op for op in ops_of(exe) if op != "constant"]
        start = len(names) - 1 - names[::-1].index("rfft")
        return names[start + 1:len(names) - 1 - names[::-1].index("irfft")]
    assert backward_spectrum_ops(folded) == ["complex_mul"]
    assert backward_spectrum_ops(plain) == ["complex_mul"] * 3  # C, conj(ik), W
    for a, b in zip(folded.run([x]), plain.run([x])):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14)


def test_real_and_complex_multipliers_fold_in_every_order():
    rng = np.random.default_rng(1)
    r1, r2 = rng.standard_normal((5, 1)), rng.standard_normal((5, 1))
    k1, k2 = rng.standard_normal((5, 2)), rng.standard_normal((3, 5, 2))

    def chain(x):
        z = ops.rfft(x)
        return ops.irfft(ops.complex_mul(ops.complex_mul(ops.complex_mul(z, k1) * r1 * r2, k2), r1), n=8)
    graph = fc.trace(chain, "f64[3, 8]")
    x = rng.standard_normal((3, 8))
    folded, plain = fc.compile(graph), fc.compile(graph, opt_level=1)
    assert ops_of(folded).count("complex_mul") == 1 and ops_of(folded).count("mul") == 0
    np.testing.assert_allclose(folded.run([x])[0], plain.run([x])[0], rtol=1e-13, atol=1e-13)


def folds(exe) -> list[str]:
    return [message for stage, message in exe.log if stage == "fold_spectral_multipliers"]


def test_no_fold_when_an_intermediate_is_read_elsewhere_or_the_value_is_not_a_spectrum():
    r1, r2 = np.full((5, 1), 2.0), np.full((5, 1), 3.0)
    def two_outputs(x):
        y = ops.rfft(x) * r1
        return [ops.irfft(y * r2, n=8), y]
    shared = fc.compile(fc.trace(two_outputs, "f64[3, 8]"), disable=["fuse_elementwise"])
    assert folds(shared) == [] and ops_of(shared).count("mul") == 2  # rfft(x) * r1 is an output too
    real = fc.compile(fc.trace(lambda x: ops.exp(x) * np.full((4, 1), 2.0) * np.full((4, 1), 3.0), "f64[4, 2]"))
    assert folds(real) == []  # a last axis of 2 does not make exp(x) a spectrum
