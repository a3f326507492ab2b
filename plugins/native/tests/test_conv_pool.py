"""frame-native's compiled convolution layers (relu(max_pool2d(conv2d(x, w), 2) + b)) give the numpy kernels' bits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import frame_core as fc
import frame_native
from frame_core import ops
from frame_native import conv, jit

# NaN and infinities in the data on purpose: numpy's kernels say so, the compiled ones do not
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _layer(x_shape, w_shape, dtype="f32", bias_first=False, pool=2, **attrs) -> fc.Graph:
    """max_pool2d(relu(conv2d(x, w) + b)) as an ONNX import writes it (frame-ops-nn's pool_before_monotone moves
    the pool before the bias and ReLU, then compile_conv_pools takes the chain)."""
    def layer(x, w, b):
        y = ops.conv2d(x, w, **attrs)
        return ops.max_pool2d(ops.relu(ops.add(b, y) if bias_first else ops.add(y, b)), kernel_size=pool)
    return fc.trace(layer, fc.TensorType(dtype, x_shape), fc.TensorType(dtype, w_shape),
                    fc.TensorType(dtype, (w_shape[0], 1, 1)))


def _ops(exe: fc.Executable) -> list[str]:
    return [i.op for i in exe.instructions]


def _data(x_shape, w_shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)
    b = rng.standard_normal((w_shape[0], 1, 1)).astype(dtype)
    return x, w, b


CASES = {  # name: x shape, w shape, conv2d attributes, the columns frame-ops-nn multiplies
    "channels last, padded": ((2, 16, 8, 8), (40, 16, 3, 3), {"padding": 1}, "last"),
    "channels last, odd output": ((2, 16, 11, 11), (40, 16, 3, 3), {}, "last"),
    "channels last, stride 2": ((1, 16, 20, 19), (36, 16, 3, 3), {"stride": 2, "padding": [1, 0, 2, 1]}, "last"),
    "channels last, dilated rows": ((3, 17, 12, 10), (33, 17, 3, 2), {"dilation": [2, 1], "padding": 2}, "last"),
    "checked on fewer samples": ((5, 16, 8, 8), (40, 16, 3, 3), {"padding": 1}, "last"),
    "by sample, 3 channels": ((2, 3, 17, 18), (8, 3, 3, 3), {"padding": [0, 1, 1, 0]}, "sample"),
    "by sample, stride 2": ((1, 5, 37, 36), (6, 5, 3, 3), {"stride": 2, "dilation": 2}, "sample"),
    "batch 1": ((1, 3, 32, 32), (32, 3, 3, 3), {"padding": 1}, "sample"),
}


@pytest.mark.parametrize("case, dtype", [
    ("channels last, padded", np.float32), ("channels last, odd output", np.float64),
    ("channels last, stride 2", np.float32), ("channels last, dilated rows", np.float32),
    ("by sample, 3 channels", np.float64), ("by sample, stride 2", np.float32), ("batch 1", np.float32),
    ("checked on fewer samples", np.float64)])
def test_compiled_layers_give_the_numpy_kernels_bits(case, dtype, same_bits):
    exe = _compiled_case(case, dtype, same_bits)
    product = exe.instructions[0].kernel.native.slot[0].product
    assert product == "nn" if CASES[case][3] == "sample" else product in ("nn", "nt")


@pytest.mark.parametrize("case, dtype", [
    ("channels last, padded", np.float32), ("channels last, odd output", np.float64),
    ("channels last, stride 2", np.float32), ("channels last, dilated rows", np.float64),
    ("checked on fewer samples", np.float32)])
def test_the_nt_form_takes_over_where_the_nn_form_disagrees(case, dtype, same_bits, monkeypatch):
    """Channels-last layers try the NN product (columns [K, oh * ow]) first and keep it only where the install
    check finds frame-ops-nn's bits; here it is made to disagree (one ulp more), and frame-ops-nn's own NT form
    (columns [oh * ow, K], transposed) takes over, not numpy."""
    real = conv._native

    def shifted_nn(geo, order, *functions):
        native = real(geo, order, *functions)
        if order != "last_nn":
            return native
        return lambda x, w, b: np.nextafter(native(x, w, b), np.inf)
    monkeypatch.setattr(conv, "_native", shifted_nn)
    exe = _compiled_case(case, dtype, same_bits)
    assert exe.instructions[0].kernel.native.slot[0].product == "nt"


def _compiled_case(case, dtype, same_bits) -> fc.Executable:
    """CASES[case] compiled with and without the pass: the compiled layer takes over and gives the other's bits
    (random data, then exact zeros and ties of +-0)."""
    x_shape, w_shape, attrs, order = CASES[case]
    graph = _layer(x_shape, w_shape, np.dtype(dtype).name, **attrs)
    exe, ref = fc.compile(graph, cache=False), fc.compile(graph, cache=False, disable=["compile_conv_pools"])
    assert _ops(exe) == [conv.CONV_POOL_OP] and conv.CONV_POOL_OP not in _ops(ref)
    assert exe.instructions[0].node.attrs["layout"] == order
    x, w, b = _data(x_shape, w_shape, dtype, seed=len(case))
    first = exe.run([x, w, b])[0]  # numpy (then queued: FRAME_NATIVE_AFTER=1)
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["native"], frame_native.status()["notes"]
    want = ref.run([x, w, b])[0]
    same_bits(first, want)
    same_bits(exe.run([x, w, b])[0], want)
    x.reshape(-1)[::7] = -0.0  # exact zeros, ties of +-0 in the windows
    w[0] = 0.0
    b[1] = -0.0
    same_bits(exe.run([x, w, b])[0], ref.run([x, w, b])[0])
    return exe


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_infinities_spread_as_in_numpy(dtype, same_bits):
    x_shape, w_shape = (2, 16, 10, 10), (40, 16, 3, 3)
    graph = _layer(x_shape, w_shape, np.dtype(dtype).name, bias_first=True, padding=1)
    exe, ref = fc.compile(graph, cache=False), fc.compile(graph, cache=False, disable=["compile_conv_pools"])
    assert exe.instructions[0].node.attrs["bias_first"] == 1
    x, w, b = _data(x_shape, w_shape, dtype, seed=3)
    exe.run([x, w, b])
    assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native"]
    x[0, 3, 4, 4], x[1, 0, 0, 0], x[1, 5, 9, 2] = np.nan, np.inf, -np.inf
    b[2], b[3] = np.nan, -np.inf
    got, want = exe.run([x, w, b])[0], ref.run([x, w, b])[0]
    assert np.isnan(want).any() and np.isinf(want).any()
    same_bits(got, want)



@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_nans_meeting_in_the_bias_add_keep_the_first_terms(dtype, bias_first, same_bits):
    """inf - inf in the product is a -NaN; against a +NaN bias the compiled add keeps its first term's NaN (LLVM
    was free to swap fadd's operands). numpy's own choice there depends on its loop: the bits are compared
    but for a NaN's sign."""
    x_shape, w_shape = (1, 16, 10, 17), (8, 16, 3, 1)
    graph = _layer(x_shape, w_shape, np.dtype(dtype).name, bias_first=bias_first)
    exe, ref = fc.compile(graph, cache=False), fc.compile(graph, cache=False, disable=["compile_conv_pools"])
    x, w, b = _data(x_shape, w_shape, dtype, seed=0)
    exe.run([x, w, b])
    assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native"]
    x[0, 0, 0, 0], x[0, 1, 0, 0] = np.inf, -np.inf
    b[0], b[1] = np.nan, -np.nan
    got, want = exe.run([x, w, b])[0], ref.run([x, w, b])[0]
    same_bits(got, want, nan_payloads=False)
    product = fc.compile(fc.trace(lambda a, c: ops.max_pool2d(ops.conv2d(a, c), kernel_size=2),
                                  fc.TensorType(np.dtype(dtype).name, x_shape),
                                  fc.TensorType(np.dtype(dtype).name, w_shape)), cache=False).run([x, w])[0]
    first = np.broadcast_to(b, got.shape) if bias_first else product
    both = np.isnan(product) & np.isnan(np.broadcast_to(b, got.shape))
    assert both.any() and np.array_equal(np.signbit(got[both]), np.signbit(first[both]))


def test_the_install_check_compares_a_nans_place_not_its_sign():
    a = np.array([1.0, -0.0, np.nan, np.inf])
    flipped = a.copy()
    flipped[2] = -np.nan
    assert conv._same_bits_but_nan_signs(a, flipped)
    assert not conv._same_bits_but_nan_signs(a, np.array([1.0, 0.0, np.nan, np.inf]))
    assert not conv._same_bits_but_nan_signs(a, np.array([1.0, -0.0, 0.0, np.inf]))
    assert not conv._same_bits_but_nan_signs(a, a[:3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_pool_reproduces_numpys_maximum_on_every_tie_and_nan(dtype, same_bits):
    """The pool piece alone, on every window of four values among +-0, +-1, +-inf and NaN (7^4 windows, 49 x 49:
    vectors and the rest of each row one at a time), each with every one of those as the bias, against numpy and
    against frame-ops-nn's pool with frame-ops-basic's add and relu."""
    geo = conv.Geometry(np.dtype(dtype), 1, 1, 98, 98, 7, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0))
    box: list = []
    jit.submit(lambda: conv._Plan("pool", geo, "bias_second"), lambda plan, fn, how: box.append(fn))
    assert jit.wait(60) and box[0] is not None
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan], dtype)
    windows = values[np.array(list(itertools.product(range(7), repeat=4)))].reshape(49, 49, 2, 2)  # [r, q, j, i]
    y = np.broadcast_to(windows.transpose(0, 3, 1, 2).reshape(98, 98), (7, 98, 98)).copy()
    b = values.copy()
    out = np.empty((7, 49, 49), dtype)
    assert box[0](np.ndarray, np.dtype(dtype), y.reshape(7, 98 * 98), b, out) == 0
    v = y.reshape(7, 49, 2, 49, 2)
    pooled = np.maximum(np.maximum(v[:, :, 0, :, 0], v[:, :, 1, :, 0]), np.maximum(v[:, :, 0, :, 1], v[:, :, 1, :, 1]))
    same_bits(out, np.maximum(pooled + b[:, None, None], np.zeros((), dtype)))
    name = np.dtype(dtype).name
    graph = fc.trace(lambda p, c: ops.relu(ops.add(ops.max_pool2d(p, kernel_size=2), c)),
                     fc.TensorType(name, (1, 7, 98, 98)), fc.TensorType(name, (7, 1, 1)))
    same_bits(out, fc.compile(graph, cache=False).run([y[None], b.reshape(7, 1, 1)])[0][0])


def test_arguments_the_compiled_code_refuses_run_on_numpy(same_bits):
    x_shape, w_shape = (2, 3, 16, 18), (8, 3, 3, 3)
    graph = _layer(x_shape, w_shape, padding=1)
    exe = fc.compile(graph, cache=False)
    x, w, b = _data(x_shape, w_shape, np.float32, seed=5)
    exe.run([x, w, b])
    assert frame_native.wait(60) and frame_native.tier_of(exe) == ["native"]
    kernel = exe.instructions[0].kernel
    strided = np.asfortranarray(x)  # not C-contiguous: the compiled columns refuse it
    same_bits(kernel(strided, w, b), kernel.numpy(x, w, b))
    assert kernel.native.fallbacks == 1


@pytest.mark.parametrize("x_shape, w_shape", [((1, 3, 16, 18), (8, 3, 3, 3)),  # NCHW columns: one candidate
                                              ((1, 16, 8, 8), (40, 16, 3, 3))])  # channels last: NN, then NT
def test_a_layer_that_disagrees_with_numpy_is_never_swapped_in(monkeypatch, x_shape, w_shape):
    real = conv._numpy_kernel

    def shifted(types, attrs):  # numpy kernels that add one ulp's worth more: other bits than the compiled layer
        kernel = real(types, attrs)
        return lambda x, w, b: np.nextafter(kernel(x, w, b), np.inf)
    monkeypatch.setattr(conv, "_numpy_kernel", shifted)
    exe = fc.compile(_layer(x_shape, w_shape, padding=1), cache=False)
    x, w, b = _data(x_shape, w_shape, np.float32, seed=6)
    exe.run([x, w, b])
    assert frame_native.wait(60)
    assert frame_native.tier_of(exe) == ["failed"]
    assert any("convolution layer" in note for note in frame_native.status()["notes"])


@pytest.mark.parametrize("x_shape, w_shape, attrs, pool", [
    ((2, 16, 8, 8), (16, 16, 3, 3), {"padding": 1}, 2),     # short rows, 16 outputs: frame-ops-nn's padded grid
    ((2, 4, 8, 8), (40, 4, 3, 3), {"padding": 1}, 2),       # few channels and positions: chunks of samples
    ((2, 4, 8, 8), (40, 2, 3, 3), {"padding": 1, "groups": 2}, 2),
    ((2, 16, 12, 12), (40, 16, 3, 3), {"padding": 1}, 3),   # a 3 x 3 pool
    ((2, 16, 12, 12), (40, 16, 3, 3), {"padding": "same"}, 2),  # (taken: 'same' is padding 1 here)
])
def test_other_layers_stay_as_they_were(x_shape, w_shape, attrs, pool):
    exe = fc.compile(_layer(x_shape, w_shape, pool=pool, **attrs), cache=False)
    taken = attrs.get("padding") == "same"
    assert (conv.CONV_POOL_OP in _ops(exe)) == taken


def test_a_training_graph_keeps_its_layers():
    """The gradient reads the ReLU's output and the pool's input again: nothing to fuse."""
    t = lambda s: fc.TensorType("f32", s)  # noqa: E731
    loss = fc.trace(lambda x, w, b: ops.sum(ops.max_pool2d(ops.relu(ops.conv2d(x, w, padding=1) + b), kernel_size=2)),
                    t((2, 16, 8, 8)), t((40, 16, 3, 3)), t((40, 1, 1)))
    exe = fc.compile(fc.build_backward_graph(loss, 0, [1, 2]), cache=False)
    assert "conv2d" in _ops(exe) and conv.CONV_POOL_OP not in _ops(exe)


def test_switched_off_leaves_the_layer_on_numpy(monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE", "0")
    assert conv.CONV_POOL_OP not in _ops(fc.compile(_layer((2, 3, 16, 18), (8, 3, 3, 3), padding=1), cache=False))
