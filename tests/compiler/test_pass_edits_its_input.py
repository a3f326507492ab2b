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
