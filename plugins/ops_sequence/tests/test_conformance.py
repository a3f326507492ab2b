"""frame-ops-sequence against the conformance kit (frame_core.testing).

One test per (op, check, example): schema, examples, kernel against shape
inference, GradientFn contract, gradients against central differences to
order 2, float16/bfloat16 against float32, and the declared traits. It
covers every op the pack registers: the sequence ops and control flow.
"""

from frame_core.testing import conformance_tests

test_conformance = conformance_tests("ops_sequence")
