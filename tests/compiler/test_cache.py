"""The compile cache: keyed by structure, types, attributes, input names, backend, options and registry."""

from __future__ import annotations


import numpy as np
import pytest

import frame_core as fc
import frame_core.compiler.api as api
from frame_core import InputError, ops
from frame_core.compiler.api import CompileCache
from frame_core.ops_registry.registry import Registry
from frame_core.ops_registry.schema import Example, OpSchema

from .fixture_pack import load_fixture_registry


@pytest.fixture
def cache(monkeypatch) -> CompileCache:
    fresh = CompileCache()
    monkeypatch.setattr(api, "compile_cache", fresh)
    return fresh


def build(scale: float = 2.0, shape: str = "f32[3]", name: str = "x") -> fc.Graph:
    graph = fc.Graph("g")
    x = graph.add_input(shape, name)
    graph.mark_output(graph.apply("mul", graph.apply("sum", x, axes=[0]), graph.constant(scale, x.type.dtype)))
    return graph


def test_an_identical_graph_built_twice_misses_once_then_hits(cache):
    first = fc.compile(build())
    assert (cache.hits, cache.misses) == (0, 1)
    for _ in range(3):
        assert fc.compile(build()) is first
    assert (cache.hits, cache.misses) == (3, 1)
    info = cache.info()
    assert (info.hits, info.misses, info.size) == (3, 1, 1)


@pytest.mark.parametrize("change", [
    lambda: build(scale=3.0),                   # a constant's value
    lambda: build(shape="f32[4]"),              # a type
    lambda: build(shape="f64[3]"),              # a dtype
    lambda: fc.trace(lambda x: ops.sum(x, axes=[0], keepdims=True) * 2.0, "f32[3]"),  # an attribute
    lambda: fc.trace(lambda x: ops.mean(x, axes=[0]) * 2.0, "f32[3]"),               # an op
])
def test_a_changed_graph_misses(cache, change):
    fc.compile(build())
    fc.compile(change())
    assert (cache.hits, cache.misses) == (0, 2)


def test_different_input_names_miss_so_errors_name_the_right_input(cache):
    fc.compile(build(name="x"))
    renamed = fc.compile(build(name="weights"))
    assert cache.misses == 2
    with pytest.raises(InputError, match="input 0 \\('weights'\\)"):
        renamed.run([np.ones(4, np.float32)])


@pytest.mark.parametrize("options", [
    dict(opt_level=1), dict(opt_level=0), dict(disable=["fuse_elementwise"]), dict(decompose=["toy_quad"]),
    dict(checks=True),
])
def test_different_options_miss(cache, options, fixture_registry, monkeypatch):  # toy_quad has a DecomposeFn
    monkeypatch.delenv("FRAME_CHECKS", raising=False)  # the defaults, also when the suite runs under FRAME_CHECKS=1
    fc.compile(build())
    fc.compile(build(), **options)
    assert (cache.hits, cache.misses) == (0, 2)
    fc.compile(build(), **options)
    assert cache.hits == 1


def test_a_different_backend_or_registry_misses(cache, basic_registry):
    fixture = load_fixture_registry()
    fc.compile(build(), registry=fixture)
    fc.compile(build(), registry=basic_registry)
    assert cache.misses == 2
    fc.compile(build(), registry=fixture)
    assert cache.hits == 1

    doubled = fc.Graph("doubled")
    doubled.mark_output(doubled.add_node("toy_double", [doubled.add_input("f32[3]", "x")], registry=fixture).outputs[0])
    on_cpu = fc.compile(doubled, registry=fixture)
    on_toy = fc.compile(doubled, "toy", registry=fixture)
    assert on_cpu is not on_toy and (on_cpu.backend, on_toy.backend) == ("cpu", "toy")
    assert cache.misses == 4


def test_a_freed_registry_is_never_mistaken_for_a_new_one(cache):
    """Registries come and go (tests, tools); a new one must not get an old one's executables."""
    def registry_with_factor(k: float) -> Registry:
        reg = Registry()
        reg.schemas["times_k"] = OpSchema(
            "times_k", inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
            kernels={"cpu": lambda ctx: (lambda x: x * np.float32(k))}, not_differentiable="a test op",
            examples=[Example(["f32[3]"])])
        return reg

    for k in range(1, 6):
        reg = registry_with_factor(float(k))
        graph = fc.Graph("g")
        graph.mark_output(graph.add_node("times_k", [graph.add_input("f32[3]", "x")], registry=reg).outputs[0])
        (y,) = fc.compile(graph, registry=reg).run([np.ones(3, np.float32)])
        assert y[0] == k
        del reg, graph  # the next registry may land at the freed one's address


def test_cache_false_neither_reads_nor_fills_the_cache(cache):
    a = fc.compile(build(), cache=False)
    b = fc.compile(build(), cache=False)
    assert a is not b and (cache.hits, cache.misses, cache.info().size) == (0, 0, 0)


def test_clear_drops_entries_and_counters(cache):
    first = fc.compile(build())
    fc.compile(build())
    cache.clear()
    assert (cache.hits, cache.misses, cache.info().size) == (0, 0, 0)
    assert fc.compile(build()) is not first


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(monkeypatch):
    small = CompileCache(maxsize=2)
    monkeypatch.setattr(api, "compile_cache", small)
    a = fc.compile(build(scale=1.0))
    fc.compile(build(scale=2.0))
    assert fc.compile(build(scale=1.0)) is a   # a is now the most recent
    fc.compile(build(scale=3.0))                # evicts scale=2
    assert small.info().size == 2
    assert fc.compile(build(scale=1.0)) is a
    misses = small.misses
    fc.compile(build(scale=2.0))
    assert small.misses == misses + 1


def test_a_graph_keeps_its_own_copy_of_an_array_the_caller_changes_later():
    # the cache keys on constant bytes: a constant that later changed in place would alias two graphs
    w = np.array([1.0, 2.0, 3.0], np.float32)
    first = fc.compile(fc.trace(lambda x: x * w, "f32[3]"))
    w += 10
    v = np.array([1.0, 2.0, 3.0], np.float32)
    second = fc.compile(fc.trace(lambda x: x * v, "f32[3]"))
    ones = np.ones(3, np.float32)
    np.testing.assert_array_equal(first.run([ones])[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(second.run([ones])[0], [1.0, 2.0, 3.0])


def test_constants_in_a_graph_are_read_only():
    g = fc.Graph("g")
    source = np.arange(3.0)
    value = g.constant(source)
    g.mark_output(value)
    stored = value.producer.attrs["value"]
    assert not stored.flags.writeable and not np.shares_memory(stored, source)
    source[:] = -1
    np.testing.assert_array_equal(fc.compile(g, cache=False).run([])[0], [0.0, 1.0, 2.0])
    zero = g.zeros("f64[1000, 1000]").producer.attrs["value"]  # zeros cost one element, not a megabyte
    assert not zero.flags.writeable and zero.base is not None and zero.base.size == 1


def test_editing_the_output_list_in_place_is_not_served_from_the_cache():
    g = fc.trace(lambda x: x * 2.0, "f32[3]")
    ones = np.ones(3, np.float32)
    np.testing.assert_array_equal(fc.compile(g).run([ones])[0], 2 * ones)
    g.outputs[0] = g.inputs[0]
    np.testing.assert_array_equal(fc.compile(g).run([ones])[0], ones)
