"""Numerical gradient checks and the conformance kit for op packs (ARCH-066, ARCH-069).

    from frame_core.testing import check_op, check_gradients, conformance_tests

    check_op(registry().get("tanh")).assert_ok()            # one op, every example, orders 1-2, f16/bf16
    check_gradients(graph, [x, w], order=2).assert_ok()     # a graph of your own, in float64
    value_gradient_hvp(ops.tanh, [x], w, [v])                # value, gradient, Hessian-vector product
    test_conformance = conformance_tests("my_pack")         # in a test module: one test per (op, check, example)

Importing this package imports neither pytest nor any pack; ``conformance_tests``
imports pytest when called. See ``docs/testing.md`` for steps and tolerances.
"""

from __future__ import annotations

from .conformance import CHECKS, ConformanceCase, conformance_cases, conformance_tests, run_conformance
from .numeric import (
    DIRECTIONS,
    FLOAT32_STEP,
    FLOAT32_TOLERANCE,
    HIGHER_ORDER_TOLERANCE,
    LOW_PRECISION_TOLERANCE,
    MAX_FULL_ELEMENTS,
    SECOND_DIFFERENCE_STEP,
    STEP,
    TOLERANCE,
    central_difference,
    central_second_difference,
    check_gradients,
    check_low_precision,
    check_random_direction,
    directional_difference,
    relative_error,
    tolerance_for,
)
from .opcheck import LOW_PRECISION_DTYPES, check_op, check_op_example, check_op_low_precision, op_graph
from .results import CheckResult, OpReport
from .reference import torch_value_gradient_hvp, value_gradient_hvp
from .retype import retype_graph

__all__ = [
    # results
    "CheckResult", "OpReport",
    # numerical checks
    "check_op", "check_op_example", "check_op_low_precision", "check_gradients", "check_random_direction",
    "check_low_precision", "central_difference", "directional_difference", "central_second_difference",
    "relative_error", "tolerance_for", "retype_graph", "op_graph",
    # second order against another framework's autograd
    "value_gradient_hvp", "torch_value_gradient_hvp",
    # constants
    "STEP", "SECOND_DIFFERENCE_STEP", "TOLERANCE", "HIGHER_ORDER_TOLERANCE", "FLOAT32_STEP", "FLOAT32_TOLERANCE",
    "LOW_PRECISION_TOLERANCE", "LOW_PRECISION_DTYPES", "MAX_FULL_ELEMENTS", "DIRECTIONS",
    # conformance kit
    "CHECKS", "ConformanceCase", "conformance_cases", "conformance_tests", "run_conformance",
]
