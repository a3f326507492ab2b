"""One training graph, compiled with ``dynamic_shapes=True``, at new lengths and batch sizes: bit for bit.

The any-shape promise covers every input size, not just the batch (design note, section 2): a sequence length or
an image side changes the 'same' and 'causal' pads, a strided window's dropped positions, an FFT's bins and the
1/N of a mean over that axis. Each model is traced at one size and run at others (including 1, and sizes where
rfft's bin count is the same but the length is odd instead of even); every output must equal, bit for bit,
that of a graph traced at that size. A size the graph cannot take must be refused by name, never run wrongly.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def _cumsum_softmax(x):
    h = ops.cumsum(x, axis=-1, reverse=True, exclusive=True)
    return ops.sum(ops.square(ops.log_softmax(h, axis=-1))) + ops.mean(ops.logsumexp(x, axes=[1]))


def _conv_pools(x, w):
    h = ops.conv1d(x, w, padding="causal", dilation=2)
    h = ops.max_pool1d(ops.tanh(h), kernel_size=2, stride=3, padding="same")
    return ops.mean(ops.square(h)) + ops.sum(ops.mean(ops.avg_pool1d(
        x, kernel_size=3, stride=2, padding="same", count_include_pad=False), axes=[-1]))


def _conv2d_same(x, w):
    return ops.mean(ops.square(ops.conv2d(x, w, padding="same", stride=[2, 3], dilation=[2, 1])))


def _fft(x):
    y = ops.rfft(x)
    return ops.sum(ops.square(ops.irfft(ops.complex_mul(y, ops.conj(y))))) + ops.sum(ops.sin(ops.rfft(x, norm="ortho")))


def _sequence_loss(x, labels, w):
    return ops.cross_entropy(x @ w, labels) + ops.mean(ops.square(x[:, ::-2]))


MODELS = [  # (name, fn, input types with L for the varying size, traced L, run at)
    ("cumsum, log_softmax, logsumexp", _cumsum_softmax, ["f64[2, L]"], 5, (1, 2, 8)),
    ("causal conv1d, strided 'same' pools", _conv_pools, ["f64[2, 2, L]", "f64[3, 2, 3]"], 7, (1, 4, 12)),
    ("strided dilated 'same' conv2d", _conv2d_same, ["f64[2, 2, L, 5]", "f64[3, 2, 3, 2]"], 6, (1, 3, 11)),
    ("rfft, irfft: same bins, odd length", _fft, ["f64[2, L]"], 6, (7, 6)),
    ("rfft, irfft: new bin counts", _fft, ["f64[2, L]"], 6, (8, 4, 9, 2, 13)),
    ("cross_entropy over a sequence", _sequence_loss, ["f64[2, L, 4]", "i64[2, L]", "f64[4, 3]"], 3, (1, 5)),
]


def _training(fn, types, length):
    typed = [t.replace("L", str(length)) for t in types]
    wrt = [k for k, t in enumerate(typed) if t.startswith("f")]
    return fc.build_backward_graph(fc.trace(fn, *typed), 0, wrt)


def _arguments(types, length, rng):
    shapes = [tuple(int(d) for d in t.replace("L", str(length))[4:-1].split(", ")) for t in types]
    return [rng.standard_normal(s) if t.startswith("f") else rng.integers(0, 3, s) for t, s in zip(types, shapes)]


@pytest.mark.parametrize("name, fn, types, traced, sizes", MODELS, ids=[m[0] for m in MODELS])
def test_one_training_graph_runs_at_new_lengths_bit_for_bit(name, fn, types, traced, sizes):
    rng = np.random.default_rng(2)
    exe = fc.compile(_training(fn, types, traced), dynamic_shapes=True)
    for length in sizes:
        args = _arguments(types, length, rng)
        want = fc.compile(_training(fn, types, length)).run(args)
        got = exe.run(args)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{name} at length {length}"


def test_an_irfft_that_cannot_take_the_new_bin_count_is_refused_naming_irfft_and_what_to_do():
    # irfft's gradient reads its bin weights from gy's length, so a new bin count runs (MODELS above); what cannot
    # run is the forward irfft itself: an explicit n that no longer fits the bins, or one bin without n
    fixed = fc.compile(_training(lambda x: ops.sum(ops.square(ops.irfft(ops.rfft(x), n=6))), ["f64[2, L]"], 6),
                       dynamic_shapes=True)
    with pytest.raises(fc.ShapeError, match=r"\(irfft\) refuses them: irfft: got n=6 for 5 bins .* leave n out"):
        fixed.run([np.ones((2, 8))])
    free = fc.compile(_training(_fft, ["f64[2, L]"], 6), dynamic_shapes=True)
    with pytest.raises(fc.ShapeError, match=r"\(irfft\) refuses them: irfft: cannot infer n: got 1 bin"):
        free.run([np.ones((2, 1))])
