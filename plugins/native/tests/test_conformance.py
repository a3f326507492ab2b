from frame_core.testing import conformance_tests

test_conformance = conformance_tests("native")
