"""frame-ops-basic: the basic op pack of frame.

Elementwise arithmetic and math (numpy broadcasting), relu, maximum/minimum,
abs, sign, clip, pow, comparisons and where, matmul (vectors,
matrices and batches, as numpy), sum,
mean, max, min, argmax, argmin and logsumexp, softmax and log_softmax, cast and
one_hot, shape ops (reshape, transpose, expand_dims, squeeze, broadcast_to,
slice, pad, concat, stack), mse_loss and cross_entropy, stop_gradient and
heaviside_surrogate, erf/erfc/gelu/silu/log1p/expm1/logaddexp (``nonlinear``), atan/asin/acos/atan2
(``inverse_trig``), creation
ops zeros/ones/full/arange/linspace/eye/zeros_like/ones_like (``creation``), and random
numbers drawn from a key that is a graph input: random_uniform, random_normal, bernoulli,
dropout, random_split, random_fold_in, with the numpy key helpers ``key``/``split``/
``fold_in`` (``frame_ops_basic.random``, docs/random.md), each with shape inference, a numpy kernel, a GradientFn
(or a declared reason for none: comparisons and argmax have boolean/integer
outputs, which carry no gradient) and examples, plus the ``_internal`` ops
their gradients use. Every op with a GradientFn is closed under
differentiation (ARCH-068). Reference: ``docs/ops-basic.md``. Loaded through
the ``frame`` entry point ``ops_basic = frame_ops_basic.plugin``.
"""

__version__ = "0.1.0"
