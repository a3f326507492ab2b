"""slice, pad, concat, stack, expand_dims, squeeze, broadcast_to: values against numpy, gradients against
finite differences through composed graphs, named errors. (The kit checks each op alone; torch: test_shape_ops_torch.)"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ShapeError, ops

BIG = 2**62


def run(fn, *arrays, opt_level=2):
    graph = fc.trace(fn, *[_type(a) for a in arrays])
    return fc.compile(graph, opt_level=opt_level).run(list(arrays))


def _type(a: np.ndarray) -> str:
    return {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.int32): "i32",
            np.dtype(np.bool_): "bool"}[a.dtype] + str(list(a.shape))


def evaluate(fn, *arrays):
    """Outputs at every opt level, checked equal to each other."""
    results = [run(fn, *arrays, opt_level=level) for level in (0, 1, 2)]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    return results[0]


# -- slice -------------------------------------------------------------------------------------------
SLICE_CASES = [  # (shape, starts, stops, steps, axes)
    ((5, 4), [1], [4], None, None),
    ((5, 4), [-3, 1], [BIG, -1], None, None),
    ((5, 4), [-100], [100], None, [1]),
    ((7, 3), [6], [-BIG], [-2], None),
    ((7, 3), [-1, 2], [-BIG, 0], [-1, -1], [0, 1]),
    ((2, 9), [1], [9], [3], [-1]),
    ((4,), [3], [1], None, None),            # empty: stop before start
    ((4,), [10], [20], None, None),          # empty: past the end
    ((3, 4, 5), [0, 4], [3, 0], [2, -3], [2, 1]),
    ((), [], [], None, None),                 # rank 0: nothing to slice
]


@pytest.mark.parametrize("shape, starts, stops, steps, axes", SLICE_CASES)
def test_slice_matches_numpy_basic_slicing(shape, starts, stops, steps, axes):
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    index = [slice(None)] * len(shape)
    for k, axis in enumerate(axes if axes is not None else range(len(starts))):
        index[axis] = slice(starts[k], stops[k], None if steps is None else steps[k])
    (y,) = evaluate(lambda a: ops.slice(a, starts=starts, stops=stops, steps=steps, axes=axes), x)
    np.testing.assert_array_equal(y, x[tuple(index)])
    assert y.shape == x[tuple(index)].shape and y.dtype == x.dtype


def test_slice_agrees_with_python_slices_on_random_bounds():
    rng = np.random.default_rng(0)
    x = np.arange(11 * 3, dtype=np.float32).reshape(11, 3)
    g = None
    for _ in range(200):
        start, stop = (int(v) for v in rng.integers(-15, 16, 2))
        step = int(rng.choice([-4, -3, -2, -1, 1, 2, 3, 5]))
        g = fc.trace(lambda a: ops.slice(a, starts=[start], stops=[stop], steps=[step]), "f32[11, 3]")
        (y,) = fc.compile(g, cache=False).run([x])
        np.testing.assert_array_equal(y, x[start:stop:step], err_msg=f"{start}:{stop}:{step}")
    assert g is not None


def test_a_sliced_output_never_aliases_the_callers_input():
    x = np.arange(12.0).reshape(3, 4)
    (y,) = run(lambda a: ops.slice(a, starts=[1], stops=[3]), x)
    assert not np.shares_memory(y, x)
    y[...] = -1.0
    assert x[1, 0] == 4.0


# -- pad ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, before, after, axes", [
    ((3, 4), [1, 0], [2, 3], None), ((2, 3), [2], [0], [-1]), ((2, 2, 2), [0, 3], [1, 0], [1, 0]), ((), [], [], None)])
def test_pad_matches_numpy_pad_with_zeros(shape, before, after, axes):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    widths = [(0, 0)] * len(shape)
    for k, axis in enumerate(axes if axes is not None else range(len(before))):
        widths[axis] = (before[k], after[k])
    (y,) = evaluate(lambda a: ops.pad(a, before=before, after=after, axes=axes), x)
    np.testing.assert_array_equal(y, np.pad(x, widths) if widths else x)
    assert y.dtype == np.float32


def test_pad_of_integers_and_booleans_fills_zeros_and_false():
    (yi,) = run(lambda a: ops.pad(a, before=[1], after=[1]), np.array([5, 6], np.int32))
    (yb,) = run(lambda a: ops.pad(a, before=[0], after=[2]), np.array([True]))
    np.testing.assert_array_equal(yi, [0, 5, 6, 0])
    np.testing.assert_array_equal(yb, [True, False, False])


# -- concat, stack --------------------------------------------------------------------------------------
def test_concat_and_stack_match_numpy():
    rng = np.random.default_rng(2)
    a, b, c = rng.standard_normal((2, 3)), rng.standard_normal((2, 1)), rng.standard_normal((2, 2))
    (y,) = evaluate(lambda p, q, r: ops.concat(p, q, r, axis=-1), a, b, c)
    np.testing.assert_array_equal(y, np.concatenate([a, b, c], axis=-1))
    d, e = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    for axis in (0, 1, 2, -1, -3):
        (s,) = evaluate(lambda p, q: ops.stack(p, q, axis=axis), d, e)
        np.testing.assert_array_equal(s, np.stack([d, e], axis=axis))
    (t,) = evaluate(lambda p, q: ops.stack(ops.sum(p), ops.sum(q)), d, e)
    np.testing.assert_allclose(t, [d.sum(), e.sum()])


# -- expand_dims, squeeze, broadcast_to ----------------------------------------------------------------
def test_expand_dims_squeeze_and_broadcast_to_match_numpy():
    x = np.random.default_rng(3).standard_normal((3, 1, 4))
    for axes in ([0], [-1], [0, 2], [-1, 1]):
        (y,) = evaluate(lambda a: ops.expand_dims(a, axes=axes), x)
        assert y.shape == np.expand_dims(x, tuple(axes)).shape
        np.testing.assert_array_equal(y, np.expand_dims(x, tuple(axes)))
    (s,) = evaluate(lambda a: ops.squeeze(a), x)
    np.testing.assert_array_equal(s, np.squeeze(x))
    (s1,) = evaluate(lambda a: ops.squeeze(a, axes=[-2]), x)
    np.testing.assert_array_equal(s1, np.squeeze(x, -2))
    (b,) = evaluate(lambda a: ops.broadcast_to(a, shape=[2, 3, 5, 4]), x)
    np.testing.assert_array_equal(b, np.broadcast_to(x, (2, 3, 5, 4)))
    assert b.flags.writeable and b.flags.c_contiguous  # the view is copied before it leaves run()


# -- gradients of composed graphs (finite differences, orders 1 and 2, every opt level) ---------------------
def _loss_program(a, b):
    """Every shape op in one nonlinear loss, so second derivatives pass through their gradients' gradients."""
    s = ops.slice(a, starts=[-1, 1], stops=[-BIG, 6], steps=[-2, 2])          # [3, 3] strided, backwards
    p = ops.pad(ops.slice(b, starts=[0, 1], stops=[2, 3]), before=[1, 0], after=[0, 1])  # [3, 3]
    c = ops.concat(s, p, axis=0)                                             # [6, 3]
    st = ops.stack(ops.sin(c), c * c, axis=1)                                # [6, 2, 3]
    e = ops.squeeze(ops.expand_dims(ops.sum(st, axes=[1]), axes=[0, -1]), axes=[0])  # [6, 3, 1]
    w = ops.broadcast_to(ops.expand_dims(ops.slice(b, starts=[0], stops=[1], axes=[1]), axes=[1]),
                         shape=[6, 3, 1])                                    # b[:, None, :1] -> [6, 3, 1]
    return ops.sum(ops.square(e * w))


def test_composed_shape_ops_have_exact_first_and_second_derivatives():
    rng = np.random.default_rng(4)
    a, b = rng.uniform(-1, 1, (6, 7)), rng.uniform(-1, 1, (3, 4))
    b = np.concatenate([b, b], axis=0)  # [6, 4]
    forward = fc.trace(_loss_program, "f64[6, 7]", "f64[6, 4]")
    first = fc.build_backward_graph(forward, 0, [0, 1])
    va, vb = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    dotted, k = fc.extend_graph(first, lambda *v: ops.sum(v[-2] * va) + ops.sum(v[-1] * vb))
    second = fc.build_backward_graph(dotted, k, [0, 1])
    fc.verify(second)
    outs = [fc.compile(second, opt_level=level).run([a, b]) for level in (0, 1, 2)]
    for o in outs[1:]:
        for x, y in zip(outs[0], o):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)
    _, ga, gb, _, hva, hvb = outs[0]

    loss = fc.compile(forward)
    grad = fc.compile(first)
    h = 1e-6

    def f(x, y):
        return float(loss.run([x, y])[0])

    def directional(fn, d_a, d_b):
        return (fn(a + h * d_a, b + h * d_b) - fn(a - h * d_a, b - h * d_b)) / (2 * h)

    for _ in range(3):  # first order along random directions
        da, db = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
        np.testing.assert_allclose(np.sum(ga * da) + np.sum(gb * db), directional(f, da, db), rtol=1e-6, atol=1e-8)

    def gdot(x, y):  # <v, grad L> as a function of the inputs
        _, g1, g2 = grad.run([x, y])
        return float(np.sum(g1 * va) + np.sum(g2 * vb))

    for _ in range(3):
        da, db = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
        np.testing.assert_allclose(np.sum(hva * da) + np.sum(hvb * db), directional(gdot, da, db), rtol=1e-6,
                                   atol=1e-8)
    assert np.all(ga[:, 0] == 0) and np.all(ga[0::2] == 0)  # a is read at rows 5, 3, 1 and columns 1, 3, 5


def test_unit_step_slice_and_pad_are_each_others_gradients():
    from frame_ops_basic.like import _bind  # the slice's gradient, compiled at the traced shapes

    graph = fc.trace(lambda a: ops.sum(ops.slice(a, starts=[1], stops=[3])), "f32[5, 2]")
    first = fc.build_backward_graph(graph, 0, [0])
    assert "slice_grad_like_internal" in [n.op for n in first.nodes]
    assert "pad" in [n.op for n in _bind(first, None).nodes]
    back = fc.trace(lambda a: ops.sum(ops.pad(a, before=[1], after=[2])), "f32[2, 2]")
    assert "slice" in [n.op for n in fc.build_backward_graph(back, 0, [0]).nodes]
    strided = fc.trace(lambda a: ops.sum(ops.slice(a, starts=[0], stops=[5], steps=[2])), "f32[5, 2]")
    assert "slice_grad_internal" in [n.op for n in _bind(fc.build_backward_graph(strided, 0, [0]), None).nodes]
    (g,) = fc.compile(fc.build_backward_graph(strided, 0, [0])).run([np.ones((5, 2), np.float32)])[1:]
    np.testing.assert_array_equal(g[:, 0], [1, 0, 1, 0, 1])


# -- named errors --------------------------------------------------------------------------------------
ERRORS = [
    ("slice axis out of range", lambda a: ops.slice(a, starts=[0], stops=[1], axes=[2]), "out of range"),
    ("slice repeated axis", lambda a: ops.slice(a, starts=[0, 0], stops=[1, 1], axes=[0, -2]), "twice"),
    ("slice zero step", lambda a: ops.slice(a, starts=[0], stops=[2], steps=[0]), "step"),
    ("slice list lengths", lambda a: ops.slice(a, starts=[0, 1], stops=[2]), "one entry per named axis"),
    ("slice too many entries", lambda a: ops.slice(a, starts=[0, 0, 0], stops=[1, 1, 1]), "only 2 axes"),
    ("slice axes length", lambda a: ops.slice(a, starts=[0], stops=[1], axes=[0, 1]), "names 2 axes"),
    ("pad negative", lambda a: ops.pad(a, before=[-1], after=[0]), "non-negative"),
    ("pad axis", lambda a: ops.pad(a, before=[1], after=[1], axes=[-3]), "out of range"),
    ("concat shapes", lambda a: ops.concat(a, ops.transpose(a), axis=0), "every axis but axis 0"),
    ("concat axis", lambda a: ops.concat(a, a, axis=2), "out of range"),
    ("concat rank 0", lambda a: ops.concat(ops.sum(a), ops.sum(a)), "rank-0"),
    ("stack shapes", lambda a: ops.stack(a, ops.transpose(a)), "one shape"),
    ("stack axis", lambda a: ops.stack(a, a, axis=3), "out of range"),
    ("squeeze wide axis", lambda a: ops.squeeze(a, axes=[0]), "size 1"),
    ("expand_dims axis", lambda a: ops.expand_dims(a, axes=[3]), "out of range"),
    ("expand_dims repeated", lambda a: ops.expand_dims(a, axes=[0, -4]), "twice"),
    ("broadcast_to", lambda a: ops.broadcast_to(a, shape=[2, 4]), "cannot broadcast"),
    ("broadcast_to rank", lambda a: ops.broadcast_to(a, shape=[3]), "cannot broadcast"),
]


@pytest.mark.parametrize("what, fn, words", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_axes_and_ranges_raise_a_named_error_at_build_time(what, fn, words):
    with pytest.raises(ShapeError, match=words) as info:
        fc.trace(fn, "f32[2, 3]")
    assert str(info.value).split(":")[0] in {"slice", "pad", "concat", "stack", "squeeze", "expand_dims", "broadcast_to"}


def test_concat_refuses_mixed_dtypes_and_no_inputs():
    with pytest.raises(ShapeError, match="share a dtype"):
        fc.trace(lambda a, b: ops.concat(a, b), "f32[2]", "f64[2]")
    with pytest.raises(ShapeError, match="at least one input"):
        fc.trace(lambda: ops.concat(axis=0))
