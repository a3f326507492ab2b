"""Bad input to control flow: named errors at build time that say what was expected (issue 10).

Mismatched branch types, a body returning the wrong number or types of
states, a non-boolean cond, M < 0, bodies that are not callables or graphs,
scanned inputs of the wrong length; at run time, a trip limit above M; and a
body op without a gradient, reported with its path through the nesting.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops


def trace(fn, *types):  # noqa: ANN001, ANN201
    return fc.trace(fn, *types)


def test_branches_returning_different_types_are_refused():
    with pytest.raises(fc.ShapeError, match=r"then_branch returns \[f64\[3\]\] but else_branch returns \[f64\[\]\]"):
        trace(lambda c, x: ops.if_else(c, lambda v: v * 2.0, lambda v: ops.sum(v), x), "bool[]", "f64[3]")
    with pytest.raises(fc.ShapeError, match="same number of values"):
        trace(lambda c, x: ops.if_else(c, lambda v: (v, v), lambda v: v, x), "bool[]", "f64[3]")


def test_a_cond_that_is_not_one_boolean_is_refused():
    with pytest.raises(fc.ShapeError, match=r"cond must be a boolean with one element \(bool\[\]\), got f64\[\]"):
        trace(lambda c, x: ops.if_else(c, lambda v: v, lambda v: -v, x), "f64[]", "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"got bool\[3\]; .* \(for an elementwise choice, use ops.where"):
        trace(lambda c, x: ops.if_else(c, lambda v: v, lambda v: -v, x), "bool[3]", "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"initial cond must be a boolean with one element"):
        trace(lambda c, x: ops.loop(lambda i, s: (True, s), 3, c, x), "i64[]", "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"its body returns f64\[\] as cond"):
        trace(lambda x: ops.loop(lambda i, s: (ops.sum(s), s), 3, True, x), "f64[3]")


def test_a_body_returning_the_wrong_states_is_refused():
    with pytest.raises(fc.ShapeError, match=r"its body returns 2 values; it must return \(cond, 2 new states"):
        trace(lambda x, y: ops.loop(lambda i, a, b: (True, a), 3, True, x, y), "f64[3]", "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"returns f64\[\] for state 0, which has type f64\[3\]"):
        trace(lambda x: ops.loop(lambda i, s: (True, ops.sum(s)), 3, True, x), "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"returns f32\[3\] for carry 0, which has type f64\[3\]"):
        trace(lambda x, w: ops.scan(lambda c, _: (w, None), x, length=2), "f64[3]", "f32[3]")
    with pytest.raises(fc.ShapeError, match="the body returns 1 carries, the initial carry has 2"):
        trace(lambda x: ops.scan(lambda c, _: ((c[0],), None), (x, x), length=2), "f64[3]")
    with pytest.raises(fc.IRError, match=r"must return a pair \(carry, y\)"):
        trace(lambda x: ops.scan(lambda c, _: c, x, length=2), "f64[3]")


def test_max_trip_and_lengths_are_checked():
    with pytest.raises(fc.IRError, match=r"max_trip must be 0 or more \(the most steps the loop may run\), got -1"):
        trace(lambda x: ops.loop(lambda i, s: (True, s), -1, True, x), "f64[3]")
    with pytest.raises(fc.IRError, match="max_trip must be an int"):
        trace(lambda x: ops.loop(lambda i, s: (True, s), 2.5, True, x), "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"xs\[0\] is f64\[4, 3\]; each scanned tensor needs max_trip = 3 rows"):
        trace(lambda x, xs: ops.loop(lambda i, s, r: (True, s + r), 3, True, x, xs=[xs]), "f64[3]", "f64[4, 3]")
    with pytest.raises(fc.ShapeError, match="must all have the same number of rows"):
        trace(lambda x, a, b: ops.scan(lambda c, r: (c, None), x, (a, b)), "f64[3]", "f64[4, 3]", "f64[5, 3]")
    with pytest.raises(fc.ShapeError, match="without xs, give length"):
        trace(lambda x: ops.scan(lambda c, _: (c, None), x), "f64[3]")
    with pytest.raises(fc.IRError, match="checkpoint_every must be an int >= 1"):
        trace(lambda x: ops.loop(lambda i, s: (True, s), 4, True, x, checkpoint_every=0), "f64[3]")


@pytest.mark.parametrize("body", [None, 3, "s * 2", np.ones(3)])
def test_a_body_that_is_neither_callable_nor_graph_is_refused(body):
    with pytest.raises(fc.IRError, match="the loop body must be a Python callable"):
        trace(lambda x: ops.loop(body, 3, True, x), "f64[3]")
    with pytest.raises(fc.IRError, match="the then branch of if_else must be a Python callable"):
        trace(lambda c, x: ops.if_else(c, body, lambda v: v, x), "bool[]", "f64[3]")
    with pytest.raises(fc.IRError, match="the scan body must be a Python callable"):
        trace(lambda x: ops.scan(body, x, length=2), "f64[3]")


def test_a_body_given_as_a_graph_must_take_the_right_types():
    good = fc.trace(lambda i, s: (True, s * 3.0), "i64[]", "f64[3]")
    g = trace(lambda x: ops.loop(good, 2, True, x), "f64[3]")
    np.testing.assert_allclose(fc.compile(g).run([np.ones(3)])[0], 9.0)
    bad = fc.trace(lambda s: s * 3.0, "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"the loop body graph 'graph' takes \[f64\[3\]\], but here it must take "
                                            r"\[i64\[\], f64\[3\]\]"):
        trace(lambda x: ops.loop(bad, 2, True, x), "f64[3]")


def test_verify_names_a_broken_body_and_loading_keeps_the_rule():
    g = trace(lambda x: ops.loop(lambda i, s: (True, s * 2.0), 3, True, x), "f64[3]")
    body = g.nodes[-1].attrs["body"]
    body.outputs[1] = body.inputs[0]  # the body now returns the i64 step as the state
    problems = fc.check_graph(g)
    assert problems and any("returns i64[] for state 0, which has type f64[3]" in str(p) for p in problems)


def test_a_body_op_without_a_gradient_is_named_with_its_path():
    def f(x):  # noqa: ANN001, ANN202
        return ops.sum(ops.loop(lambda i, s: (True, ops.nograd(s) * 2.0), 3, True, x))
    forward = trace(f, "f64[3]")
    loop_index = next(k for k, n in enumerate(forward.nodes) if n.op == "loop")
    with pytest.raises(fc.MissingGradientError) as info:
        fc.build_backward_graph(forward, 0, [0])
    assert f"node {loop_index} (loop) > body node 0 (nograd)" in str(info.value)
    assert info.value.paths == [f"node {loop_index} (loop) > body node 0 (nograd) "
                                "(declared not differentiable: a step function)"]


def test_the_path_goes_through_every_nesting_level():
    def f(c, x):  # noqa: ANN001, ANN202
        def then(v):  # noqa: ANN001, ANN202
            _, ys = ops.scan(lambda h, r: (h + r, ops.nograd(h)), v, x)
            return ops.sum(ys) + v * 0.0
        return ops.sum(ops.if_else(c, then, lambda v: v * 2.0, ops.sum(x) * 1.0))
    forward = trace(f, "bool[]", "f64[3]")
    with pytest.raises(fc.MissingGradientError, match=r"node \d+ \(if_else\) > then_branch node \d+ \(scan\) > "
                                                      r"body node \d+ \(nograd\)"):
        fc.build_backward_graph(forward, 0, [1])


def test_a_reverse_loop_with_a_data_dependent_exit_is_not_differentiated():
    g = fc.Graph("raw")
    x = g.add_input("f64[2]", "x")
    body = fc.trace(lambda i, s: (fc.constant(np.array(False)), s * 2.0),
                    "i64[]", "f64[2]")
    y = g.apply("loop", g.constant(np.array(3)), g.constant(np.array(True)), x, body=body, max_trip=3, n_states=1,
                reverse=True)
    g.mark_output(g.apply("sum", y))
    with pytest.raises(fc.GradientError, match="reverse loop is differentiated only when its body's cond is the "
                                               "constant true"):
        fc.build_backward_graph(g, 0, [0])


def test_a_body_that_cannot_take_its_arguments_says_how_it_is_called():
    with pytest.raises(fc.IRError, match=r"the loop body <lambda>\(s\) cannot take 2 positional arguments.*"
                                         r"body\(i, \*states"):
        trace(lambda x: ops.loop(lambda s: (True, s), 3, True, x), "f64[3]")
    with pytest.raises(fc.IRError, match=r"the scan body <lambda>\(c\) cannot take 2 positional arguments.*"
                                         r"f\(carry, x, \*invariants\)"):
        trace(lambda x: ops.scan(lambda c: (c, None), x, length=3), "f64[3]")
    with pytest.raises(fc.IRError, match="the then branch of if_else <lambda>\\(\\) cannot take 1 positional"):
        trace(lambda c, x: ops.if_else(c, lambda: x, lambda v: v, x), "bool[]", "f64[3]")
    with pytest.raises(fc.IRError, match="cannot take 2 positional arguments"):
        trace(lambda x: ops.loop(lambda s: (True, s), 4, True, x, checkpoint_every=2), "f64[3]")


def test_an_op_without_gradient_that_only_decides_the_cond_is_fine():
    def f(x):  # noqa: ANN001, ANN202
        body = lambda i, s: (ops.less(ops.sum(ops.nograd(s * 3.0)), 6.0), s * 1.5)  # noqa: E731
        return ops.sum(ops.loop(body, 6, True, x))
    training = fc.build_backward_graph(trace(f, "f64[3]"), 0, [0])
    x = np.array([0.2, 0.3, 0.4])
    loss, gx = fc.compile(training).run([x])
    s, steps = x, 0  # the step's cond reads the state it was given: floor sums 1, 2, 5, 9 -> four steps
    while steps < 6:
        go = np.floor(s * 3.0).sum() < 6.0
        s, steps = s * 1.5, steps + 1
        if not go:
            break
    assert steps == 4
    np.testing.assert_allclose(gx, 1.5 ** steps)
    np.testing.assert_allclose(loss, s.sum())


def test_a_python_number_returned_by_a_body_is_never_narrowed():
    """A number a body returns takes the carried value's dtype only when that loses nothing; 1.5 for an
    integer state, or 1 for a cond, is refused instead of becoming 1 or True."""
    with pytest.raises(fc.ShapeError, match=r"returns f64\[\] for state 0, which has type i64\[\]"):
        trace(lambda n: ops.loop(lambda i, n: (True, 1.5), 3, True, n), "i64[]")
    with pytest.raises(fc.ShapeError, match=r"returns i64\[\] as cond"):
        trace(lambda x: ops.loop(lambda i, s: (1, s), 3, True, x), "f64[3]")
    with pytest.raises(fc.ShapeError, match=r"returns f64\[\] for carry 0, which has type i64\[\]"):
        trace(lambda n: ops.scan(lambda c, _: (0.5, None), n, length=2), "i64[]")
    with pytest.raises(fc.ShapeError, match=r"then_branch returns \[i64\[\]\] but else_branch returns \[f64\[\]\]"):
        trace(lambda c, n: ops.if_else(c, lambda m: m, lambda m: 2.5, n), "bool[]", "i64[]")
    # what loses nothing still takes the carried dtype: an int for a float state, a bool for a cond
    g = trace(lambda x, n: ops.loop(lambda i, s, n: (False, 2, n + 1), 3, True, x, n), "f32[]", "i64[]")
    s, n = fc.compile(g).run([np.zeros((), np.float32), np.array(4)])
    assert s.dtype == np.float32 and float(s) == 2.0 and int(n) == 5


def test_a_cond_given_as_a_number_is_refused_with_its_value():
    with pytest.raises(fc.IRError, match=r"cond must be a boolean tensor \(bool\[\]\) or a Python bool, got int 1"):
        trace(lambda x: ops.if_else(1, lambda v: v, lambda v: -v, x), "f64[3]")
    with pytest.raises(fc.IRError, match=r"cond must be a boolean tensor \(bool\[\]\) or a Python bool, got float 0.0"):
        trace(lambda x: ops.loop(lambda i, s: (True, s), 3, 0.0, x), "f64[3]")


@pytest.mark.parametrize("every", [None, 2])
def test_checkpointed_bodies_are_checked_like_the_others(every):
    """checkpoint_every=k rewrites the loop as a nest; a malformed body gets the message of a plain loop."""
    with pytest.raises(fc.ShapeError, match="the body returns 1 carries, the initial carry has 2"):
        trace(lambda x, a: ops.scan(lambda c, r: ((c[0],), c[0]), (x, x), a, checkpoint_every=every),
              "f64[3]", "f64[4, 3]")
    with pytest.raises(fc.ShapeError, match="the body returns 2 carries, the initial carry has 1"):
        trace(lambda x, a: ops.scan(lambda c, r: ((c, c), c), x, a, checkpoint_every=every), "f64[3]", "f64[4, 3]")
    with pytest.raises(fc.ShapeError, match=r"its body returns bool\[3\] as cond"):
        trace(lambda x: ops.loop(lambda i, s: (ops.less(s, 1.0), s), 6, True, x, checkpoint_every=every), "f64[3]")
    with pytest.raises(fc.IRError, match=r"init must be a tensor or a tuple/list of tensors, got None; give \(\)"):
        trace(lambda a: ops.scan(lambda c, r: (c, r), None, a, checkpoint_every=every), "f64[4, 3]")


def test_verify_names_malformed_bodies_with_their_path_and_never_crashes():
    """Hand-built nesting mistakes are VerifyError problems with the path to the body, whatever they are:
    a body reading a value of the outer graph instead of a capture, or a body that holds itself."""
    def model(x, w):  # noqa: ANN001, ANN202
        def body(i, s):  # noqa: ANN001, ANN202
            return True, ops.if_else(ops.less(ops.sum(s), 1.0), lambda v: ops.sin(v * w), lambda v: v, s)
        return ops.loop(body, 3, True, x)

    outer_read = trace(model, "f64[3]", "f64[3]")
    body = outer_read.nodes[-1].attrs["body"]
    first = body.nodes[0]
    first.inputs = (outer_read.inputs[0], *first.inputs[1:])  # reads the outer x, not its own state
    with pytest.raises(fc.VerifyError, match=r"node 2 \(loop\)\.body: node 0 \(sum\): V2: input 0 .* is not defined in "
                                            r"this graph"):
        fc.verify(outer_read)

    for depth in (0, 1):
        cyclic = trace(model, "f64[3]", "f64[3]")
        holder = cyclic.nodes[-1] if depth == 0 else [n for n in cyclic.nodes[-1].attrs["body"].nodes
                                                       if n.op == "if_else"][0]
        holder.attrs["else_branch" if depth else "body"] = cyclic  # a body holding the graph around it
        with pytest.raises(fc.VerifyError, match="a body cannot contain itself"):
            fc.verify(cyclic)
        with pytest.raises(fc.IRError, match="a body cannot contain itself"):  # its cache key, before verify
            fc.compile(cyclic, cache=False)


def test_compile_refuses_a_node_whose_body_no_longer_gives_its_outputs():
    """The node's output count follows its body: a hand-edited body with one output less leaves the node
    with an output nothing computes. verify says so (V5), and so does compile, instead of running it."""
    g = trace(lambda x: ops.loop(lambda i, s: (True, s * 2.0, s, s * s), 3, True, x), "f64[3]")
    g.nodes[-1].attrs["body"].outputs.pop()
    with pytest.raises(fc.VerifyError, match=r"node 2 \(loop\): has 3 outputs, but shape inference gives 2 from its body "):
        fc.verify(g)
    with pytest.raises(fc.VerifyError, match=r"node 2 \(loop\): has 3 outputs, but shape inference gives 2 from its body "):
        fc.compile(g, cache=False)


def test_a_body_returning_something_else_than_tensors_is_named_by_its_output():
    with pytest.raises(fc.IRError, match=r"output 1 of the loop body must be a tensor, a Python number or a numpy "
                                         r"array, got tuple \(return the values as one flat tuple\)"):
        trace(lambda x: ops.loop(lambda i, s: (True, (s, s)), 3, True, x), "f64[3]")
    with pytest.raises(fc.IRError, match=r"output 0 of the then branch of if_else must be .* got dict"):
        trace(lambda c, x: ops.if_else(c, lambda v: {"v": v}, lambda v: v, x), "bool[]", "f64[3]")


@pytest.mark.parametrize("call, words", [
    (lambda x: ops.if_else(ops.greater(ops.sum(x), 0.0), lambda y: y, lambda y: -y, x, foo=1),
     "ops.if_else takes no keyword 'foo'; call it as ops.if_else(cond, then_fn, else_fn, *xs)"),
    (lambda x: ops.scan(lambda c, r: (c, r), x, x, lenght=3), "takes no keyword 'lenght'; did you mean 'length'?"),
    (lambda x: ops.loop(lambda i, c: (True, c), 3, True, x, foo=1), "ops.loop takes no keyword 'foo'"),
    (lambda x: ops.scan(lambda c, r: (c, r)), "ops.scan missing a required argument: 'init'"),
])
def test_arguments_a_front_end_cannot_take_are_a_frame_error_that_is_a_type_error(call, words):
    """Found in QA: an unknown keyword to if_else/loop/scan was Python's raw TypeError."""
    with pytest.raises(fc.ArgumentError) as info:
        fc.trace(call, "f32[3]")
    assert isinstance(info.value, TypeError) and words in str(info.value)


def test_the_hint_for_a_bad_if_else_input_shows_the_call_it_takes():
    """Found in QA: the hint suggested ops.if_else(cond, xs, then_branch=..., else_branch=...), which fails."""
    with pytest.raises(fc.FrameError) as info:
        fc.trace(lambda x: ops.if_else("yes", lambda y: y, lambda y: -y, x), "f32[3]")
    assert "call it as ops.if_else(cond, then_fn, else_fn, *xs)" in str(info.value)
    assert "then_branch=" not in str(info.value)
