"""frame-ops-basic: the basic op pack of frame.

Elementwise arithmetic and math (numpy broadcasting), relu, maximum/minimum,
abs, sign, clip, pow, comparisons and where, matmul (vectors,
matrices and batches, as numpy), sum,
mean, max, min, argmax, argmin and logsumexp, softmax and log_softmax, cast and
one_hot, shape ops (reshape, transpose, expand_dims, squeeze, broadcast_to,
slice, pad, concat, stack), mse_loss and cross_entropy, stop_gradient and
heaviside_surrogate, each with shape inference, a numpy kernel, a GradientFn
(or a declared reason for none: comparisons and argmax have boolean/integer
outputs, which carry no gradient) and examples, plus the ``_internal`` ops
their gradients use. Every op with a GradientFn is closed under
differentiation (ARCH-068). Reference: ``docs/ops-basic.md``. Loaded through
the ``frame`` entry point ``ops_basic = frame_ops_basic.plugin``.
"""

__version__ = "0.1.0"
