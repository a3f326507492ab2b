"""frame-native: groups run numpy first, compiled code after the swap, and both give the same bits.

Kernels tier up at their first call here (conftest sets FRAME_NATIVE_AFTER=1) and every test has its own
kernel cache. ``frame_native.wait()`` blocks until the background compiler is idle.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import codegen, jit

NATIVE = "native_fused_internal"


def tiered_kernels(exe) -> list:
    return [ins.kernel for ins in exe.instructions if ins.op == NATIVE]


def chain(n: int, size: int, seed: int = 0):
    """x -> relu(x * c + d) repeated: n ops of add, mul and relu with full-size constants."""
    rng = np.random.default_rng(seed)
    cs = [rng.standard_normal(size).astype(np.float32) for _ in range(n)]

    def fn(x):
        for i in range(n):
            x = x * cs[i] if i % 3 == 0 else x + cs[i] if i % 3 == 1 else ops.relu(x)
        return x
    return fn


def run_both_tiers(exe, inputs):
    """Results of the first run (numpy tier) and of a run after the swap; asserts the swap happened."""
    first = [np.array(r, copy=True) for r in exe.run(inputs)]
    assert frame_native.wait(60)
    assert set(frame_native.tier_of(exe)) == {"native"}, (frame_native.tier_of(exe), jit.status())
    return first, exe.run(inputs)


def test_a_chain_is_bitwise_the_same_before_and_after_the_swap(same_bits):
    exe = fc.compile(fc.trace(chain(30, 67), "f32[67]"), cache=False)
    assert [i.op for i in exe.instructions] == [NATIVE]
    (kernel,) = tiered_kernels(exe)
    assert kernel.native.state == "numpy"
    x = np.random.default_rng(1).standard_normal(67).astype(np.float32)
    x[:4] = [0.0, -0.0, np.inf, -np.inf]  # (NaN signs: see the NaN test)
    before, after = run_both_tiers(exe, [x])
    same_bits(after[0], before[0])
    assert kernel.native.how == "compiled" and kernel.native.swapped_at >= kernel.native.queued_at
    same_bits(after[0], kernel.numpy(x))  # frame's numpy code for the same group, called directly


OPS = ["add", "sub", "mul", "div", "neg", "square", "sqrt", "relu", "relu_grad", "accumulate"]


def random_graph(rng: np.random.Generator, dtype: str):
    """A random DAG of the compiled ops over full, row-periodic and scalar operands (inputs and constants)."""
    shape = tuple(int(d) for d in rng.choice([1, 3, 8, 17], size=rng.integers(1, 3)))
    np_dtype = np.float32 if dtype == "f32" else np.float64
    full, row = f"{dtype}[{', '.join(map(str, shape))}]", f"{dtype}[{shape[-1]}]"
    n_ops = int(rng.integers(2, 14))
    picks = rng.choice(OPS, size=n_ops)
    consts = [rng.standard_normal(shape).astype(np_dtype), rng.standard_normal(shape[-1]).astype(np_dtype)]

    def fn(x, y, r, s):
        values = [x, y]
        extra = [r, s, fc.constant(consts[0]), fc.constant(consts[1]), 0.5, -2.0]
        for op in picks:
            a = values[int(rng.integers(len(values)))]
            b = values[int(rng.integers(len(values)))] if rng.random() < 0.6 else extra[int(rng.integers(len(extra)))]
            if op == "add":
                v = a + b
            elif op == "sub":
                v = a - b
            elif op == "mul":
                v = a * b
            elif op == "div":
                v = a / b
            elif op == "neg":
                v = -a
            elif op == "square":
                v = ops.square(a)
            elif op == "sqrt":
                v = ops.sqrt(a)
            elif op == "relu":
                v = ops.relu(a)
            elif op == "relu_grad":
                v = ops.relu_grad_internal(a, values[int(rng.integers(len(values)))])
            else:
                v = ops.accumulate_internal(a, values[int(rng.integers(len(values)))])
            values.append(v)
        outs = values[2:]
        return [outs[-1]] + ([outs[int(rng.integers(len(outs)))] * 1.5] if rng.random() < 0.4 else [])
    graph = fc.trace(fn, full, full, row, f"{dtype}[]")
    return graph, shape, np_dtype


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_many_random_graphs_give_numpys_bits_before_and_after_the_swap(dtype, same_bits):
    rng = np.random.default_rng(11 if dtype == "f32" else 12)
    compiled = 0
    for _ in range(20):
        graph, shape, np_dtype = random_graph(rng, dtype)
        exe = fc.compile(graph, cache=False)
        inputs = [rng.standard_normal(shape).astype(np_dtype) * 2, rng.standard_normal(shape).astype(np_dtype),
                  rng.standard_normal(shape[-1]).astype(np_dtype), np.asarray(rng.standard_normal(), np_dtype)]
        inputs[0].reshape(-1)[:3] = [0.0, -0.0, 1e-310 if np_dtype is np.float64 else 1e-40][: inputs[0].size]
        reference = fc.compile(graph, opt_level=0, cache=False).run(inputs)  # one kernel per node: numpy
        first = [np.array(r, copy=True) for r in exe.run(inputs)]
        if tiered_kernels(exe):
            assert frame_native.wait(60)
            compiled += frame_native.tier_of(exe).count("native")
        after = exe.run(inputs)
        for a, f, r in zip(after, first, reference):
            same_bits(f, r, nan_payloads=False)  # (sqrt of a negative makes NaNs that may meet)
            same_bits(a, r, nan_payloads=False)
    assert compiled >= 10  # most random graphs fuse into at least one compiled group


def test_signed_zeros_infinities_and_nans_propagate_as_in_numpy(same_bits):
    """Every number bit for bit; a NaN stays a NaN where numpy has one, though its sign may differ (IEEE 754
    leaves a computed NaN's sign open, and LLVM, like C compilers, folds -(x * 2) into x * -2)."""
    g = fc.trace(lambda x: [ops.relu(-x), -(x * 2.0), ops.sqrt(x) + x, ops.relu_grad_internal(x, x) * x,
                            ops.relu(x) / x], "f32[20]")
    exe = fc.compile(g, cache=False)
    assert len(tiered_kernels(exe)) == 5  # each output is a group of two
    x = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, -1.0, 1.0, 1e-45, -1e-45] * 2, np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        before, after = run_both_tiers(exe, [x])
    for a, b in zip(after, before):
        same_bits(a, b, nan_payloads=False)
        assert np.isnan(a).sum() > 0


@pytest.mark.parametrize("shapes, compiled", [
    (("f32[4, 8]", "f32[8]", "f32[]"), True),       # row broadcast and a scalar
    (("f32[4, 8]", "f32[1, 8]", "f32[1, 1]"), True),
    (("f32[4, 8]", "f32[4, 1]", "f32[]"), True),    # a column broadcast: one element per row
    (("f32[4, 8]", "f32[4, 1]", "f32[1, 8]"), True),  # ... with a row broadcast: an outer product
    (("f32[2, 4, 8]", "f32[2, 1, 1]", "f32[4, 8]"), True),
    (("f64[3, 5]", "f64[3, 1]", "f64[3, 5]"), True),
    (("f32[2, 4, 8]", "f32[2, 1, 8]", "f32[]"), False),  # broadcast across a middle axis: not compiled
    (("f32[2, 4, 8]", "f32[2, 4, 1]", "f32[4, 8]"), False),  # a column per 8, a period of 32
    (("f32[2, 4, 8]", "f32[4, 8]", "f32[8]"), False),  # two different periods
    (("f64[3, 5]", "f64[3, 5]", "f64[5]"), True),
])
def test_broadcast_operands_compile_when_they_repeat_along_leading_or_trailing_axes(shapes, compiled, same_bits):
    g = fc.trace(lambda a, b, c: ops.relu(a * b + c) - b, *shapes)
    exe = fc.compile(g, cache=False)
    assert bool(tiered_kernels(exe)) is compiled
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(fc.TensorType.parse(s).shape).astype(fc.TensorType.parse(s).dtype.np)
              for s in shapes]
    want = fc.compile(g, opt_level=0, cache=False).run(inputs)[0]
    first = exe.run(inputs)[0].copy()
    frame_native.wait(60)
    assert all(k.native.state == "native" for k in tiered_kernels(exe))
    same_bits(first, want)
    same_bits(exe.run(inputs)[0], want)


def test_transcendental_ops_and_integers_stay_on_numpy():
    for fn, t in [(lambda x: ops.tanh(x * 2.0) + x, "f32[8]"), (lambda x: ops.exp(x) * x, "f64[8]"),
                  (lambda x: (x + x) * x, "i32[8]")]:
        exe = fc.compile(fc.trace(fn, t), cache=False)
        assert not tiered_kernels(exe)
        assert "fused_elementwise_internal" in [i.op for i in exe.instructions]


def test_a_group_with_a_numpy_only_op_compiles_the_members_after_it(same_bits):
    """``tanh(x) + 1`` grouped with the products reading it (a derivative graph's ``1 - y^2`` times tangents):
    the group splits into a numpy part (the tanh and what it reads) and a compiled part, same bits."""
    def fn(x, dx):
        y = ops.tanh(x * 0.5)
        t = 1.0 - y * y
        return t * dx * dx + y * t
    g = fc.trace(fn, "f32[4, 8]", "f32[8]")
    exe = fc.compile(g, cache=False)
    ops_run = [i.op for i in exe.instructions]
    assert ops_run == ["fused_elementwise_internal", NATIVE], ops_run
    (numpy_part,) = [i for i in exe.instructions if i.op == "fused_elementwise_internal"]
    assert [n.op for n in numpy_part.node.attrs["body"].nodes if n.op != "constant"] == ["mul", "tanh"]
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)]
    want = fc.compile(g, opt_level=0, cache=False).run(inputs)[0]
    before, after = run_both_tiers(exe, inputs)
    same_bits(before[0], want)
    same_bits(after[0], want)


def test_the_broadcasts_before_a_numpy_only_op_compile_as_a_prefix(same_bits):
    """``tanh(x w + 0 + b)`` of a layer with one input feature (the ``[n, 1] @ [1, h]`` product is a broadcast
    multiply, plus 0.0): numpy runs the outer product and the bias add row by row, so they form a compiled group
    that runs first, the tanh stays on numpy and the members after it compile as before. Same bits, for values
    that test the rounding (subnormals, signed zeros, infinities, NaN)."""
    def fn(x, w, b, dx):
        y = ops.tanh(x * w + 0.0 + b)
        t = 1.0 - y * y
        return t * dx * w + y
    g = fc.trace(fn, "f32[16, 1]", "f32[1, 12]", "f32[12]", "f32[16, 12]")
    exe = fc.compile(g, cache=False)
    assert [i.op for i in exe.instructions] == [NATIVE, "fused_elementwise_internal", NATIVE]
    numpy_part = exe.instructions[1].node.attrs["body"]
    assert [n.op for n in numpy_part.nodes if n.op != "constant"] == ["tanh"]
    rng = np.random.default_rng(6)
    x = rng.standard_normal((16, 1)).astype(np.float32)
    x[:6, 0] = [0.0, -0.0, np.inf, np.nan, 1e-40, -3e38]
    w = rng.standard_normal((1, 12)).astype(np.float32)
    w[0, :3] = [-0.0, 1e-30, 2e5]
    inputs = [x, w, rng.standard_normal(12).astype(np.float32), rng.standard_normal((16, 12)).astype(np.float32)]
    with np.errstate(all="ignore"):
        want = fc.compile(g, opt_level=0, cache=False).run(inputs)[0]
        before, after = run_both_tiers(exe, inputs)
    assert all(k.native.state == "native" for k in tiered_kernels(exe))
    same_bits(before[0], want, nan_payloads=False)
    same_bits(after[0], want, nan_payloads=False)


def test_one_full_size_member_before_a_numpy_only_op_stays_on_numpy():
    """A prefix of one member over full arrays saves no pass over memory and would cost a kernel call."""
    exe = fc.compile(fc.trace(lambda x, y: ops.tanh(x + y) * y * y, "f32[4, 8]", "f32[4, 8]"), cache=False)
    assert [i.op for i in exe.instructions] == ["fused_elementwise_internal", NATIVE]


def test_a_strided_input_falls_back_to_numpy_for_that_call(same_bits):
    exe = fc.compile(fc.trace(chain(9, 16), "f32[16]"), cache=False)
    base = np.random.default_rng(4).standard_normal(32).astype(np.float32)
    contiguous = np.ascontiguousarray(base[::2])
    before, _ = run_both_tiers(exe, [contiguous])
    (kernel,) = tiered_kernels(exe)
    strided = exe.run([base[::2]])[0]  # a view with stride 2: the compiled kernel refuses it
    assert kernel.native.fallbacks == 1
    same_bits(strided, before[0])
    same_bits(exe.run([contiguous])[0], before[0])
    assert kernel.native.fallbacks == 1


def test_a_group_with_several_outputs_writes_into_the_buffers_it_is_given(same_bits):
    """The accepts_out contract, for several exports: ``out`` is a tuple of planned buffers (None for one that
    is not planned); the compiled tier writes into each one given and returns it, as the numpy tier does."""
    exe = fc.compile(fc.trace(lambda x, y: (x * y + 1.0, ops.relu(x * y + 1.0) * 3.0), "f64[6]", "f64[6]"),
                     cache=False)
    x, y = np.linspace(-2, 2, 6), np.linspace(1, 3, 6)
    before, after = run_both_tiers(exe, [x, y])
    for got, want in zip(after, before):
        same_bits(got, want)
    (kernel,) = tiered_kernels(exe)
    planned = np.empty(6)
    first, second = kernel(x, y, out=(planned, None))
    assert first is planned and second is not planned and kernel.native.fallbacks == 0
    same_bits(first, before[0])
    same_bits(second, before[1])
    frozen = np.zeros(6)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # numpy's refusal: the compiled tier does not write it
        kernel(x, y, out=(frozen, None))
    assert kernel.native.fallbacks == 1 and not frozen.any()


def test_an_unaligned_input_falls_back_to_numpy_for_that_call(same_bits):
    """The compiled loads are declared aligned to the element (LLVM may rely on it: undefined behaviour
    otherwise); a C-contiguous view at an odd byte offset is refused like a strided one."""
    for np_dtype, t in ((np.float32, "f32[3, 5]"), (np.float64, "f64[3, 5]")):
        exe = fc.compile(fc.trace(lambda x, y: ops.relu(x * y + 1.0) / y - x, t, t), cache=False)
        x, y = (np.random.default_rng(k).standard_normal((3, 5)).astype(np_dtype) for k in (5, 6))
        before, _ = run_both_tiers(exe, [x, y])
        (kernel,) = tiered_kernels(exe)
        raw = np.zeros(x.nbytes + 1, np.uint8)
        unaligned = np.frombuffer(raw.data, np_dtype, x.size, offset=1).reshape(x.shape)
        unaligned[...] = x
        assert unaligned.flags.c_contiguous and not unaligned.flags.aligned
        same_bits(exe.run([unaligned, y])[0], before[0])
        assert kernel.native.fallbacks == 1


def test_arguments_that_are_not_ndarrays_fall_back_to_numpy_instead_of_crashing(same_bits):
    # A rank-0 body inside a loop hands its kernels numpy scalars (a 0-d ufunc result, a row of a 1-d
    # trajectory). The compiled code reads numpy's C struct of each argument, so anything that is not
    # exactly an ndarray must go to numpy: reading a float64 scalar as an array crashed the process.
    exe = fc.compile(fc.trace(lambda x: ops.relu(ops.relu(x * 3.0 + 1.0) * x - 0.5), "f64[]"), cache=False)
    x = np.asarray(0.75)
    before, _ = run_both_tiers(exe, [x])
    (kernel,) = tiered_kernels(exe)
    for value in (np.float64(0.75), 0.75):
        got = kernel(value)
        assert kernel.native.fallbacks >= 1
        same_bits(np.asarray(got), np.asarray(before[0]))
    out = np.empty(())
    assert kernel(x, out) is out and kernel.native.fallbacks == 2
    same_bits(out, np.asarray(before[0]))


def test_groups_larger_than_a_chunk_are_split_into_several_functions(monkeypatch, same_bits):
    monkeypatch.setattr(codegen, "CHUNK", 7)
    g = fc.trace(lambda x, y: [chain(40, 24, seed=5)(x) + y, ops.relu(x * y)], "f32[24]", "f32[24]")
    exe = fc.compile(g, cache=False)
    plan = codegen.plan_body(exe.instructions[0].node.attrs["body"], {op: fc.registry().schemas[op].pack
                                                                      for op in ("add", "mul", "relu")})
    assert len(plan.chunks) > 5 and plan.scratch
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    before, after = run_both_tiers(exe, [x, y])
    for a, b in zip(after, before):
        same_bits(a, b)


def sum_of_inputs(n: int):
    def fn(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = acc * 0.5 + x
        return acc
    return fn


def test_a_group_reading_hundreds_of_inputs_compiles_in_time_linear_in_its_size(same_bits):
    """The argument checks (several per array) are compiled unoptimised: LLVM's ConstraintElimination pass is
    quadratic in the conditions of one function (7.5 s for 400 inputs, over a minute for 950)."""
    n = 300
    exe = fc.compile(fc.trace(sum_of_inputs(n), *["f32[5]"] * n), cache=False)
    (kernel,) = tiered_kernels(exe)
    xs = [np.full(5, k / 7, np.float32) for k in range(n)]
    before, after = run_both_tiers(exe, xs)
    same_bits(after[0], before[0])
    reg = fc.registry()
    body = exe.instructions[0].node.attrs["body"]
    plan = codegen.plan_body(body, {m.op: reg.schemas[m.op].pack for m in body.nodes if m.op in reg.schemas})
    ir = codegen.generate(plan, 8)
    entry = next(line for line in ir.splitlines() if line.startswith("define i32 @kernel("))
    attributes = next(line for line in ir.splitlines() if line.startswith(f"attributes {entry.split()[-2]} = "))
    assert "optnone" in attributes


def test_a_group_with_more_arrays_than_a_call_can_pass_stays_on_numpy(monkeypatch):
    monkeypatch.setattr(codegen, "MAX_ARRAYS", 10)  # (1,000 in truth: ctypes passes at most 1,024 arguments)
    exe = fc.compile(fc.trace(sum_of_inputs(12), *["f32[5]"] * 12), cache=False)
    assert [i.op for i in exe.instructions] == ["fused_elementwise_internal"]
    assert any("'14 arrays to pass'" in message for _, message in exe.log), exe.log


def test_compiled_code_has_no_fused_multiply_add():
    g = fc.trace(lambda a, b, c: a * b + c - a * c, "f64[64]", "f64[64]", "f64[64]")
    exe = fc.compile(g, cache=False)
    plan = codegen.plan_body(exe.instructions[0].node.attrs["body"], {"add": "ops_basic", "sub": "ops_basic",
                                                                      "mul": "ops_basic"})
    llvm = jit._setup(jit._state)
    assert llvm is not None
    text = codegen.generate(plan, llvm.width_bytes // 8)
    module = llvm.llvm.parse_assembly(text)
    builder = llvm.llvm.create_pass_builder(llvm.tm, llvm.llvm.create_pipeline_tuning_options(2))
    builder.getModulePassManager().run(module, builder)
    assembly = llvm.tm.emit_assembly(module)
    assert "vmulpd" in assembly or "mulpd" in assembly
    assert "fma" not in assembly.lower()


@pytest.mark.parametrize("value", ["0", "false", " OFF ", "no"])
def test_frame_native_0_turns_it_off(monkeypatch, value):
    monkeypatch.setenv("FRAME_NATIVE", value)
    exe = fc.compile(fc.trace(chain(6, 8), "f32[8]"), cache=False)
    assert [i.op for i in exe.instructions] == ["fused_elementwise_internal"]
    assert any("FRAME_NATIVE=0" in message for _, message in exe.log)


def test_frame_native_is_read_at_every_compile_even_when_the_graph_is_in_the_compile_cache(monkeypatch):
    fc.compile_cache.clear()
    graph = fc.trace(chain(6, 8, seed=7), "f32[8]")
    ops_of = lambda exe: [i.op for i in exe.instructions]  # noqa: E731
    assert ops_of(fc.compile(graph)) == [NATIVE]
    monkeypatch.setenv("FRAME_NATIVE", "0")
    assert ops_of(fc.compile(graph)) == ["fused_elementwise_internal"]
    monkeypatch.setenv("FRAME_NATIVE", "on")
    on = fc.compile(graph)
    assert ops_of(on) == [NATIVE] and fc.compile(graph) is on  # and the cache still serves


def test_without_llvmlite_groups_stay_on_numpy_with_one_note(monkeypatch, caplog, same_bits):
    from frame_native import passes

    monkeypatch.setattr(passes, "_LLVMLITE", [False])  # as if find_spec("llvmlite") found nothing
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        for _ in range(2):
            exe = fc.compile(fc.trace(chain(6, 8), "f32[8]"), cache=False)
            assert [i.op for i in exe.instructions] == ["fused_elementwise_internal"]
    notes = [r.getMessage() for r in caplog.records if "llvmlite is not installed" in r.getMessage()]
    assert len(notes) == 1 and "\n" not in notes[0]


def test_when_llvmlite_fails_to_import_in_the_compiler_the_kernel_stays_on_numpy(monkeypatch, caplog, same_bits):
    monkeypatch.setattr(jit, "_llvm", [])
    monkeypatch.setitem(sys.modules, "llvmlite", None)  # import llvmlite -> ImportError
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    exe = fc.compile(fc.trace(chain(6, 8), "f32[8]"), cache=False)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        first = exe.run([x])[0].copy()
        assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["off"]
    assert any("llvmlite is not available" in r.getMessage() for r in caplog.records)
    same_bits(exe.run([x])[0], first)


def test_when_llvm_fails_the_kernel_stays_on_numpy(monkeypatch, caplog, same_bits):
    def broken(self, ir):
        raise RuntimeError("simulated LLVM error")
    monkeypatch.setattr(jit._LLVM, "compile", broken)
    exe = fc.compile(fc.trace(chain(7, 8, seed=9), "f32[8]"), cache=False)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        first = exe.run([x])[0].copy()
        assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["failed"]
    assert any("simulated LLVM error" in r.getMessage() for r in caplog.records)
    same_bits(exe.run([x])[0], first)


def test_a_kernel_that_fails_to_install_leaves_the_compiler_running(monkeypatch, caplog, same_bits):
    """An error while installing one compiled kernel must not kill the compiler thread: the groups queued after
    it would stay 'queued' forever while wait() reported the queue done."""
    from frame_native import tiered

    real, calls = tiered._wrapper, []

    def first_one_fails(*args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("simulated install error")
        return real(*args)
    monkeypatch.setattr(tiered, "_wrapper", first_one_fails)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    broken, fine = (fc.compile(fc.trace(chain(5, 8, seed=s), "f32[8]"), cache=False) for s in (30, 31))
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        first = broken.run([x])[0].copy()
        assert frame_native.wait(60)
        before, after = run_both_tiers(fine, [x])
    assert frame_native.tier_of(broken) == ["failed"]
    assert any("simulated install error" in r.getMessage() for r in caplog.records)
    same_bits(broken.run([x])[0], first)
    same_bits(after[0], before[0])


def test_an_llvm_error_quoting_the_ir_is_still_a_one_line_note(monkeypatch, caplog, same_bits):
    """LLVM's parse and verify errors span lines (the IR line, a caret line); the note stays one short line."""
    def broken(self, ir):
        raise RuntimeError("LLVM IR parsing error\n<string>:3:3: error: expected ','\n  ret void\n  ^\n" + "x" * 5000)
    monkeypatch.setattr(jit._LLVM, "compile", broken)
    exe = fc.compile(fc.trace(chain(7, 8, seed=10), "f32[8]"), cache=False)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        first = exe.run([x])[0].copy()
        assert frame_native.wait(60)
    (message,) = [r.getMessage() for r in caplog.records if "parsing error" in r.getMessage()]
    assert "\n" not in message and "expected ','" in message and len(message) < 400
    assert frame_native.tier_of(exe) == ["failed"]
    same_bits(exe.run([x])[0], first)


def test_a_read_only_cache_directory_keeps_groups_on_numpy(tmp_path, monkeypatch, caplog, same_bits):
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o500)
    monkeypatch.setenv("FRAME_NATIVE_CACHE", str(folder))
    if os.access(folder, os.W_OK):  # root writes anywhere: make this directory read-only for the check
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(folder) else real(p, mode, **kw))
    exe = fc.compile(fc.trace(chain(6, 8), "f32[8]"), cache=False)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        first = exe.run([x])[0].copy()
        frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["off"]
    assert any("read-only" in r.getMessage() for r in caplog.records)
    same_bits(exe.run([x])[0], first)


@pytest.mark.parametrize("problem", ["missing parent", "writable by others"])
def test_an_unusable_cache_directory_keeps_groups_on_numpy(problem, tmp_path, monkeypatch, caplog):
    if problem == "missing parent":
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory")
        folder = blocker / "kernels"
    else:
        folder = tmp_path / "shared"
        folder.mkdir()
        folder.chmod(0o777)
    monkeypatch.setenv("FRAME_NATIVE_CACHE", str(folder))
    exe = fc.compile(fc.trace(chain(6, 8), "f32[8]"), cache=False)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        exe.run([np.ones(8, np.float32)])
        frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["off"]
    assert caplog.records and "FRAME_NATIVE_CACHE" in caplog.records[-1].getMessage() or \
        "chmod" in caplog.records[-1].getMessage()


def test_a_cache_directory_set_after_the_first_compile_is_checked_too(tmp_path, monkeypatch, caplog):
    """FRAME_NATIVE_CACHE is read at every compile; a directory others can write to is refused whenever it is
    named, not only when it is the first one (object code loaded from it runs in this process)."""
    first = fc.compile(fc.trace(chain(6, 8, seed=20), "f32[8]"), cache=False)
    run_both_tiers(first, [np.ones(8, np.float32)])
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("FRAME_NATIVE_CACHE", str(shared))
    second = fc.compile(fc.trace(chain(6, 8, seed=21), "f32[8]"), cache=False)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        second.run([np.ones(8, np.float32)])
        frame_native.wait(60)
    assert frame_native.tier_of(second) == ["off"] and not list(shared.iterdir())
    assert any("writable by others" in r.getMessage() for r in caplog.records)


def test_a_cache_path_naming_a_file_says_so(tmp_path, monkeypatch, caplog):
    target = tmp_path / "kernels.o"
    target.write_bytes(b"not a directory")
    monkeypatch.setenv("FRAME_NATIVE_CACHE", str(target))
    exe = fc.compile(fc.trace(chain(6, 8, seed=40), "f32[8]"), cache=False)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        exe.run([np.ones(8, np.float32)])
        frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["off"] and target.read_bytes() == b"not a directory"
    (message,) = [r.getMessage() for r in caplog.records if "kernel cache" in r.getMessage()]
    assert "is a file, not a directory" in message and "point FRAME_NATIVE_CACHE at a directory" in message


def run_python(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


PROGRAM = """
    import sys, numpy as np, frame_core as fc, frame_native
    from frame_core import ops
    cs = [np.float32(1.0 + i / 64) for i in range(60)]
    def fn(x):
        for i, c in enumerate(cs):
            x = ops.relu(x * c - 0.25) if i % 2 else x + c
        return x
    exe = fc.compile(fc.trace(fn, "f32[256]"))
    x = np.linspace(-2, 2, 256, dtype=np.float32)
    first = exe.run([x])[0].copy()
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["native"], frame_native.status()
    assert exe.run([x])[0].tobytes() == first.tobytes()
    print(frame_native.status()["compiled"], frame_native.status()["from_cache"])
"""


def test_the_disk_cache_serves_a_second_process_and_survives_a_corrupt_file(tmp_path):
    env = {"FRAME_NATIVE_CACHE": str(tmp_path / "k"), "FRAME_NATIVE_AFTER": "1"}
    first = run_python(PROGRAM, env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "0"]
    second = run_python(PROGRAM, env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["0", "1"]
    (cached,) = list((tmp_path / "k").glob("*.o"))
    data = bytearray(cached.read_bytes())
    data[-10] ^= 0xFF  # a flipped bit: the checksum no longer matches, the kernel is compiled afresh
    cached.write_bytes(bytes(data))
    third = run_python(PROGRAM, env)
    assert third.returncode == 0, third.stderr
    assert third.stdout.split() == ["1", "0"]


def test_a_process_exits_promptly_while_a_large_group_compiles(tmp_path):
    code = """
        import time, numpy as np, frame_core as fc
        from frame_core import ops
        rng = np.random.default_rng(0)
        cs = [rng.standard_normal(64).astype(np.float32) for _ in range(3000)]
        def fn(x):
            for i, c in enumerate(cs):
                x = ops.relu(x * c) if i % 2 else x + c
            return x
        exe = fc.compile(fc.trace(fn, "f32[64]"))
        exe.run([np.ones(64, np.float32)])   # queues a 3000-op compile, then exits at once
        print("done", flush=True)
    """
    done = run_python(code, {"FRAME_NATIVE_CACHE": str(tmp_path / "k"), "FRAME_NATIVE_AFTER": "1"}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    # stopping at exit is no failure to report, and llvmlite's objects are not freed against torn-down modules
    assert done.stderr.strip() == ""


def test_a_process_that_exits_while_the_compiler_sets_llvm_up_exits_quietly(tmp_path):
    """llvmlite imported after the exit hooks began never registers its own at-exit hook; its objects were
    then freed against torn-down modules ("Exception ignored in ObjectRef.__del__")."""
    code = """
        import time, numpy as np, frame_core as fc
        from frame_core import ops
        from frame_native import jit
        original = jit._LLVM.__init__
        def late(self):  # sets LLVM up only once the process has begun to exit
            while not jit._state.stopping:
                time.sleep(0.005)
            original(self)
        jit._LLVM.__init__ = late
        exe = fc.compile(fc.trace(lambda x: ops.relu(x * 2.0) + 1.0, "f32[8]"))
        exe.run([np.ones(8, np.float32)])
        print("done", flush=True)
    """
    for attempt in range(2):  # (whether the modules are torn down in the failing order varies between runs)
        done = run_python(code, {"FRAME_NATIVE_CACHE": str(tmp_path / "k"), "FRAME_NATIVE_AFTER": "1"}, timeout=30)
        assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
        assert done.stderr.strip() == ""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_compiles_and_keeps_the_parents_native_kernels(same_bits):
    native = fc.compile(fc.trace(chain(9, 32, seed=1), "f32[32]"), cache=False)
    x = np.linspace(-3, 3, 32, dtype=np.float32)
    before, _ = run_both_tiers(native, [x])
    pending = fc.compile(fc.trace(chain(12, 32, seed=2), "f32[32]"), cache=False)
    queued = fc.compile(fc.trace(chain(9, 32, seed=3), "f32[32]"), cache=False)
    import threading

    forked, real_compile = threading.Event(), jit._compile
    jit._compile = lambda *a: forked.wait(30) and real_compile(*a)  # still queued at the fork
    try:
        queued.run([x])
        pid = os.fork()
    finally:
        jit._compile = real_compile
        forked.set()
    if pid == 0:  # child: the parent's native kernel still runs; a new group stays on numpy
        code = 1
        try:
            ok = native.run([x])[0].tobytes() == before[0].tobytes()
            want = pending.run([x])[0].copy()
            ok = ok and frame_native.tier_of(pending) == ["off"] and not jit.status()["active"]
            ok = ok and pending.run([x])[0].tobytes() == want.tobytes()
            ok = ok and frame_native.tier_of(queued) == ["off"]  # not 'queued' for ever: never compiled here
            code = 0 if ok else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    first = pending.run([x])[0].copy()  # the parent still compiles
    assert frame_native.wait(60) and frame_native.tier_of(pending) == ["native"]
    same_bits(pending.run([x])[0], first)


def test_the_number_of_kernels_is_bounded(monkeypatch, caplog):
    """The bound is on distinct machine code: executables holding the same group (compiled again, or the
    same layer in another graph) share one kernel and do not use the bound up."""
    monkeypatch.setattr(jit, "MAX_KERNELS", 1)
    first = fc.compile(fc.trace(chain(5, 8, seed=1), "f32[8]"), cache=False)
    again = [fc.compile(fc.trace(chain(5, 8, seed=1), "f32[8]"), cache=False) for _ in range(3)]
    second = fc.compile(fc.trace(chain(5, 8, seed=2), "f32[8]"), cache=False)
    x = np.ones(8, np.float32)
    with caplog.at_level(logging.WARNING, logger="frame_native"):
        for exe in [first, *again, second]:
            exe.run([x])
        frame_native.wait(60)
    assert [frame_native.tier_of(exe) for exe in [first, *again]] == [["native"]] * 4
    assert frame_native.tier_of(second) == ["off"]
    assert any("most one process compiles" in r.getMessage() for r in caplog.records)


def test_a_group_runs_on_numpy_until_it_has_been_called_enough(monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE_AFTER", "3")
    exe = fc.compile(fc.trace(chain(5, 8, seed=3), "f32[8]"), cache=False)
    x = np.ones(8, np.float32)
    for _ in range(2):
        exe.run([x])
    assert frame_native.tier_of(exe) == ["numpy"] and jit.status()["kernels"] == 0
    exe.run([x])
    assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native"]


def test_the_compiled_kernel_refuses_anything_but_ndarrays_of_its_dtype_and_shape(same_bits):
    """A numpy scalar (what a ufunc returns for 0-d inputs), an ndarray subclass, another dtype or another
    shape never reaches the compiled code: that call runs frame's numpy code, whatever it makes of it."""
    exe = fc.compile(fc.trace(lambda x, y: ops.relu(x * y + 1.0) - y, "f32[]", "f32[]"), cache=False)
    x, y = np.asarray(np.float32(-0.5)), np.asarray(np.float32(3.0))
    before, _ = run_both_tiers(exe, [x, y])
    (kernel,) = tiered_kernels(exe)

    class Sub(np.ndarray):
        pass
    calls = [(np.float32(-0.5), np.float32(3.0)), (x.view(Sub), y), (x.astype(np.float64), y)]
    for k, args in enumerate(calls, 1):
        with np.errstate(all="ignore"):
            same_bits(np.asarray(kernel(*args), np.float32), np.asarray(kernel.numpy(*args), np.float32))
        assert kernel.native.fallbacks == k
    wide = fc.compile(fc.trace(chain(6, 8), "f32[8]"), cache=False)
    run_both_tiers(wide, [np.ones(8, np.float32)])
    (wide_kernel,) = tiered_kernels(wide)
    with pytest.raises(ValueError):  # numpy's own complaint about the shapes, not a crash or a wrong answer
        wide_kernel(np.ones(16, np.float32))
    assert wide_kernel.native.fallbacks == 1
    same_bits(exe.run([x, y])[0], before[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_the_compiler_holds_its_locks_does_not_hang():
    """The compiler thread takes the state's lock (``note``) and the queue's (``get``, ``task_done``); a fork at
    that moment copies them held, with no thread left in the child to let go."""
    import signal
    import threading

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with jit._state.lock, jit._state.queue.mutex:
            held.set()
            release.wait(30)
    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(10)  # a hang ends the child with SIGALRM
                exe = fc.compile(fc.trace(chain(4, 8), "f32[8]"), cache=False)  # notes why it stays off
                ok = [i.op for i in exe.instructions] == ["fused_elementwise_internal"]
                ok = ok and jit.status()["active"] is False and frame_native.wait(1)
                code = 0 if ok else 1
            finally:
                os._exit(code)
    finally:
        release.set()
        holder.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_compile_that_finishes_before_submit_returns_leaves_the_group_native(monkeypatch):
    """The compiler thread may install a kernel (one loaded already, or from the disk cache) before the calling
    thread gets the GIL back: the group was then marked queued over its native state, for good."""
    real_submit = jit.submit

    def submit_then_finish(make_plan, install):  # noqa: ANN001, ANN202
        queued = real_submit(make_plan, install)
        assert jit.wait(60)
        return queued
    monkeypatch.setattr(jit, "submit", submit_then_finish)
    exe = fc.compile(fc.trace(chain(6, 8, seed=77), "f32[8]"), cache=False)
    exe.run([np.ones(8, np.float32)])
    assert frame_native.tier_of(exe) == ["native"]
