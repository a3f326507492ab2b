"""frame-ops-fft: Fourier transforms for frame on a packed complex layout.

Complex values are real tensors whose last axis holds (re, im); the IR has no
complex dtype (seed 000 §5). Ops: ``rfft``/``irfft`` (real <-> half
spectrum), ``fft``/``ifft`` (complex <-> complex), ``complex_mul``, ``conj``
and ``complex_matmul``, each with a gradient closed to any order (ARCH-068),
kernels on scipy.fft (``frame_ops_fft.config.WORKERS`` threads). Library
functions built from them (ARCH-067: no new forward op): ``rfftn``,
``irfftn``, ``wavenumbers``, ``spectral_derivative``, ``spectral_conv1d``,
``spectral_conv2d``. Loaded through the ``frame`` entry point
``ops_fft = frame_ops_fft.plugin``. See docs/fft.md.
"""

from .spectral import irfftn, rfftn, spectral_conv1d, spectral_conv2d, spectral_derivative, wavenumbers

__version__ = "0.1.0"
__all__ = ["rfftn", "irfftn", "wavenumbers", "spectral_derivative", "spectral_conv1d", "spectral_conv2d"]
