"""Forward values of the activations against an independent scalar reference (Python's math module).

Also checks the ``accepts_out`` contract: the kernel writes into ``out``, even
when ``out`` is its own input, and keeps float16 inputs in float16.
"""

import math

import numpy as np
import pytest

import frame_core

REGISTRY = frame_core.load_registry()
C = math.sqrt(2.0 / math.pi)

REFERENCE = {
    "softplus": (lambda x: math.log1p(math.exp(x)) if x < 30 else x + math.log1p(math.exp(-x)), {}),
    "gelu_tanh": (lambda x: 0.5 * x * (1.0 + math.tanh(C * (x + 0.044715 * x ** 3))), {}),
    "leaky_relu": (lambda x: x if x > 0 else 0.2 * x, {"slope": 0.2}),
    "elu": (lambda x: x if x > 0 else 0.7 * math.expm1(x), {"alpha": 0.7}),
}
X = np.array([-40.0, -3.0, -1.0, -0.25, -1e-3, 1e-3, 0.25, 1.0, 3.0, 40.0])


def run(op, x, **attrs):
    with frame_core.use_registry(REGISTRY):
        graph = frame_core.trace(lambda t: getattr(frame_core.ops, op)(t, **attrs), f"f64[{len(x)}]")
        return frame_core.compile(graph).run([x])[0]


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_values_match_the_scalar_reference(op):
    fn, attrs = REFERENCE[op]
    expected = np.array([fn(float(v)) for v in X])
    np.testing.assert_allclose(run(op, X, **attrs), expected, rtol=1e-12, atol=1e-300)


def test_softplus_does_not_overflow():
    y = run("softplus", np.array([1000.0, -1000.0]))
    np.testing.assert_allclose(y, [1000.0, 0.0], atol=1e-300)


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_kernel_writes_into_out_even_when_out_is_x(op):
    _, attrs = REFERENCE[op]
    schema = REGISTRY.get(op)
    kernel = schema.kernels["cpu"](schema.context(["f64[10]"], attrs))
    expected = kernel(X.copy())
    x = X.copy()
    result = kernel(x, x)
    assert result is x
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_float16_stays_float16(op):
    _, attrs = REFERENCE[op]
    schema = REGISTRY.get(op)
    kernel = schema.kernels["cpu"](schema.context(["f16[4]"], attrs))
    x = np.array([-2.0, -0.5, 0.5, 2.0], np.float16)
    y = kernel(x)
    assert y.dtype == np.float16
    fn, _ = REFERENCE[op]
    np.testing.assert_allclose(y.astype(np.float64), [fn(float(v)) for v in x], rtol=2e-3, atol=2e-3)


def test_shape_inference_refuses_integers():
    with frame_core.use_registry(REGISTRY), pytest.raises(frame_core.ShapeError, match="floating input"):
        frame_core.trace(lambda t: frame_core.ops.gelu_tanh(t), "i32[3]")
