"""Registry-driven: every example of every installed op runs, and agrees with shape inference and its kernel.

No hand list: the ops and examples come from ``frame_core.registry()``, so a
new op in any installed pack is covered the moment it is registered.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import frame_core as fc
from frame_core import Graph
from frame_core.frontend.trace import apply
from frame_core.ir.dtypes import as_dtype
from frame_core.ops_registry.loader import discover_entry_points, load_registry
from frame_core.ops_registry.registry import registry, use_registry
from frame_core.ops_registry.schema import Example

from .fakepacks import FakeEntryPoint, plugin, unary

CASES = [(schema.name, i) for schema in registry() for i in range(len(schema.examples))]


def single_node_graph(schema, example: Example) -> Graph:
    g = Graph(f"{schema.name}_example")
    xs = [g.add_input(t) for t in example.inputs]
    node = g.add_node(schema.name, xs, example.attrs)
    for v in node.outputs:
        g.mark_output(v)
    return g


def sample(op: str, index: int, example: Example) -> list[np.ndarray]:
    return example.sample(np.random.default_rng(zlib.crc32(f"{op}/{index}".encode())))


def as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    if as_dtype(a.dtype).is_float:
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))  # NaN equals NaN here
    else:
        np.testing.assert_array_equal(a, b)


def test_every_installed_op_has_examples_and_the_table_is_not_empty():
    assert {op for op, _ in CASES} == set(registry().names())  # no op drops out of the table
    assert {"constant", "accumulate_internal"} <= {op for op, _ in CASES}


@pytest.mark.parametrize("op, index", CASES, ids=[f"{op}-{i}" for op, i in CASES])
def test_example_runs_and_outputs_match_inferred_types_and_the_kernel(op, index):
    schema = registry().get(op)
    example = schema.examples[index]
    graph = single_node_graph(schema, example)
    inferred = graph.output_types
    arrays = sample(op, index, example)
    assert [fc.TensorType(as_dtype(a.dtype), a.shape) for a in arrays] == list(example.inputs)

    outputs = fc.compile(graph, opt_level=0, cache=False).run([a.copy() for a in arrays])
    assert len(outputs) == len(inferred)
    for out, t in zip(outputs, inferred):
        assert isinstance(out, np.ndarray), f"{op}: output is a {type(out).__name__}"
        assert out.dtype == t.dtype.np and out.shape == t.shape, f"{op}: got {out.dtype}{list(out.shape)}, inferred {t}"

    ctx = schema.context(example.inputs, example.attrs)
    given = [a.copy() for a in arrays]
    direct = as_tuple(schema.kernels["cpu"](ctx)(*given))
    assert len(direct) == len(outputs)
    for d, out in zip(direct, outputs):
        assert_same(np.asarray(d), out)
    for a, kept in zip(given, arrays):  # a kernel called without `out` leaves its inputs alone
        assert_same(a, kept)


# -- DecomposeFn: decomposed and kernel values agree ------------------------------------------------------------
def _decomposable_ops():
    """A fixture op with a DecomposeFn, so the check below always has at least one op to test."""
    def decomposition(ctx):
        return ctx.decomposition_graph(lambda x: apply("accumulate_internal", x, x))

    return [unary("twice_fixture", not_differentiable="fixture", decomposition=decomposition,
                  kernels={"cpu": lambda ctx: (lambda x: x + x)},
                  examples=[Example(["f32[3]"]), Example(["f64[2, 2]"])])]


def test_decomposed_and_kernel_values_agree_for_every_op_with_a_decompose_fn():
    eps = [*discover_entry_points(), FakeEntryPoint("decomp", plugin("decomp", _decomposable_ops))]
    reg = load_registry(eps, environ={}, strict=True)
    checked = []
    with use_registry(reg):
        for schema in reg:
            if schema.decomposition is None:
                continue
            for index, example in enumerate(schema.examples):
                graph = single_node_graph(schema, example)
                arrays = sample(schema.name, index, example)
                kernel = fc.compile(graph, opt_level=0, cache=False, registry=reg)
                decomposed = fc.compile(graph, opt_level=0, cache=False, registry=reg, decompose={schema.name})
                assert schema.name not in [n.op for n in decomposed.graph.nodes]
                for k, d in zip(kernel.run([a.copy() for a in arrays]), decomposed.run([a.copy() for a in arrays])):
                    assert d.dtype == k.dtype and d.shape == k.shape
                    tol = {2: 1e-2, 4: 1e-5, 8: 1e-12}.get(k.dtype.itemsize, 0) if as_dtype(k.dtype).is_float else 0
                    np.testing.assert_allclose(d.astype(np.float64), k.astype(np.float64), rtol=tol, atol=tol)
                checked.append((schema.name, index))
    assert ("twice_fixture", 0) in checked and ("twice_fixture", 1) in checked
