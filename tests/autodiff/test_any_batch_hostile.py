"""Any-batch cases the registry sweep (``_any_batch.py``: one node per op example, batch leading) does not meet:
batch 0 through reductions, integer and boolean outputs, a multi-output op with one output used, the batch on
another axis than the first, and scan / if_else bodies, nested. Each graph (forward, VJP, VJP of the VJP, JVP)
is traced at B, compiled with ``dynamic_shapes=True`` and run at other batches: bit for bit a fresh trace there,
or refused with a named ``FrameError`` (by the fresh trace too where the op takes no such batch), as
docs/design-parameters-and-shapes.md section 2 says."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

KINDS = ("forward", "vjp", "vjp2", "jvp")


def _graph(fn, types, kind):
    forward = fc.trace(fn, *types)
    wrt = [k for k, v in enumerate(forward.inputs) if v.type.dtype.is_float]
    if kind == "forward":
        return forward
    if kind == "jvp":
        return fc.build_jvp_graph(forward, wrt)
    vjp = fc.build_vjp_graph(forward, wrt)
    if kind == "vjp":
        return vjp
    return fc.build_vjp_graph(vjp, [k for k, v in enumerate(vjp.inputs) if v.type.dtype.is_float])


def _arrays(types, rng, classes):
    out = []
    for t in types:
        if t.dtype.is_float:
            out.append(rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype.np))
        elif t.dtype.name == "bool":
            out.append(rng.uniform(size=t.shape) > 0.5)
        else:
            out.append(rng.integers(0, classes, t.shape).astype(t.dtype.np))
    return out


def _verdict(fn, types_at, traced_batch, size, kind, classes=2):
    """``same``, ``refused`` (the traced graph, by a named error; a fresh trace runs) or ``both-refuse``; anything
    else fails the test where it happens."""
    exe = fc.compile(_graph(fn, types_at(traced_batch), kind), dynamic_shapes=True, cache=False)
    rng = np.random.default_rng(size)
    primal = [fc.as_type(t) for t in types_at(size)]
    try:
        fresh = _graph(fn, primal, kind)
    except fc.FrameError:  # no such batch for the op: the traced graph must refuse too, with the traced cotangents
        traced = _graph(fn, types_at(traced_batch), kind)
        arrays = _arrays(primal, rng, classes) + _arrays([v.type for v in traced.inputs[len(primal):]], rng, classes)
        with pytest.raises(fc.FrameError):
            exe.run(arrays)
        return "both-refuse"
    arrays = _arrays([v.type for v in fresh.inputs], rng, classes)
    want = fc.compile(fresh, cache=False).run([a.copy() for a in arrays])
    try:
        got = exe.run([a.copy() for a in arrays])
    except fc.ShapeError as exc:
        assert kind != "forward" and "traced as" in str(exc) and "again" in str(exc), str(exc)
        return "refused"
    assert len(got) == len(want)
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and a.tobytes() == b.tobytes(), (kind, size)
    return "same"


def f32(*shape):
    return f"f32[{', '.join(map(str, shape))}]"


W = np.linspace(-0.5, 0.5, 9).reshape(3, 3).astype(np.float32)


def _bn(which):
    def fn(x, w, b):
        return ops.batch_norm(x, w, b, np.zeros(3, np.float32), np.ones(3, np.float32), training=True)[which]
    return fn


def _rnn_with_if(h0, xs):
    def body(c, x):
        n = ops.tanh(c @ W + x)
        return ops.if_else(ops.greater(ops.sum(n), 0.0), lambda a: a * 0.5, ops.sin, n), n
    c, ys = ops.scan(body, h0, xs)
    return ops.mean(c), ys


def _scan_in_scan(h0, xs):
    def outer(c, x):
        ci, _ = ops.scan(lambda a, xi: (ops.tanh(a * xi + c), a), c, ops.stack(x, x * 2.0, axis=0))
        return ci, ops.sum(ci, axes=[1])
    return ops.scan(outer, h0, xs)


def _if_over_the_batch(p, x):
    return ops.if_else(ops.greater(ops.sum(p), 0.0), lambda a: ops.mean(a * a, axes=[0]),
                       lambda a: ops.sum(a, axes=[0]), x)


# (name, fn, input types at batch b, traced batch, {kind: expected verdict at batches 0, 1, B + 3}); "same0" is
# "same" except at batch 0, which the op refuses (both-refuse)
CASES = [
    # batch 0 through reductions: the mean of an empty batch is NaN at both, with the same bits
    ("mean over an empty batch", lambda x: ops.mean(x, axes=[0]), lambda b: [f32(b, 3)], 4, "same"),
    ("mean of all", lambda x: ops.mean(ops.tanh(x)), lambda b: [f32(b, 3)], 4, "same"),
    ("centred", lambda x: x - ops.mean(x, axes=[0], keepdims=True), lambda b: [f32(b, 3)], 4, "same"),
    ("mse_loss", lambda x, y: ops.mse_loss(x, y), lambda b: [f32(b, 3), f32(b, 3)], 4, "same"),
    ("max over the batch", lambda x: ops.max(x, axes=[0]), lambda b: [f32(b, 3)], 4, "same0"),
    ("logsumexp over the batch", lambda x: ops.logsumexp(x, axes=[0]), lambda b: [f32(b, 3)], 4, "same0"),
    ("softmax over the batch", lambda x: ops.softmax(x, axis=0), lambda b: [f32(b, 3)], 4, "same0"),
    ("cross_entropy", lambda x, y: ops.cross_entropy(x, y), lambda b: [f32(b, 5), f"i64[{b}]"], 4, "same0"),
    # max_pool2d's second order read each window's taps with a reshape(-1), which numpy refuses for an empty batch
    ("max_pool2d", lambda x: ops.max_pool2d(x, kernel_size=2), lambda b: [f32(b, 2, 4, 4)], 2, "same"),
    ("max_pool2d, padded", lambda x: ops.max_pool2d(x, kernel_size=3, stride=2, padding=1),
     lambda b: [f32(b, 5, 5)], 2, "same"),
    # integer and boolean outputs, and inputs
    ("argmax beside tanh", lambda x: (ops.tanh(x), ops.argmax(x, axis=1)), lambda b: [f32(b, 3)], 4, "same"),
    ("argmax alone", lambda x: ops.argmax(x, axis=1), lambda b: [f32(b, 3)], 4, "same"),
    ("argmax over the batch", lambda x: ops.argmax(x, axis=0), lambda b: [f32(b, 3)], 4, "same0"),
    ("a mask out", lambda x: (ops.greater(x, 0.0), x * 2.0), lambda b: [f32(b, 3)], 4, "same"),
    ("cast to int", lambda x: (ops.cast(x * 3.0, to="i32"), ops.sin(x)), lambda b: [f32(b, 3)], 4, "same"),
    ("where", lambda m, x: ops.where(m, x, -x), lambda b: [f"bool[{b}, 3]", f32(b, 3)], 4, "same"),
    # a multi-output op, one output used: batch_norm's JVP and second order read 1/N and 1/(N-1) off x, so they
    # run at any batch of two or more (one value per channel and none are refused by the fresh trace too)
    ("batch_norm y only", _bn(0), lambda b: [f32(b, 3), f32(3), f32(3)], 4, "same01"),
    ("batch_norm running mean only", _bn(1), lambda b: [f32(b, 3), f32(3), f32(3)], 4, "same01"),
    # the batch on another axis
    ("sum over axis 1", lambda x: ops.sum(ops.tanh(x), axes=[1]), lambda b: [f32(3, b)], 4, "same"),
    ("mean over axis 1", lambda x: ops.mean(x, axes=[1]), lambda b: [f32(3, b)], 4, "same"),
    ("softmax over axis 1", lambda x: ops.softmax(x, axis=1), lambda b: [f32(3, b)], 4, "same0"),
    ("concat on axis 1", lambda x, y: ops.concat(x, y, axis=1), lambda b: [f32(3, b), f32(3, 2)], 4, "same"),
    ("transpose", lambda x, w: ops.transpose(x) @ w, lambda b: [f32(3, b), f32(3, 2)], 4, "same"),
    ("reshape with -1 inside", lambda x: ops.reshape(x, shape=[3, -1]), lambda b: [f32(3, b, 2)], 4, "same"),
    ("matmul, batch in the middle", lambda x, w: ops.sum(x @ w, axes=[1]), lambda b: [f32(2, b, 3), f32(3, 4)], 4,
     "same"),
    # scan and if_else bodies: their gradients and forward rules run at any batch where the bodies' do; a scan
    # body's gradient that reads the shape of a value made inside the body (the sum over ci) writes it down, so
    # that the loop does not save the value for its shape only: refused by name (an if_else saves nothing)
    ("if_else in a scan, batch in the carry", _rnn_with_if, lambda b: [f32(b, 3), f32(5, b, 3)], 4, "same"),
    ("scan in a scan", _scan_in_scan, lambda b: [f32(b, 3), f32(4, b, 3)], 2,
     {"forward": "same", "vjp": "refused", "vjp2": "refused", "jvp": "same"}),
    ("if_else reducing the batch", _if_over_the_batch, lambda b: [f32(2), f32(b, 3)], 4, "same"),
]


def _expected(spec, kind, size):
    want = spec[kind] if isinstance(spec, dict) else spec
    name = want.rstrip("01")
    refused_at = {int(c) for c in want[len(name):]}
    return "both-refuse" if size in refused_at else name


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # (the mean of an empty batch)
@pytest.mark.parametrize("name, fn, types_at, traced, spec", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_graph_at_other_batches_is_a_fresh_traces_bits_or_refused_by_name(name, fn, types_at, traced,
                                                                                      spec, kind):
    got = {size: _verdict(fn, types_at, traced, size, kind, classes=5) for size in (0, 1, traced + 3)}
    assert got == {size: _expected(spec, kind, size) for size in got}


def test_a_vjp_is_refused_where_its_op_refuses_the_inputs():
    # argmax's gradient is zeros of x's type and conj's reads the cotangent only: the VJP graph dropped the forward
    # node, so at an empty batch (argmax) or an odd length (conj's packed complex pairs) it ran and answered for
    # inputs that have no value; build_vjp_graph keeps the forward's nodes and the op refuses, by name
    argmax = fc.build_vjp_graph(fc.trace(lambda x: ops.argmax(x, axis=0), "f64[4, 3]"), [0])
    exe = fc.compile(argmax, dynamic_shapes=True)
    assert exe.run([np.ones((5, 3)), np.zeros(3, np.int64)])[0].tobytes() == np.zeros((5, 3)).tobytes()
    with pytest.raises(fc.ShapeError, match=r"\(argmax\) refuses them.*size 0"):
        exe.run([np.ones((0, 3)), np.zeros(3, np.int64)])
    conj = fc.compile(fc.build_vjp_graph(fc.trace(ops.conj, "f32[2]")), dynamic_shapes=True)
    with pytest.raises(fc.ShapeError, match=r"\(conj\) refuses them.*packed complex"):
        conj.run([np.ones(5, np.float32), np.ones(5, np.float32)])
    # the forward's nodes stay as written; compiled from opt_level 1, the unread one is gone
    forward = fc.trace(lambda x, y: ops.tanh(x) + y, "f64[3]", "f64[3]")
    vjp = fc.build_vjp_graph(forward)
    assert [n.op for n in vjp.nodes[:len(forward.nodes)]] == [n.op for n in forward.nodes]
    x, y, g = np.random.default_rng(0).standard_normal((3, 3))
    at0, at2 = (fc.compile(vjp, opt_level=level, cache=False) for level in (0, 2))
    for a, b in zip(at0.run([x, y, g]), at2.run([x, y, g])):
        assert a.tobytes() == b.tobytes()
    assert "add" not in {n.op for n in fc.compile(vjp, cache=False).graph.nodes}
