"""A scan's steps after the first run inline in one generated loop (``Executable.scan_steps``): per-step outputs
written by their kernels into their rows, the trajectory stack filled after the loop by a block copy. The
results must be bit for bit those of the body's runner called once per step, which ``checks=True`` keeps."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def _rnn(h0, xs, wx, wh, b, r):  # noqa: ANN001, ANN202 - traced tensors
    def step(h, x):  # noqa: ANN001, ANN202
        new = ops.tanh(x @ wx + h @ wh + b)
        return new, new
    return ops.sum(ops.scan(step, h0, xs)[1] * r)


def _inputs(dtype: str, steps: int = 7) -> tuple[list[str], list[np.ndarray]]:
    rng = np.random.default_rng(3)
    shapes = [(4, 5), (steps, 4, 3), (3, 5), (5, 5), (5,), (steps, 4, 5)]
    types = [f"{dtype}[{', '.join(map(str, s))}]" for s in shapes]
    return types, [rng.standard_normal(s).astype(dtype.replace("f", "float")) for s in shapes]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("reverse", [False, True])
def test_training_step_equals_the_runner_per_step_bit_for_bit(dtype, reverse):
    def f(*t):  # noqa: ANN002, ANN202
        def step(h, x):  # noqa: ANN001, ANN202
            new = ops.tanh(x @ t[2] + h @ t[3] + t[4])
            return new, new
        return ops.sum(ops.scan(step, t[0], t[1], reverse=reverse)[1] * t[5])
    types, xs = _inputs(dtype)
    graph = fc.build_backward_graph(fc.trace(f, *types), 0, [0, 2, 3, 4])
    inline = fc.compile(graph, cache=False, checks=False)
    runner = fc.compile(graph, cache=False, checks=True)  # every step through the checked runner
    for _ in range(3):  # the first run (a checked first step), then the inline loop alone
        for got, want in zip(inline.run(xs), runner.run(xs)):
            assert got.tobytes() == want.tobytes()


def test_the_final_carry_owns_its_memory():
    """The carry's last value is written into the last row of the stacked output: the kernel returns a copy,
    and a second run does not change the first run's results."""
    exe = fc.compile(fc.trace(lambda h, xs: ops.scan(lambda c, x: (lambda n: (n, n))(ops.tanh(c + x)), h, xs),
                              "f64[3]", "f64[4, 3]"))
    xs = np.arange(12.0).reshape(4, 3) / 10
    for _ in range(2):
        last, ys = exe.run([np.zeros(3), xs])
        assert not np.shares_memory(last, ys)
        np.testing.assert_array_equal(last, ys[-1])
    kept = [a.copy() for a in (last, ys)]
    exe.run([np.ones(3), xs])
    np.testing.assert_array_equal(last, kept[0])
    np.testing.assert_array_equal(ys, kept[1])


@pytest.mark.parametrize("length", [1, 2, 3, 6])
@pytest.mark.parametrize("reverse", [False, True])
def test_a_carry_written_by_turns_into_two_arrays_owns_its_memory_after_the_loop(length, reverse):
    """A new carry that is the one output of an out-taking kernel (here c @ w) is written into two arrays of the
    loop's own by turns: the same bits as the runner, and the final carry handed out is a copy that a later run
    does not write."""
    graph = fc.trace(lambda h, xs, w: ops.scan(lambda c, x: (c @ w * x, None), h, xs, reverse=reverse)[0],
                     "f64[2, 3]", f"f64[{length}, 2, 3]", "f64[3, 3]")
    (node,) = [n for n in graph.nodes if n.op == "scan"]
    body = fc.compile_subgraph(node.attrs["body"])
    assert "_two" in body.scan_steps(1, 1).source
    inline = fc.compile(graph, cache=False, checks=False)
    runner = fc.compile(graph, cache=False, checks=True)
    rng = np.random.default_rng(length)
    runs = [[rng.standard_normal(s) for s in ((2, 3), (length, 2, 3), (3, 3))] for _ in range(2)]
    kept = []
    for xs in [*runs, *runs]:
        (got,), (want,) = inline.run(xs), runner.run(xs)
        assert got.tobytes() == want.tobytes()
        kept.append((got, got.copy()))
    for got, copy in kept:
        assert got.tobytes() == copy.tobytes()


def test_a_carry_passed_on_keeps_every_carry_out_of_the_turns():
    """With one carry passed on unchanged (or stacked, or a view), no carry is written by turns: the loop's
    two arrays could otherwise be read through the other carry after the next step overwrote them."""
    graph = fc.trace(lambda a, b, xs, w: ops.scan(lambda c, x: ((c[0] @ w * x, c[0]), None), (a, b), xs)[0],
                     "f64[2, 3]", "f64[2, 3]", "f64[5, 2, 3]", "f64[3, 3]")
    (node,) = [n for n in graph.nodes if n.op == "scan"]
    assert "_two" not in fc.compile_subgraph(node.attrs["body"]).scan_steps(2, 1).source
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s) for s in ((2, 3), (2, 3), (5, 2, 3), (3, 3))]
    for got, want in zip(fc.compile(graph, cache=False).run(xs), fc.compile(graph, cache=False, checks=True).run(xs)):
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("reverse", [False, True])
def test_scalar_rows_and_a_stacked_entering_carry(reverse):
    """Rank-0 rows (written through a 0-d view of the row) and a body that stacks the carry entering each
    step next to the carry it leaves (filled after the loop, shifted by one step)."""
    def f(c0, xs):  # noqa: ANN001, ANN202
        last, (news, entering) = ops.scan(lambda c, x: (lambda n: (n, (n, c)))(c * 0.5 + x), c0, xs,
                                          reverse=reverse)
        return last, news, entering
    exe = fc.compile(fc.trace(f, "f64[]", "f64[6]"))
    xs = np.arange(6.0)
    for _ in range(2):
        last, news, entering = exe.run([np.array(1.0), xs])
        c, want_new, want_in = 1.0, np.zeros(6), np.zeros(6)
        for i in (range(5, -1, -1) if reverse else range(6)):
            want_in[i] = c
            c = c * 0.5 + xs[i]
            want_new[i] = c
        np.testing.assert_array_equal(news, want_new)
        np.testing.assert_array_equal(entering, want_in)
        assert float(last) == c


def test_a_tanh_residual_is_computed_from_the_stacked_outputs_with_the_same_bits(monkeypatch):
    """tanh's 1 - t^2 is not stacked by the forward scan: one pass over the stacked outputs between the two
    loops gives it. The gradients are those of the residual computed per step and stacked, bit for bit."""
    import frame_ops_sequence.control as control

    types, xs = _inputs("f32")
    graph = fc.build_backward_graph(fc.trace(_rnn, *types), 0, [0, 2, 3, 4])
    scans = [n for n in graph.nodes if n.op == "scan"]
    saving = scans[-2].attrs["body"]  # the forward with the saving body, then the reverse scan
    assert not any(n.op == "square" for n in saving.nodes if n.outputs[0] in saving.outputs)
    assert any(n.op == "square" for n in graph.nodes)  # on the stack, in the gradient graph
    got = fc.compile(graph, cache=False).run(xs)
    monkeypatch.setattr(control, "_from_outputs", lambda r, outputs: None)  # every residual stacked per step
    stacked = fc.build_backward_graph(fc.trace(_rnn, *types), 0, [0, 2, 3, 4])
    assert not any(n.op == "square" for n in stacked.nodes)
    for a, b in zip(got, fc.compile(stacked, cache=False).run(xs)):
        assert a.tobytes() == b.tobytes()
