"""frame-ops-basic: the basic op pack of frame.

Elementwise arithmetic and math (numpy broadcasting), relu, matmul (vectors,
matrices and batches, as numpy), sum and mean, reshape and transpose,
mse_loss, stop_gradient and heaviside_surrogate, each with shape inference, a numpy kernel, a GradientFn
and examples, plus the ``_internal`` ops their gradients use. Every op is
closed under differentiation (ARCH-068). Loaded through the ``frame`` entry
point ``ops_basic = frame_ops_basic.plugin``.
"""

__version__ = "0.1.0"
