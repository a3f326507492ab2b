"""frame-ops-fft against the conformance kit: one test per (op, check, example), gradients to order 2
against central differences, float16/bfloat16 against float32, declared traits."""

from frame_core.testing import conformance_tests

test_conformance = conformance_tests("ops_fft")
