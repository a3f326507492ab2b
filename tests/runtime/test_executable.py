"""``Executable``: input validation, kernel errors, the interpreter for long programs, the profiler, threads."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import frame_core as fc
import frame_core.runtime.executable as executable
from frame_core import DataError, InputError, KernelError, ops
from frame_core.frontend.trace import apply


def two_input_graph() -> fc.Graph:
    return fc.trace(lambda x, w: ops.sum(ops.tanh(x * w), axes=[0]), "f32[2, 3]", "f32[3]")


X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
W = np.array([1.0, -1.0, 0.5], np.float32)


def mlp_training_graph() -> fc.Graph:
    def mlp(x, t, w1, b1, w2, b2):
        return ops.mse_loss(ops.relu(x @ w1 + b1) @ w2 + b2, t)
    forward = fc.trace(mlp, "f32[8, 4]", "f32[8, 2]", "f32[4, 6]", "f32[6]", "f32[6, 2]", "f32[2]")
    return fc.build_backward_graph(forward, 0, [2, 3, 4, 5])


def mlp_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in [(8, 4), (8, 2), (4, 6), (6,), (6, 2), (2,)]]


# -- input validation ----------------------------------------------------------------------------
def test_a_wrong_input_count_lists_the_expected_types():
    exe = fc.compile(two_input_graph(), cache=False)
    with pytest.raises(InputError, match=r"run\(\) expected 2 inputs \(f32\[2, 3\], f32\[3\]\), got 1"):
        exe.run([X])
    with pytest.raises(InputError, match="got 3"):
        exe.run([X, W, W])
    with pytest.raises(InputError, match=r"run\(\) takes a list of 2 arrays \(one per graph input\), got float32\[3, 3\]"):
        exe.run(np.ones((3, 3), np.float32))


@pytest.mark.parametrize("bad, message", [
    (W.astype(np.float64), r"input 1 \('w'\) must have dtype float32 \(f32\[3\]\), got float64\[3\]; convert it with "
                           r"array.astype\(np.float32\)"),
    (np.ones(4, np.float32), r"input 1 \('w'\) must have shape \[3\] \(f32\[3\]\), got float32\[4\]"),
    (np.ones((1, 3), np.float32), r"input 1 \('w'\) must have shape \[3\] \(f32\[3\]\), got float32\[1, 3\]"),
    ([1.0, 2.0, 3.0], r"input 1 \('w'\) must be a numpy array of type f32\[3\], got list"),
    (2.0, r"input 1 \('w'\) must be a numpy array of type f32\[3\], got float"),
])
def test_a_wrong_input_is_named_with_expected_and_actual_type(bad, message):
    exe = fc.compile(two_input_graph(), cache=False)
    with pytest.raises(InputError, match=message):
        exe.run([X, bad])


def test_an_unnamed_input_is_named_by_position():
    graph = fc.Graph("unnamed")
    graph.mark_output(graph.apply("neg", graph.add_input("f32[3]")))
    with pytest.raises(InputError, match=r"^input 0 must have shape \[3\]"):
        fc.compile(graph, cache=False).run([np.ones(2, np.float32)])


@pytest.mark.parametrize("type_, value, want", [
    ("f32[]", 2.5, np.float32(2.5)), ("f32[]", 3, np.float32(3.0)), ("f64[]", 0.1, 0.1),
    ("f32[]", np.float32(1.5), np.float32(1.5)), ("f64[]", np.float64(-2.0), -2.0), ("i64[]", 7, 7),
    ("i32[]", np.int32(4), 4),
])
def test_python_and_numpy_scalars_are_accepted_for_rank_0_inputs(type_, value, want):
    exe = fc.compile(fc.trace(lambda s: s + s, type_), cache=False)
    (y,) = exe.run([value])
    assert isinstance(y, np.ndarray) and y.shape == () and str(y.dtype) == fc.TensorType.parse(type_).dtype.np.name
    assert y == 2 * want


@pytest.mark.parametrize("type_, value", [("f32[]", True), ("i64[]", 1.5), ("f32[]", "1.0"), ("f32[]", None)])
def test_scalars_of_the_wrong_kind_are_refused(type_, value):
    exe = fc.compile(fc.trace(lambda s: s + s, type_), cache=False)
    with pytest.raises(InputError, match=r"input 0 \('s'\) must be a numpy array of type"):
        exe.run([value])


@pytest.mark.parametrize("type_, value, message", [
    ("i32[]", 2**40, r"is the number 1099511627776, which does not fit in int32 \(valid -2147483648\.\.2147483647\)"),
    ("i32[]", np.int64(2**31), r"is the number 2147483648, which does not fit in int32"),  # numpy wraps it around
    ("i64[]", 2**63, r"is the number 9223372036854775808, which does not fit in int64"),
    ("f32[]", 1e300, r"is the number 1e\+300, which is beyond the range of float32"),  # numpy rounds it to inf
    ("f16[]", 70000, r"is the number 70000, which is beyond the range of float16 \(largest finite value 65504\)"),
    ("f64[]", 10**400, r"is the number 100000000000\.\.\. \(401 digits\), which is beyond the range of float64"),
])
def test_a_number_its_rank_0_input_cannot_hold_is_refused(type_, value, message):
    exe = fc.compile(fc.trace(lambda s: ops.reshape(s, shape=[1]), type_), cache=False)
    with pytest.raises(InputError, match=r"^input 0 \('s'\) " + message):
        exe.run([value])


def test_a_python_number_is_accepted_for_a_bfloat16_scalar_input():
    # bfloat16's numpy kind is "V", not "f": the kind check must ask frame's dtype, not numpy
    exe = fc.compile(fc.trace(lambda s: s + s, "bf16[]"), cache=False)
    assert [float(exe.run([v])[0]) for v in (2.5, 3, np.float32(1.5))] == [5.0, 6.0, 3.0]


def test_rank_0_results_are_arrays():
    graph = fc.trace(lambda a, b: [apply("accumulate_internal", a, b), a + b, ops.sum(a * b)], "f32[]", "f32[]")
    for level in (0, 2):
        for out in fc.compile(graph, opt_level=level, cache=False).run([np.float32(1), np.float32(2)]):
            assert isinstance(out, np.ndarray) and out.shape == ()


def test_call_is_run_with_positional_inputs():
    exe = fc.compile(two_input_graph(), cache=False)
    np.testing.assert_array_equal(exe(X, W)[0], exe.run([X, W])[0])


# -- kernel errors -------------------------------------------------------------------------------
def test_a_kernel_that_raises_becomes_a_kernel_error_naming_the_node():
    graph = fc.trace(lambda x: ops.exp(apply("explode", x * 2.0)), "f32[3]")
    exe = fc.compile(graph, cache=False)
    np.testing.assert_allclose(exe.run([np.ones(3, np.float32)])[0], np.exp(2.0), rtol=1e-6)
    with pytest.raises(KernelError, match=r"the cpu kernel of node \d+ \(%\d+ = explode\(%\d+\)\) failed: "
                                          r"ValueError: negative input") as err:
        exe.run([-np.ones(3, np.float32)])
    assert isinstance(err.value.__cause__, ValueError)


def test_a_data_error_from_a_kernel_stays_a_data_error_naming_the_node():
    exe = fc.compile(fc.trace(lambda x: ops.exp(apply("explode", x * 2.0)), "f32[3]"), cache=False)
    with pytest.raises(DataError, match=r"^node \d+ \(%\d+ = explode\(%\d+\)\): x holds 20000000.0, above the limit 1e6$") as err:
        exe.run([np.full(3, 1e7, np.float32)])
    assert not isinstance(err.value, KernelError) and isinstance(err.value, ValueError)


def test_a_failure_inside_a_nested_executable_names_the_outer_node():
    body = fc.trace(lambda x: apply("explode", ops.sin(ops.cos(x))), "f32[3]")
    exe = fc.compile(fc.trace(lambda x: ops.exp(apply("call", x * 1.5, body=body)), "f32[3]"), opt_level=0, cache=False)
    with pytest.raises(KernelError) as err:
        exe.run([np.full(3, 2.0, np.float32)])
    outer, inner = str(err.value).split(" failed: ", 1)
    assert outer == f"the cpu kernel of node 2 ({exe.instructions[1].text})" and "= call(" in outer
    assert inner.startswith("KernelError: the cpu kernel of node 2 (%2 = explode(%1)) failed: ValueError")


# -- the interpreter for long programs -------------------------------------------------------------
@pytest.fixture
def interpreted(monkeypatch):
    """Compile as if every program were longer than CODEGEN_LIMIT."""
    monkeypatch.setattr(executable, "CODEGEN_LIMIT", 0)


@pytest.mark.parametrize("level", [0, 2])
def test_the_interpreter_gives_exactly_the_results_of_generated_code(level, monkeypatch):
    graph = mlp_training_graph()
    generated = fc.compile(graph, opt_level=level, cache=False)
    assert generated.source is not None and generated.source.startswith("def run(inputs):")
    monkeypatch.setattr(executable, "CODEGEN_LIMIT", 0)
    looped = fc.compile(graph, opt_level=level, cache=False)
    assert looped.source is None
    for seed in range(3):  # several runs: the planned buffers are reused
        inputs = mlp_inputs(seed)
        for a, b in zip(looped.run(inputs), generated.run(inputs)):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def test_the_interpreter_copies_aliased_outputs_and_returns_arrays(interpreted):
    graph = fc.trace(lambda x: [x, x, ops.reshape(x, shape=[6]), ops.sum(x), fc.constant(np.ones(2, np.float32))],
                     "f32[2, 3]")
    exe = fc.compile(graph, cache=False)
    outs = exe.run([X])
    for i, out in enumerate(outs):
        assert isinstance(out, np.ndarray) and not np.shares_memory(out, X)
        for previous in outs[:i]:
            assert not np.shares_memory(out, previous)
        out[...] = 5
    np.testing.assert_array_equal(exe.run([X])[4], np.ones(2, np.float32))


def test_the_interpreter_validates_inputs_and_names_failing_nodes(interpreted):
    exe = fc.compile(fc.trace(lambda x: ops.exp(apply("explode", x)), "f32[3]"), cache=False)
    with pytest.raises(InputError, match=r"input 0 \('x'\) must have shape \[3\]"):
        exe.run([np.ones(4, np.float32)])
    with pytest.raises(InputError, match="expected 1 inputs"):
        exe.run([])
    with pytest.raises(KernelError, match=r"node 0 \(%\d+ = explode\(%x\)\) failed: ValueError: negative input"):
        exe.run([-np.ones(3, np.float32)])
    (y,) = fc.compile(fc.trace(lambda s: s * 2.0, "f32[]"), cache=False).run([1.5])
    assert y == np.float32(3.0)


# -- the profiler --------------------------------------------------------------------------------
def test_profile_times_every_instruction_and_top_lists_the_slowest():
    graph = mlp_training_graph()
    exe = fc.compile(graph, cache=False)
    inputs = mlp_inputs()
    report = exe.profile(inputs, repeat=3)
    assert report.repeat == 3
    assert [ins for ins, _ in report.rows] == exe.instructions
    assert all(t >= 0.0 for _, t in report.rows)
    assert report.total == pytest.approx(sum(t for _, t in report.rows))
    assert sum(report.by_op().values()) == pytest.approx(report.total)
    assert set(report.by_op()) == {ins.op for ins in exe.instructions}

    text = report.top(4)
    header, *lines = text.splitlines()
    assert "median of 3 runs" in header and "time (us)" in header
    assert len(lines) == 4
    times = [float(line.split()[0]) for line in lines]
    assert times == sorted(times, reverse=True)
    assert all(f"#{ins.index} {ins.text}" in text for ins, _ in sorted(report.rows, key=lambda r: -r[1])[:4])
    assert str(report) == report.top()
    assert len(report.top(1000).splitlines()) == 1 + len(exe.instructions)
    for a, b in zip(exe.run(inputs), fc.compile(graph, opt_level=0, cache=False).run(inputs)):  # still correct
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_profile_validates_inputs_and_accepts_python_scalars():
    # heaviside's kernel reads x.dtype: it must get the 0-d array run() makes of the Python float
    graph = fc.trace(lambda x, s: ops.sum(ops.heaviside_surrogate(s) * x), "f32[3]", "f32[]")
    exe = fc.compile(graph, opt_level=0, cache=False)  # unplanned: the kernel is called without `out`
    report = exe.profile([W, 2.0], repeat=2)
    assert len(report.rows) == len(exe.instructions)
    with pytest.raises(InputError, match=r"input 1 \('s'\) must be a numpy array of type f32\[\], got str"):
        exe.profile([W, "2"])


@pytest.mark.parametrize("n", [-1, 2.5, True])
def test_profile_top_takes_a_row_count_of_zero_or_more(n):
    # top(-1) sliced off the fastest row instead of saying what n is; top(2.5) was a raw TypeError
    exe = fc.compile(fc.trace(lambda x: ops.sum(x * x), "f32[3]"), cache=False)
    report = exe.profile([W], repeat=1)
    assert len(report.top(0).splitlines()) == 1
    with pytest.raises(InputError, match=r"ProfileReport.top\(n\) must be an int of 0 or more"):
        report.top(n)


# -- threads -------------------------------------------------------------------------------------
def test_concurrent_runs_of_one_executable_give_each_caller_its_own_results():
    graph = mlp_training_graph()
    exe = fc.compile(graph, cache=False)
    cases = [mlp_inputs(seed) for seed in range(8)]
    expected = [fc.compile(graph, opt_level=0, cache=False).run(inputs) for inputs in cases]
    failures: list[str] = []
    start = threading.Barrier(len(cases))

    def worker(k: int) -> None:
        start.wait()  # every thread runs at once: without the lock, runs would overwrite each other's buffers
        for _ in range(25):
            for got, want in zip(exe.run(cases[k]), expected[k]):
                if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                    failures.append(f"thread {k}")
                    return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(cases))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so unserialised runs would interleave
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []


@pytest.mark.parametrize("bad", [np.zeros((2, 3), np.float32), 3.0, "x"], ids=["array", "number", "str"])
def test_run_refuses_something_that_is_not_a_list_of_arrays(bad):
    exe = fc.compile(fc.trace(lambda a, b: a + b, "f32[3]", "f32[3]"))
    with pytest.raises(fc.InputError, match=r"takes a list of 2 arrays"):
        exe.run(bad)


def test_run_accepts_any_sequence_of_arrays():
    exe = fc.compile(fc.trace(lambda a, b: a + b, "f32[3]", "f32[3]"))
    (y,) = exe.run(iter([np.ones(3, np.float32), np.ones(3, np.float32)]))
    np.testing.assert_array_equal(y, np.full(3, 2.0, np.float32))


def test_run_takes_a_dict_by_input_name_and_says_which_names_are_wrong():
    exe = fc.compile(fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f64[2, 3]", "f64[3, 4]"))
    x, w = np.full((2, 3), 0.5), np.full((3, 4), 0.25)
    assert exe.run({"w": w, "x": x})[0] == exe.run([x, w])[0]  # by name, whatever the dict's order
    with pytest.raises(InputError, match=r"inputs are \['x', 'w'\]; missing: \['w'\]"):
        exe.run({"x": x})
    with pytest.raises(InputError, match=r"unknown: \['b'\]"):
        exe.run({"x": x, "w": w, "b": w})
    with pytest.raises(InputError, match=r"input 1 \('w'\) must have shape \[3, 4\]"):
        exe.run({"x": x, "w": x})
    g = fc.Graph("unnamed")
    g.mark_output(g.add_input("f64[2]"))
    with pytest.raises(InputError, match="only when every input has a name of its own"):
        fc.compile(g).run({"x": x})
