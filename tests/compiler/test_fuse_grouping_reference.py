"""fuse_elementwise's groupings, read against its rules walked the plain way (issue 21: fusion runs on positions
and arrays).

``_plain_grouping`` is the walk the rules describe, as fusion made it before it worked on arrays: one group
object per node, a table of values, every read looked at in turn. Its groups (moving and adjacent), which values
a node outside their group reads, the values' lifetimes and the peak verdict must be fusion's own, on a chain's
training graph, a graph whose values have many readers, a layer norm's training graph (nodes of several
outputs), a second-order graph (where moving members would raise the peak) and random elementwise graphs. The
fused program itself must hold every node of the unfused one exactly once and compute the same bits.
"""

from __future__ import annotations

import random
from collections import Counter
from itertools import accumulate

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
from frame_core.compiler.context import CompileContext
from frame_core.compiler.passes import fuse
from ._graphs import chain_training

FUSED = "fused_elementwise_internal"


class _PlainGroup:
    def __init__(self, first, type_, rank=0):
        self.positions = [first]
        self.first = first
        self.type = type_
        self.rank = rank


def _plain_grouping(nodes, fusable):
    """Both groupings, the reads and the lifetimes, node by node and read by read."""
    n = len(nodes)
    position, group_at, adjacent_at = {}, [None] * n, [None] * n
    shared, adjacent_shared = [False] * n, [False] * n
    ends, fused_ends, several = [-1] * n, [-1] * n, {}
    moving, adjacent = [], []
    rank = 0
    for i, node in enumerate(nodes):
        if node.op == "constant":
            for v in node.outputs:
                position[v] = -2
            continue
        rank += 1
        ps = [position.get(v, -1) for v in node.inputs]
        for v in node.outputs:
            position[v] = i
        chosen = near = None
        if fusable[node.op] and len(node.outputs) == 1 and node.inputs:
            t = node.outputs[0].type
            for p in ps:  # the first producer's group whose outside inputs are all defined before it starts
                g = group_at[p] if p >= 0 else None
                if g is not None and g.type is t and all(q < g.first or group_at[q] is g for q in ps):
                    chosen = g
                    break
            if chosen is None:
                chosen = _PlainGroup(i, t)
                moving.append(chosen)
            else:
                chosen.positions.append(i)
            group_at[i] = chosen
            for p in ps:  # the group of the node just before, when it reads it
                g = adjacent_at[p] if p >= 0 else None
                if g is not None and g.type is t and g.rank == rank - 1:
                    near = g
                    break
            if near is None:
                near = _PlainGroup(i, t)
                adjacent.append(near)
            else:
                near.positions.append(i)
            near.rank = rank
            adjacent_at[i] = near
        else:
            for v in node.outputs if len(node.outputs) != 1 else ():
                several[v] = [-1, -1]
        here = i if chosen is None else chosen.first
        for v, p in zip(node.inputs, ps):
            if p < 0:
                continue
            shared[p] |= group_at[p] is not chosen
            adjacent_shared[p] |= adjacent_at[p] is not near
            if v in several:
                several[v] = [i, max(several[v][1], here)]
            else:
                ends[p] = i
                fused_ends[p] = max(fused_ends[p], here)
    return {"moving": [g.positions for g in moving if len(g.positions) > 1],
            "adjacent": [g.positions for g in adjacent if len(g.positions) > 1],
            "shared": shared, "adjacent_shared": adjacent_shared, "ends": ends, "fused_ends": fused_ends,
            "several": several, "group_at": group_at}


def _plain_raises_peak(graph, plain):
    """The intermediates' peak with the moving groups run at their first member's place, against unfused."""
    nodes, outputs = graph.nodes, set(graph.outputs)
    delta, fused_delta = [0] * (len(nodes) + 2), [0] * (len(nodes) + 2)
    for i, node in enumerate(nodes):
        if node.op == "constant":
            continue
        for v in node.outputs:
            if v in outputs:
                continue
            if len(node.outputs) == 1:
                end, fused_end = plain["ends"][i], plain["fused_ends"][i]
            else:
                end, fused_end = plain["several"].get(v, (-1, -1))
            delta[i] += v.type.nbytes
            delta[max(end, i) + 1] -= v.type.nbytes
            g = plain["group_at"][i]
            if g is not None and not plain["shared"][i] and fused_end >= 0:
                continue  # read only inside its group: never stored
            start = i if g is None else g.first
            fused_delta[start] += v.type.nbytes
            fused_delta[max(fused_end, start) + 1] -= v.type.nbytes
    return max(0, *accumulate(fused_delta)) > max(0, *accumulate(delta))


def _many_readers():  # values read by several nodes, inside and outside their chains, and by the caller
    def fn(a, b):
        s = ops.sin(a)
        t = s * b + s
        u = ops.exp(t) * s - ops.cos(b) * t
        m = ops.sum(u) * t + s
        return [m * 2.0 + u, s, ops.tanh(m) - t]
    return fc.trace(fn, "f32[4, 8]", "f32[4, 8]")


def _layer_norm_training():  # layer_norm's training node has several outputs
    def loss(x, w, b):
        h = ops.tanh(ops.layer_norm(ops.sin(x) * 2.0 + x, w, b)) * x
        return ops.sum(h * h + ops.exp(h))
    return fc.build_backward_graph(fc.trace(loss, "f32[3, 8]", "f32[8]", "f32[8]"), 0, [0, 1, 2])


def _second_order():  # (at this size moving members would raise the peak: test_peak_memory.py)
    forward = fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w) * ops.sin(x)), "f64[300, 300]", "f64[300, 300]")
    first = fc.build_backward_graph(forward, 0, [0, 1])
    contracted, k = fc.add_scalar_contraction(first, 1)
    return fc.build_backward_graph(contracted, k, [0, 1])


def _random(seed, size=80):
    rng = random.Random(seed)
    unary = [ops.sin, ops.tanh, ops.exp, ops.cos, lambda a: a * 2.0, lambda a: a + 1.0, lambda a: -a]
    binary = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b]

    def fn(a, b, c, d, e):
        pool = {"f32": [a, b, c, e], "f64": [d]}
        outs = []
        for _ in range(size):
            vals = pool["f64" if rng.random() < 0.2 else "f32"]
            x = rng.choice(vals[-6:] if rng.random() < 0.7 else vals)
            r = rng.random()
            if r < 0.4:
                vals.append(rng.choice(unary)(x))
            elif r < 0.85:
                vals.append(rng.choice(binary)(x, rng.choice(vals)))
            elif r < 0.95:
                vals.append(ops.sum(x) * x)
            else:
                outs.append(ops.sum(x))
        return outs + [ops.sum(pool["f32"][-1]), ops.sum(pool["f64"][-1])]
    return fc.trace(fn, "f32[4, 8]", "f32[4, 8]", "f32[8]", "f64[4, 8]", "f32[4, 1]")


GRAPHS = {"chain": lambda: chain_training(12), "many readers": _many_readers, "layer norm training": _layer_norm_training,
          "second order": _second_order, **{f"random {s}": (lambda s=s: _random(s)) for s in range(8)},
          "random training": lambda: fc.build_backward_graph(_random(11, 40), 0, [0, 1, 3])}


@pytest.fixture(scope="module")
def everything():
    """Every pack installed here (layer_norm is frame-ops-nn's; this folder's tests make ops_basic current)."""
    from frame_core.ops_registry.loader import discover_entry_points, load_registry

    return load_registry(discover_entry_points(), environ={})


def _unfused(make):
    """The graph as the fusion stage receives it."""
    return fc.compile(make(), disable=["fuse_elementwise"], cache=False).graph


@pytest.mark.parametrize("name", list(GRAPHS))
def test_groupings_reads_lifetimes_and_peak_verdict_follow_the_plain_walk(name, everything):
    with fc.use_registry(everything):
        _compare_with_the_plain_walk(name)


def _compare_with_the_plain_walk(name):
    graph = _unfused(GRAPHS[name])
    fusable = fuse._fusable_ops(graph, CompileContext(backend="cpu", registry=fc.registry()))
    plain = _plain_grouping(graph.nodes, fusable)
    got = fuse._group(graph.nodes, fusable, True)
    assert got.moving == plain["moving"] and got.adjacent == plain["adjacent"]
    assert got.moving  # (every graph here has something to fuse)
    assert got.shared.tolist() == plain["shared"]
    assert got.adjacent_shared.tolist() == plain["adjacent_shared"]
    assert got.ends.tolist() == plain["ends"] and got.fused_ends.tolist() == plain["fused_ends"]
    assert got.several == plain["several"]
    assert fuse._raises_peak(graph, got) == _plain_raises_peak(graph, plain)
    if name == "layer norm training":
        assert plain["several"]  # the walk met nodes of several outputs
    if name == "second order":
        assert _plain_raises_peak(graph, plain)  # the adjacent grouping is the one used


def _members(graph):
    """The ops a program runs, fused bodies opened (constants aside)."""
    ops_run = Counter()
    for node in graph.nodes:
        if node.op == FUSED:
            ops_run.update(n.op for n in node.attrs["body"].nodes if n.op != "constant")
        elif node.op != "constant":
            ops_run[node.op] += 1
    return ops_run


@pytest.mark.parametrize("name", list(GRAPHS))
def test_the_fused_program_runs_every_node_once_and_gives_the_same_bits(name, everything, monkeypatch):
    monkeypatch.setenv("FRAME_NATIVE", "0")  # the fused nodes themselves, not frame-native's rewrite of them
    with fc.use_registry(everything):
        graph = GRAPHS[name]()
        fused = fc.compile(graph, cache=False)
        unfused = fc.compile(graph, disable=["fuse_elementwise"], cache=False)
    assert any(n.op == FUSED for n in fused.graph.nodes)
    assert _members(fused.graph) == _members(unfused.graph)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(t.shape).astype(t.dtype.name) for t in graph.input_types]
    for got, want in zip(fused.run(inputs), unfused.run(inputs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))
