"""build_backward_graph of a graph whose only problem is ops no loaded pack provides (a file from a machine
with another pack, a disabled pack) asks for the pack, rather than telling the user to fix a graph that is
fine: the ops inside a control-flow body count too."""

from __future__ import annotations

import pytest

import frame_core as fc
from frame_core import ops
from frame_core.errors import GradientError


def _rename_in_body(graph: fc.Graph, old: str, new: str) -> None:
    for node in graph.nodes:
        for value in node.attrs.values():
            if isinstance(value, fc.Graph):
                _rename_in_body(value, old, new)
        if node.op == old:
            node.op = new


@pytest.mark.parametrize("nested", [False, True])
def test_unregistered_ops_ask_for_their_pack(nested):
    if nested:
        g = fc.trace(lambda x: ops.sum(ops.loop(lambda i, s: (True, ops.tanh(s)), 2, True, x)), "f64[3]")
    else:
        g = fc.trace(lambda x: ops.sum(ops.tanh(x)), "f64[3]")
    _rename_in_body(g, "tanh", "elsewhere::tanh")
    with pytest.raises(GradientError) as info:
        fc.build_backward_graph(g, 0, [0])
    message = str(info.value)
    assert "'elsewhere::tanh'" in message and "install or load the packs that provide them" in message
    assert "no pack is at fault" not in message


def test_a_graph_with_a_wrong_type_is_still_the_users_to_fix():
    g = fc.trace(lambda x: ops.sum(ops.loop(lambda i, s: (True, ops.tanh(s)), 2, True, x)), "f64[3]")
    body = g.nodes[-2].attrs["body"]
    body.nodes[-1].op = "nowhere::tanh"  # an unregistered op, and besides a wrong type the user wrote
    g.nodes[-1].attrs["bogus"] = 1
    with pytest.raises(GradientError, match="(?s)V4.*no pack is at fault") as info:
        fc.build_backward_graph(g, 0, [0])
    assert "install or load" not in str(info.value)


def test_frame_graph_show_asks_for_the_pack_of_an_op_inside_a_body(tmp_path):
    from typer.testing import CliRunner

    from frame_core.cli.main import app

    g = fc.trace(lambda x: ops.sum(ops.loop(lambda i, s: (True, ops.tanh(s)), 2, True, x)), "f64[3]")
    _rename_in_body(g, "tanh", "elsewhere::tanh")
    path = tmp_path / "g.json"
    fc.save_graph(g, path)
    result = CliRunner().invoke(app, ["graph", "show", str(path)])
    assert result.exit_code == 2
    assert "is the pack that provides its ops installed" in result.stderr
    assert "written by hand, or edited" not in result.stderr
