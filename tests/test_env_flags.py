"""Every FRAME_* on/off switch reads its value one way (found in QA): FRAME_STRICT=off turned strict mode on,
and FRAME_CHECKS=false or FRAME_DEBUG=no turned checks and tracebacks on; a word outside the accepted ones
warns saying what is accepted."""

from __future__ import annotations

import warnings

import pytest

import frame_core as fc
from frame_core import ops
from frame_core import _args
from frame_core._args import env_flag
from frame_core.cli._common import debugging
from frame_core.ops_registry.registry import strict_from_env

OFF = ["", " ", "0", "false", "False", "NO", "off", " Off "]
ON = ["1", "true", "yes", "on", " TRUE ", "Yes"]
NOT_UNDERSTOOD = ["2", "anything", "disable", "n", "0.0", "enabled"]


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(_args, "_warned", set())


@pytest.mark.parametrize("value, on", [(v, False) for v in OFF] + [(v, True) for v in ON])
def test_the_frame_switches_agree_on_what_is_off(monkeypatch, value, on):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the accepted words never warn
        assert env_flag("FRAME_X", {"FRAME_X": value}) is on
        assert strict_from_env({"FRAME_STRICT": value}) is on
        monkeypatch.setenv("FRAME_DEBUG", value)
        assert debugging() is on
        monkeypatch.setenv("FRAME_CHECKS", value)
        graph = fc.trace(lambda x: ops.relu(x) + 1.0, "f32[2]")
        assert fc.compile(graph, cache=False).checks is on


@pytest.mark.parametrize("value", NOT_UNDERSTOOD)
def test_a_word_a_switch_does_not_accept_warns_once_saying_what_it_accepts(value):
    """Found in QA: FRAME_NATIVE=disable (or n, 0.0) silently meant on; FRAME_STRICT=2 meant on by guess."""
    with pytest.warns(fc.FrameWarning) as record:
        assert env_flag("FRAME_X", {"FRAME_X": value}) is False
        assert env_flag("FRAME_X", {"FRAME_X": value}, default=True) is True
    assert len(record) == 1  # once per process and value
    message = str(record[0].message)
    assert f"FRAME_X={value!r}" in message
    assert "1, true, yes, on (on) or 0, false, no, off (off)" in message and "taken as unset" in message


def test_frame_native_reads_its_switch_the_same_way(monkeypatch):
    pytest.importorskip("frame_native")
    from frame_native.passes import switched_off
    from frame_native.tiered import calls_before_compile

    for value, off in (("0", True), ("off", True), ("1", False), ("", False)):
        monkeypatch.setenv("FRAME_NATIVE", value)
        assert switched_off() is off
    monkeypatch.setenv("FRAME_NATIVE", "disable")
    with pytest.warns(fc.FrameWarning, match="FRAME_NATIVE='disable' is not understood"):
        assert switched_off() is False
    monkeypatch.setenv("FRAME_NATIVE_AFTER", "5")
    assert calls_before_compile() == 5
    for value in ("0", "-1", "two", "2.5"):
        monkeypatch.setenv("FRAME_NATIVE_AFTER", value)
        with pytest.warns(fc.FrameWarning, match="a whole number of runs, 1 or more"):
            assert calls_before_compile() == 2
