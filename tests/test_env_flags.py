"""Every FRAME_* on/off switch reads its value one way (found in QA): FRAME_STRICT=off turned strict mode on,
and FRAME_CHECKS=false or FRAME_DEBUG=no turned checks and tracebacks on."""

from __future__ import annotations

import pytest

import frame_core as fc
from frame_core import ops
from frame_core._args import env_flag
from frame_core.cli._common import debugging
from frame_core.ops_registry.registry import strict_from_env

OFF = ["", " ", "0", "false", "False", "NO", "off", " Off "]
ON = ["1", "true", "yes", "on", "2", "anything"]


@pytest.mark.parametrize("value, on", [(v, False) for v in OFF] + [(v, True) for v in ON])
def test_the_frame_switches_agree_on_what_is_off(monkeypatch, value, on):
    assert env_flag("FRAME_X", {"FRAME_X": value}) is on
    assert strict_from_env({"FRAME_STRICT": value}) is on
    monkeypatch.setenv("FRAME_DEBUG", value)
    assert debugging() is on
    monkeypatch.setenv("FRAME_CHECKS", value)
    graph = fc.trace(lambda x: ops.relu(x) + 1.0, "f32[2]")
    assert fc.compile(graph, cache=False).checks is on
