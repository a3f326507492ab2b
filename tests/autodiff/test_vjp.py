"""``build_vjp_graph``: the vector-Jacobian product of a whole graph, how control flow differentiates bodies."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from ._fd import gradient


def test_vjp_inputs_outputs_and_values_match_central_differences():
    g = fc.trace(lambda x, w: (ops.tanh(x * w), ops.sum(x * x)), "f64[3]", "f64[3]")
    vjp = fc.build_vjp_graph(g)
    assert [str(t) for t in vjp.input_types] == ["f64[3]", "f64[3]", "f64[3]", "f64[]"]
    assert [str(t) for t in vjp.output_types] == ["f64[3]", "f64[3]"]
    rng = np.random.default_rng(0)
    x, w, gy0, gy1 = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3), np.array(0.7)
    gx, gw = fc.compile(vjp).run([x, w, gy0, gy1])

    def scalar(xv, wv):  # noqa: ANN001, ANN202
        return float(np.sum(np.tanh(xv * wv) * gy0) + gy1 * np.sum(xv * xv))
    np.testing.assert_allclose(gx, gradient(lambda v: scalar(v, w), x), rtol=1e-8)
    np.testing.assert_allclose(gw, gradient(lambda v: scalar(x, v), w), rtol=1e-8)


def test_vjp_of_a_chosen_input_subset_and_of_untouched_inputs():
    g = fc.trace(lambda x, n, unused: x * 3.0, "f64[2]", "i64[2]", "f64[2]")
    vjp = fc.build_vjp_graph(g, [0, 1, 2])
    gx, gn, gu = fc.compile(vjp).run([np.ones(2), np.ones(2, np.int64), np.ones(2), np.array([1.0, 2.0])])
    np.testing.assert_array_equal(gx, [3.0, 6.0])
    assert gn.dtype == np.int64 and not gn.any() and not gu.any()
    only = fc.build_vjp_graph(g, [2])
    assert len(only.outputs) == 1


def test_an_output_that_is_an_input_and_a_repeated_output_accumulate():
    g = fc.Graph("passthrough")
    x = g.add_input("f64[2]", "x")
    g.mark_output(x)
    g.mark_output(x)
    (gx,) = fc.compile(fc.build_vjp_graph(g)).run([np.zeros(2), np.array([1.0, 2.0]), np.array([10.0, 20.0])])
    np.testing.assert_array_equal(gx, [11.0, 22.0])


def test_vjp_computes_only_what_the_gradients_need():
    # sin's value is not needed by its gradient (cos is): the node stays in the graph, as the forward wrote it (so
    # that at new shapes its shape function refuses what sin refuses), and the compiled program drops it
    g = fc.trace(lambda x: (ops.exp(x), ops.sin(x)), "f64[3]")
    vjp = fc.build_vjp_graph(g)
    assert [n.op for n in vjp.nodes[:len(g.nodes)]] == [n.op for n in g.nodes]
    assert [n.op for n in vjp.nodes[len(g.nodes):]].count("sin") == 0
    assert not any(n.op == "sin" for n in fc.compile(vjp, cache=False).graph.nodes)


def test_vjp_differentiates_again():
    g = fc.trace(lambda x: ops.sin(x) * x, "f64[]")
    second = fc.build_vjp_graph(fc.build_vjp_graph(g), [0])  # d/dx of (gy * (cos x * x + sin x))
    x, gy, ggx = 0.4, 1.5, 1.0
    (got,) = fc.compile(second).run([np.array(x), np.array(gy), np.array(ggx)])
    assert float(got) == pytest.approx(gy * (-np.sin(x) * x + 2 * np.cos(x)), rel=1e-12)


def test_bad_arguments_are_gradient_errors():
    g = fc.trace(lambda x: x, "f64[2]")
    with pytest.raises(fc.GradientError, match="wrt index 3 is out of range"):
        fc.build_vjp_graph(g, [3])
    with pytest.raises(fc.GradientError, match="needs a Graph"):
        fc.build_vjp_graph("graph")  # type: ignore[arg-type]
