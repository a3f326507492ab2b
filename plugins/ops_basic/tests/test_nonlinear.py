"""erf, erfc, gelu, silu, log1p, expm1 and logaddexp: values against Python's math module (always), and values,
gradients and Hessian-vector products against PyTorch autograd (with the ``compare`` extra). Central
differences to order 2 run for every op in the conformance kit (test_conformance.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import torch_value_gradient_hvp, value_gradient_hvp

X = np.array([-40.0, -8.0, -3.0, -1.0, -0.25, -1e-8, 0.0, 1e-8, 0.25, 1.0, 3.0, 8.0, 40.0])
SQRT1_2 = 1 / math.sqrt(2)


def run(fn, *xs):
    types = [f"f64[{', '.join(map(str, x.shape))}]" for x in xs]
    return fc.compile(fc.trace(fn, *types)).run(list(xs))[0]


#: op -> (frame fn, scalar reference from Python's math module, inputs)
SCALAR = {
    "erf": (ops.erf, math.erf, X),
    "erfc": (ops.erfc, math.erfc, X),
    "gelu": (ops.gelu, lambda x: x * 0.5 * math.erfc(-x * SQRT1_2), X),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), X),
    "silu": (ops.silu, lambda x: x / (1 + math.exp(-x)), X),
    "log1p": (ops.log1p, math.log1p, np.array([-0.999, -0.5, -1e-12, 0.0, 1e-12, 1.0, 1e10])),
    "expm1": (ops.expm1, math.expm1, X),
}


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_values_match_pythons_math_module(name):
    fn, ref, x = SCALAR[name]
    np.testing.assert_allclose(run(fn, x), [ref(float(v)) for v in x], rtol=5e-15, atol=1e-300)  # a few ulps


def test_logaddexp_matches_the_scalar_formula_and_does_not_overflow():
    a = np.array([1000.0, -1000.0, 0.0, 3.0, -np.inf])
    b = np.array([1000.0, -1000.0, 1e-20, -2.0, 1.0])
    expected = [1000 + math.log(2), -1000 + math.log(2), math.log(2) + 5e-21, 3 + math.log1p(math.exp(-5)), 1.0]
    np.testing.assert_allclose(run(ops.logaddexp, a, b), expected, rtol=1e-15)


def test_float32_and_half_precision_round_once_from_float32():
    x = np.linspace(-4, 4, 101)
    for op in ("erf", "erfc", "gelu", "silu"):
        graph = fc.trace(lambda t: getattr(ops, op)(t), "f32[101]")
        y32 = fc.compile(graph).run([x.astype(np.float32)])[0]
        y64 = run(getattr(ops, op), x)
        assert y32.dtype == np.float32
        np.testing.assert_allclose(y32, y64, rtol=1e-6, atol=1e-7)
        y16 = fc.compile(fc.trace(lambda t: getattr(ops, op)(t), "f16[101]")).run([x.astype(np.float16)])[0]
        assert y16.dtype == np.float16
        np.testing.assert_allclose(y16.astype(np.float64), run(getattr(ops, op), x.astype(np.float16).astype(float)),
                                   rtol=1e-3, atol=1e-3)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # numpy warns about NaN in logaddexp
def test_nan_flows_through():
    nan = np.array([np.nan])
    for op in ("erf", "erfc", "gelu", "silu", "log1p", "expm1"):
        assert np.isnan(run(getattr(ops, op), nan)).all(), op
    assert np.isnan(run(ops.logaddexp, nan, np.array([1.0]))).all()


def test_bad_input_is_a_named_error():
    with pytest.raises(fc.ShapeError, match="approximate must be 'none'.*got 'fast'"):
        fc.trace(lambda x: ops.gelu(x, approximate="fast"), "f32[3]")
    with pytest.raises(fc.ShapeError, match="erf: needs a floating input, got i32"):
        fc.trace(lambda x: ops.erf(x), "i32[3]")


# -- against torch -----------------------------------------------------------------------------------------
#: name -> (frame fn, torch fn name or callable, input ranges)
TORCH = {
    "erf": (ops.erf, "erf", [(-3, 3)]),
    "erfc": (ops.erfc, "erfc", [(-3, 3)]),
    "gelu": (ops.gelu, lambda t, x: t.nn.functional.gelu(x), [(-4, 4)]),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh"),
                  lambda t, x: t.nn.functional.gelu(x, approximate="tanh"), [(-4, 4)]),
    "silu": (ops.silu, lambda t, x: t.nn.functional.silu(x), [(-6, 6)]),
    "log1p": (ops.log1p, "log1p", [(-0.9, 3)]),
    "expm1": (ops.expm1, "expm1", [(-3, 3)]),
    "logaddexp": (ops.logaddexp, "logaddexp", [(-3, 3), (-3, 3)]),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_value_gradient_and_second_order_match_torch(name):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    fn, reference, ranges = TORCH[name]
    if isinstance(reference, str):
        tfn = getattr(torch, reference)
    else:
        def tfn(*a):
            return reference(torch, *a)
    rng = np.random.default_rng(sorted(TORCH).index(name))
    shapes = [(4, 5), (5,)] if len(ranges) == 2 else [(4, 5)]  # logaddexp broadcasts a row
    xs = [rng.uniform(lo, hi, s) for (lo, hi), s in zip(ranges, shapes)]
    w = rng.uniform(-1, 1, (4, 5))
    direction = [rng.uniform(-1, 1, x.shape) for x in xs]
    loss, grads, hvps = value_gradient_hvp(fn, xs, w, direction)

    tloss, tgrads, thvps = torch_value_gradient_hvp(tfn, xs, w, direction)
    np.testing.assert_allclose(loss, tloss, rtol=1e-13)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g, tg, rtol=1e-12, atol=1e-14)
    for h, th in zip(hvps, thvps):
        np.testing.assert_allclose(h, th, rtol=1e-11, atol=1e-13)


def test_forward_values_match_torch_in_the_tails():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    x = np.concatenate([X, np.linspace(-6, 6, 49)])
    t = torch.from_numpy(x)
    F = torch.nn.functional
    for fn, ref in ((ops.erf, torch.erf(t)), (ops.erfc, torch.erfc(t)), (ops.silu, F.silu(t)),
                    (ops.expm1, torch.expm1(t))):
        np.testing.assert_allclose(run(fn, x), ref.numpy(), rtol=5e-15, atol=1e-300)
    # gelu's 1 + erf(x/sqrt 2) (torch; frame's erfc form does not) and 1 + tanh(...) (both) cancel for x < -4: there
    # the two agree to float64 rounding of x-sized terms, an absolute match
    np.testing.assert_allclose(run(ops.gelu, x), F.gelu(t).numpy(), rtol=5e-15, atol=1e-15)
    np.testing.assert_allclose(run(lambda v: ops.gelu(v, approximate="tanh"), x), F.gelu(t, approximate="tanh").numpy(),
                               rtol=5e-15, atol=1e-15)
