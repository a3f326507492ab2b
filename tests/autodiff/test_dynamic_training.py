"""A training graph compiled once with ``dynamic_shapes=True`` runs at any batch size (design note, section 2).

Gradients read the shapes they need from operands (``*_like_internal``) and a mean's 1/N from
``inverse_count_internal``, so re-specialising a training graph re-infers them; ``bind_shapes`` gives them the
compiled shapes as attributes again. Checked here: the gradients at batch 8, 13 and 1 of one graph traced at 8
equal, bit for bit, those of a graph traced at that batch, and torch's to 1e-12 in float64; a graph through an
op whose gradient may hold traced sizes is refused with a named ``ShapeError``, never run wrongly; and every
op that declares ``any_shape_gradient`` keeps the promise on its own examples at other sizes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

RNG = np.random.default_rng(11)
IN, HIDDEN, CLASSES = 5, 7, 3


def mlp_loss(x, labels, w1, b1, w2, b2):
    h = ops.tanh(x @ w1 + b1)
    h = ops.relu(h - ops.mean(h, axes=[0]))             # a mean over the batch: its 1/N is the runtime batch
    logits = h @ w2 + b2
    last = x[-1]                                        # the last row, wherever the batch ends
    shifted = ops.reshape(logits, shape=[-1]) * 0.5
    return (ops.cross_entropy(logits, labels) + ops.mean(ops.square(shifted)) + ops.sum(last * last) * 0.1
            + ops.mean(ops.logsumexp(logits, axes=[1])) + ops.mean(ops.max(h, axes=[1])))


WEIGHTS = [RNG.standard_normal((IN, HIDDEN)) * 0.5, RNG.standard_normal(HIDDEN) * 0.1,
           RNG.standard_normal((HIDDEN, CLASSES)) * 0.5, RNG.standard_normal(CLASSES) * 0.1]


def traced(batch):
    types = [f"f64[{batch}, {IN}]", f"i64[{batch}]", *(fc.TensorType(fc.as_dtype("f64"), w.shape) for w in WEIGHTS)]
    return fc.trace(mlp_loss, *types)


def data(batch):
    return [RNG.standard_normal((batch, IN)), RNG.integers(0, CLASSES, batch)]


def torch_gradients(x, labels):
    torch = pytest.importorskip("torch")
    w1, b1, w2, b2 = (torch.tensor(w, requires_grad=True) for w in WEIGHTS)
    xt = torch.tensor(x, requires_grad=True)
    h = torch.tanh(xt @ w1 + b1)
    h = torch.relu(h - h.mean(0))
    logits = h @ w2 + b2
    loss = (torch.nn.functional.cross_entropy(logits, torch.tensor(labels)) + ((logits.reshape(-1) * 0.5) ** 2).mean()
            + (xt[-1] * xt[-1]).sum() * 0.1 + torch.logsumexp(logits, 1).mean() + h.max(1).values.mean())
    loss.backward()
    return [loss.detach().numpy(), xt.grad.numpy(), *(t.grad.numpy() for t in (w1, b1, w2, b2))]


def test_one_training_graph_serves_every_batch_size_bit_for_bit():
    training = fc.build_backward_graph(traced(8), 0, [0, 2, 3, 4, 5])
    exe = fc.compile(training, dynamic_shapes=True)
    for batch in (8, 13, 1):
        x, labels = data(batch)
        got = exe.run([x, labels, *WEIGHTS])
        want = fc.compile(fc.build_backward_graph(traced(batch), 0, [0, 2, 3, 4, 5])).run([x, labels, *WEIGHTS])
        assert [a.shape for a in got] == [a.shape for a in want]
        for a, b in zip(got, want):
            assert a.tobytes() == b.tobytes(), f"batch {batch}"
        for a, b in zip(got, torch_gradients(x, labels)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"batch {batch}")
    assert exe.specializations().misses == 2


def test_a_train_step_graph_with_its_update_runs_at_any_batch():
    training = fc.build_backward_graph(traced(8), 0, [2, 3, 4, 5])
    n = len(training.inputs)

    def sgd(*values):  # new parameters: p - 0.1 * grad
        params, grads = values[2:n], values[n + 1:]
        return [p - g * 0.1 for p, g in zip(params, grads)]
    step, _ = fc.extend_graph(training, sgd)
    exe = fc.compile(step, dynamic_shapes=True, opt_level=1)
    for batch in (13, 1, 8):
        x, labels = data(batch)
        again, _ = fc.extend_graph(fc.build_backward_graph(traced(batch), 0, [2, 3, 4, 5]), sgd)
        want = fc.compile(again, opt_level=1).run([x, labels, *WEIGHTS])
        for a, b in zip(exe.run([x, labels, *WEIGHTS]), want):
            assert a.tobytes() == b.tobytes(), f"batch {batch}"


def test_a_graph_traced_at_batch_one_broadcasts_correctly_later():
    # traced at 1, x [1, 4] and a parameter row r [1, 4] have one shape; at 6 the parameter is broadcast, so its
    # gradient must sum over the batch, which nothing in the trace showed
    forward = fc.trace(lambda x, r: ops.sum(ops.square(x * r)), "f64[1, 4]", "f64[1, 4]")
    exe = fc.compile(fc.build_backward_graph(forward, 0, [1]), dynamic_shapes=True)
    x, r = RNG.standard_normal((6, 4)), RNG.standard_normal((1, 4))
    loss, g = exe.run([x, r])
    np.testing.assert_allclose(g, np.sum(2 * x * x * r, axis=0, keepdims=True), rtol=1e-13)
    assert g.shape == (1, 4) and loss.shape == ()


REFUSALS = [
    ("an op whose gradient holds traced sizes", lambda x, w: ops.sum(ops.linear_scan(ops.tanh(x @ w), x @ w, axis=0)),
     r"gradient of linear_scan may hold the traced sizes \(no any_shape_gradient trait\)"),
    ("a trace that read a size", lambda x, w: ops.sum(x @ w) / x.shape[0],
     r"read a tensor's shape, size or len\(\)"),
]


@pytest.mark.parametrize("what, fn, message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_graph_that_cannot_be_generalised_is_refused_by_name(what, fn, message):
    forward = fc.trace(fn, "f64[8, 3]", "f64[3, 2]")
    training = fc.build_backward_graph(forward, 0, [1])
    exe = fc.compile(training, dynamic_shapes=True)
    x, w = RNG.standard_normal((8, 3)), RNG.standard_normal((3, 2))
    exe.run([x, w])  # the traced batch runs
    with pytest.raises(fc.ShapeError, match=message) as caught:
        exe.run([RNG.standard_normal((5, 3)), w])
    assert "input 0 ('x') dimension 0 is 5, traced as 8" in str(caught.value)
    extended, _ = fc.extend_graph(training, lambda x, w, loss, g: w - g)  # a copy keeps the refusal
    with pytest.raises(fc.ShapeError, match=message):
        fc.specialize(extended, ["f64[5, 3]", "f64[3, 2]"])
    loaded = fc.loads(fc.dumps(training))
    with pytest.raises(fc.ShapeError, match=message):  # and so does a saved and loaded one
        fc.specialize(loaded, ["f64[5, 3]", "f64[3, 2]"])


# -- every op that declares any_shape_gradient, on its own examples at other sizes --------------------------------
def _arrays(example, types, rng):
    # integers (labels, indices) stay below every floating input's last size (a class count), and the example's top
    top = min([int(example.high)] + [t.shape[-1] for t in types if t.dtype.is_float and t.rank])
    arrays = []
    for t in types:
        if t.dtype.is_float:
            a = rng.uniform(example.low, example.high, t.shape)
            if example.min_abs:
                a = np.where(np.abs(a) < example.min_abs, np.copysign(example.min_abs, a), a)
            arrays.append(a.astype(t.dtype.np))
        elif t.dtype.is_int:
            arrays.append(rng.integers(max(int(example.low), 0), max(top, 1), t.shape).astype(t.dtype.np))
        else:
            arrays.append(rng.random(t.shape) < 0.5)
    return arrays


def _vjp(op, types, attrs):
    """The op's forward graph and its VJP with respect to the floating inputs that get a gradient (an input whose
    gradient is zero everywhere, such as relu_grad_internal's mask, gets zeros of its traced shape, which makes
    any graph refuse re-specialisation: right, but nothing to check)."""
    forward = fc.trace(lambda *xs: fc.apply(op, *xs, **attrs), *types)
    nondiff = fc.registry().schemas[op].nondiff_inputs
    wrt = [i for i, t in enumerate(types) if t.dtype.is_float and i not in nondiff]
    vjp = fc.build_vjp_graph(forward, wrt)
    live = [i for i, g in zip(wrt, vjp.outputs) if not (g.producer is not None and g.producer.op == "constant")]
    if live != wrt:
        vjp = fc.build_vjp_graph(forward, live) if live else None
    return forward, vjp


def _resized(types, old, new):
    return [t.with_shape(tuple(new if d == old else d for d in t.shape)) for t in types]


def _bodies_resized(attrs, old, new):
    """``attrs`` with each body (a graph attribute: control flow) re-specialised with ``old`` sizes as ``new``, as a
    trace at the new sizes would type it."""
    return {k: fc.specialize(a, _resized([v.type for v in a.inputs], old, new)) if isinstance(a, fc.Graph) else a
            for k, a in attrs.items()}


def _declared():
    reg = fc.registry()
    return sorted(name for name, s in reg.schemas.items()
                  if s.gradient is not None and "any_shape_gradient" in s.traits and s.examples)


@pytest.mark.parametrize("op", _declared())
def test_any_shape_gradient_holds_at_other_sizes(op):
    schema = fc.registry().schemas[op]
    rng = np.random.default_rng(0)
    checked = refused = 0
    for example in schema.examples:
        types = [fc.as_type(t) for t in example.inputs]
        if not any(t.dtype.is_float for t in types):
            continue
        try:
            traced_forward, vjp = _vjp(op, types, example.attrs)
        except fc.FrameError:
            continue  # (an example of a kind of input that carries no gradient)
        if vjp is None:
            refused += 1
            continue
        sizes = sorted({d for t in types for d in t.shape if d > 0})
        for old, new in [(d, d + 2) for d in sizes] + [(d, 1) for d in sizes if d > 1]:
            wanted = _resized(types, old, new)
            try:
                forward, fresh = _vjp(op, wanted, _bodies_resized(example.attrs, old, new))
            except fc.FrameError:
                continue  # the op cannot take inputs of these shapes at all
            cotangents = [v.type for v in forward.outputs]
            if [t.rank for t in cotangents] != [v.type.rank for v in traced_forward.outputs] or fresh is None:
                continue  # another kind of output (squeeze() of a new size-1 axis): a trace of its own
            try:
                specialised = fc.specialize(vjp, [*wanted, *cotangents])
            except fc.ShapeError:
                refused += 1  # refused by name (one_hot's depth at another class count, say): never wrong
                continue
            arrays = _arrays(example, [*wanted, *cotangents], rng)
            try:
                want = fc.compile(fresh).run(arrays)
            except fc.DataError:
                continue  # indices drawn for the traced sizes, out of range of a smaller table: nothing to compare
            got = fc.compile(specialised).run(arrays)
            tolerance = 1e-12 if all(t.dtype.name == "f64" for t in wanted if t.dtype.is_float) else 1e-5
            for a, b in zip(got, want):
                assert a.shape == b.shape, f"{op} {example.inputs}: size {old} -> {new}"
                np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance,
                                           err_msg=f"{op} {example.inputs}: size {old} -> {new}")
            checked += 1
    # (ops whose gradient is zero everywhere, ceil or stop_gradient, included: their VJP is zeros read off the
    # input's type, which follow it to the new size)
    assert checked, f"{op}: no example could be resized ({refused} refused)"


def test_the_compiled_program_is_the_attribute_forms():
    # bind_shapes lowers every *_like_internal op at compile time: no operand is kept alive for its shape
    training = fc.build_backward_graph(traced(8), 0, [0, 2, 3, 4, 5])
    assert any(re.search("_like_internal|inverse_count", n.op) for n in training.nodes)
    from frame_ops_basic.like import _bind

    lowered = _bind(training, None)
    assert not any(re.search("_like_internal|inverse_count", n.op) for n in lowered.nodes)


def test_a_forward_mode_graph_runs_at_any_batch_bit_for_bit():
    # the derived JVPs (max, logsumexp, cross_entropy) transpose GradientFns that read shapes from operands: a JVP
    # graph re-specialised at another batch reads them again, where it used to hold the traced ones
    jvp = fc.compile(fc.build_jvp_graph(traced(8), [0, 2, 3, 4, 5]), dynamic_shapes=True)
    for batch in (8, 13, 1):
        x, labels = data(batch)
        tangents = [RNG.standard_normal(x.shape), *(RNG.standard_normal(w.shape) for w in WEIGHTS)]
        got = jvp.run([x, labels, *WEIGHTS, *tangents])
        want = fc.compile(fc.build_jvp_graph(traced(batch), [0, 2, 3, 4, 5])).run([x, labels, *WEIGHTS, *tangents])
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"batch {batch}"
        if batch == 13:  # against a central difference along the tangent
            value = fc.compile(traced(batch))

            def at(t):
                return float(value.run([x + t * tangents[0], labels, *(w + t * d for w, d in
                                                                        zip(WEIGHTS, tangents[1:]))])[0])
            np.testing.assert_allclose(got[1], (at(1e-6) - at(-1e-6)) / 2e-6, rtol=1e-6)


def test_value_and_grad_re_specialises_its_training_graph_when_every_op_allows(monkeypatch):
    from frame_core.autodiff import backward

    calls = []
    real = backward.build_backward_graph
    monkeypatch.setattr(backward, "build_backward_graph", lambda *a, **k: calls.append(1) or real(*a, **k))
    params = dict(zip(["w1", "b1", "w2", "b2"], WEIGHTS))

    def loss(p, x, labels):
        return mlp_loss(x, labels, p["w1"], p["b1"], p["w2"], p["b2"])
    step = fc.value_and_grad(loss)
    for batch in (8, 13, 1):
        x, labels = data(batch)
        value, grads = step(params, x, labels)
        want = fc.compile(real(traced(batch), 0, [2, 3, 4, 5])).run([x, labels, *WEIGHTS])
        assert value.tobytes() == want[0].tobytes()
        for k, name in enumerate(["w1", "b1", "w2", "b2"]):
            assert grads[name].tobytes() == want[1 + k].tobytes(), f"batch {batch}"
    assert len(calls) == 1 and step.traces == 1  # differentiated once, re-specialised for 13 and 1

    calls.clear()  # batch_norm's running averages get zeros read off their type as cotangents: re-specialised too

    def normed(p, x):
        y, _, _ = ops.batch_norm(x @ p["w"], np.ones(HIDDEN), np.zeros(HIDDEN), np.zeros(HIDDEN), np.ones(HIDDEN))
        return ops.sum(ops.square(y))
    held = fc.value_and_grad(normed)
    for batch in (4, 6, 2):
        x = RNG.standard_normal((batch, IN))
        value, grads = held({"w": WEIGHTS[0]}, x)
        fresh = fc.trace(lambda w, x: normed({"w": w}, x), f"f64[{IN}, {HIDDEN}]", f"f64[{batch}, {IN}]")
        want = fc.compile(real(fresh, 0, [0])).run([WEIGHTS[0], x])  # (real: the references are not counted)
        assert value.tobytes() == want[0].tobytes() and grads["w"].tobytes() == want[1].tobytes(), f"batch {batch}"
    assert len(calls) == 1  # differentiated once, re-specialised for 6 and 2
