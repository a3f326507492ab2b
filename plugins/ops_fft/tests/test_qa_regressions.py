"""Regressions found by hostile QA of the FFT pack: each test failed before its fix."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import frame_core as fc
from frame_core import FrameError, ShapeError, ops
from frame_core.ir.dtypes import as_dtype
from frame_core.testing import check_gradients
from frame_ops_fft import irfftn, rfftn, spectral_conv1d, spectral_derivative, wavenumbers


def pack(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1)


def unpack(p: np.ndarray) -> np.ndarray:
    return p[..., 0] + 1j * p[..., 1]


def at_every_level(graph, arrays, disable=()):
    results = [fc.compile(graph, opt_level=level, cache=False, disable=disable).run(arrays) for level in (0, 1, 2)]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    return results[0]


# -- a complex scalar, f[2], is packed complex for complex_mul and conj ---------------------------------------
@pytest.mark.parametrize("a_type, b_type", [("f64[2]", "f64[2]"), ("f64[1]", "f64[2]"), ("f64[2]", "f64[3, 2]"),
                                            ("f64[3, 1]", "f64[2]")])
def test_complex_mul_by_a_complex_scalar_runs_and_differentiates(a_type, b_type):
    rng = np.random.default_rng(0)
    graph = fc.trace(lambda a, b: ops.complex_mul(a, ops.conj(b)), a_type, b_type)
    a, b = (rng.standard_normal(fc.TensorType.parse(t).shape) for t in (a_type, b_type))
    (got,) = at_every_level(graph, [a, b])
    as_complex = [x[..., 0] if x.shape[-1] == 1 else unpack(x) for x in (a, b)]
    np.testing.assert_allclose(got, pack(as_complex[0] * np.conj(as_complex[1])), rtol=1e-14)
    check_gradients(graph, [a, b], order=2).assert_ok()


# -- build-time errors that were run-time scipy errors or misleading messages ----------------------------------
@pytest.mark.parametrize("op, attrs", [("fft", {}), ("ifft", {}), ("irfft", {"n": 1})])
@pytest.mark.parametrize("z_type, axis, named", [("f32[0, 2]", -1, 0), ("f64[3, 0, 2]", 1, 1)])
def test_a_transform_of_an_empty_axis_is_refused_when_the_graph_is_built(op, attrs, z_type, axis, named):
    with pytest.raises(ShapeError, match=rf"^{op}: got an empty axis {named} in {re.escape(z_type)}; "
                                         "expected at least one point to transform"):
        fc.trace(lambda z: getattr(ops, op)(z, axis=axis, **attrs), z_type)


@pytest.mark.parametrize("fn, z_type", [(lambda z: ops.fft(z), "f64[0, 3, 2]"), (lambda z: ops.ifft(z, axis=0), "f64[2, 0, 2]"),
                                        (lambda z: ops.irfft(z, n=4), "f64[0, 3, 2]")])
def test_an_empty_batch_axis_is_fine_for_every_transform(fn, z_type):
    graph = fc.trace(fn, z_type)
    (y,) = at_every_level(graph, [np.zeros(fc.TensorType.parse(z_type).shape)])
    assert y.shape == graph.outputs[0].type.shape and 0 in y.shape


def test_irfft_names_only_lengths_that_are_valid():
    with pytest.raises(ShapeError) as info:
        fc.trace(lambda z: ops.irfft(z, n=0), "f32[1, 2]")
    message = str(info.value)
    assert "got n=0 for 1 bin " in message and "expected n = 1 " in message and "n = 0" not in message


# -- the library functions check their arguments: named errors, never a TypeError from inside ------------------
LIBRARY_BAD = [
    ("irfftn s an int", lambda z: irfftn(z, s=4, axes=(1,)), "f32[4, 3, 2]", "irfftn: s must be a list of sizes"),
    ("irfftn s of floats", lambda z: irfftn(z, s=(4.0, 4.0)), "f32[4, 3, 2]", "irfftn: s must be a list of sizes"),
    ("irfftn s of zeros", lambda z: irfftn(z, s=(4, 0)), "f32[4, 3, 2]", "irfftn: s must be a list of sizes"),
    ("irfftn axes of tuples", lambda z: irfftn(z, s=(4,), axes=((0,),)), "f32[4, 3, 2]", "irfftn: axes must be"),
    ("rfftn axes of floats", lambda x: rfftn(x, axes=(0.0, 1)), "f32[4, 4]", "rfftn: axes must be"),
    ("rfftn axes an int", lambda x: rfftn(x, axes=0), "f32[4, 4]", "rfftn: axes must be"),
    ("derivative axis a tuple", lambda x: spectral_derivative(x, axis=(0,)), "f32[8]", "spectral_derivative: axis must be an int"),
    ("derivative order a bool", lambda x: spectral_derivative(x, order=True), "f32[8]", "non-negative int, got True"),
    ("derivative length inf", lambda x: spectral_derivative(x, length=math.inf), "f32[8]", "finite"),
    ("derivative of no points", lambda x: spectral_derivative(x), "f32[2, 0]", "spectral_derivative: "),
    ("derivative of a rank-0 x", lambda x: spectral_derivative(x), "f32[]", "has no axes"),
    ("derivative of a list", lambda x: spectral_derivative([1.0, 2.0]), "f32[8]", "spectral_derivative: x must be"),
    ("conv1d weights a list", lambda x: spectral_conv1d(x, [[1.0]]), "f32[2, 3, 8]", "spectral_conv1d: weights must be a traced tensor"),
]


@pytest.mark.parametrize("what, fn, x_type, words", LIBRARY_BAD, ids=[b[0] for b in LIBRARY_BAD])
def test_library_functions_refuse_bad_arguments_with_a_named_error(what, fn, x_type, words):
    with pytest.raises(FrameError, match=re.escape(words)):
        fc.trace(fn, x_type)


@pytest.mark.parametrize("n, length", [(4.5, 1.0), (True, 1.0), (8, math.inf), (8, math.nan), (0, 1.0)])
def test_wavenumbers_refuses_a_count_that_is_not_a_positive_int_or_a_length_that_is_not_finite(n, length):
    with pytest.raises(ShapeError, match=r"^wavenumbers needs n >= 1 points \(an int\) and a positive length \(finite\)"):
        wavenumbers(n, length)


def test_library_functions_take_numpy_arrays_as_constants_like_ops_do():
    x = np.sin(np.arange(8) * 2 * np.pi / 8)
    w = np.ones((2, 1, 1, 2))
    graph = fc.trace(lambda v: [spectral_derivative(x) + v, spectral_conv1d(ops.expand_dims(v, axes=[0, 1]), w)],
                     "f64[8]")
    d, conv = at_every_level(graph, [np.zeros(8)])
    np.testing.assert_allclose(d, np.cos(np.arange(8) * 2 * np.pi / 8), atol=1e-12)
    assert conv.shape == (1, 1, 8)


# -- examples/train_pino.py refuses bad options through argparse, without a traceback ---------------------------
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_pino.py"


@pytest.mark.parametrize("argv, words", [(["--steps", "0"], "--steps"), (["--steps", "-5"], "--steps"),
                                         (["--lr", "0"], "--lr"), (["--lr", "nan"], "--lr"), (["--lr", "-1"], "--lr"),
                                         (["--seed", "-1"], "--seed")])
def test_the_pino_example_refuses_bad_options_with_a_usage_error(argv, words, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("train_pino_cli", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["train_pino.py", *argv])
    with pytest.raises(SystemExit) as info:
        module.main()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {words}" in err and "Traceback" not in err


# -- a bad config.WORKERS is reported as the setting it is, not as scipy's complaint ------------------------------
@pytest.mark.parametrize("workers", [0, 2.5, "2", True])
def test_a_bad_workers_setting_names_the_setting_and_what_it_accepts(workers, monkeypatch):
    from frame_ops_fft import config

    monkeypatch.setattr(config, "WORKERS", workers)
    monkeypatch.setattr(config, "PARALLEL_MIN_ELEMENTS", 0)
    exe = fc.compile(fc.trace(lambda x: ops.rfft(x), "f32[2, 8]"), cache=False)
    with pytest.raises(fc.KernelError, match=r"frame_ops_fft\.config\.WORKERS must be a non-zero int .* got "):
        exe.run([np.ones((2, 8), np.float32)])


# -- spectral_derivative of half-precision input is computed in float32 and rounded once ------------------------
@pytest.mark.parametrize("n, order", [(64, 4), (512, 2), (16, 3)])
def test_a_half_precision_spectral_derivative_is_the_float32_one_rounded_once(n, order):
    x = np.arange(n) * 2 * math.pi / n
    u = np.sin(3 * x).astype(np.float16)
    (got,) = fc.compile(fc.trace(lambda v: spectral_derivative(v, order), f"f16[{n}]")).run([u])
    (wide,) = fc.compile(fc.trace(lambda v: spectral_derivative(v, order), f"f32[{n}]")).run([u.astype(np.float32)])
    assert got.dtype == np.float16 and np.isfinite(got).all()  # k^order no longer overflows float16 (inf * 0 = nan)
    np.testing.assert_array_equal(got, wide.astype(np.float16))


def test_an_axis_out_of_range_counts_one_complex_axis_in_the_singular():
    with pytest.raises(ShapeError, match=r"which has 1 complex axis, so expected an axis in -1\.\.0"):
        fc.trace(lambda z: ops.fft(z, axis=1), "f32[3, 2]")


def test_rfftn_and_irfftn_take_axes_and_sizes_as_numpy_arrays_too():
    x = np.random.default_rng(0).standard_normal((4, 6))
    graph = fc.trace(lambda v: irfftn(rfftn(v, axes=np.array([0, 1])), s=np.array([4, 6]), axes=np.array([0, 1])),
                     "f64[4, 6]")
    # bitwise the same at every level but for the pass that cancels the ifft(fft(.)) pair (docs/fft.md)
    (back,) = at_every_level(graph, [x], disable=["cancel_transform_pairs"])
    np.testing.assert_allclose(back, x, atol=1e-14)
    (cancelled,) = fc.compile(graph, cache=False).run([x])
    np.testing.assert_allclose(cancelled, x, atol=1e-14)


@pytest.mark.parametrize("order, dtype, points, highest", [(1000, "f64", 16, 341), (44, "f32", 16, 42),
                                                           (100, "f16", 8, 63)])
def test_a_derivative_order_whose_multiplier_overflows_is_refused(order, dtype, points, highest):
    """Found in QA: spectral_derivative(x, 1000) returned [inf, nan, ...] where the derivative is finite (the
    bins' round-off times an infinite multiplier). The refusal names the highest order the grid holds."""
    with pytest.raises(ShapeError, match=f"order {order} multiplies") as info:
        fc.trace(lambda v: spectral_derivative(v, order), f"{dtype}[{points}]")
    assert f"the highest order {'float32' if dtype != 'f64' else 'float64'} holds is {highest}" in str(info.value)
    t = np.linspace(0, 2 * np.pi, points, endpoint=False)
    graph = fc.trace(lambda v: spectral_derivative(v, highest), f"{dtype}[{points}]")
    (y,) = fc.compile(graph, cache=False).run([np.zeros_like(t).astype(as_dtype(dtype).np)])
    assert np.all(np.isfinite(y))  # the highest order held runs, finite


def test_a_wide_period_allows_high_orders():
    t = np.linspace(0, 1000.0, 8, endpoint=False)  # wavenumbers below 1: k**1000 never overflows
    (y,) = fc.compile(fc.trace(lambda v: spectral_derivative(v, 1000, length=1000.0), "f64[8]")).run([np.cos(t)])
    assert np.all(np.isfinite(y))
