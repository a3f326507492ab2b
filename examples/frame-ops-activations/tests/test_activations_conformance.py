"""frame's conformance kit over every op of this pack (frame_core.testing).

One test per (op, check, example): schema, examples, kernel against
shape_infer, the GradientFn contract, gradients against finite differences
to order 2, float16/bfloat16 against float32, and the declared traits
(elementwise, accepts_out). See frame's docs/testing.md.
"""

from frame_core.testing import conformance_tests

test_conformance = conformance_tests("activations")
