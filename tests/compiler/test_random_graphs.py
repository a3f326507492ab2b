"""Property: optimised and unoptimised execution agree on random graphs built from the registry's ops.

A graph is grown step by step from the ops of the current registry (core +
ops_basic) and their examples:

* ``example``  an op applied as one of its examples says (input types, with the
               graph's dtype, and attributes), reading pool values of exactly
               those types or new graph inputs; only examples whose inputs and
               outputs are all floating;
* ``unary``    a user-facing one-input elementwise op without required attributes on
               any pool value;
* ``binary``   a two-input broadcasting op on two pool values whose shapes broadcast,
               or on a value and a new constant;
* ``reduce``   an op with ``axes``/``keepdims`` attributes (sum, mean, max, ...) over
               random axes;
* ``view``     a ``view`` op (reshape to 1-D, a random transpose, stop_gradient);
* ``identity`` ``x + 0`` or ``x * 1`` with a zero/one constant that may broadcast x;
* ``repeat``   the previous step again on the same inputs (food for CSE).

Inputs of ops whose examples sample a positive range (log, sqrt, div) are
passed through ``sigmoid(v) + 0.5``; ``exp`` reads ``tanh(v)``, so values stay
finite. The loss is the sum of ``sum(v)`` over the values nothing reads (the
last one always), and a few more values (graph inputs among them) are extra
outputs, so outputs that alias inputs or each other are exercised.

Checked, for opt_level 1 and 2 with ``checks=True`` (verify after every stage)
against opt_level 0: outputs, and all input gradients of the graph that
``build_backward_graph`` returns. Tolerances: float32 rtol 1e-5, atol 1e-6;
float64 rtol 1e-12, atol 1e-12 (the passes run the same kernels on the same
values, so differences are rounding of reordered-but-equal operations only).
The optimised executable is then run on other inputs, and the first run's
results must be unchanged (planned buffers are reused between runs); its
memory plan passes ``plan_check.check_plan`` and its outputs alias nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import frame_core as fc
from frame_core.ir.dtypes import float32, float64
from frame_core.ir.graph import Graph, Value
from frame_core.ir.types import TensorType
from frame_core.ops_registry.registry import registry

from .plan_check import check_outputs_alias_nothing, check_plan

SHAPES = [(3, 4), (4,), (3, 1), (), (2, 3, 4), (1, 4)]
TOLERANCE = {float32: dict(rtol=1e-5, atol=1e-6), float64: dict(rtol=1e-12, atol=1e-12)}
KINDS = ["example", "example", "unary", "binary", "binary", "reduce", "view", "identity", "repeat"]
#: Ops a random graph must not contain: pipeline products and ops without data inputs.
EXCLUDED = {"constant", "fused_elementwise_internal"}


def _usable(schema) -> bool:
    return (schema.name not in EXCLUDED and schema.gradient is not None and not schema.has_side_effect
            and not schema.variadic and schema.inputs)


def _floating_example(schema, example) -> bool:
    """The example reads and writes only values of one floating dtype (the graph's dtype replaces theirs;
    integer labels, boolean conditions, integer results and a dtype pinned by an attribute, as cast's `to`,
    have no place in a graph of one floating dtype)."""
    if not all(t.dtype.is_float for t in example.inputs) or any(a.kind == "dtype" for a in schema.attrs.values()):
        return False
    outputs = schema.context(example.inputs, example.attrs).output_types
    return all(t.dtype is example.inputs[0].dtype for t in outputs)


def _needs_no_attrs(schema) -> bool:
    return all(not spec.required for spec in schema.attrs.values())


def _positive_domain(schema) -> bool:
    """The op's examples all sample inputs from a positive range (log, sqrt, div)."""
    return bool(schema.examples) and all(e.low > 0 and e.values is None for e in schema.examples)


@dataclass
class Builder:
    """Grows one random graph; ``steps`` is a readable log of what was drawn."""

    dtype: object
    graph: Graph = field(default_factory=lambda: Graph("random"))
    pool: list[Value] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    last: tuple | None = None

    def new_input(self, shape: tuple[int, ...]) -> Value:
        v = self.graph.add_input(TensorType(self.dtype, shape), f"in{len(self.graph.inputs)}")
        self.pool.append(v)
        return v

    def constant(self, array: np.ndarray) -> Value:
        return self.graph.constant(np.asarray(array, self.dtype.np))

    def guarded(self, op: str, v: Value) -> Value:
        schema = registry().get(op)
        if _positive_domain(schema):  # into (0.5, 1.5)
            return self.graph.apply("add", self.graph.apply("sigmoid", v), self.constant(0.5))
        if op == "exp":
            return self.graph.apply("tanh", v)
        return v

    def apply(self, op: str, inputs: list[Value], attrs: dict) -> Value:
        ins = [self.guarded(op, v) for v in inputs]
        outs = self.graph.apply(op, *ins, **attrs)
        out = outs[0] if isinstance(outs, tuple) else outs
        self.last = (op, inputs, attrs)
        self.steps.append(f"{op}({', '.join(str(v.type) for v in inputs)}; {attrs})")
        self.pool.append(out)
        return out


def _step(data, b: Builder) -> None:
    reg = registry()
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    if kind == "repeat":
        if b.last is None:
            kind = "unary"
        else:
            op, inputs, attrs = b.last
            b.apply(op, inputs, attrs)
            return
    if kind == "example":
        cases = [(s, e) for s in reg if _usable(s) for e in s.examples if _floating_example(s, e)]
        schema, example = data.draw(st.sampled_from(cases), label="op example")
        inputs = []
        for t in example.inputs:
            want = TensorType(b.dtype, t.shape)
            candidates = [v for v in b.pool if v.type == want]
            pick = data.draw(st.integers(0, len(candidates)), label=f"{schema.name} input")
            inputs.append(candidates[pick] if pick < len(candidates) else b.new_input(want.shape))
        b.apply(schema.name, inputs, dict(example.attrs))
        return
    x = data.draw(st.sampled_from(b.pool), label="operand")
    if kind == "unary":
        ops = sorted(s.name for s in reg if _usable(s) and "elementwise" in s.traits and len(s.inputs) == 1
                     and not s.internal and _needs_no_attrs(s))
        b.apply(data.draw(st.sampled_from(ops), label="unary op"), [x], {})
    elif kind == "binary":
        ops = sorted(s.name for s in reg if _usable(s) and "broadcasting" in s.traits and len(s.inputs) == 2)
        op = data.draw(st.sampled_from(ops), label="binary op")
        partners = [v for v in b.pool if _broadcasts(v.shape, x.shape)]
        pick = data.draw(st.integers(0, len(partners)), label="partner")
        if pick < len(partners):
            y = partners[pick]
        else:
            shape = data.draw(st.sampled_from([(), x.shape[-1:], x.shape]), label="constant shape")
            rng = np.random.default_rng(len(b.steps))
            y = b.constant(rng.uniform(-1, 1, shape))
        first, second = (x, y) if data.draw(st.booleans(), label="order") else (y, x)
        b.apply(op, [first, second], {})
    elif kind == "reduce":
        ops = sorted(s.name for s in reg if _usable(s) and {"axes", "keepdims"} <= set(s.attrs))
        op = data.draw(st.sampled_from(ops), label="reduction")
        axes = data.draw(st.none() | st.lists(st.integers(0, max(x.type.rank - 1, 0)), unique=True, max_size=x.type.rank)
                         if x.type.rank else st.none(), label="axes")
        b.apply(op, [x], {"axes": axes, "keepdims": data.draw(st.booleans(), label="keepdims")})
    elif kind == "view":
        how = data.draw(st.sampled_from(["reshape", "transpose", "stop_gradient"]), label="view op")
        if how == "reshape":
            b.apply("reshape", [x], {"shape": [-1]})
        elif how == "transpose":
            perm = data.draw(st.permutations(range(x.type.rank)), label="perm")
            b.apply("transpose", [x], {"perm": list(perm)})
        else:
            b.apply("stop_gradient", [x], {})
    elif kind == "identity":
        op, neutral = data.draw(st.sampled_from([("add", 0.0), ("mul", 1.0), ("sub", 0.0), ("div", 1.0)]), label="identity")
        shape = data.draw(st.sampled_from([(), x.shape, (2,) + x.shape]), label="neutral shape")
        b.last = None
        out = b.graph.apply(op, x, b.constant(np.full(shape, neutral)))
        b.steps.append(f"{op}({x.type}, {neutral} of shape {list(shape)})")
        b.pool.append(out)


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def _build(data) -> tuple[Graph, list[int]]:
    dtype = data.draw(st.sampled_from([float32, float64]), label="dtype")
    b = Builder(dtype)
    for _ in range(data.draw(st.integers(1, 2), label="inputs")):
        b.new_input(data.draw(st.sampled_from(SHAPES), label="input shape"))
    for _ in range(data.draw(st.integers(1, 12), label="steps")):
        _step(data, b)
    g = b.graph
    read = {v for n in g.nodes for v in n.inputs}
    ends = [v for v in b.pool if v not in read and v is not b.pool[-1]]
    ends = [b.pool[-1]] + data.draw(st.lists(st.sampled_from(ends), unique=True, max_size=3), label="summed") if ends \
        else [b.pool[-1]]
    loss = None
    for v in ends:
        s = g.apply("sum", v)
        loss = s if loss is None else g.apply("add", loss, s)
    g.mark_output(loss)
    for v in data.draw(st.lists(st.sampled_from(b.pool), max_size=3), label="extra outputs"):
        g.mark_output(v)
    note("steps:\n  " + "\n  ".join(b.steps))
    note(f"graph:\n{g}")
    return g, list(range(len(g.inputs)))


def _sample(graph: Graph, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, v.type.shape).astype(v.type.dtype.np) for v in graph.inputs]


def _agree(got: list[np.ndarray], want: list[np.ndarray], tol: dict, what: str) -> None:
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        assert isinstance(a, np.ndarray), f"{what} {i} is a {type(a).__name__}, not an ndarray"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what} {i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        np.testing.assert_allclose(a, b, err_msg=f"{what} {i}", **tol)


def _check_levels(graph: Graph, inputs: list[np.ndarray], other: list[np.ndarray], tol: dict, what: str) -> None:
    want = fc.compile(graph, opt_level=0, cache=False).run(inputs)
    assume(all(np.all(np.isfinite(w)) for w in want))
    want_other = fc.compile(graph, opt_level=0, cache=False).run(other)
    for level in (1, 2):
        exe = fc.compile(graph, opt_level=level, checks=True, cache=False)
        note(f"{what}, opt_level={level}:\n{exe.graph}")
        check_plan(exe, registry())
        got = exe.run(inputs)
        check_outputs_alias_nothing(exe, inputs, got)
        kept = [np.array(a, copy=True) for a in got]
        _agree(got, want, tol, f"{what} output (opt_level={level})")
        _agree(exe.run(other), want_other, tol, f"{what} output on other inputs (opt_level={level})")
        _agree(got, kept, dict(rtol=0, atol=0), f"{what} output of the first run after a second run (opt_level={level})")


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(st.data())
def test_optimised_and_unoptimised_execution_agree_in_values_and_gradients(data):
    graph, wrt = _build(data)
    tol = TOLERANCE[graph.inputs[0].type.dtype]
    seed = data.draw(st.integers(0, 2**16), label="input seed")
    inputs, other = _sample(graph, seed), _sample(graph, seed + 1)
    _check_levels(graph, inputs, other, tol, "forward")
    train = fc.build_backward_graph(graph, 0, wrt)
    _check_levels(train, inputs, other, tol, "gradient")
