"""Where a failed pack's message points (issue 8 §1, found in QA): at the pack's own line, never at frame's.

A pack that does not declare FRAME_PLUGIN_API, or whose entry point names an attribute its module lacks, was
reported "(at .../frame_core/ops_registry/loader.py:210)": a line of frame, which reads as a bug in frame.
"""

from __future__ import annotations

from frame_core.ops_registry.loader import load_registry

from .fakepacks import pack_source


def _error(reg, dist: str) -> str:
    (record,) = [p for p in reg.packs.values() if p.distribution == dist]
    assert record.status == "failed"
    return record.error


def test_a_pack_without_frame_plugin_api_is_told_what_to_add_without_a_frame_line(site):
    site.pack("no-api", pack_source(["fk_a"], api=None))
    error = _error(load_registry(environ={}), "no-api")
    assert 'does not declare FRAME_PLUGIN_API; add FRAME_PLUGIN_API = "1.0"' in error
    assert "frame_core" not in error


def test_an_entry_point_naming_a_missing_attribute_says_so(site):
    module = site.pack("bad-attr", pack_source(["fk_a"]))
    info = next(site.root.glob("bad_attr-*.dist-info"))
    (info / "entry_points.txt").write_text(f"[frame]\nbad_attr = {module}:plugin.nothing\n")
    error = _error(load_registry(environ={}), "bad-attr")
    assert f"names 'plugin', which '{module}' does not have; fix the entry point in bad-attr's metadata" in error
    assert "frame_core" not in error


def test_a_failure_in_the_packs_own_code_still_points_at_its_line(site):
    module = site.pack("raises", pack_source(["fk_a"], body="import numpy\nnumpy.zeros(3).reshape(4)"))
    error = _error(load_registry(environ={}), "raises")
    assert f"{module}.py:" in error and "cannot reshape" in error
