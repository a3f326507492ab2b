"""``Tensor.__getitem__``: numpy's basic indexing traced into slice / squeeze / expand_dims, checked against
numpy itself on random keys, differentiated against finite differences, and its refusals."""

from __future__ import annotations

import random

import numpy as np
import pytest

import frame_core as fc
from frame_core import IRError, ops
from frame_core.testing.numeric import central_difference

X = np.arange(2 * 5 * 4, dtype=np.float64).reshape(2, 5, 4)


def _random_key(rng: random.Random) -> tuple:
    def item(size: int):
        r = rng.random()
        if r < 0.3:
            return rng.randint(-size, size - 1)
        if r < 0.4:
            return None
        bound = lambda: rng.choice([None, rng.randint(-size - 3, size + 3)])  # noqa: E731 - out of range too
        return slice(bound(), bound(), rng.choice([None, 1, 2, -1, -2, 3]))
    key = [item(X.shape[min(k, 2)]) for k in range(rng.randint(1, 3))]
    if rng.random() < 0.25:
        key.insert(rng.randint(0, len(key)), Ellipsis)
    return tuple(key)


def test_basic_indexing_gives_numpys_result_on_random_keys():
    rng = random.Random(7)
    checked = 0
    while checked < 150:
        key = _random_key(rng)
        try:
            want = X[key]
        except IndexError:
            continue
        got = fc.compile(fc.trace(lambda x: x[key], "f64[2, 5, 4]")).run([X])[0]
        assert got.shape == want.shape and np.array_equal(got, want), key
        checked += 1


@pytest.mark.parametrize("key", [(1,), (slice(None), slice(1, None, 2)), (Ellipsis, -1), (None, 0, slice(None, None, -1))])
def test_indexing_is_differentiable(key):
    rng = np.random.default_rng(0)
    weights = rng.standard_normal(X[key].shape)
    forward = fc.trace(lambda x: ops.sum(ops.square(x[key]) * weights), "f64[2, 5, 4]")
    exe = fc.compile(fc.build_backward_graph(forward, 0, [0]))
    x = rng.standard_normal(X.shape)
    _, grad = exe.run([x])
    expected = np.zeros_like(x)
    expected[key] = 2 * x[key] * weights  # basic indexing selects each element once
    np.testing.assert_allclose(grad, expected, rtol=1e-12)
    numeric = central_difference(lambda v: float(fc.compile(forward).run([v])[0]), x)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_len_and_iteration_follow_the_first_axis():
    def unstack(x):
        assert len(x) == 2
        rows = list(x)
        return ops.stack(*rows, axis=0) - x
    got = fc.compile(fc.trace(unstack, "f64[2, 5, 4]")).run([X])[0]
    assert not got.any()


@pytest.mark.parametrize("build, message", [
    (lambda x: x[np.array([0, 1])], r"ops.gather\(x, indices, axis=...\)"),
    (lambda x: x[[0, 1]], r"ops.gather"),
    (lambda x: x[x > 0.0], r"got Tensor"),
    (lambda x: x[1.0], r"got float 1.0"),
    (lambda x: x[..., 0, ...], r"at most one \.\.\."),
    (lambda x: x[0, 0, 0, 0], r"too many indices for f64\[2, 5, 4\]: 4 given for 3 axes"),
    (lambda x: x[2], r"index 2 is out of range for axis 0 of f64\[2, 5, 4\] \(size 2\)"),
    (lambda x: x[:, ::0], r"step must not be zero"),
    (lambda x: x[:, 1.5:], r"a start of a slice must be an int or None, got float"),
    (lambda x: x * float(x[0, 0, 0]), r"float\(\) or int\(\) cannot read it"),
])
def test_indexing_refusals_say_what_to_do(build, message):
    with pytest.raises(IRError, match=message):
        fc.trace(build, "f64[2, 5, 4]")


def test_a_rank_0_tensor_has_no_length():
    with pytest.raises(TypeError, match="rank-0"):
        fc.trace(lambda x: x * len(x), "f64[]")


def test_slice_bounds_past_int64_clamp_as_numpys_do():
    got = fc.compile(fc.trace(lambda x: x[:, -2**70:2**70:2] + 0.0, "f64[2, 5, 4]")).run([X])[0]
    np.testing.assert_array_equal(got, X[:, -2**70:2**70:2])
    got = fc.compile(fc.trace(lambda x: x[2**70:-2**70:-1] + 0.0, "f64[2, 5, 4]")).run([X])[0]
    np.testing.assert_array_equal(got, X[2**70:-2**70:-1])


def test_a_tensor_where_a_list_is_expected_is_refused_before_it_traces_anything():
    def misuse(x):
        with pytest.raises(IRError, match="takes a list of Values, got Tensor"):
            x.graph.add_node("relu", x)
        with pytest.raises(IRError, match="a shape must be a sequence of ints"):
            fc.TensorType("f64", x)
        return x
    assert fc.trace(misuse, "f64[3, 2]").nodes == []  # iterating x would have traced a slice per row


def test_steps_past_int64_and_size_follow_numpy():
    for key in [(slice(None, None, 2**63),), (slice(None, None, -2**70), 1), (slice(1, None, 7), slice(None, None, 9))]:
        got = fc.compile(fc.trace(lambda x: x[key] + 0.0, "f64[2, 5, 4]")).run([X])[0]
        np.testing.assert_array_equal(got, X[key])
    assert fc.trace(lambda x: x * x.size, "f64[2, 5, 4]").nodes[-1].op == "mul"
    sizes = []
    fc.trace(lambda x: sizes.append(x.size) or x, "f64[2, 5, 4]")
    assert sizes == [X.size]


def test_len_and_iteration_of_a_rank_0_tensor_are_a_frame_error_that_is_a_type_error():
    """Found in QA: a bare TypeError; now a ShapeError that is still the TypeError numpy raises."""
    from frame_core.errors import ShapeError, UnsizedTensorError

    def use(how):
        def f(x):
            how(fc.ops.sum(x))
            return x
        return f

    for how, words in ((len, r"len\(\) of a rank-0 tensor"), (list, "iteration over a rank-0 tensor")):
        with pytest.raises(UnsizedTensorError, match=words) as info:
            fc.trace(use(how), "f32[3]")
        assert isinstance(info.value, ShapeError) and isinstance(info.value, TypeError)


def test_python_numeric_protocols_on_a_traced_tensor_are_named_type_errors():
    """int/float/complex/bool, operator.index, range(), math.trunc, round to digits and a format spec need a value
    a traced Tensor does not have: a ValuelessTensorError that is both an IRError and the TypeError Python raises."""
    import math
    import operator

    from frame_core.errors import ValuelessTensorError

    uses = {
        "operator.index": (operator.index, "cannot be an index"),
        "range": (range, "cannot be an index"),
        "int": (int, r"float\(\) or int\(\)"),
        "complex": (complex, r"complex\(\)"),
        "bool": (bool, r"bool\(\)"),
        "math.trunc": (math.trunc, r"math.trunc\(\)"),
        "round to digits": (lambda t: round(t, 2), r"round\(x, 2\)"),
        "format spec": (lambda t: format(t, ".3f"), "format spec '.3f'"),
    }
    for name, (how, words) in uses.items():
        def f(x, how=how):
            how(x)
            return x
        with pytest.raises(ValuelessTensorError, match=words) as info:
            fc.trace(f, "f32[3]")
        assert isinstance(info.value, IRError) and isinstance(info.value, TypeError), name


def test_round_floor_ceil_and_plain_format_of_a_traced_tensor_trace_ops():
    import math

    seen = []

    def f(x):
        seen.append(f"{x}")
        return round(x) * 100.0 + math.floor(x) * 10.0 + math.ceil(x)

    graph = fc.trace(f, "f64[5]")
    x = np.array([1.5, 2.5, -0.5, -1.7, np.nan])
    got = fc.compile(graph).run([x])[0]
    np.testing.assert_array_equal(got, np.round(x) * 100.0 + np.floor(x) * 10.0 + np.ceil(x))
    assert seen and "f64[5]" in seen[0]
