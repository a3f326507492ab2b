"""The first run checks each kernel signature in full once and every other call by dtype, shape and identity
(issue 21): a 100k-node program paid 20 us of checks per call. Every kind of fault is still caught at the
first run: a later call of an already checked signature that returns a wrong type, its input, a view of an
input, or one array for two outputs goes to the full check and is a ``KernelError``.

The fake pack ``late`` has ops whose kernels are right on their first call and wrong from the second on.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import frame_core as fc
from frame_core import KernelError, ops
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import use_registry
from frame_core.ops_registry.schema import Example, OpSchema
from frame_core.runtime import executable

from ..fakes import FakeEntryPoint

LATER = {  # what the kernel returns from its second call on
    "wider": lambda x: (x * 2.0).astype(np.float32),
    "itself": lambda x: x,
    "view": lambda x: x[::1],
    "reshaped": lambda x: x.reshape(x.shape),
}


def _late_kernel(mode):
    def build(ctx):
        calls = []

        def kernel(x):
            calls.append(1)
            return x * 2.0 if len(calls) == 1 else LATER[mode](x)
        return kernel
    return build


def _late_pair(ctx):
    calls = []

    def kernel(x):
        calls.append(1)
        a = x * 2.0
        return (a, x * 3.0) if len(calls) == 1 else (a, a)
    return kernel


LATER_OUT = {  # what a kernel given an ``out`` buffer returns from its second call on
    "fresh": lambda x, out: x * 2.0,  # right, but not its buffer: the full check decides (and accepts)
    "buffer_view": lambda x, out: np.multiply(x, 2.0, out=out)[::1],  # a view of its buffer: accepted too
    "narrower": lambda x, out: np.multiply(x, 2.0, out=out).astype(np.float32),
    "input": lambda x, out: x,
}


def _late_out_kernel(mode):
    def build(ctx):
        calls = []

        def kernel(x, out=None):
            calls.append(1)
            if len(calls) == 1:
                return np.multiply(x, 2.0, out=out)
            return LATER_OUT[mode](x, out)
        return kernel
    return build


def _op(name, build, outputs=("y",), traits=()):
    return OpSchema(name, inputs=("x",), outputs=outputs, shape_infer=lambda ctx: [ctx.input_types[0]] * len(outputs),
                    kernels={"cpu": build}, not_differentiable="a test op", examples=[Example(["f64[4]"])],
                    traits=traits)


def _pack() -> types.ModuleType:
    module = types.ModuleType("late_plugin")
    module.FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops():
        return [*[_op(f"late_{mode}", _late_kernel(mode)) for mode in LATER], _op("late_pair", _late_pair, ("a", "b")),
                *[_op(f"late_out_{mode}", _late_out_kernel(mode), traits=("accepts_out",)) for mode in LATER_OUT]]

    module.frame_register_ops = frame_register_ops
    return module


@pytest.fixture(scope="module")
def reg():
    basic = [ep for ep in discover_entry_points() if ep.name == "ops_basic"]
    return load_registry([FakeEntryPoint("late", _pack(), dist_name="frame-late", dist_version="0.1"), *basic],
                         environ={})


X = np.array([0.0, 0.25, 0.5, 1.0])


def _twice(reg, op, codegen, monkeypatch):
    """Two calls of one kernel signature (the same op on the same types), the second one wrong."""
    if not codegen:
        monkeypatch.setattr(executable, "CODEGEN_LIMIT", 0)

    def f(x):
        if op == "late_pair":
            a, b = ops.op(op)(ops.neg(x))
            c, d = ops.op(op)(ops.exp(x))
            return a + b + c + d
        return ops.op(op)(ops.neg(x)) + ops.op(op)(ops.exp(x))
    with use_registry(reg):
        graph = fc.trace(f, "f64[4]")
        return fc.compile(graph, registry=reg, cache=False, disable=["fuse_elementwise"])


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "loop"])
@pytest.mark.parametrize("mode, words", [
    ("wider", r"returned an array float32\[4\] for its output, but shape inference says f64\[4\]"),
    ("itself", "sharing memory with its input 0"),
    ("view", "sharing memory with its input 0"),
    ("reshaped", "sharing memory with its input 0"),
])
def test_a_later_call_of_a_checked_signature_that_goes_wrong_is_still_caught(reg, mode, words, codegen, monkeypatch):
    exe = _twice(reg, f"late_{mode}", codegen, monkeypatch)
    kernels = [i.kernel for i in exe.instructions if i.op == f"late_{mode}"]
    assert len(kernels) == 2 and kernels[0] is kernels[1]  # one signature: the second call is the cheap one
    with pytest.raises(KernelError, match=words):
        exe.run([X])


def test_two_outputs_made_one_array_on_a_later_call_are_caught(reg, monkeypatch):
    exe = _twice(reg, "late_pair", True, monkeypatch)
    with pytest.raises(KernelError, match="output 1.*sharing memory with its output 0"):
        exe.run([X])


@pytest.mark.parametrize("op", ["late_wider", "late_out_fresh"])
def test_the_plan_checks_the_first_call_of_each_signature_in_full(reg, op, monkeypatch):
    exe = _twice(reg, op, True, monkeypatch)
    checks = executable._check_plan(exe.program.rows, everything=False)  # None: in full
    ops_of = [row[1].op for row in exe.program.rows]
    late = [k for k, o in enumerate(ops_of) if o == op]
    assert checks[late[0]] is None and checks[late[1]] is not None
    if exe.program.rows[late[1]][5] is None:
        want, buffered = checks[late[1]]
        assert want == ((np.dtype(np.float64), (4,)),) and not buffered
    else:  # one output into its out buffer: (dtype, shape), tested inline
        assert op == "late_out_fresh" and type(checks[late[1]]) is executable._Buffered
        assert tuple(checks[late[1]]) == (np.dtype(np.float64), (4,))
    assert all(c is None for c in executable._check_plan(exe.program.rows, everything=True))  # FRAME_CHECKS: all


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "loop"])
@pytest.mark.parametrize("mode, words", [
    ("narrower", r"returned an array float32\[4\] for its output, but shape inference says f64\[4\]"),
    ("input", "sharing memory with its input 0"),
])
def test_a_later_call_given_an_out_buffer_that_goes_wrong_is_still_caught(reg, mode, words, codegen, monkeypatch):
    exe = _twice(reg, f"late_out_{mode}", codegen, monkeypatch)
    rows = [row for row in exe.program.rows if row[1].op == f"late_out_{mode}"]
    assert len(rows) == 2 and rows[0][2] is rows[1][2] and all(row[5] is not None for row in rows)  # both buffered
    with pytest.raises(KernelError, match=words):
        exe.run([X])


@pytest.mark.parametrize("mode", ["fresh", "buffer_view"])
def test_a_later_call_right_but_not_returning_its_buffer_passes(reg, mode, monkeypatch):
    exe = _twice(reg, f"late_out_{mode}", False, monkeypatch)
    got = exe.run([X])[0]
    np.testing.assert_array_equal(got, -X * 2.0 + np.exp(X) * 2.0)


def test_sound_repeated_kernels_pass_and_give_the_unchecked_programs_results():
    def f(x, w):
        h = x
        for _ in range(6):
            h = ops.tanh(h @ w) + ops.sin(h)
        return ops.sum(h)
    graph = fc.trace(f, "f32[4, 8]", "f32[8, 8]")
    training = fc.build_backward_graph(graph, 0, [0, 1])
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    w = np.eye(8, dtype=np.float32) * 0.5
    exe = fc.compile(training, cache=False)
    first = exe.run([x, w])  # checked
    second = exe.run([x, w])  # unchecked
    for a, b in zip(first, second):
        assert a.tobytes() == b.tobytes()


def test_plainly_sound_accepts_only_results_that_plainly_own_their_memory():
    a = np.arange(4.0)
    want = ((a.dtype, a.shape),)
    fresh = a * 2.0
    assert executable._plainly_sound(fresh, [a], want, False)
    assert executable._plainly_sound(a, [fresh, a], want, True)  # its out buffer (the last argument)
    square = np.arange(4.0).reshape(2, 2)
    assert not executable._plainly_sound(square, [square.T], ((square.dtype, (2, 2)),), False)  # the input's owner
    assert not executable._plainly_sound(a, [a], want, False)  # the input itself
    assert not executable._plainly_sound(a[::1], [fresh], want, False)  # a view: the full check decides
    raw = np.frombuffer(memoryview(fresh), dtype=fresh.dtype)  # memory owned by a non-array object
    assert not executable._plainly_sound(a * 3.0, [raw], want, False)
    assert not executable._plainly_sound(a.astype(np.float32), [fresh], want, False)  # another dtype
    assert not executable._plainly_sound([a], [fresh], want, False)
    assert not executable._plainly_sound((fresh, fresh), [a], want * 2, False)  # one array for two outputs
    assert executable._plainly_sound((fresh, a * 3.0), [a], want * 2, False)


def test_a_kernel_object_that_does_not_hash_runs_checked(reg):
    """A kernel is any callable: one that defines equality and so no hash (a dataclass) is keyed by its id."""
    class Doubler:
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other):
            return isinstance(other, Doubler)

        def __call__(self, x):
            return x * 2.0

    schema = _op("late_unhashed", lambda ctx: Doubler())
    local = load_registry([FakeEntryPoint("late", _pack(), dist_name="frame-late", dist_version="0.1"),
                           *[ep for ep in discover_entry_points() if ep.name == "ops_basic"]], environ={})
    local.get("late_wider").kernels["cpu"] = schema.kernels["cpu"]
    with use_registry(local):
        graph = fc.trace(lambda x: ops.op("late_wider")(ops.neg(x)) + ops.op("late_wider")(ops.exp(x)), "f64[4]")
        exe = fc.compile(graph, registry=local, cache=False, disable=["fuse_elementwise"])
    np.testing.assert_array_equal(exe.run([X])[0], -2 * X + 2 * np.exp(X))


@pytest.fixture(scope="module")
def reg_with_scan():
    packs = [ep for ep in discover_entry_points() if ep.name in ("ops_basic", "ops_sequence")]
    return load_registry([FakeEntryPoint("late", _pack(), dist_name="frame-late", dist_version="0.1"), *packs],
                         environ={})


@pytest.mark.parametrize("mode", list(LATER))
def test_a_later_call_inside_a_scan_body_is_caught_at_the_bodys_first_run(reg_with_scan, mode):
    """A body runs once per step; its first run (the first step) checks its calls as the plan says, so a
    signature called twice per step and wrong on its second call is caught at the op, not at the scan."""
    def f(h0, xs):
        def body(h, x):
            y = ops.op(f"late_{mode}")(ops.neg(h + x)) + ops.op(f"late_{mode}")(ops.exp(h))
            return y, y
        return ops.scan(body, h0, xs)
    with use_registry(reg_with_scan):
        exe = fc.compile(fc.trace(f, "f64[4]", "f64[3, 4]"), registry=reg_with_scan, cache=False,
                         disable=["fuse_elementwise"])
    with pytest.raises(KernelError, match=f"op 'late_{mode}'"):
        exe.run([X, np.ones((3, 4))])


@pytest.mark.parametrize("mode", list(LATER))
def test_frame_checks_catch_a_body_kernel_wrong_on_a_later_step(reg_with_scan, mode):
    """Called once per step, the kernel's second call is the body's second run: unchecked but under
    FRAME_CHECKS (checks=True), which checks every run of every body in full."""
    def f(h0, xs):
        return ops.scan(lambda h, x: (lambda y: (y, y))(ops.op(f"late_{mode}")(ops.neg(h + x))), h0, xs)
    with use_registry(reg_with_scan):
        exe = fc.compile(fc.trace(f, "f64[4]", "f64[3, 4]"), registry=reg_with_scan, cache=False, checks=True,
                         disable=["fuse_elementwise"])
    with pytest.raises(KernelError, match=f"op 'late_{mode}'"):
        exe.run([X, np.ones((3, 4))])


@pytest.mark.parametrize("mode", ["wider", "itself"])
def test_a_body_kernel_wrong_on_a_later_step_is_named_without_frame_checks(reg_with_scan, mode):
    """Called once per step, the kernel is checked in full at the first step only; the steps after it run
    inline (Executable.scan_steps) with a cheap check of every result (class, dtype, shape, identity), so a
    wrong dtype or an input handed back at step 2 names the faulty op and its pack, not the scan."""
    def f(h0, xs):
        return ops.scan(lambda h, x: (lambda y: (y, y))(ops.op(f"late_{mode}")(ops.neg(h + x))), h0, xs)
    with use_registry(reg_with_scan):
        exe = fc.compile(fc.trace(f, "f64[4]", "f64[3, 4]"), registry=reg_with_scan, cache=False, checks=False,
                         disable=["fuse_elementwise"])
    with pytest.raises(KernelError, match=f"op 'late_{mode}' \\(pack late, frame-late\\)"):
        exe.run([X, np.ones((3, 4))])


def test_a_multi_output_body_kernel_returning_one_array_twice_on_a_later_step_is_named(reg_with_scan):
    def f(h0, xs):
        def body(h, x):
            a, b = ops.op("late_pair")(ops.neg(h + x))
            return a, b
        return ops.scan(body, h0, xs)
    with use_registry(reg_with_scan):
        exe = fc.compile(fc.trace(f, "f64[4]", "f64[3, 4]"), registry=reg_with_scan, cache=False, checks=False,
                         disable=["fuse_elementwise"])
    with pytest.raises(KernelError, match="op 'late_pair' \\(pack late"):
        exe.run([X, np.ones((3, 4))])
