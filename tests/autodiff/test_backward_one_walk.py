"""build_backward_graph's one walk over the forward graph (check, clone and the chain's forward half together) and
its pruned recipes give the graph the separate walks gave, node for node; what the one walk cannot vouch for goes
the separate way, and every node left has a reader."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

from ._dead_nodes import dead as _dead
from frame_core.autodiff import backward
from frame_core.errors import GradientError


def _listing(graph: fc.Graph) -> list[str]:
    """The graph as lines: each node's op, inputs and outputs by position, attributes, output types and names."""
    ids: dict[fc.Value, int] = {}

    def name(v: fc.Value) -> str:
        return f"v{ids.setdefault(v, len(ids))}"
    lines = [graph.name, " ".join(f"{name(v)}:{v.type}:{v.name}" for v in graph.inputs)]
    for node in graph.nodes:
        attrs = {k: (a.dtype.str, a.shape, a.tobytes()) if isinstance(a, np.ndarray) else a
                 for k, a in node.attrs.items()}
        lines.append(f"{node.op}({','.join(map(name, node.inputs))}) {attrs} -> "
                     + " ".join(f"{name(v)}:{v.type}:{v.name}" for v in node.outputs))
    lines.append(f"{[name(v) for v in graph.outputs]} {graph.output_names}")
    return lines


def _chain(x, w):
    h = x
    for i in range(8):
        h = ops.tanh(h @ w) if i % 2 else ops.sin(h) + h
    return ops.sum(h)


def _mlp(x, w1, b1, w2, t):
    h = ops.relu(x @ w1 + b1)
    return ops.mean(ops.square(ops.softmax(h @ w2, axis=-1) - t))


def _norm(x, w, b):
    return ops.sum(ops.square(ops.batch_norm(x, w, b, np.zeros(3, np.float32), np.ones(3, np.float32))[0]))


def _stopped(x, w):
    return ops.sum(ops.stop_gradient(x * w) * w + ops.sin(x))


_CHAIN = ("f32[4, 8]", "f32[8, 8]")
_MLP = ("f64[6, 5]", "f64[5, 7]", "f64[7]", "f64[7, 3]", "f64[6, 3]")
_CASES = [
    (_chain, _CHAIN, [0, 1]), (_chain, _CHAIN, [0]), (_chain, _CHAIN, [1]),
    (_mlp, _MLP, [1, 2, 3]), (_mlp, _MLP, [0, 1, 2, 3, 4]), (_mlp, _MLP, [3]),
    (_norm, ("f32[6, 3]", "f32[3]", "f32[3]"), [0, 1, 2]), (_norm, ("f32[6, 3]", "f32[3]", "f32[3]"), [1]),
    (_stopped, ("f64[5]", "f64[5]"), [0, 1]), (_stopped, ("f64[5]", "f64[5]"), [0]),
]


def _both_ways(forward: fc.Graph, loss: int, wrt: list[int], monkeypatch: pytest.MonkeyPatch) -> tuple:
    one_walk = fc.build_backward_graph(forward, loss, wrt)
    with monkeypatch.context() as m:
        m.setattr(backward, "_clone_checked", lambda *args: None)  # the separate check, clone and chain
        apart = fc.build_backward_graph(forward, loss, wrt)
    return one_walk, apart


@pytest.mark.parametrize("fn, types, wrt", _CASES)
def test_the_one_walk_gives_the_graph_of_the_separate_walks(fn, types, wrt, monkeypatch):
    forward = fc.trace(fn, *types)
    one_walk, apart = _both_ways(forward, 0, wrt, monkeypatch)
    assert _listing(one_walk) == _listing(apart)
    assert _dead(one_walk, len(forward.nodes)) == []
    # second order: the training graph, contracted, differentiated again (both ways again)
    contracted, index = fc.add_scalar_contraction(one_walk, len(forward.outputs))
    second, second_apart = _both_ways(contracted, index, wrt, monkeypatch)
    assert _listing(second) == _listing(second_apart)
    assert _dead(second, len(contracted.nodes)) == []


def test_unasked_gradients_are_never_made(monkeypatch):
    # w's gradient (matmul_grad_rhs_like_internal) is not asked for: the pruned recipes never append it, so the
    # drop after the walk does not run (it would find nothing)
    forward = fc.trace(_chain, *_CHAIN)
    calls = []
    monkeypatch.setattr(backward, "_drop_unneeded", lambda *args, **kw: calls.append(args))
    only_x = fc.build_backward_graph(forward, 0, [0])
    assert calls == []
    assert "matmul_grad_rhs_like_internal" not in {n.op for n in only_x.nodes}
    assert _dead(only_x, len(forward.nodes)) == []


def test_a_stopped_gradient_is_dropped_after_the_walk():
    # stop_gradient's zero leaves x * w's gradient unread: the drop runs and nothing dead is left
    forward = fc.trace(_stopped, "f64[5]", "f64[5]")
    training = fc.build_backward_graph(forward, 0, [0, 1])
    assert _dead(training, len(forward.nodes)) == []
    x, w = np.linspace(0.1, 0.9, 5), np.linspace(-1.0, 1.0, 5)
    _, gx, gw = fc.compile(training, cache=False).run([x, w])
    np.testing.assert_allclose(gx, np.cos(x), rtol=1e-12)  # x * w is stopped: only sin(x) reaches x
    np.testing.assert_allclose(gw, x * w, rtol=1e-12)


def test_a_graph_the_one_walk_cannot_vouch_for_is_checked_apart():
    g = fc.Graph("hand_built")
    x = g.add_input("f32[3]")
    y = g.add_node("sin", [x], {}).outputs[0]
    g.mark_output(g.add_node("sum", [y], {"axes": None, "keepdims": False}).outputs[0])
    g.nodes.reverse()  # sum reads sin's output before sin defines it (rule V2)
    with pytest.raises(GradientError, match="the forward graph itself is invalid"):
        fc.build_backward_graph(g, 0, [0])


def test_a_node_recorded_wrongly_off_the_chain_is_left_alone_on_it_named():
    def build(on_chain: bool) -> fc.Graph:
        g = fc.Graph("hand_built")
        x, w = g.add_input("f32[3]"), g.add_input("f32[3]")
        source = x if on_chain else w
        bad = g.add_node("exp", [source], {}, ["f64[3]"]).outputs[0]  # recorded wrongly by hand
        s = g.add_node("add", [g.add_node("cast", [bad], {"to": "f32"}).outputs[0], x], {}).outputs[0]
        g.mark_output(g.add_node("sum", [s], {"axes": None, "keepdims": False}).outputs[0])
        return g
    with pytest.raises(GradientError, match=r"recorded as \[f64\[3\]\] but inference gives \[f32\[3\]\]"):
        fc.build_backward_graph(build(True), 0, [0])
    training = fc.build_backward_graph(build(False), 0, [0])  # the wrong node depends on w only
    assert training.output_names[-1] == "grad(output 0, input 0)"
