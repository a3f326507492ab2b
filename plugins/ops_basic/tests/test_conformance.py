"""frame-ops-basic against the conformance kit every third-party pack uses (frame_core.testing).

One test per (op, check, example): schema, examples, kernel against shape
inference, GradientFn contract, gradients against central differences to
order 2, float16/bfloat16 against float32, and the declared traits.
"""

from frame_core.testing import conformance_tests

test_conformance = conformance_tests("ops_basic")
