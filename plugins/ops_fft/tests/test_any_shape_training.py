"""A spectral (FNO-style) model's training graph, compiled once with dynamic_shapes=True, runs at any batch size.

rfft (its gradient reads n and the bin weights from x), complex_matmul (modes mixing channels), complex_mul,
conj and irfft declare any_shape_gradient. One graph traced at batch 4 and run at batches 4, 9 and 1 gives, bit
for bit, what a graph traced there gives, and torch's gradients at batch 9.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

RNG = np.random.default_rng(4)
C, MODES, LENGTH = 3, 4, 16
PARAMS = {"mix": RNG.standard_normal((MODES, C, C, 2)) * 0.3, "scale": RNG.standard_normal((MODES, 1, 1, 2)) * 0.5 + 1}
NAMES = sorted(PARAMS)


def spectral_loss(x, target, mix, scale):
    spectrum = ops.rfft(x, axis=-1)                                               # [B, C, L//2 + 1, 2]
    low = ops.slice(spectrum, starts=[0], stops=[MODES], axes=[2])               # [B, C, M, 2]
    modes_first = ops.transpose(low, perm=[2, 0, 1, 3])                          # [M, B, C, 2]
    mixed = ops.complex_mul(ops.conj(ops.complex_matmul(modes_first, mix)), scale)  # [M, B, C, 2]
    back = ops.transpose(mixed, perm=[1, 2, 0, 3])                               # [B, C, M, 2]
    full = ops.pad(back, before=[0], after=[LENGTH // 2 + 1 - MODES], axes=[2])
    return ops.mean(ops.square(ops.irfft(full, n=LENGTH, axis=-1) - target))


def training_graph(batch):
    types = [f"f64[{batch}, {C}, {LENGTH}]", f"f64[{batch}, {C}, {LENGTH}]",
             *(fc.TensorType(fc.as_dtype("f64"), PARAMS[n].shape) for n in NAMES)]
    return fc.build_backward_graph(fc.trace(spectral_loss, *types), 0, [0, 2, 3])


def arguments(batch):
    return [RNG.standard_normal((batch, C, LENGTH)), RNG.standard_normal((batch, C, LENGTH)),
            *(PARAMS[n] for n in NAMES)]


def torch_gradients(args):
    torch = pytest.importorskip("torch")
    x = torch.tensor(args[0], requires_grad=True)
    mix, scale = (torch.tensor(PARAMS[n], requires_grad=True) for n in NAMES)
    low = torch.fft.rfft(x, dim=-1)[..., :MODES].permute(2, 0, 1)                 # [M, B, C]
    mixed = torch.conj(low @ torch.view_as_complex(mix)) * torch.view_as_complex(scale)
    full = torch.nn.functional.pad(mixed.permute(1, 2, 0), (0, LENGTH // 2 + 1 - MODES))
    loss = ((torch.fft.irfft(full, n=LENGTH, dim=-1) - torch.tensor(args[1])) ** 2).mean()
    loss.backward()
    return [loss.detach().numpy(), x.grad.numpy(), mix.grad.numpy(), scale.grad.numpy()]


def test_a_spectral_training_graph_runs_at_any_batch_bit_for_bit():
    exe = fc.compile(training_graph(4), dynamic_shapes=True)
    for batch in (4, 9, 1):
        args = arguments(batch)
        want = fc.compile(training_graph(batch)).run(args)
        got = exe.run(args)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}"
        if batch == 9:
            for a, b in zip(got, torch_gradients(args)):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert exe.specializations().misses == 2
