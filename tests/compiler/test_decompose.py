"""Stage 3, decomposition: DecomposeFns replace ops the backend has no kernel for (or ops named in ``decompose=``).

The fixture pack has ``toy_quad`` (cpu kernel only, DecomposeFn
``toy_double(toy_double(x))``), ``toy_double``/``toy_add`` (kernels for cpu and
the fake backend ``toy``) and ``cpu_only`` (cpu kernel, no DecomposeFn).
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import CompileError
from frame_core.frontend.trace import apply

X = np.array([1.0, -2.0, 0.5], np.float32)


def quad_graph():
    return fc.trace(lambda x: apply("toy_add", apply("toy_quad", x), x), "f32[3]")


def test_an_op_without_a_kernel_for_the_backend_is_replaced_by_its_decompose_fn(fixture_registry):
    for level in (0, 1, 2):
        exe = fc.compile(quad_graph(), "toy", opt_level=level, cache=False)
        ops = [n.op for n in exe.graph.nodes]
        assert "toy_quad" not in ops and exe.backend == "toy"
        assert all("toy" in fixture_registry.get(n.op).kernels for n in exe.graph.nodes if n.op != "constant")
        np.testing.assert_array_equal(exe.run([X])[0], 5 * X)
        assert ("decompose", "decomposed ops without a kernel") in exe.log


def test_an_op_with_a_kernel_is_kept_unless_named_in_decompose(fixture_registry):
    kept = fc.compile(quad_graph(), opt_level=0, cache=False)
    assert [n.op for n in kept.graph.nodes] == ["toy_quad", "toy_add"]
    forced = fc.compile(quad_graph(), opt_level=0, decompose={"toy_quad"}, cache=False)
    assert [n.op for n in forced.graph.nodes] == ["toy_double", "toy_double", "toy_add"]
    np.testing.assert_array_equal(forced.run([X])[0], kept.run([X])[0])


def test_decomposition_then_fusion_gives_the_same_values_on_the_cpu(fixture_registry):
    exe = fc.compile(quad_graph(), decompose={"toy_quad"}, cache=False)
    assert [n.op for n in exe.graph.nodes] == ["fused_elementwise_internal"]
    np.testing.assert_array_equal(exe.run([X])[0], 5 * X)


def test_constants_need_no_kernel_on_another_backend(fixture_registry):
    graph = fc.trace(lambda x: apply("toy_add", apply("toy_quad", x), fc.constant(np.ones(3, np.float32))), "f32[3]")
    exe = fc.compile(graph, "toy", opt_level=0, cache=False)
    np.testing.assert_array_equal(exe.run([X])[0], 4 * X + 1)


def test_fusion_is_skipped_for_a_backend_without_a_fused_kernel(fixture_registry):
    graph = fc.trace(lambda x: apply("toy_double", apply("toy_double", apply("toy_add", x, x))), "f32[3]")
    exe = fc.compile(graph, "toy", cache=False)
    assert [n.op for n in exe.graph.nodes] == ["toy_add", "toy_double", "toy_double"]
    np.testing.assert_array_equal(exe.run([X])[0], 8 * X)


def test_a_missing_kernel_without_decompose_fn_is_a_compile_error_naming_op_and_backend(fixture_registry):
    graph = fc.trace(lambda x: apply("toy_double", apply("cpu_only", x)), "f32[3]")
    with pytest.raises(CompileError) as err:
        fc.compile(graph, "toy", cache=False)
    message = str(err.value)
    assert "op 'cpu_only' has no kernel for backend 'toy' (it has: cpu) and no DecomposeFn" in message
    np.testing.assert_array_equal(fc.compile(graph, cache=False).run([X])[0], 2 * (X + 1))


def test_an_unknown_backend_names_the_first_op_without_a_kernel(fixture_registry):
    with pytest.raises(CompileError, match="op 'toy_add' has no kernel for backend 'tpu'"):
        fc.compile(fc.trace(lambda x: apply("toy_add", x, x), "f32[3]"), "tpu", cache=False)


def test_compile_with_registry_argument_decomposes_with_that_registry(fixture_registry, basic_registry):
    graph = quad_graph()
    with fc.use_registry(basic_registry):  # the fixture ops are unknown here; registry= must be enough
        exe = fc.compile(graph, "toy", registry=fixture_registry, cache=False)
    np.testing.assert_array_equal(exe.run([X])[0], 5 * X)


def test_a_decompose_fn_of_the_wrong_type_is_a_compile_error(fixture_registry):
    graph = fc.trace(lambda x: apply("bad_decomp", x), "f32[3]")
    with pytest.raises(CompileError, match=r"DecomposeFn of 'bad_decomp' returns \[f32\[1, 3\]\], expected \[f32\[3\]\]"):
        fc.compile(graph, decompose={"bad_decomp"}, cache=False)


def test_a_decomposition_that_never_ends_is_a_compile_error(fixture_registry):
    graph = fc.trace(lambda x: apply("self_decomp", x), "f32[3]")
    with pytest.raises(CompileError, match="decomposition did not terminate"):
        fc.compile(graph, decompose={"self_decomp"}, cache=False)
