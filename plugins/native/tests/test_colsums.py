"""frame-native's compiled column sums (reduce_to_shape_internal over the rows of x[N, C]) give numpy's bits."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import colsums


def _sum_of_rows(shape: tuple[int, ...], target: list[int], dtype: str) -> fc.Executable:
    graph = fc.trace(lambda x: ops.reduce_to_shape_internal(x, shape=target), fc.TensorType(dtype, shape))
    return fc.compile(graph, cache=False)


def _wide(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(dtype)  # many exponents


def _ops(exe: fc.Executable) -> list[str]:
    return [i.op for i in exe.instructions]


@pytest.mark.parametrize("shape, target, dtype", [
    ((8, 2), [2], np.float32), ((256, 64), [64], np.float32), ((9, 13), [1, 13], np.float32),
    ((33, 7), [7], np.float64), ((300, 1001), [1, 1001], np.float64)])
def test_column_sums_give_numpys_bits(shape, target, dtype, same_bits):
    exe = _sum_of_rows(shape, target, np.dtype(dtype).name)
    assert _ops(exe) == [colsums.COLUMN_SUM_OP]
    x = _wide(shape, dtype, seed=sum(shape))
    x[:, 0] = -0.0  # numpy starts from +0.0: a column of -0.0 sums to +0.0
    x[3, 1], x[5, -1] = np.inf, np.nan
    first = np.array(exe.run([x])[0])  # numpy (queued after this first run: FRAME_NATIVE_AFTER=1)
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["native"], frame_native.status()["notes"]
    native = exe.run([x])[0]
    same_bits(native, first)
    same_bits(native, np.add.reduce(x, axis=0).reshape(target))
    assert np.signbit(first.reshape(-1)[0]) == np.False_


@pytest.mark.parametrize("shape, target, dtype", [
    ((6, 1), [1], "f32"), ((7, 16), [16], "f32"), ((12, 16), [16], "f16"), ((3, 4, 5), [5], "f32"),
    ((12, 16), [12, 1], "f32"), ((12, 16), [], "f64")])
def test_other_reductions_stay_on_numpy(shape, target, dtype):
    assert colsums.COLUMN_SUM_OP not in _ops(_sum_of_rows(shape, target, dtype))


def test_switched_off_leaves_the_sum_on_numpy(monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE", "0")
    assert _ops(_sum_of_rows((16, 8), [8], "f32")) == ["reduce_to_shape_internal"]


def test_a_sum_that_disagrees_with_numpy_is_never_swapped_in(monkeypatch):
    def backwards(types, shape):  # a numpy kernel adding the rows from the last: other bits than the compiled sum
        return lambda x: np.add.reduce(x[::-1], axis=0).reshape(shape)
    monkeypatch.setattr(colsums, "_numpy_kernel", backwards)
    exe = _sum_of_rows((64, 16), [16], "f32")
    x = _wide((64, 16), np.float32, seed=4)
    exe.run([x])
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["failed"]
    assert any("column sum" in note for note in frame_native.status()["notes"])
    np.testing.assert_array_equal(exe.run([x])[0], np.add.reduce(x[::-1], axis=0))


def test_a_large_node_is_checked_on_fewer_rows(monkeypatch, same_bits):
    monkeypatch.setattr(colsums, "PROBE_ELEMENTS", 40)
    exe = _sum_of_rows((50, 12), [12], "f64")
    x = _wide((50, 12), np.float64, seed=6)
    first = np.array(exe.run([x])[0])
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["native"]
    assert frame_native.status()["compiled"] == 2  # the node's sum and its 3-row twin
    same_bits(exe.run([x])[0], first)


def test_a_strided_argument_runs_numpy_and_is_counted(same_bits):
    exe = _sum_of_rows((16, 8), [8], "f32")
    x = _wide((16, 8), np.float32, seed=7)
    exe.run([x])
    assert frame_native.wait(60)
    kernel = next(i.kernel for i in exe.instructions if i.op == colsums.COLUMN_SUM_OP)
    wide = np.zeros((16, 16), np.float32)
    wide[:, ::2] = x
    same_bits(kernel(wide[:, ::2]), kernel.numpy(x))
    assert kernel.native.fallbacks == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_gradients_are_the_same_bits_with_frame_native_on_and_off(dtype, monkeypatch, same_bits):
    t = lambda s: fc.TensorType(np.dtype(dtype).name, s)  # noqa: E731
    graph = fc.trace(lambda x, w, b: ops.sum(ops.tanh(ops.matmul(x, w) + b) ** 2), t((40, 1)), t((1, 24)), t((24,)))
    backward = fc.build_backward_graph(graph, 0, [1, 2])
    inputs = [_wide(s, dtype, seed=k) for k, s in enumerate([(40, 1), (1, 24), (24,)])]
    exe = fc.compile(backward, cache=False)
    assert _ops(exe).count(colsums.COLUMN_SUM_OP) >= 1
    exe.run(inputs)
    assert frame_native.wait(60)
    on = [np.array(o) for o in exe.run(inputs)]
    monkeypatch.setenv("FRAME_NATIVE", "0")
    off_exe = fc.compile(backward, cache=False)
    assert colsums.COLUMN_SUM_OP not in _ops(off_exe)
    for got, want in zip(on, off_exe.run(inputs)):
        same_bits(got, want)
