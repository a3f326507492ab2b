"""Hostile cases for a scan's inline steps (``Executable.scan_steps``): every result must be that of the body's
runner called once per step (``checks=True`` keeps it) bit for bit, and a plain numpy loop where one is written;
runs alternate inputs A, B, A so a value left in a reused buffer would show."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def _bits(a: np.ndarray) -> tuple:
    a = np.asarray(a)
    return a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()


def _same(graph: fc.Graph, *runs: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Each input list run on the inline executable and the per-step runner, in turn, twice over (A, B, A, B):
    the results of each run, equal in bits to the runner's."""
    inline = fc.compile(graph, cache=False, checks=False)
    runner = fc.compile(graph, cache=False, checks=True)
    results = []
    for xs in [*runs, *runs]:
        got = inline.run([np.array(x, copy=True) for x in xs])
        want = runner.run([np.array(x, copy=True) for x in xs])
        assert [_bits(g) for g in got] == [_bits(w) for w in want]
        results.append([np.array(g, copy=True) for g in got])
    for k, r in enumerate(results[len(runs):]):  # a second run of the same inputs: the same bits
        assert [_bits(g) for g in r] == [_bits(g) for g in results[k]]
    return results


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("length", [0, 1, 2, 40])
@pytest.mark.parametrize("reverse", [False, True])
def test_lengths_and_directions_against_numpy(length, reverse):
    def f(h, xs, w):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            new = ops.tanh(x + c @ w)
            return new, (new, c)
        last, (news, entering) = ops.scan(step, h, xs, reverse=reverse)
        return last, news, entering
    graph = fc.trace(f, "f64[3]", f"f64[{length}, 3]", "f64[3, 3]")
    r = _rng(length)
    a = [r.standard_normal(3), r.standard_normal((length, 3)), r.standard_normal((3, 3)) / 2]
    b = [r.standard_normal(3), r.standard_normal((length, 3)), r.standard_normal((3, 3)) / 2]
    for xs, got in zip([a, b], _same(graph, a, b)):
        c = xs[0].copy()
        news, entering = np.zeros((length, 3)), np.zeros((length, 3))
        for i in (range(length - 1, -1, -1) if reverse else range(length)):
            entering[i] = c
            c = np.tanh(xs[1][i] + c @ xs[2])
            news[i] = c
        np.testing.assert_array_equal(got[0], c)
        np.testing.assert_array_equal(got[1], news)
        np.testing.assert_array_equal(got[2], entering)


@pytest.mark.parametrize("length", [0, 1, 2, 9])
@pytest.mark.parametrize("reverse", [False, True])
def test_mixed_dtype_carries_and_rank0(length, reverse):
    def f(a16, b32, c64, n, flag, s, xs):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            a, b, d, k, g, s = c
            a2 = a * ops.cast(x, to="f16") + a
            b2 = ops.sin(b) + x
            d2 = d * 0.5 + ops.cast(ops.sum(b2), to="f64")
            k2 = k + ops.cast(x > 0, to="i64") * 3
            g2 = ops.not_equal(g, x[0] > 0)
            s2 = s + ops.sum(x)
            return (a2, b2, d2, k2, g2, s2), (a2, b2, d2, k2, g2, s2, s)
        last, ys = ops.scan(step, (a16, b32, c64, n, flag, s), xs, reverse=reverse)
        return (*last, *ys)
    graph = fc.trace(f, "f16[2]", "f32[2]", "f64[]", "i64[2]", "bool[]", "f32[]", f"f32[{length}, 2]")

    def inputs(seed):  # noqa: ANN001, ANN202
        r = _rng(seed)
        return [r.standard_normal(2).astype(np.float16), r.standard_normal(2).astype(np.float32),
                np.array(r.standard_normal()), r.integers(-5, 5, 2), np.array(seed % 2 == 0),
                np.array(r.standard_normal(), np.float32), r.standard_normal((length, 2)).astype(np.float32)]
    a, b = inputs(1), inputs(2)
    for xs, got in zip([a, b], _same(graph, a, b)):
        a16, b32, c64, n, flag, s = [np.array(v, copy=True) for v in xs[:6]]
        stacks: list[list[np.ndarray]] = [[] for _ in range(7)]
        order = range(length - 1, -1, -1) if reverse else range(length)
        for i in order:
            x = xs[6][i]
            a16 = a16 * x.astype(np.float16) + a16
            b32 = np.sin(b32) + x
            c64 = c64 * 0.5 + np.float64(np.sum(b32))
            n = n + (x > 0).astype(np.int64) * 3
            flag = np.not_equal(flag, x[0] > 0)
            s_old = s
            s = np.float32(s + np.sum(x))
            for st, v in zip(stacks, (a16, b32, c64, n, flag, s, s_old)):
                st.append(np.array(v))
        assert [_bits(g) for g in got[:6]] == [_bits(np.asarray(v).astype(t.dtype))
                                              for v, t in zip((a16, b32, c64, n, flag, s), xs[:6])]
        for k, st in enumerate(stacks):
            want = np.zeros((length, *np.shape(xs[k if k < 6 else 5])), np.asarray(xs[k if k < 6 else 5]).dtype)
            for j, i in enumerate(order):
                want[i] = st[j]
            assert got[6 + k].dtype == want.dtype
            np.testing.assert_array_equal(got[6 + k], want)


ALIASING = {
    "identity": lambda c, x: (c, c),
    "twice": lambda c, x: (lambda n: (n, (n, n, c)))(c * x),
    "constant": lambda c, x: (np.full(3, 2.5), (np.full(3, 2.5), c)),
    "swap": lambda c, x: ((c[1], c[0] + x), (c[0], c[1])),
    "input_row": lambda c, x: (x, (x, c)),
    "carry_is_y_of_other": lambda c, x: ((c[1] * x, c[1]), (c[0], c[1] * x, c[1])),
}


@pytest.mark.parametrize("name", sorted(ALIASING))
@pytest.mark.parametrize("length", [0, 1, 2, 5])
@pytest.mark.parametrize("reverse", [False, True])
def test_bodies_whose_outputs_alias_their_inputs(name, length, reverse):
    pair = name in ("swap", "carry_is_y_of_other")

    def f(a, b, xs):  # noqa: ANN001, ANN202
        last, ys = ops.scan(ALIASING[name], (a, b) if pair else a, xs, reverse=reverse)
        return (*(last if pair else (last,)), *(ys if isinstance(ys, tuple) else (ys,)))
    graph = fc.trace(f, "f64[3]", "f64[3]", f"f64[{length}, 3]")
    r = _rng(7)
    a = [r.standard_normal(3), r.standard_normal(3), r.standard_normal((length, 3))]
    b = [r.standard_normal(3), r.standard_normal(3), r.standard_normal((length, 3))]
    for xs, got in zip([a, b], _same(graph, a, b)):
        c = (xs[0].copy(), xs[1].copy()) if pair else xs[0].copy()
        rows: list = []
        order = list(range(length - 1, -1, -1) if reverse else range(length))
        for i in order:
            c, y = ALIASING[name](c, xs[2][i])
            rows.append([np.array(v, copy=True) for v in (y if isinstance(y, tuple) else (y,))])
        finals = list(c) if pair else [c]
        for g, w in zip(got, finals):
            np.testing.assert_array_equal(g, w)
        for k, g in enumerate(got[len(finals):]):
            want = np.zeros((length, 3))
            for j, i in enumerate(order):
                want[i] = rows[j][k]
            np.testing.assert_array_equal(g, want)


VIEWS = {
    "reshape": lambda n, c: ops.reshape(n, shape=(3, 2)),
    "transpose": lambda n, c: ops.transpose(n),
    "slice": lambda n, c: n[1:, ::2],
    "entering_transposed": lambda n, c: ops.transpose(c),
    "entering_slice": lambda n, c: c[0],
    # broadcasting, and a kernel of no inputs (zeros) in the body: its check once generated `(,)`, a SyntaxError
    "broadcast": lambda n, c: n + ops.reshape(c[:, 0], shape=(2, 1)) * 0.0 + ops.zeros(shape=(4, 2, 3), dtype="f32"),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("reverse", [False, True])
def test_per_step_outputs_that_are_views_of_carries(name, reverse):
    def f(h, xs, w):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            n = ops.tanh(c * w + x)  # x: [3] broadcast over the rows of c
            return n, (VIEWS[name](n, c), n)
        return ops.scan(step, h, xs, reverse=reverse)[1]
    graph = fc.trace(f, "f32[2, 3]", "f32[6, 3]", "f32[2, 1]")
    r = _rng(11)
    a = [r.standard_normal(s).astype(np.float32) for s in ((2, 3), (6, 3), (2, 1))]
    b = [r.standard_normal(s).astype(np.float32) for s in ((2, 3), (6, 3), (2, 1))]
    _same(graph, a, b)


def _nested(kind: str, reverse: bool):  # noqa: ANN202
    def f(h, xs, w):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            if kind == "scan":
                inner_last, inner = ops.scan(lambda d, e: (lambda n: (n, (n, d)))(ops.tanh(d * w + e)), c,
                                             ops.reshape(x, shape=(2, 3)), reverse=not reverse)
                n = inner_last + ops.sum(inner[0], axes=(0,)) * 0.25
            elif kind == "loop":
                n = ops.loop(lambda i, d: (True, ops.sin(d * w) + x[:3]), 3, True, c)
            else:
                n = ops.if_else(ops.sum(x) > 0, lambda d: ops.tanh(d * w), lambda d: d * 0.5 - x[3:], c)
            return n, (n, c)
        return ops.scan(step, h, xs, reverse=reverse)
    return f


@pytest.mark.parametrize("kind", ["scan", "loop", "if_else"])
@pytest.mark.parametrize("reverse", [False, True])
def test_nested_control_flow_in_the_body(kind, reverse):
    f = _nested(kind, reverse)

    def loss(h, xs, w):  # noqa: ANN001, ANN202
        last, (news, entering) = f(h, xs, w)
        return ops.sum(last * last) + ops.sum(ops.sin(news)) + ops.sum(entering * news)
    types = ["f64[3]", "f64[5, 6]", "f64[3]"]
    r = _rng(5)
    a = [r.standard_normal(3), r.standard_normal((5, 6)), r.standard_normal(3)]
    b = [r.standard_normal(3), r.standard_normal((5, 6)), r.standard_normal(3)]
    _same(fc.trace(lambda *t: (lambda o: (o[0], *o[1]))(f(*t)), *types), a, b)
    graph = fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1, 2])
    got = _same(graph, a, b)[0]
    value = fc.compile(fc.trace(loss, *types), cache=False)
    for i in (0, 1, 2):  # first derivatives against central differences
        base = [x.copy() for x in a]
        num = np.zeros(a[i].shape)
        for k in np.ndindex(a[i].shape):
            plus, minus = [x.copy() for x in base], [x.copy() for x in base]
            plus[i][k] += 1e-6
            minus[i][k] -= 1e-6
            num[k] = (value.run(plus)[0] - value.run(minus)[0]) / 2e-6
        np.testing.assert_allclose(got[1 + i], num, rtol=1e-5, atol=1e-7)


SECOND_ORDER = {
    "rnn": lambda c, x, w: (lambda n: (n, (n, c)))(ops.tanh(c * w + x)),
    "identity_then_views": lambda c, x, w: (c, (ops.transpose(ops.reshape(c * x, shape=(3, 1))), c[1:])),
    "twice": lambda c, x, w: (lambda n: (n, (n, n)))(ops.sin(c) * w + x),
    "constant_carry": lambda c, x, w: (np.full(3, 0.5), (c * x * w, c)),
    "broadcast": lambda c, x, w: (lambda n: (n, ops.reshape(n, shape=(3, 1)) * ops.reshape(w, shape=(1, 3))))(
        ops.tanh(c * x) + w),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [4])
def test_gradients_to_order_two_against_finite_differences(name, reverse, length):
    from .helpers import hvp_graph

    def loss(h, xs, w):  # noqa: ANN001, ANN202
        last, ys = ops.scan(lambda c, x: SECOND_ORDER[name](c, x, w), h, xs, reverse=reverse)
        total = ops.sum(ops.sin(last))
        for k, y in enumerate(ys if isinstance(ys, tuple) else (ys,)):
            total = total + ops.sum(ops.tanh(y) * (k + 1.5))
        return total
    types = ["f64[3]", f"f64[{length}, 3]", "f64[3]"]
    r = _rng(length)
    a = [r.standard_normal(3), r.standard_normal((length, 3)), r.standard_normal(3)]
    v = [r.standard_normal(3), r.standard_normal((length, 3)), r.standard_normal(3)]
    hv = _same(hvp_graph(loss, types, [0, 1, 2], v), a)[0]
    grads = fc.compile(fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1, 2]), cache=False)
    eps = 1e-5
    plus = grads.run([x + eps * d for x, d in zip(a, v)])[1:]
    minus = grads.run([x - eps * d for x, d in zip(a, v)])[1:]
    for k in range(3):
        np.testing.assert_allclose(hv[5 + k], (plus[k] - minus[k]) / (2 * eps), rtol=1e-5, atol=1e-7)
    value = fc.compile(fc.trace(loss, *types), cache=False)
    s = (value.run([x + eps * d for x, d in zip(a, v)])[0] - value.run([x - eps * d for x, d in zip(a, v)])[0])
    np.testing.assert_allclose(hv[4], s / (2 * eps), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_mode_against_finite_differences(name, reverse):
    def f(h, xs, w):  # noqa: ANN001, ANN202
        last, ys = ops.scan(lambda c, x: SECOND_ORDER[name](c, x, w), h, xs, reverse=reverse)
        return (last, *(ys if isinstance(ys, tuple) else (ys,)))
    types = ["f64[3]", "f64[4, 3]", "f64[3]"]
    r = _rng(9)
    a = [r.standard_normal(3), r.standard_normal((4, 3)), r.standard_normal(3)]
    v = [r.standard_normal(3), r.standard_normal((4, 3)), r.standard_normal(3)]
    forward = fc.trace(f, *types)
    n_out = len(forward.outputs)
    got = _same(fc.build_jvp_graph(forward), [*a, *v], [*v, *a])[0]
    value = fc.compile(forward, cache=False)
    eps = 1e-6
    plus = value.run([x + eps * d for x, d in zip(a, v)])
    minus = value.run([x - eps * d for x, d in zip(a, v)])
    for k in range(n_out):
        np.testing.assert_allclose(got[n_out + k], (plus[k] - minus[k]) / (2 * eps), rtol=1e-6, atol=1e-8)


def _rnn_loss(h, xs, w):  # noqa: ANN001, ANN202
    last, ys = ops.scan(lambda c, x: (lambda n: (n, (n, c)))(ops.tanh(c @ w + x)), h, xs)
    return ops.sum(last) + ops.sum(ys[0] * ys[1])


def test_nan_and_inf_flow_through_the_steps_as_in_the_runner():
    graph = fc.build_backward_graph(fc.trace(_rnn_loss, "f32[2, 3]", "f32[6, 2, 3]", "f32[3, 3]"), 0, [0, 1, 2])
    r = _rng(2)
    clean = [r.standard_normal(s).astype(np.float32) for s in ((2, 3), (6, 2, 3), (3, 3))]
    dirty = [x.copy() for x in clean]
    dirty[1][3, 0, 1] = np.nan
    dirty[1][4, 1, 2] = np.inf
    dirty[1][5, 1, 0] = -np.inf
    got = _same(graph, clean, dirty)
    assert np.isfinite(got[0][0]) and all(np.isfinite(g).all() for g in got[0])
    assert np.isnan(got[1][0])  # the NaN reaches the loss and every gradient it touches
    # batch row 0 met the NaN: NaN at every step (forward after it, backward before it); row 1 met only +-inf,
    # which tanh saturates: finite
    assert np.isnan(got[1][2][:, 0]).all() and np.isfinite(got[1][2][:, 1]).all()


def test_many_runs_alternating_inputs_leave_nothing_behind():
    graph = fc.build_backward_graph(fc.trace(_rnn_loss, "f64[2, 3]", "f64[5, 2, 3]", "f64[3, 3]"), 0, [0, 1, 2])
    exe = fc.compile(graph, cache=False)
    r = _rng(4)
    runs = [[r.standard_normal(s) for s in ((2, 3), (5, 2, 3), (3, 3))] for _ in range(3)]
    want = [[_bits(o) for o in fc.compile(graph, cache=False, checks=True).run(xs)] for xs in runs]
    kept = []
    for k in range(30):
        out = exe.run(runs[k % 3])
        assert [_bits(o) for o in out] == want[k % 3]
        kept.append((k % 3, out))
    for k, out in kept:  # results handed out earlier are not written by later runs
        assert [_bits(o) for o in out] == want[k]


def test_two_threads_on_one_executable():
    graph = fc.build_backward_graph(fc.trace(_rnn_loss, "f64[2, 3]", "f64[40, 2, 3]", "f64[3, 3]"), 0, [0, 1, 2])
    exe = fc.compile(graph, cache=False)
    r = _rng(6)
    runs = [[r.standard_normal(s) for s in ((2, 3), (40, 2, 3), (3, 3))] for _ in range(2)]
    want = [[_bits(o) for o in fc.compile(graph, cache=False, checks=True).run(xs)] for xs in runs]
    bad: list = []

    def work(t: int) -> None:
        for _ in range(15):
            if [_bits(o) for o in exe.run(runs[t])] != want[t]:
                bad.append(t)
    threads = [threading.Thread(target=work, args=(t,)) for t in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_dynamic_batch_sizes():
    """The forward scan compiled with dynamic_shapes (a training graph through a scan is refused at another
    size by name: scan's gradient is not declared any_shape_gradient, docs/design-parameters-and-shapes.md;
    value_and_grad retraces)."""
    def f(h, xs, w):  # noqa: ANN001, ANN202
        last, ys = ops.scan(lambda c, x: (lambda n: (n, (n, c)))(ops.tanh(c @ w + x)), h, xs)
        return last, ys[0], ys[1]
    exe = fc.compile(fc.trace(f, "f32[2, 3]", "f32[5, 2, 3]", "f32[3, 3]"), cache=False, dynamic_shapes=True)
    r = _rng(8)
    for batch in (2, 7, 1, 2, 7):
        xs = [r.standard_normal(s).astype(np.float32) for s in ((batch, 3), (5, batch, 3), (3, 3))]
        want = fc.compile(fc.trace(f, f"f32[{batch}, 3]", f"f32[5, {batch}, 3]", "f32[3, 3]"),
                          cache=False, checks=True).run(xs)
        assert [_bits(o) for o in exe.run(xs)] == [_bits(o) for o in want]


def _broadcasting_residual_loss(case: str):  # noqa: ANN202
    """Bodies whose gradient's residual is a cheap chain of per-step outputs of *different* shapes: recomputed
    on whole stacks, a rank-0 output ([L]) met a [3] constant, and [L, 3] met [L, 2, 1] (at L = 2 broadcasting
    to the right shape with the wrong values: a silent wrong gradient; at other lengths a GradientError)."""
    def loss(h, xs):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            if case == "constant":
                t = ops.tanh(c * x)  # rank 0, stacked
                return ops.sum(ops.square(t * np.array([1.0, 2.0, 3.0]))) * 0.1, t
            t1 = ops.tanh(c * x)  # [3]
            t2 = ops.reshape(ops.tanh(c[:2] + x[1:]), shape=(2, 1))  # [2, 1]
            return ops.tanh(c + ops.sum(ops.square(t1 + t2), axes=(0,)) * 0.1), (t1, t2)
        last, ys = ops.scan(step, h, xs)
        if case == "constant":
            return ops.sum(last) + ops.sum(ops.sin(ys))
        return ops.sum(last) + ops.sum(ops.sin(ys[0])) + ops.sum(ys[1])
    return loss


@pytest.mark.parametrize("case", ["constant", "mixed"])
@pytest.mark.parametrize("length", [2, 3])
def test_a_residual_chain_over_outputs_of_different_shapes(case, length):
    loss = _broadcasting_residual_loss(case)
    types = ["f64[]", f"f64[{length}]"] if case == "constant" else ["f64[3]", f"f64[{length}, 3]"]
    r = _rng(length)
    shapes = [(), (length,)] if case == "constant" else [(3,), (length, 3)]
    a = [np.asarray(r.standard_normal(s)) for s in shapes]
    got = _same(fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1]), a)[0]
    value = fc.compile(fc.trace(loss, *types), cache=False)
    for i in (0, 1):
        num = np.zeros(a[i].shape)
        for k in np.ndindex(a[i].shape):
            plus, minus = [x.copy() for x in a], [x.copy() for x in a]
            plus[i][k] += 1e-6
            minus[i][k] -= 1e-6
            num[k] = (value.run(plus)[0] - value.run(minus)[0]) / 2e-6
        np.testing.assert_allclose(got[1 + i], num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("checks", [False, True])
def test_a_data_error_at_a_later_step_is_named_and_the_next_run_is_clean(checks):
    def f(h, idx, table):  # noqa: ANN001, ANN202
        return ops.scan(lambda c, i: (lambda n: (n, n))(ops.tanh(c + ops.gather(table, i, axis=0))), h, idx)
    graph = fc.trace(f, "f64[3]", "i64[5]", "f64[4, 3]")
    exe = fc.compile(graph, cache=False, checks=checks)
    good = [np.zeros(3), np.array([0, 1, 2, 3, 0]), np.arange(12.0).reshape(4, 3) / 10]
    want = [_bits(o) for o in exe.run(good)]
    with pytest.raises(fc.DataError, match="gather: index 9 .* out of range"):
        exe.run([good[0], np.array([0, 1, 2, 9, 0]), good[2]])
    assert [_bits(o) for o in exe.run(good)] == want


def test_a_fused_group_of_several_stacked_outputs_writes_each_into_its_row():
    def f(h, xs):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            a = ops.tanh(c + x)
            b = a * a + 1.0
            d = ops.exp(b * 0.1) - a
            return d, (a, b, d, c)
        last, ys = ops.scan(step, h, xs)
        return (last, *ys)
    r = _rng(12)
    runs = [[r.standard_normal(64).astype(np.float32), r.standard_normal((12, 64)).astype(np.float32)]
            for _ in range(2)]
    got = _same(fc.trace(f, "f32[64]", "f32[12, 64]"), *runs)
    for xs, out in zip(runs, got):
        c = xs[0]
        for i in range(12):
            assert out[4][i].tobytes() == c.tobytes()  # the entering carry, filled after the loop
            c = out[3][i]
        assert out[0].tobytes() == c.tobytes()


@pytest.mark.parametrize("kind", ["scan", "loop", "if_else"])
def test_nested_second_order_and_forward_mode(kind):
    from .helpers import hvp_graph

    f = _nested(kind, False)

    def loss(h, xs, w):  # noqa: ANN001, ANN202
        last, (news, entering) = f(h, xs, w)
        return ops.sum(last * last) + ops.sum(ops.sin(news)) + ops.sum(entering * news)
    types = ["f64[3]", "f64[3, 6]", "f64[3]"]
    r = _rng(13)
    a = [r.standard_normal(3), r.standard_normal((3, 6)), r.standard_normal(3)]
    v = [r.standard_normal(3), r.standard_normal((3, 6)), r.standard_normal(3)]
    hv = _same(hvp_graph(loss, types, [0, 1, 2], v), a)[0]
    grads = fc.compile(fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1, 2]), cache=False)
    eps = 1e-5
    plus = grads.run([x + eps * d for x, d in zip(a, v)])[1:]
    minus = grads.run([x - eps * d for x, d in zip(a, v)])[1:]
    for k in range(3):
        np.testing.assert_allclose(hv[5 + k], (plus[k] - minus[k]) / (2 * eps), rtol=1e-5, atol=1e-7)
    forward = fc.trace(loss, *types)
    jvp = _same(fc.build_jvp_graph(forward), [*a, *v])[0]
    value = fc.compile(forward, cache=False)
    want = (value.run([x + 1e-6 * d for x, d in zip(a, v)])[0] - value.run([x - 1e-6 * d for x, d in zip(a, v)])[0])
    np.testing.assert_allclose(jvp[1], want / 2e-6, rtol=1e-6)


OUT_KERNELS = {  # ops whose kernels take an ``out`` array: per-step outputs written into their rows, rank 0 too
    "matmul_vector": lambda c, x, w: c @ x,
    "matmul_row": lambda c, x, w: ops.reshape(c, shape=(1, 3)) @ x,
    "sum": lambda c, x, w: ops.sum(c * x),
    "mean": lambda c, x, w: ops.mean(c * x),
    "max": lambda c, x, w: ops.max(c * x),
    "argmax": lambda c, x, w: ops.argmax(c * x),
    "argmin": lambda c, x, w: ops.argmin(c * x, axis=0),
    "logsumexp": lambda c, x, w: ops.logsumexp(c * x),
    "softmax": lambda c, x, w: ops.softmax(c * x),
    "concat": lambda c, x, w: ops.concat(c, x, axis=0),
    "stack": lambda c, x, w: ops.stack(c, x, axis=1),
    "pad": lambda c, x, w: ops.pad(c, before=(1,), after=(2,)),
    "one_hot": lambda c, x, w: ops.one_hot(ops.argmax(c), depth=4),
    "cast_int": lambda c, x, w: ops.cast(c * 10, to="i32"),
    "cast_bool": lambda c, x, w: ops.cast(c, to="bool"),
    "clip": lambda c, x, w: ops.clip(c, min=-0.5, max=0.5),
    "greater": lambda c, x, w: c > x,
    "maximum": lambda c, x, w: ops.maximum(c, w),
}


@pytest.mark.parametrize("name", sorted(OUT_KERNELS))
def test_out_taking_kernels_write_their_rows(name):
    def f(h, xs, w):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            n = ops.tanh(c * 0.9 + x)
            return n, (OUT_KERNELS[name](n, x, w), OUT_KERNELS[name](c, x, w))
        last, ys = ops.scan(step, h, xs, reverse=name < "m")
        return (last, *ys)
    r = _rng(14)
    _same(fc.trace(f, "f64[3]", "f64[5, 3]", "f64[3]"),
          *[[r.standard_normal(3), r.standard_normal((5, 3)), r.standard_normal(3)] for _ in range(2)])


SHAPES_OF_SCANS = {  # (init, xs, body): no carry, no per-step output, no scanned input, checkpointed
    "no_carry": lambda h, xs, w: ops.scan(lambda c, x: ((), ops.tanh(x * w)), (), xs),
    "no_output": lambda h, xs, w: ops.scan(lambda c, x: (ops.tanh(c * w + x), None), h, xs),
    "no_xs": lambda h, xs, w: ops.scan(lambda c, x: (lambda n: (n, (n, c)))(ops.sin(c * w)), h, None, length=4),
    "captured": lambda h, xs, w: ops.scan(lambda c, x: (lambda n: (n, n * h))(ops.tanh(c * w + x)), h, xs),
    "checkpointed": lambda h, xs, w: ops.scan(lambda c, x: (lambda n: (n, (n, c)))(ops.tanh(c * w + x)), h, xs,
                                              checkpoint_every=2),
}


def _flat(result):  # noqa: ANN001, ANN202
    out = []
    for part in result:
        if isinstance(part, tuple):
            out.extend(part)
        elif part is not None:
            out.append(part)
    return out


@pytest.mark.parametrize("name", sorted(SHAPES_OF_SCANS))
def test_scans_without_carries_outputs_or_xs_and_checkpointed(name):
    def f(h, xs, w):  # noqa: ANN001, ANN202
        return _flat(SHAPES_OF_SCANS[name](h, xs, w))

    def loss(h, xs, w):  # noqa: ANN001, ANN202
        total = ops.sum(w)
        for k, v in enumerate(f(h, xs, w)):
            total = total + ops.sum(ops.sin(v)) * (k + 1)
        return total
    types = ["f64[3]", "f64[5, 3]", "f64[3]"]
    r = _rng(15)
    runs = [[r.standard_normal(3), r.standard_normal((5, 3)), r.standard_normal(3)] for _ in range(2)]
    _same(fc.trace(f, *types), *runs)
    got = _same(fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1, 2]), *runs)[0]
    value = fc.compile(fc.trace(loss, *types), cache=False)
    a = runs[0]
    for i in (0, 1, 2):
        num = np.zeros(a[i].shape)
        for k in np.ndindex(a[i].shape):
            plus, minus = [x.copy() for x in a], [x.copy() for x in a]
            plus[i][k] += 1e-6
            minus[i][k] -= 1e-6
            num[k] = (value.run(plus)[0] - value.run(minus)[0]) / 2e-6
        np.testing.assert_allclose(got[1 + i], num, rtol=1e-6, atol=1e-8)


def test_two_threads_on_one_dynamic_executable_with_different_batch_sizes():
    def f(h, xs, w):  # noqa: ANN001, ANN202
        last, ys = ops.scan(lambda c, x: (lambda n: (n, (n, c)))(ops.tanh(c @ w + x)), h, xs)
        return last, ys[0], ys[1]
    exe = fc.compile(fc.trace(f, "f64[2, 3]", "f64[30, 2, 3]", "f64[3, 3]"), cache=False, dynamic_shapes=True)
    r = _rng(16)
    runs = [[r.standard_normal(s) for s in ((b, 3), (30, b, 3), (3, 3))] for b in (2, 5)]
    want = [[_bits(o) for o in fc.compile(fc.trace(f, *[fc.TensorType(x.dtype, x.shape) for x in xs]), cache=False,
                                          checks=True).run(xs)] for xs in runs]
    bad: list = []

    def work(t: int) -> None:
        for _ in range(20):
            if [_bits(o) for o in exe.run(runs[t])] != want[t]:
                bad.append(t)
    threads = [threading.Thread(target=work, args=(t,)) for t in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_forward_mode_through_mixed_dtype_carries():
    def f(a16, b32, n, flag, xs):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            a, b, k, g = c
            a2 = a * ops.cast(x, to="f16") + a
            b2 = ops.sin(b) + x * ops.cast(k, to="f32")
            k2 = k + ops.cast(x > 0, to="i64")
            g2 = ops.not_equal(g, x[0] > 0)
            return (a2, b2, k2, g2), (a2, b2 * ops.cast(g2, to="f32"), k2)
        last, ys = ops.scan(step, (a16, b32, n, flag), xs, reverse=True)
        return (*last, *ys)
    forward = fc.trace(f, "f16[2]", "f32[2]", "i64[2]", "bool[]", "f32[5, 2]")
    r = _rng(17)
    xs = [r.standard_normal(2).astype(np.float16), r.standard_normal(2).astype(np.float32), np.array([1, -2]),
          np.array(True), r.standard_normal((5, 2)).astype(np.float32)]
    tangents = [np.zeros(2, np.float16), r.standard_normal(2).astype(np.float32),
                r.standard_normal((5, 2)).astype(np.float32)]
    got = _same(fc.build_jvp_graph(forward), [*xs, *tangents])[0]
    value = fc.compile(forward, cache=False)
    eps = np.float32(1e-3)
    plus = value.run([xs[0], xs[1] + eps * tangents[1], *xs[2:4], xs[4] + eps * tangents[2]])
    minus = value.run([xs[0], xs[1] - eps * tangents[1], *xs[2:4], xs[4] - eps * tangents[2]])
    for k in (1, 5):  # the f32 carry and its stacked product
        np.testing.assert_allclose(got[7 + k], (plus[k] - minus[k]) / (2 * eps), rtol=2e-3, atol=2e-3)
    assert not got[7 + 2].any() and not got[7 + 6].any()  # integer outputs: zero tangents


@pytest.mark.parametrize("outer", ["loop", "if_else"])
def test_a_scan_inside_a_loop_body_or_a_branch(outer):
    def inner(c, xs, w):  # noqa: ANN001, ANN202
        last, ys = ops.scan(lambda d, x: (lambda n: (n, (n, d)))(ops.tanh(d * w + x)), c, xs, reverse=True)
        return last + ops.sum(ys[0] * ys[1], axes=(0,)) * 0.1

    def loss(h, xs, w):  # noqa: ANN001, ANN202
        if outer == "loop":
            out = ops.loop(lambda i, c: (True, inner(c, xs, w)), 3, True, h)
        else:
            out = ops.if_else(ops.sum(h) > 0, lambda c: inner(c, xs, w), lambda c: inner(c * 2.0, xs, w), h)
        return ops.sum(ops.sin(out))
    types = ["f64[3]", "f64[4, 3]", "f64[3]"]
    r = _rng(18)
    runs = [[r.standard_normal(3), r.standard_normal((4, 3)), r.standard_normal(3)] for _ in range(2)]
    runs[1][0] = -np.abs(runs[0][0])  # the other branch
    runs[0][0] = np.abs(runs[0][0])
    got = _same(fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1, 2]), *runs)
    value = fc.compile(fc.trace(loss, *types), cache=False)
    for a, out in zip(runs, got):
        for i in (0, 2):
            num = np.zeros(3)
            for k in range(3):
                plus, minus = [x.copy() for x in a], [x.copy() for x in a]
                plus[i][k] += 1e-6
                minus[i][k] -= 1e-6
                num[k] = (value.run(plus)[0] - value.run(minus)[0]) / 2e-6
            np.testing.assert_allclose(out[1 + i], num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("sa, sb, op, const_shape, length", [
    ((), (1, 3), "add", None, 3),  # the rank-0 stack [3] broadcast against [3, 1, 3]: wrong values, no error
    ((3,), (1, 3), "mul", (2, 1), 2),
    ((2, 1), (3,), "sub", None, 2),
    ((2, 3), (2, 3), "mul", (3,), 2),  # same shapes, a broadcasting constant: still recomputed
])
def test_residual_chains_of_broadcast_operands(sa, sb, op, const_shape, length):
    const = None if const_shape is None else np.linspace(0.5, 1.5, int(np.prod(const_shape))).reshape(const_shape)

    def loss(h, xs):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            na, nb = int(np.prod(sa)), int(np.prod(sb))
            ta = ops.tanh(ops.reshape(c[:na] * x[:na], shape=sa))
            tb = ops.tanh(ops.reshape(c[6 - nb:] + x[:nb], shape=sb))
            z = getattr(ops, op)(ta, tb)
            z = z if const is None else z * const
            return ops.tanh(c * 0.5 + ops.sum(ops.square(z)) * 0.1), (ta, tb)
        last, ys = ops.scan(step, h, xs)
        return ops.sum(ops.sin(last)) + ops.sum(ops.sin(ys[0])) + ops.sum(ys[1] * ys[1])
    types = ["f64[6]", f"f64[{length}, 6]"]
    r = _rng(19)
    a = [r.standard_normal(6), r.standard_normal((length, 6))]
    graph = fc.build_backward_graph(fc.trace(loss, *types), 0, [0, 1])
    if sa == sb:
        assert any(n.op == "square" for n in graph.nodes)  # recomputed from the stacks
    got = _same(graph, a)[0]
    value = fc.compile(fc.trace(loss, *types), cache=False)
    for i in (0, 1):
        num = np.zeros(a[i].shape)
        for k in np.ndindex(a[i].shape):
            plus, minus = [x.copy() for x in a], [x.copy() for x in a]
            plus[i][k] += 1e-6
            minus[i][k] -= 1e-6
            num[k] = (value.run(plus)[0] - value.run(minus)[0]) / 2e-6
        np.testing.assert_allclose(got[1 + i], num, rtol=1e-6, atol=1e-8)


def test_value_and_grad_through_a_scan_at_several_batch_sizes():
    def loss(params, xs):  # noqa: ANN001, ANN202
        w, h0 = params["w"], params["h0"]
        last, ys = ops.scan(lambda c, x: (lambda n: (n, (n, c)))(ops.tanh(c @ w + x)), ops.zeros_like(xs[0]) + h0,
                            xs)
        return ops.sum(last) + ops.sum(ys[0] * ys[1])
    vg = fc.value_and_grad(loss)
    r = _rng(20)
    params = {"w": r.standard_normal((3, 3)) / 2, "h0": r.standard_normal(3)}
    for batch in (2, 5, 2):
        xs = r.standard_normal((6, batch, 3))
        value, grads = vg(params, xs)
        want = fc.compile(fc.build_backward_graph(fc.trace(lambda w, h0, x: loss({"w": w, "h0": h0}, x), "f64[3, 3]",
                                                           "f64[3]", f"f64[6, {batch}, 3]"), 0, [0, 1]),
                          cache=False, checks=True).run([params["w"], params["h0"], xs])
        assert _bits(value) == _bits(want[0])
        assert _bits(grads["w"]) == _bits(want[1]) and _bits(grads["h0"]) == _bits(want[2])
