"""``compile(fast_math=True)``: float32 tanh by ``approx.tanh_f32`` (at most 7 ulp), compiled in fused groups and in
scan bodies, the same bits on both tiers; without the option every result stays numpy's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import jit
from frame_native.approx import CLAMP, FAST_TANH_OP, P, Q, tanh_f32

MAX_ULP = 7  # over every float32 (benchmarks/tanh_accuracy.py): 7 at one value, 6 at 21


def _floats(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def _sweep() -> np.ndarray:
    """Positive float32 values: every 2039th bit pattern up to inf, the 4096 smallest subnormals, the 8192 values
    either side of the smallest normal and of the clamp (9.125), every third value from 8.0 up (results next to 1)
    and every value from 4.0 up for 2^17 steps (where the largest errors lie)."""
    dense = np.arange(0, 0x7F800000, 2039, dtype=np.int64)
    edges = [np.arange(0, 4096), np.arange(0x007FF000, 0x00801000), np.arange(0x41120000 - 8192, 0x41120000 + 8192),
             np.arange(0x41000000, 0x41000000 + 40000, 3), np.arange(0x40800000, 0x40800000 + (1 << 17)),
             np.array([0x40BD67BA])]  # 5.9189119: the one float32 off by 7 ulp (an exhaustive sweep found it)
    return _floats(np.concatenate([dense, *[e.astype(np.int64) for e in edges]]))


def _ordered(a: np.ndarray) -> np.ndarray:
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_error(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Distance in float32 steps from ``got`` to float64 tanh of ``x`` rounded to float32."""
    return np.abs(_ordered(got) - _ordered(np.tanh(x.astype(np.float64)).astype(np.float32)))


def test_tanh_f32_is_within_7_ulp_and_odd():
    x = _sweep()
    got = tanh_f32(x)
    err = ulp_error(got, x)
    assert err.max() == MAX_ULP, (err.max(), x[err.argmax()])  # the bound is attained, not exceeded
    assert err.max() >= 2  # an approximation (numpy's own tanh is within 1 ulp here): the sweep sees it
    assert np.all(np.abs(got) <= 1.0)  # so 1 - t * t, tanh's gradient, is never negative
    np.testing.assert_array_equal(tanh_f32(-x).view(np.uint32), (-got).view(np.uint32))  # exactly odd
    subnormal = x[x < np.finfo(np.float32).tiny]
    np.testing.assert_array_equal(tanh_f32(subnormal), subnormal)  # tanh(x) = x, exactly, for tiny x


def test_tanh_f32_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, np.finfo(np.float32).max, 9.125, 20.0], np.float32)
    got = tanh_f32(x)
    assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1])  # the sign of zero kept
    np.testing.assert_array_equal(got[2:4], [1.0, -1.0])
    assert np.isnan(got[4])
    np.testing.assert_array_equal(got[5:], [1.0, -1.0, 1.0, 1.0, 1.0])


def test_the_gradient_of_the_approximation_is_1_minus_its_square():
    """The graph's gradient of tanh, gy (1 - t^2), reads the forward's t: for the approximation t(x) that is its
    own derivative up to the approximation's error (the rational function, in float64, differentiated)."""
    x = np.linspace(-float(CLAMP), float(CLAMP), 20001)

    def rational(v):
        s = v * v
        return v * np.polyval(np.array(P[::-1], np.float64), s) / np.polyval(np.array(Q[::-1], np.float64), s)
    h = 1e-6
    slope = (rational(x + h) - rational(x - h)) / (2 * h)
    np.testing.assert_allclose(slope, 1 - rational(x) ** 2, atol=2e-6)


def _wait_native(exe, runs, args):
    for _ in range(runs):
        exe.run(args)
    assert frame_native.wait(60)


def test_compiled_code_gives_the_numpy_tiers_bits(same_bits):
    sweep = _sweep()
    specials = np.float32([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30])
    x = np.concatenate([specials, sweep[::50], -sweep[::51]])[:40001]  # odd length: the scalar remainder loop too
    assert x.size == 40001 and np.isnan(x).sum() == 2 and np.nanmin(x) < -9 and np.nanmax(x) > 9
    graph = fc.trace(lambda a, b: ops.tanh(a * b), "f32[40001]", "f32[]")
    one = np.float32(1.0)
    exe = fc.compile(graph, cache=False, fast_math=True)
    before = exe.run([x, one])[0]  # the numpy tier
    same_bits(before, tanh_f32(x))
    _wait_native(exe, 2, [x, one])
    assert frame_native.tier_of(exe) == ["native"]
    same_bits(exe.run([x, one])[0], before)


def test_default_compile_keeps_numpys_tanh_bit_for_bit(same_bits):
    graph = fc.trace(lambda a, b: ops.tanh(a * 2.0 + b) * 3.0, "f32[64, 33]", "f32[33]")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 33)).astype(np.float32) * 4, rng.standard_normal(33).astype(np.float32)
    exe = fc.compile(graph, cache=False)
    _wait_native(exe, 3, [a, b])
    assert all(ins.op != FAST_TANH_OP for ins in exe.instructions)
    numpy_tier = [ins for ins in exe.instructions if ins.op == "fused_elementwise_internal"]
    assert any("tanh(" in str(ins.node.attrs["body"]) for ins in numpy_tier)  # left to numpy (what precedes it compiles)
    same_bits(exe.run([a, b])[0], np.tanh(a * np.float32(2.0) + b) * np.float32(3.0))
    fast = fc.compile(graph, fast_math=True)
    assert fast is not fc.compile(graph)  # the option is part of the compile cache's key
    got = fast.run([a, b])[0]
    assert not np.array_equal(got, exe.run([a, b])[0])
    same_bits(got, tanh_f32(a * np.float32(2.0) + b) * np.float32(3.0))


def test_float64_tanh_stays_numpys_under_fast_math(same_bits):
    graph = fc.trace(lambda a: ops.tanh(a * 2.0), "f64[50]")
    a = np.linspace(-5, 5, 50)
    exe = fc.compile(graph, cache=False, fast_math=True)
    _wait_native(exe, 2, [a])
    same_bits(exe.run([a])[0], np.tanh(a * 2.0))


def test_fast_math_gradient_reads_the_approximated_forward():
    def f(x, b, r):  # noqa: ANN001, ANN202
        t = ops.tanh(x + b)
        return [ops.sum(t * r), t]
    graph = fc.build_backward_graph(fc.trace(f, "f32[16, 8]", "f32[8]", "f32[16, 8]"), 0, [0])
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((16, 8)).astype(np.float32) * 3, rng.standard_normal(8).astype(np.float32),
            rng.standard_normal((16, 8)).astype(np.float32)]
    exe = fc.compile(graph, cache=False, fast_math=True)
    _wait_native(exe, 2, args)
    _, t, gx = exe.run(args)
    np.testing.assert_array_equal(t, tanh_f32(args[0] + args[1]))
    np.testing.assert_allclose(gx, args[2] * (1 - t * t), rtol=1e-6, atol=1e-7)


def _rnn(h0, xs, wx, wh, b):  # noqa: ANN001, ANN202
    _, hs = ops.scan(lambda h, x: (lambda n: (n, n))(ops.tanh(x @ wx + h @ wh + b)), h0, xs)
    return hs


def test_scan_bodies_compile_the_approximation(same_bits):
    types = ["f32[4, 16]", "f32[12, 4, 8]", "f32[8, 16]", "f32[16, 16]", "f32[16]"]
    rng = np.random.default_rng(3)
    args = [(rng.standard_normal(shape) / 3).astype(np.float32) for shape in ((4, 16), (12, 4, 8), (8, 16), (16, 16), (16,))]
    exe = fc.compile(fc.trace(_rnn, *types), cache=False, fast_math=True)
    first = exe.run(args)[0]  # the numpy tier
    assert frame_native.wait(60)
    assert jit.status()["compiled"] + jit.status()["from_cache"] >= 1, jit.status()
    same_bits(exe.run(args)[0], first)
    h0, xs, wx, wh, b = args
    entering = np.concatenate([h0[None], first[:-1]])  # one step at a time: no error carried along the recurrence
    z = np.stack([x @ wx + h @ wh + b for x, h in zip(xs, entering)])
    np.testing.assert_allclose(first, tanh_f32(z), rtol=1e-6, atol=1e-7)
    assert np.abs(first - tanh_f32(z)).max() < np.abs(first - np.tanh(z)).max()


def test_fast_math_must_be_a_bool():
    graph = fc.trace(lambda a: ops.tanh(a), "f32[3]")
    with pytest.raises(fc.CompileError, match="fast_math= is True or False"):
        fc.compile(graph, fast_math="yes")


def test_dynamic_shapes_keep_fast_math(same_bits):
    graph = fc.trace(lambda a, b: ops.tanh(a * b), "f32[4, 8]", "f32[]")
    exe = fc.compile(graph, dynamic_shapes=True, fast_math=True)
    x = np.linspace(-6, 6, 512 * 8, dtype=np.float32).reshape(512, 8)  # another batch: re-specialised
    two = np.float32(2.0)
    got = exe.run([x, two])[0]
    same_bits(got, tanh_f32(x * two))
    assert not np.array_equal(got, np.tanh(x * two))


def test_the_approximation_compiles_to_vector_code_without_calls_or_fma():
    from frame_native import codegen

    exe = fc.compile(fc.trace(lambda a: ops.tanh(a * 2.0), "f32[256]"), cache=False, fast_math=True)
    body = exe.instructions[0].node.attrs["body"]
    plan = codegen.plan_body(body, {"mul": "ops_basic", FAST_TANH_OP: "native"})
    llvm = jit._setup(jit._state)
    assert llvm is not None
    width = llvm.width_bytes // 4
    text = codegen.generate(plan, width)
    module = llvm.llvm.parse_assembly(text)
    builder = llvm.llvm.create_pass_builder(llvm.tm, llvm.llvm.create_pipeline_tuning_options(2))
    builder.getModulePassManager().run(module, builder)
    assembly = llvm.tm.emit_assembly(module).lower()
    assert "divps" in assembly  # the ratio, on vectors (no table, no branch per element)
    assert "fma" not in assembly and "call" not in assembly.split("kernel:")[0]  # numpy's tier's bits; no libm


def test_a_tanh_outside_fused_groups_is_approximated_too(same_bits):
    graph = fc.trace(lambda x, w, v: ops.tanh(x @ w) @ v, "f32[32, 16]", "f32[16, 24]", "f32[24, 4]")
    rng = np.random.default_rng(4)
    x, w, v = (rng.standard_normal(s).astype(np.float32) for s in ((32, 16), (16, 24), (24, 4)))
    default = fc.compile(graph, cache=False)
    assert "tanh" in [ins.op for ins in default.instructions]
    same_bits(default.run([x, w, v])[0], np.tanh(x @ w) @ v)
    fast = fc.compile(graph, cache=False, fast_math=True)
    assert [ins.op for ins in fast.instructions] == ["matmul", "native_fused_internal", "matmul"]
    first = fast.run([x, w, v])[0]
    same_bits(first, tanh_f32(x @ w) @ v)
    _wait_native(fast, 2, [x, w, v])
    assert frame_native.tier_of(fast) == ["native"]
    same_bits(fast.run([x, w, v])[0], first)
