"""A pack's pass that edits the graph it is given (instead of returning a new one) is a CompileError naming it.

Found by writing a third-party pack from the docs: a pass that reordered ``graph.nodes`` in place broke the
caller's own graph (its nodes out of order for every later use) and made ``compile`` fail with a raw
``KeyError: <Value ...>`` from ``lower``.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import CompileError, PassSpec, ops

from .fixture_pack import registry_with_passes


def _reorder(graph, ctx):  # noqa: ANN001, ANN202 - a pass
    graph.nodes.reverse()
    return graph


def _rewire(graph, ctx):  # noqa: ANN001, ANN202
    node = graph.nodes[-1]
    node.inputs = (node.inputs[1], node.inputs[0])
    return graph


def _retag(graph, ctx):  # noqa: ANN001, ANN202
    graph.nodes[-1].attrs["note"] = "mine"
    return graph


@pytest.mark.parametrize("edit", [_reorder, _rewire, _retag], ids=["reorder", "rewire", "retag"])
def test_a_pass_editing_its_input_is_refused_and_the_callers_graph_restored(edit):
    reg = registry_with_passes(PassSpec("editor", edit, after="fold_constants", min_level=0), pack="edit_pack")
    with fc.use_registry(reg):
        graph = fc.trace(lambda a, b: ops.sub(ops.exp(a) * 2.0, b), "f32[3]", "f32[3]")
    before = str(graph)
    with pytest.raises(CompileError, match=r"stage 'editor \(pack edit_pack\)' edited the caller's graph"):
        fc.compile(graph, registry=reg, cache=False, opt_level=0)
    assert str(graph) == before  # the caller's graph is whole again
    x, y = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    (out,) = fc.compile(graph, registry=reg, cache=False, disable=["editor"]).run([x, y])
    np.testing.assert_allclose(out, np.exp(1.0) * 2.0 - 0.5, rtol=1e-6)


def test_a_pass_returning_the_graph_it_was_given_unchanged_is_fine():
    reg = registry_with_passes(PassSpec("nothing", lambda graph, ctx: graph, after="fold_constants", min_level=0))
    with fc.use_registry(reg):
        graph = fc.trace(lambda a: ops.exp(a) * 2.0, "f32[3]")
    (out,) = fc.compile(graph, registry=reg, cache=False).run([np.ones(3, np.float32)])
    np.testing.assert_allclose(out, np.exp(1.0) * 2.0, rtol=1e-6)


def _snapshot(graph):  # noqa: ANN001, ANN202
    return (list(graph.nodes), list(graph.inputs), list(graph.outputs),
            [(n.op, n.inputs, n.outputs, n.attrs, tuple(n.attrs.items())) for n in graph.nodes])


def test_the_passes_of_the_packs_shipped_here_leave_the_callers_graph_alone():
    """They run without the purity guard (it cost 0.7 s of a 100k-node compile): this is what proves them pure.
    Each graph below gives one of those passes work: simplify_algebra (x * 1, x + 0), fold_spectral_multipliers
    and cancel_transform_pairs (a spectral derivative), narrow_spectral_multipliers (a Fourier layer), the
    control-flow passes (scan, loop, an RNN's weight gradients), selective_scan's merge, frame-native's
    compile_fused_groups (a chain), frame-ops-nn's reuse_norm_statistics and frame-native's compile_norm_rows
    (layer and batch norm with gradients), frame-ops-nn's pool_before_monotone (a max pool after a bias and
    ReLU), outer_products_as_products (an [n, 1] @ [1, h] product), frame-native's recompute_in_readers (1 - y*y
    read again after a product)."""
    from frame_ops_fft import spectral_derivative

    from frame_core.ops_registry.loader import discover_entry_points, load_registry

    everything = load_registry(discover_entry_points(), environ={})  # this folder's tests make ops_basic current
    with fc.use_registry(everything):
        _check_shipped_passes(spectral_derivative)


def _check_shipped_passes(spectral_derivative):  # noqa: ANN001, ANN202
    graphs = [
        fc.trace(lambda x: ops.sum(ops.exp(x * 1.0 + 0.0) * ops.sin(x)), "f32[8]"),
        fc.trace(lambda x: ops.sum(ops.square(spectral_derivative(spectral_derivative(x, 1), 1))), "f64[16]"),
        fc.trace(lambda h, xs: ops.sum(ops.scan(lambda c, x: (ops.tanh(c * 0.5 + x),) * 2, h, xs)[1]),
                 "f64[3]", "f64[5, 3]"),
        fc.trace(lambda x: ops.sum(ops.relu(x * 2.0 - 1.0) + x * x), "f32[64]"),
        fc.trace(lambda x: ops.sum(ops.square(_fourier_layer(x))), "f64[2, 3, 16]"),
        fc.trace(lambda x, w: ops.sum(ops.tanh(x @ w)), "f32[8, 1]", "f32[1, 4]"),  # outer_products_as_products
        fc.trace(_recomputed, "f32[16, 8]", "f32[8, 8]", "f32[16, 8]"),  # recompute_in_readers
    ]
    graphs += [fc.build_backward_graph(g, 0, [0]) for g in graphs]
    # sink_scan_accumulations (an RNN's weight gradients), merge_selective_scan_saving (selective_scan's gradient)
    graphs.append(fc.build_backward_graph(fc.trace(
        lambda h, xs, w, u: ops.sum(ops.scan(lambda c, x: (ops.tanh(x @ w + c @ u),) * 2, h, xs)[1]),
        "f64[2, 3]", "f64[5, 2, 4]", "f64[4, 3]", "f64[3, 3]"), 0, [0, 2, 3]))
    graphs.append(fc.build_backward_graph(fc.trace(
        lambda *t: ops.sum(ops.selective_scan(*t)), "f64[1, 2, 4]", "f64[1, 2, 4]", "f64[2, 3]", "f64[1, 3, 4]",
        "f64[1, 3, 4]"), 0, [0, 1]))
    # reuse_norm_statistics and frame-native's compile_norm_rows (layer_norm's training pair), batch_norm's pair
    graphs.append(fc.build_backward_graph(fc.trace(lambda x, w, b: ops.sum(ops.layer_norm(x, w, b) * x), "f32[3, 8]",
                                                   "f32[8]", "f32[8]"), 0, [0, 1, 2]))
    graphs.append(fc.build_backward_graph(fc.trace(
        lambda x, w, b: ops.sum(ops.batch_norm(x, w, b, np.zeros(6), np.ones(6))[0] * x), "f64[4, 6]", "f64[6]",
        "f64[6]"), 0, [0, 1, 2]))
    # merge_conv1d_gradients (a convolution's input and weight gradients), merge_conv1d_multiply (y * g)
    graphs.append(fc.build_backward_graph(fc.trace(lambda x, w, g: ops.sum(ops.conv1d(x, w, padding="same") * g),
                                                   "f64[2, 3, 520]", "f64[3, 3, 3]", "f64[2, 3, 520]"), 0, [0, 1]))
    # pool_before_monotone (an inference graph: the pool moves before the bias and the ReLU)
    graphs.append(fc.trace(lambda x, b: ops.max_pool2d(ops.relu(x + b), kernel_size=2), "f64[2, 3, 4, 4]",
                           "f64[3, 1, 1]"))
    names = {p.name for p in fc.registry().passes}
    assert {"simplify_algebra", "fold_spectral_multipliers"} <= names
    worked = set()
    for graph in graphs:
        before = _snapshot(graph)
        for level in (0, 1, 2):
            worked |= {stage for stage, _ in fc.compile(graph, opt_level=level, cache=False).log}
            assert _snapshot(graph) == before, (graph.name, level)
    # each shipped pass did something to these graphs (it says so in the log), so each was put to the test
    assert {"simplify_algebra", "fold_spectral_multipliers", "merge_trajectory_recompute", "prune_control_flow",
            "compile_fused_groups", "cancel_transform_pairs", "narrow_spectral_multipliers",
            "sink_scan_accumulations", "merge_selective_scan_saving", "reuse_norm_statistics",
            "compile_norm_rows", "pool_before_monotone", "outer_products_as_products",
            "merge_conv1d_gradients", "merge_conv1d_multiply", "recompute_in_readers"} <= worked


def _recomputed(x, w, dx):  # noqa: ANN001, ANN202 - frame-native's recompute_in_readers: 1 - y*y read after a product
    y = ops.tanh(x)
    t = 1.0 - y * y
    d = (t * dx) @ w
    return ops.sum(d * t * 3.0 + y * d)


def _fourier_layer(x):  # noqa: ANN001, ANN202
    from frame_ops_fft import spectral_conv1d

    return spectral_conv1d(x, np.random.default_rng(0).standard_normal((4, 3, 3, 2)))
