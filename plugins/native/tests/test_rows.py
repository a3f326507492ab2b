"""Compiled row kernels for layer_norm's training pair: numpy's bits for any row length, dtype, eps, NaN and inf;
fallbacks; what is left on numpy; the check against numpy before a swap."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import jit, rows

_PAIR = ["native_layer_norm_train_internal", "native_layer_norm_grad_saved_internal"]


def _training(shape: tuple[int, ...], k: int, dtype: type, eps: float = 1e-5) -> fc.Executable:
    """The compiled graph of sum(layer_norm(x, w, b) * g) and its gradients for x, w and b."""
    t = lambda s: fc.TensorType(np.dtype(dtype).name, s)  # noqa: E731
    graph = fc.trace(lambda x, w, b, g: ops.sum(ops.layer_norm(x, w, b, eps=eps) * g), t(shape), t(shape[-k:]),
                     t(shape[-k:]), t(shape))
    return fc.compile(fc.build_backward_graph(graph, 0, [0, 1, 2]))


def _inputs(shape: tuple[int, ...], k: int, dtype: type, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    wide = lambda s: rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 3, s)  # noqa: E731 - many exponents
    return [(wide(shape) + 5.0).astype(dtype), wide(shape[-k:]).astype(dtype), wide(shape[-k:]).astype(dtype),
            wide(shape).astype(dtype)]


def _numpy_then_native(exe: fc.Executable, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    first = [np.array(o) for o in exe.run(inputs)]  # numpy (queued after this first run: FRAME_NATIVE_AFTER=1)
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["native", "native"], frame_native.status()["notes"]
    return first, [np.array(o) for o in exe.run(inputs)]


@pytest.mark.parametrize("shape, k, dtype", [
    ((3, 2), 1, np.float32), ((5, 7), 1, np.float32), ((4, 9), 1, np.float32), ((3, 129), 1, np.float32),
    ((2, 264), 1, np.float32), ((3, 1023), 1, np.float32), ((2, 3, 4, 5), 2, np.float32), ((17,), 1, np.float32),
    ((2, 8), 1, np.float64), ((3, 136), 1, np.float64), ((2, 4099), 1, np.float64)])  # (pairwise: 8, 128 split)
def test_row_kernels_give_numpys_bits_for_any_row_length(shape, k, dtype, same_bits):
    exe = _training(shape, k, dtype)
    assert [i.op for i in exe.instructions if i.op.startswith("native_layer")] == _PAIR
    inputs = _inputs(shape, k, dtype, seed=sum(shape))
    first, native = _numpy_then_native(exe, inputs)
    for got, want in zip(native, first):
        same_bits(got, want)


def test_nan_and_inf_propagate_as_in_numpy(same_bits):
    exe = _training((6, 40), 1, np.float32, eps=0.0)
    x, w, b, g = _inputs((6, 40), 1, np.float32, seed=3)
    x[1, 5], x[2, 0], g[3, 7], b[9] = np.nan, np.inf, -np.inf, np.nan
    x[4] = 2.5  # a constant row with eps 0: 0 / 0
    with np.errstate(all="ignore"):  # (numpy's tier warns of the NaN it makes; the compiled one does not)
        first, native = _numpy_then_native(exe, [x, w, b, g])
    for got, want in zip(native, first):
        same_bits(got, want, nan_payloads=False)
    assert np.isnan(native[1][1]).all() and np.isfinite(native[1][0]).all()


@pytest.mark.parametrize("eps", [0.5, 1e-12])
def test_eps_is_rounded_as_numpy_rounds_it(eps, same_bits):
    exe = _training((4, 33), 1, np.float32, eps=eps)
    first, native = _numpy_then_native(exe, _inputs((4, 33), 1, np.float32, seed=5))
    for got, want in zip(native, first):
        same_bits(got, want)


def test_a_strided_argument_runs_numpy_and_is_counted():
    exe = _training((4, 16), 1, np.float32)
    inputs = _inputs((4, 16), 1, np.float32, seed=1)
    _numpy_then_native(exe, inputs)
    forward = next(i.kernel for i in exe.instructions if i.op == _PAIR[0])
    wide = np.zeros((4, 32), np.float32)
    wide[:, ::2] = inputs[0]
    got = forward(wide[:, ::2], *inputs[1:3])
    want = forward.numpy(inputs[0], *inputs[1:3])
    assert forward.native.fallbacks == 1
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape, dtype", [((5, 1), np.float32), ((4, 6), np.float16)])
def test_rows_of_one_value_and_half_precision_stay_on_numpy(shape, dtype):
    exe = _training(shape, 1, dtype)
    assert not any(i.op.startswith("native_layer") for i in exe.instructions)


def test_switched_off_leaves_the_pair_on_numpy(monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE", "0")
    exe = _training((4, 6), 1, np.float32)
    assert [i.op for i in exe.instructions if "layer_norm" in i.op] == ["layer_norm_train_internal",
                                                                        "layer_norm_grad_saved_internal"]


def test_a_kernel_that_disagrees_with_numpy_is_never_swapped_in():
    # a numpy kernel that sums in another order than the compiled one: the check on the compiler thread refuses it
    exe = _training((3, 200), 1, np.float32)
    kernel = next(i.kernel for i in exe.instructions if i.op == _PAIR[0])
    exe.run(_inputs((3, 200), 1, np.float32, seed=0))
    assert frame_native.wait(60) and kernel.native.state == "native"
    shapes, numpy_kernel = [(3, 200), (200,), (200,)], kernel.numpy

    def other_order(x, w, b):  # noqa: ANN001, ANN202
        y, xhat, rstd = numpy_kernel(x, w, b)
        return y, xhat, (rstd * np.float32(1 + 2**-20)).astype(np.float32)
    tier = rows.Tier()
    tier.slot.append(other_order)
    rows._install(tier, "layer_norm_train_internal", kernel.native.slot[0], "compiled", other_order, shapes,
                  np.dtype(np.float32))
    assert tier.state == "failed" and tier.slot[0] is other_order
    assert any("does not give numpy's bits" in n for n in frame_native.status()["notes"])


# -- batch_norm of x[N, C] ---------------------------------------------------------------------------------
_BATCH_PAIR = ["native_batch_norm_train_internal", "native_batch_norm_grad_saved_internal"]


def _batch_training(shape: tuple[int, ...], dtype: type, momentum: float = 0.1, eps: float = 1e-5) -> fc.Executable:
    """sum(batch_norm(x, w, b, rm, rv)[0] * g) with its gradients for x, w, b, and the new running averages."""
    t = lambda s: fc.TensorType(np.dtype(dtype).name, s)  # noqa: E731
    c = (shape[1],)

    def fn(x, w, b, rm, rv, g):  # noqa: ANN001, ANN202 - traced tensors
        y, new_rm, new_rv = ops.batch_norm(x, w, b, rm, rv, momentum=momentum, eps=eps)
        return [ops.sum(y * g), new_rm, new_rv]
    graph = fc.trace(fn, t(shape), t(c), t(c), t(c), t(c), t(shape))
    return fc.compile(fc.build_backward_graph(graph, 0, [0, 1, 2]))


@pytest.mark.parametrize("shape, dtype, momentum", [
    ((2, 2), np.float32, 0.1), ((5, 7), np.float32, 0.1), ((3, 9), np.float32, 0.3), ((256, 1024), np.float32, 0.1),
    ((4, 17), np.float64, 0.5), ((2, 1000), np.float64, 0.1)])
def test_batch_norm_passes_give_numpys_bits(shape, dtype, momentum, same_bits):
    exe = _batch_training(shape, dtype, momentum)
    assert [i.op for i in exe.instructions if i.op.startswith("native_batch")] == _BATCH_PAIR
    rng = np.random.default_rng(shape[1])
    wide = lambda s: (rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 3, s)).astype(dtype)  # noqa: E731
    c = shape[1]
    inputs = [wide(shape) + dtype(2.0), wide(c), wide(c), wide(c), np.abs(wide(c)), wide(shape)]
    first, native = _numpy_then_native(exe, inputs)
    assert len(first) == 6  # value, new running mean and variance, gx, gw, gb
    for got, want in zip(native, first):
        same_bits(got, want)


def test_batch_norm_nan_and_inf_propagate_as_in_numpy(same_bits):
    exe = _batch_training((6, 12), np.float32)
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((2, 6, 12)).astype(np.float32)
    w, b, rm, rv = rng.standard_normal((4, 12)).astype(np.float32)
    x[2, 3], x[0, 5], g[4, 7], b[1] = np.nan, np.inf, -np.inf, np.nan
    with np.errstate(all="ignore"):
        first, native = _numpy_then_native(exe, [x, w, b, rm, rv, g])
    for got, want in zip(native, first):
        same_bits(got, want, nan_payloads=False)
    assert np.isnan(native[3][:, 3]).all() and np.isfinite(native[3][:, 0]).all()  # gx: NaN in its channel only


@pytest.mark.parametrize("shape", [(4, 1), (2, 3, 4)])
def test_batch_norm_of_one_channel_or_with_positions_stays_on_numpy(shape):
    exe = _batch_training(shape, np.float32)
    assert not any(i.op.startswith("native_batch") for i in exe.instructions)


def test_a_batch_norm_argument_the_passes_refuse_runs_numpy():
    exe = _batch_training((4, 16), np.float32)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((4, 16), (16,), (16,), (16,), (16,), (4, 16))]
    _numpy_then_native(exe, inputs)
    forward = next(i.kernel for i in exe.instructions if i.op == _BATCH_PAIR[0])
    wide = np.zeros((4, 32), np.float32)
    wide[:, ::2] = inputs[0]
    got, want = forward(wide[:, ::2], *inputs[1:5]), forward.numpy(*inputs[:5])
    assert forward.native.fallbacks == 1
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_large_node_is_checked_on_fewer_rows(monkeypatch, same_bits):
    monkeypatch.setattr(rows, "PROBE_ELEMENTS", 40)  # (so that these small nodes count as large)
    assert [t.shape for t in rows._probe_types("layer_norm_grad_saved_internal", [
        fc.TensorType("f32", s) for s in ((6, 16), (6,), (16,), (6, 16))])] == [(2, 16), (2,), (16,), (2, 16)]
    for exe, inputs in [(_training((6, 16), 1, np.float32), _inputs((6, 16), 1, np.float32, seed=2)),
                        (_batch_training((8, 10), np.float64),
                         [np.random.default_rng(k).standard_normal(s) for k, s in
                          enumerate([(8, 10), (10,), (10,), (10,), (10,), (8, 10)])])]:
        first, native = _numpy_then_native(exe, inputs)
        for got, want in zip(native, first):
            same_bits(got, want)
    assert frame_native.status()["compiled"] == 2 * 2 + 2 * 5  # each node's functions, and their fewer-row twins


def _pairwise_reference(a: np.ndarray) -> np.ndarray:
    """The documented order of a row sum (rows.py's module docstring), with numpy elementwise ops only."""
    n = a.shape[1]
    if n < 8:
        total = np.zeros(a.shape[0], a.dtype)
        for i in range(n):
            total = total + a[:, i]
        return total
    if n <= 128:
        s = [a[:, j].copy() for j in range(8)]
        end = n - n % 8
        for i in range(8, end, 8):
            s = [s[j] + a[:, i + j] for j in range(8)]
        total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
        for i in range(end, n):
            total = total + a[:, i]
        return total
    half = n // 2 - (n // 2) % 8
    return _pairwise_reference(a[:, :half]) + _pairwise_reference(a[:, half:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_frame_ops_nn_sums_in_the_order_the_kernels_reproduce(dtype):
    # the premise of the row kernels, checked without LLVM: numpy's row and column sums as frame-ops-nn uses them
    from frame_ops_nn.norm import _column_sums, _row_sums

    rng = np.random.default_rng(0)
    for n in [*range(1, 40), 127, 128, 129, 135, 136, 137, 255, 257, 1000, 1024, 4099, 9000]:
        a = (rng.standard_normal((3, n)) * 10.0 ** rng.uniform(-4, 4, (3, n))).astype(dtype)
        a[2] = -0.0  # (numpy adds the total to its identity +0.0)
        np.testing.assert_array_equal(_row_sums(a).view(f"u{a.itemsize}"),
                                      (0.0 + _pairwise_reference(a)).view(f"u{a.itemsize}"))
    for r, c in [(2, 2), (300, 3), (9, 1000), (1000, 5)]:
        a = (rng.standard_normal((r, c)) * 10.0 ** rng.uniform(-4, 4, (r, c))).astype(dtype)
        total = np.zeros(c, dtype)
        for row in a:
            total = total + row
        np.testing.assert_array_equal(_column_sums(a), total)


# -- values random data never hits, and the ways a user reaches a swapped kernel -----------------------------

def _swapped(exe):  # noqa: ANN001, ANN202
    """The two tiered kernels of ``exe`` once the compiled ones are in."""
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["native", "native"], frame_native.status()["notes"]
    return [i.kernel for i in exe.instructions if hasattr(i.kernel, "native")]


@pytest.mark.parametrize("features", [3, 8, 9, 130])  # (the short, 8-lane and split sums)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_of_negative_zeros_give_numpys_signed_zeros(features, dtype, same_bits):
    # numpy adds a row's pairwise sum to the identity +0.0, so a row of -0.0 sums to +0.0, and x - mean is -0.0
    exe = _training((2, features), 1, dtype)
    rng = np.random.default_rng(features)
    x, w, b, gy = (rng.standard_normal(s).astype(dtype) for s in [(2, features), features, features, (2, features)])
    exe.run([x, w, b, gy])
    forward, backward = _swapped(exe)
    x[0], b[:] = -0.0, -0.0
    for got, want in zip(forward(x, np.abs(w), b), forward.numpy(x, np.abs(w), b)):
        same_bits(got, want)
    xhat, rstd = forward.numpy(x, w, b)[1:]
    gy[1] = -0.0  # g = gy * w is -0.0 throughout row 1, as is g * xhat
    for got, want in zip(backward(xhat, rstd, np.abs(w), gy), backward.numpy(xhat, rstd, np.abs(w), gy)):
        same_bits(got, want)


_ROWS_PROGRAM = """
import hashlib, sys, numpy as np, frame_core as fc, frame_native
from frame_core import ops
t = lambda s: fc.TensorType("float32", s)
graph = fc.trace(lambda x, w, b, g: ops.sum(ops.layer_norm(x, w, b) * g), t((5, 300)), t((300,)), t((300,)),
                 t((5, 300)))
exe = fc.compile(fc.build_backward_graph(graph, 0, [0, 1, 2]))
rng = np.random.default_rng(0)
inputs = [rng.standard_normal(s).astype(np.float32) for s in ((5, 300), (300,), (300,), (5, 300))]
first = b"".join(np.asarray(o).tobytes() for o in exe.run(inputs))
assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native", "native"], frame_native.status()
assert b"".join(np.asarray(o).tobytes() for o in exe.run(inputs)) == first
print(hashlib.sha256(first).hexdigest(), frame_native.status()["compiled"], frame_native.status()["from_cache"])
"""


@pytest.mark.slow
def test_a_second_process_loads_the_row_kernels_from_disk_and_a_damaged_entry_is_compiled_afresh(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "FRAME_NATIVE_CACHE": str(tmp_path / "k"), "FRAME_NATIVE_AFTER": "1"}
    run = lambda: subprocess.run([sys.executable, "-c", _ROWS_PROGRAM], env=env, capture_output=True,  # noqa: E731
                                 text=True, timeout=120)
    first = run()
    assert first.returncode == 0, first.stderr
    digest, compiled, loaded = first.stdout.split()
    assert (compiled, loaded) == ("2", "0")
    second = run()
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == [digest, "0", "2"]  # the same bits from the cached kernels
    for entry in (tmp_path / "k").glob("*.o"):
        data = bytearray(entry.read_bytes())
        data[-20] ^= 0x10
        entry.write_bytes(bytes(data))
    third = run()
    assert third.returncode == 0, third.stderr
    assert third.stdout.split() == [digest, "2", "0"]
    refusals = [line for line in third.stderr.splitlines() if "is not used" in line]
    assert len(refusals) == 2 and all("compiled afresh" in line and "run on numpy" not in line
                                      for line in refusals), third.stderr


def test_the_check_before_the_swap_catches_a_kernel_that_gets_only_signed_zeros_wrong(monkeypatch):
    # a row sum that skips numpy's +0.0 start agrees on every random row; the check's row of -0.0 tells them apart
    def without_numpys_start(t, name, row, features):  # noqa: ANN001, ANN202
        return [f"  %{name} = call {t} @pw(ptr {row}, i64 {features})"]
    monkeypatch.setattr(rows, "_row_sum", without_numpys_start)
    exe = _training((3, 40), 1, np.float64)
    exe.run(_inputs((3, 40), 1, np.float64, seed=0))
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["failed", "failed"]
    assert any("does not give numpy's bits" in n for n in frame_native.status()["notes"])


def test_threads_running_one_executable_across_the_swap_get_the_same_bits(monkeypatch):
    import threading

    from frame_native import jit

    exe = _training((16, 300), 1, np.float32)
    inputs = _inputs((16, 300), 1, np.float32, seed=8)
    release, real_compile = threading.Event(), jit._compile
    monkeypatch.setattr(jit, "_compile", lambda *a: release.wait(30) and real_compile(*a))
    want = b"".join(np.asarray(o).tobytes() for o in exe.run(inputs))  # (queues the pair, held until released)
    differ: list[int] = []
    seen: set[str] = set()

    def runner() -> None:  # runs before the swap, across it, and 20 times after it
        after = 0
        for _ in range(5000):
            tier = frame_native.tier_of(exe)[0]
            seen.add(tier)
            if b"".join(np.asarray(o).tobytes() for o in exe.run(inputs)) != want:
                differ.append(1)
            after += tier == "native"
            if after == 20:
                break
    threads = [threading.Thread(target=runner) for _ in range(2)]
    for t in threads:
        t.start()
    release.set()  # the swap happens while both threads run
    for t in threads:
        t.join()
    assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native", "native"]
    assert not differ and seen == {"queued", "native"}
    assert b"".join(np.asarray(o).tobytes() for o in exe.run(inputs)) == want


def test_a_child_forked_with_the_pair_queued_never_compiles_it_and_gets_the_same_bits(monkeypatch):
    import os
    import threading

    from frame_native import jit

    exe = _batch_training((8, 12), np.float64)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s) for s in ((8, 12), 12, 12, 12, 12, (8, 12))]
    release, real_compile = threading.Event(), jit._compile
    monkeypatch.setattr(jit, "_compile", lambda *a: release.wait(30) and real_compile(*a))
    want = b"".join(np.asarray(o).tobytes() for o in exe.run(inputs))
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = all(b"".join(np.asarray(o).tobytes() for o in exe.run(inputs)) == want for _ in range(3))
            ok = ok and frame_native.tier_of(exe) == ["off", "off"] and jit.status()["compiled"] == 0
        finally:
            os._exit(0 if ok else 1)
    release.set()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native", "native"]
    assert b"".join(np.asarray(o).tobytes() for o in exe.run(inputs)) == want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_training_loop_gives_the_same_bits_with_frame_native_on_and_off(dtype, monkeypatch):
    import frame_train as ft

    def loss(p, x, t):  # noqa: ANN001, ANN202 - traced tensors
        h = ops.relu(ops.layer_norm(x @ p["w1"], p["g1"], p["b1"]))
        h = ops.batch_norm(h, p["g2"], p["b2"], p["rm"], p["rv"])[0]
        return ops.mse_loss(h @ p["w2"], t)
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((32, 12)).astype(dtype), rng.standard_normal((32, 1)).astype(dtype)
    params = {"w1": (rng.standard_normal((12, 24)) * 0.3).astype(dtype), "g1": np.ones(24, dtype),
              "b1": np.zeros(24, dtype), "g2": np.ones(24, dtype), "b2": np.zeros(24, dtype),
              "rm": np.zeros(24, dtype), "rv": np.ones(24, dtype),
              "w2": (rng.standard_normal((24, 1)) * 0.3).astype(dtype)}
    runs = []
    for native in ("0", "1"):
        monkeypatch.setenv("FRAME_NATIVE", native)
        step = ft.TrainStep(loss, params, ft.adam(1e-2))
        losses = [step(x[i % 2::2], t[i % 2::2]) for i in range(2)]
        assert frame_native.wait(60)
        losses += [step(x[i % 2::2], t[i % 2::2]) for i in range(2, 12)]
        ops_run = [i.op for e in step.executables() for i in e.instructions if "norm" in i.op]
        assert all(op.startswith("native_") == (native == "1") for op in ops_run) and len(ops_run) == 4
        if native == "1":
            assert set(sum((frame_native.tier_of(e) for e in step.executables()), [])) == {"native"}
        runs.append((np.array(losses), [np.array(step.params[k]) for k in sorted(params)]))
    (off_losses, off_params), (on_losses, on_params) = runs
    assert off_losses.tobytes() == on_losses.tobytes() and off_losses[-1] < off_losses[0]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(off_params, on_params))


def test_the_check_of_a_large_node_of_long_rows_keeps_two_rows(monkeypatch):
    # the second row is the one of -0.0 (_probe); one row would leave the signed zeros unchecked
    monkeypatch.setattr(rows, "PROBE_ELEMENTS", 40)
    types = [fc.TensorType("f32", s) for s in ((5, 64), (64,), (64,))]
    assert [t.shape for t in rows._probe_types("layer_norm_train_internal", types)] == [(2, 64), (64,), (64,)]
    types = [fc.TensorType("f32", s) for s in ((64,), (64,), (64,))]  # one row: nothing to add
    assert [t.shape for t in rows._probe_types("layer_norm_train_internal", types)] == [(1, 64), (64,), (64,)]


def test_a_compile_that_finishes_before_submit_returns_leaves_the_tier_native(monkeypatch):
    # the compiler thread may install a kernel (from the disk cache, or one already loaded) before the calling
    # thread gets the GIL back: the tier must not then be marked queued over the native state
    from frame_native import jit

    real_submit = jit.submit

    def submit_then_finish(make_plan, install):  # noqa: ANN001, ANN202
        queued = real_submit(make_plan, install)
        assert jit.wait(60)
        return queued
    monkeypatch.setattr(jit, "submit", submit_then_finish)
    for exe in (_training((3, 20), 1, np.float32), _batch_training((4, 10), np.float64)):
        shapes = [(3, 20), (20,), (20,), (3, 20)] if exe.graph.inputs[0].type.shape == (3, 20) else \
            [(4, 10), (10,), (10,), (10,), (10,), (4, 10)]
        exe.run([np.random.default_rng(0).standard_normal(s).astype(exe.graph.inputs[0].type.dtype.np)
                 for s in shapes])
        assert frame_native.tier_of(exe) == ["native", "native"]
