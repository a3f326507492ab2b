"""linear_scan and selective_scan against loop references (numpy, torch) and central differences.

The torch reference of selective_scan is written here the way Mamba's
``selective_scan_ref`` is: softplus(delta + bias), deltaA = exp(delta A),
deltaB_u = delta B u, a Python loop over time for the state, y = C h + D u,
out = y * silu(z). Parameters follow Mamba's own test (A = -0.5 rand,
delta = 0.5 rand, delta_bias = 0.5 rand) at a CPU-sized length.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.testing import check_gradients


# -- linear_scan -----------------------------------------------------------------------------------
def _loop_scan(a, b, axis, reverse):
    a, b = np.moveaxis(a, axis, 0), np.moveaxis(b, axis, 0)
    h = np.zeros_like(b)
    carry = np.zeros_like(b[0])
    for t in (range(len(b) - 1, -1, -1) if reverse else range(len(b))):
        carry = a[t] * carry + b[t]
        h[t] = carry
    return np.moveaxis(h, 0, axis)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape, axis", [((9,), 0), ((4, 6), 1), ((5, 2, 3), 0), ((2, 7, 3), -2)])
def test_linear_scan_equals_the_loop(shape, axis, reverse):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1.2, 1.2, shape), rng.standard_normal(shape)
    graph = fc.trace(lambda p, q: ops.linear_scan(p, q, axis=axis, reverse=reverse), fc.TensorType("f64", shape),
                     fc.TensorType("f64", shape))
    np.testing.assert_allclose(fc.compile(graph).run([a, b])[0], _loop_scan(a, b, axis, reverse), rtol=1e-13)


def test_linear_scan_with_a_equal_to_one_is_cumsum():
    x = np.random.default_rng(1).standard_normal((3, 8))
    graph = fc.trace(lambda a, b: [ops.linear_scan(a, b, axis=1, reverse=True), ops.cumsum(b, axis=1, reverse=True)],
                     "f64[3, 8]", "f64[3, 8]")
    scan, cumsum = fc.compile(graph).run([np.ones((3, 8)), x])
    np.testing.assert_allclose(scan, cumsum, rtol=1e-13)


@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_gradients_match_torch_to_second_order(reverse, compare):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (3, 7, 2)), rng.standard_normal((3, 7, 2))

    def reference(p, q):
        steps, carry = [], torch.zeros_like(q[:, 0])
        for t in (range(6, -1, -1) if reverse else range(7)):
            carry = p[:, t] * carry + q[:, t]
            steps.append(carry)
        return torch.stack(steps[::-1] if reverse else steps, 1)

    w, vs = compare.weights_for(rng, [a, b], [0, 1], a.shape)
    got = compare.frame(lambda p, q: ops.linear_scan(p, q, axis=1, reverse=reverse), [a, b], [0, 1], w, vs)
    compare.assert_same(got, compare.torch(reference, [a, b], [0, 1], w, vs), rtol=1e-12, atol=1e-12)


def test_linear_scan_is_differentiable_to_third_order():
    rng = np.random.default_rng(3)
    graph = fc.trace(lambda a, b: ops.linear_scan(a, b, axis=0), "f64[5, 2]", "f64[5, 2]")
    check_gradients(graph, [rng.uniform(-1, 1, (5, 2)), rng.standard_normal((5, 2))], order=3).assert_ok()


@pytest.mark.parametrize("types, message", [
    (("f32[4, 3]", "f32[4, 2]"), "a and b must have one type"),
    (("f32[4]", "f64[4]"), "a and b must have one type"),
    (("i32[4]", "i32[4]"), "must be floating"),
    (("f32[]", "f32[]"), "needs an axis to scan along"),
])
def test_bad_linear_scans_are_named_shape_errors(types, message):
    with pytest.raises(fc.ShapeError, match=message):
        fc.trace(lambda a, b: ops.linear_scan(a, b, axis=0), *types)


# -- selective_scan --------------------------------------------------------------------------------
NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _inputs(rng, batch, dim, n, length, dtype, b_shape="variable", c_shape="variable", groups=2):
    def form(kind):
        return {"variable": (batch, n, length), "grouped": (batch, groups, n, length), "constant": (dim, n)}[kind]
    xs = {
        "u": rng.standard_normal((batch, dim, length)), "delta": 0.5 * rng.random((batch, dim, length)),
        "A": -0.5 * rng.random((dim, n)), "B": rng.standard_normal(form(b_shape)),
        "C": rng.standard_normal(form(c_shape)), "D": rng.standard_normal(dim),
        "z": rng.standard_normal((batch, dim, length)), "delta_bias": 0.5 * rng.random(dim),
    }
    return {k: v.astype(dtype) for k, v in xs.items()}


def torch_selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """The recurrence of Mamba's selective_scan_ref, in torch, for real A."""
    import torch

    if delta_bias is not None:
        delta = delta + delta_bias[:, None]
    if delta_softplus:
        delta = torch.nn.functional.softplus(delta)
    batch, dim, length = u.shape

    def per_channel(m):  # (batch, dim, N, L) or (dim, N)
        if m.dim() == 3:
            return m[:, None].expand(batch, dim, *m.shape[1:])
        if m.dim() == 4:
            return m.repeat_interleave(dim // m.shape[1], dim=1)
        return m
    B, C = per_channel(B), per_channel(C)
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    if B.dim() == 2:
        delta_bu = torch.einsum("bdl,dn,bdl->bdln", delta, B, u)
    else:
        delta_bu = torch.einsum("bdl,bdnl,bdl->bdln", delta, B, u)
    x = u.new_zeros(batch, dim, A.shape[1])
    ys = []
    for i in range(length):
        x = delta_a[:, :, i] * x + delta_bu[:, :, i]
        ys.append(torch.einsum("bdn,bdn->bd", x, C[..., i]) if C.dim() == 4 else torch.einsum("bdn,dn->bd", x, C))
    out = torch.stack(ys, dim=2)
    if D is not None:
        out = out + u * D[:, None]
    if z is not None:
        out = out * torch.nn.functional.silu(z)
    return out


CASES = [
    # (B form, C form, optional inputs, delta_softplus)
    ("variable", "variable", ("D", "z", "delta_bias"), True),
    ("variable", "variable", (), False),
    ("grouped", "grouped", ("D", "delta_bias"), True),
    ("constant", "variable", ("z",), False),
    ("variable", "constant", ("D", "z"), True),
    ("grouped", "constant", ("delta_bias",), True),
    ("grouped", "variable", ("z",), True),
]


def _case_inputs(case, rng, dtype, batch=2, dim=4, n=8, length=64):
    b_form, c_form, optional, softplus = case
    xs = _inputs(rng, batch, dim, n, length, dtype, b_form, c_form)
    names = ("u", "delta", "A", "B", "C", *optional)
    attrs = {"delta_softplus": softplus, "optional_inputs": list(optional)}
    return names, [xs[k] for k in names], attrs


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-10)])
@pytest.mark.parametrize("case", CASES, ids=["-".join([c[0], c[1], *c[2], str(c[3])]) for c in CASES])
def test_selective_scan_matches_the_torch_reference(case, dtype, tol, compare):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(sum(map(ord, str(case))))
    names, xs, attrs = _case_inputs(case, rng, dtype)
    wrt = list(range(len(xs)))
    w = rng.standard_normal(xs[0].shape).astype(dtype)
    got = compare.frame(lambda *t: ops.selective_scan(*t, **attrs), xs, wrt, w)

    def reference(*t):
        return torch_selective_scan_ref(*t[:5], **dict(zip(names[5:], t[5:])), delta_softplus=case[3])
    want = compare.torch(reference, xs, wrt, w)
    assert got.value.dtype == np.dtype(dtype)
    scale = 1.0 + np.abs(want.value).max()  # relative to the output's size (the loop in float32 rounds too)
    np.testing.assert_allclose(got.value, want.value, rtol=tol, atol=tol * scale)
    for name, a, b in zip(names, got.first, want.first):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * (1.0 + np.abs(b).max()), err_msg=f"gradient of {name}")


@pytest.mark.parametrize("b_groups, c_groups", [(1, 4), (4, 1), (2, 4), (4, 2), (1, None), (None, 2)])
def test_selective_scan_with_b_and_c_grouped_apart_matches_the_torch_reference(b_groups, c_groups, compare):
    # As in selective_scan_ref, B and C are repeated to the channels each by its own group count
    # (None: the variable [batch, N, L] form); before, one group count mismatched the state in the gradient.
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(11)
    batch, dim, n, length = 2, 4, 3, 5

    def mat(groups):
        return rng.standard_normal((batch, n, length) if groups is None else (batch, groups, n, length))
    xs = [rng.standard_normal((batch, dim, length)), 0.5 * rng.random((batch, dim, length)),
          -0.5 * rng.random((dim, n)), mat(b_groups), mat(c_groups), rng.standard_normal(dim)]
    wrt = list(range(len(xs)))
    w, vs = compare.weights_for(rng, xs, wrt, xs[0].shape)
    got = compare.frame(lambda *t: ops.selective_scan(*t, delta_softplus=True), xs, wrt, w, vs)
    want = compare.torch(lambda *t: torch_selective_scan_ref(*t[:5], D=t[5], delta_softplus=True), xs, wrt, w, vs)
    compare.assert_same(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", CASES[:4], ids=["-".join([c[0], c[1], *c[2], str(c[3])]) for c in CASES[:4]])
def test_selective_scan_second_order_against_central_differences(case):
    rng = np.random.default_rng(7)
    names, xs, attrs = _case_inputs(case, rng, "float64", batch=1, dim=2, n=3, length=5)
    graph = fc.trace(lambda *t: ops.selective_scan(*t, **attrs), *[fc.TensorType(x.dtype, x.shape) for x in xs])
    check_gradients(graph, xs, order=2).assert_ok()


def test_selective_scan_second_order_matches_torch(compare):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    rng = np.random.default_rng(8)
    names, xs, attrs = _case_inputs(CASES[0], rng, "float64", batch=2, dim=4, n=3, length=12)
    wrt = list(range(len(xs)))
    w, vs = compare.weights_for(rng, xs, wrt, xs[0].shape)
    got = compare.frame(lambda *t: ops.selective_scan(*t, **attrs), xs, wrt, w, vs)
    want = compare.torch(lambda *t: torch_selective_scan_ref(*t[:5], **dict(zip(names[5:], t[5:])),
                                                             delta_softplus=True), xs, wrt, w, vs)
    compare.assert_same(got, want, rtol=1e-10, atol=1e-10)


def test_optional_inputs_default_to_the_leading_names_by_count():
    rng = np.random.default_rng(9)
    xs = _inputs(rng, 1, 2, 3, 4, "float64")
    six = [xs[k] for k in ("u", "delta", "A", "B", "C", "D")]
    types = [fc.TensorType(x.dtype, x.shape) for x in six]
    implicit = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t), *types)).run(six)[0]
    explicit = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t, optional_inputs=["D"]), *types)).run(six)[0]
    without = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t), *types[:5])).run(six[:5])[0]
    np.testing.assert_array_equal(implicit, explicit)
    np.testing.assert_allclose(implicit - without, xs["u"] * xs["D"][:, None], rtol=1e-12)


@pytest.mark.parametrize("dtype, short", [("float16", "f16"), ("bfloat16", "bf16")])
def test_half_precision_selective_scan_is_computed_in_float32(dtype, short):
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

    rng = np.random.default_rng(10)
    names, xs, attrs = _case_inputs(CASES[0], rng, dtype, length=32)
    types = [fc.TensorType(x.dtype, x.shape) for x in xs]
    out = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t, **attrs), *types)).run(xs)[0]
    wide = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t, **attrs), *[t.with_dtype("f32") for t in types]))
    exact = wide.run([x.astype(np.float32) for x in xs])[0]
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, exact.astype(dtype))  # the float32 result, rounded once


def _types(**shapes):
    base = {"u": "f32[2, 4, 6]", "delta": "f32[2, 4, 6]", "A": "f32[4, 3]", "B": "f32[2, 3, 6]", "C": "f32[2, 3, 6]"}
    base.update(shapes)
    return list(base.values())


@pytest.mark.parametrize("types, attrs, message", [
    (_types(delta="f32[2, 4, 5]"), {}, "delta must have u's shape [batch, D, L] = [2, 4, 6]"),
    (_types(A="f32[3, 3]"), {}, "A must be [D, N] with D = 4"),
    (_types(B="f32[2, 2, 6]"), {}, "B must be [batch, N, L] = [2, 3, 6] (variable)"),
    # a wrong N in A shows up as a B that does not fit: the message says where N comes from
    (_types(A="f32[4, 5]"), {}, "got f32[2, 3, 6] (batch, D and L come from u, N = 5 from A's last axis: check A too)"),
    (_types(C="f32[2, 3, 3, 6]"), {}, "G dividing D = 4"),
    (_types(A="f64[4, 3]"), {}, "every input must have u's dtype float32; A is f64[4, 3]"),
    (_types(u="i32[2, 4, 6]"), {}, "u must be a floating [batch, D, L] tensor"),
    ([*_types(), "f32[3]"], {}, "D must be [D] = [4]"),
    ([*_types(), "f32[2, 4, 5]"], {"optional_inputs": ["z"]}, "z must have u's shape"),
    ([*_types(), "f32[4]"], {"optional_inputs": ["z", "D"]}, "each once and in that order"),
    ([*_types(), "f32[4]"], {"optional_inputs": ["D", "z"]}, "names 2 input(s) ['D', 'z'], but 1 follow C"),
    ([*_types(), "f32[4]", "f32[2, 4, 6]", "f32[4]", "f32[4]"], {}, "takes at most 8 inputs"),
    (_types()[:4], {}, "takes at least 5 inputs, got 4"),
])
def test_mismatched_selective_scan_inputs_are_named_shape_errors(types, attrs, message):
    with pytest.raises(fc.ShapeError) as info:
        fc.trace(lambda *t: ops.selective_scan(*t, **attrs), *types)
    assert message in str(info.value)


# -- selective_scan's gradient kernels (issue 21) ------------------------------------------------------
def _training(case, dtype, rng, length=9):
    names, xs, attrs = _case_inputs(case, rng, dtype, batch=2, dim=4, n=3, length=length)
    types = [fc.TensorType(x.dtype, x.shape) for x in xs]
    g = rng.standard_normal(xs[0].shape).astype(dtype)
    loss = fc.trace(lambda *t: ops.sum(ops.selective_scan(*t[:-1], **attrs) * t[-1]), *types,
                    fc.TensorType(g.dtype, g.shape))
    return fc.build_backward_graph(loss, 0, list(range(len(xs)))), [*xs, g], attrs, types


@pytest.mark.parametrize("case", CASES, ids=["-".join([c[0], c[1], *c[2], str(c[3])]) for c in CASES])
def test_the_training_graph_scans_forward_once_and_keeps_the_forward_bits(case):
    rng = np.random.default_rng(21)
    training, inputs, attrs, types = _training(case, "float32", rng)
    exe = fc.compile(training)
    assert [n.op for n in exe.graph.nodes].count("selective_scan_saving_internal") == 1
    assert not any(n.op == "selective_scan" for n in exe.graph.nodes)  # merged into the saving node
    forward = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t, **attrs), *types)).run(inputs[:-1])[0]
    np.testing.assert_array_equal(exe.run(inputs)[0], np.sum(forward * inputs[-1], dtype=np.float32))
    unmerged = fc.compile(training, opt_level=0)  # the forward runs twice, with the same results
    for a, b in zip(unmerged.run(inputs), exe.run(inputs)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", CASES, ids=["-".join([c[0], c[1], *c[2], str(c[3])]) for c in CASES])
def test_the_backward_kernel_matches_the_composite_gradient(case, monkeypatch):
    # The numpy kernel sums in another order than the frame-op composite (still the reference for half precision
    # and for higher orders): float64 agrees to rounding, float32 within a few ulps of the largest gradient entry
    import frame_ops_sequence._selective as selective

    for dtype, tol in (("float64", 1e-12), ("float32", 2e-6)):
        training, inputs, _, _ = _training(case, dtype, np.random.default_rng(22))
        fast = fc.compile(training, cache=False).run(inputs)
        with monkeypatch.context() as m:
            m.setattr(selective, "fast_path", lambda t: False)
            training, inputs, _, _ = _training(case, dtype, np.random.default_rng(22))
            composite = fc.compile(training, cache=False).run(inputs)
        for a, b in zip(fast, composite):
            assert np.abs(a - b).max() <= tol * (1.0 + np.abs(b).max())


@pytest.mark.parametrize("length", [1, 2, 17, 33])
def test_the_backward_kernel_over_a_last_block_of_one_step_matches_the_composite_gradient(length, monkeypatch):
    """The backward walks blocks of 16 steps and keeps lam_{t+1} as a row of the block, not a copy: at 17 and 33
    steps the last block has one step, whose row is the one the step before left lam_{t+1} in."""
    import frame_ops_sequence._selective as selective

    training, inputs, _, _ = _training(CASES[0], "float64", np.random.default_rng(23), length)
    fast = fc.compile(training, cache=False).run(inputs)
    with monkeypatch.context() as m:
        m.setattr(selective, "fast_path", lambda t: False)
        training, inputs, _, _ = _training(CASES[0], "float64", np.random.default_rng(23), length)
        composite = fc.compile(training, cache=False).run(inputs)
    for a, b in zip(fast, composite):
        assert np.abs(a - b).max() <= 1e-12 * (1.0 + np.abs(b).max())


@pytest.mark.parametrize("length", [1, 15, 17, 33])
@pytest.mark.parametrize("case", CASES[:2], ids=["variable", "constant-b"])
def test_the_forward_over_partial_blocks_matches_the_torch_reference(case, length):
    """The forward computes exp(delta A) and delta B u for 16 steps at a time, then the recurrence step by step:
    lengths that leave a partial last block (of one step at 17 and 33)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'frame-core[compare]')")
    names, xs, attrs = _case_inputs(case, np.random.default_rng(24), "float64", batch=2, dim=4, n=3, length=length)
    got = fc.compile(fc.trace(lambda *t: ops.selective_scan(*t, **attrs),
                              *[fc.TensorType(x.dtype, x.shape) for x in xs])).run(xs)[0]
    want = torch_selective_scan_ref(*map(torch.from_numpy, xs[:5]), delta_softplus=case[3],
                                    **{k: torch.from_numpy(v) for k, v in zip(names[5:], xs[5:])}).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_saving_and_backward_ops_refuse_half_precision_and_wrong_saved_types():
    f16 = ["f16[1, 2, 3]", "f16[1, 2, 3]", "f16[2, 2]", "f16[1, 2, 3]", "f16[1, 2, 3]"]
    with pytest.raises(fc.ShapeError, match="float32 or float64"):
        fc.trace(lambda *t: ops.selective_scan_saving_internal(*t), *f16)
    f32 = [t.replace("f16", "f32") for t in f16]
    with pytest.raises(fc.ShapeError, match="a, h, dt, y and the cotangent"):
        fc.trace(lambda *t: ops.selective_scan_backward_internal(*t), *f32, "f32[3, 1, 1, 2, 2]",
                 "f32[3, 1, 1, 2, 3]", "f32[1, 2, 3]", "f32[1, 2, 3]", "f32[1, 2, 3]")


@pytest.mark.parametrize("c_type", ["f64[1, 3, 0]", "f64[2, 3]"])
def test_an_empty_sequence_has_zero_gradients(c_type):
    types = ["f64[1, 2, 0]", "f64[1, 2, 0]", "f64[2, 3]", c_type, c_type]
    training = fc.build_backward_graph(fc.trace(lambda *t: ops.sum(ops.selective_scan(*t)), *types), 0, list(range(5)))
    shapes = [fc.compile(fc.trace(lambda x: x, t)).input_types[0].shape for t in types]
    out = fc.compile(training).run([np.ones(s) for s in shapes])
    assert [o.shape for o in out[1:]] == shapes and all(not np.any(o) for o in out)
