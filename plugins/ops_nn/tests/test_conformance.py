"""frame-ops-nn against the conformance kit (frame_core.testing): schema, examples, kernel against shape
inference, GradientFn contract, gradients against central differences to order 2, float16/bfloat16."""

from frame_core.testing import conformance_tests

test_conformance = conformance_tests("ops_nn")
