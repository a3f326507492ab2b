"""A third-party op sharing a short name with a bundled op (found in QA: an older pack's `clip`, whose short name
the bundled ops_basic::clip has since taken, silently changed meaning for code calling `ops.clip`): the collision
reaches a Python program as a warning, errors about the other op's attributes mention it, listings print the
qualified name, and strict mode says how to stop loading the one pack."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import frame_core as fc
from frame_core import AttributeSpecError, FrameWarning, PluginError, ops
from frame_core.ops_registry import registry as registry_module
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.registry import use_registry
from frame_core.ops_registry.schema import AttrSpec, Example

from ..fakes import FakeEntryPoint
from .fakepacks import plugin, unary
from .test_op_identity import basic_entry_points


def old_clip():
    """The older pack's clip: attributes lo and hi."""
    return unary("clip", attrs={"lo": AttrSpec("float", 0.0), "hi": AttrSpec("float", 1.0)},
                 kernels={"cpu": lambda ctx: (lambda x: np.clip(x, ctx.attrs["lo"], ctx.attrs["hi"]))},
                 examples=[Example(["f32[3]"])], not_differentiable="a fixture")


@pytest.fixture(scope="module")
def reg():
    (basic,) = basic_entry_points()
    return load_registry([basic, FakeEntryPoint("extra", plugin("extra", lambda: [old_clip()]), dist_name="extra")],
                         environ={})


def test_the_collision_is_warned_once_per_process_inside_python(reg, monkeypatch):
    monkeypatch.setattr(registry_module, "_global", None)
    monkeypatch.setattr(registry_module, "_warned_collisions", set())
    monkeypatch.setattr("frame_core.ops_registry.loader.load_registry", lambda **options: reg)
    with pytest.warns(FrameWarning) as record:
        assert registry_module.registry() is reg
        monkeypatch.setattr(registry_module, "_global", None)
        registry_module.registry()  # loaded again: the same collision is not warned twice
    (warning,) = [w for w in record if "clip" in str(w.message)]
    message = str(warning.message)
    assert "ops_basic::clip" in message and "extra::clip" in message
    assert "ops.op('extra::clip')" in message and "FRAME_DISABLE_PLUGINS=extra" in message


def test_an_error_about_the_other_ops_attributes_names_the_collision(reg):
    with use_registry(reg), pytest.raises(AttributeSpecError) as info:
        fc.trace(lambda x: ops.clip(x, lo=0.0), "f32[3]")
    message = str(info.value)
    assert "'lo'" in message and "'clip' means ops_basic::clip (bundled with frame)" in message
    assert "ops.op('extra::clip')" in message
    with use_registry(reg):  # and the qualified name picks the pack's op
        graph = fc.trace(lambda x: ops.op("extra::clip")(x, lo=0.5, hi=0.75), "f32[3]")
        (y,) = fc.compile(graph, cache=False).run([np.array([0.0, 0.6, 1.0], np.float32)])
    np.testing.assert_array_equal(y, np.array([0.5, 0.6, 0.75], np.float32))


def test_an_error_without_a_collision_has_no_note(reg):
    with use_registry(reg), pytest.raises(AttributeSpecError) as info:
        fc.trace(lambda x: ops.relu(x, lo=0.0), "f32[3]")
    assert "collision" not in str(info.value)


def test_listings_and_docs_show_the_qualified_name_in_the_signature(reg):
    from frame_core.cli.listing import op_row

    assert op_row(reg.get("extra::clip"), reg)["signature"].startswith("extra::clip(x, lo: float = 0.0")
    assert op_row(reg.get("clip"), reg)["signature"].startswith("clip(")
    with use_registry(reg):
        assert ops.op("extra::clip").__doc__.startswith("extra::clip(")


def test_strict_mode_says_how_to_stop_loading_the_one_pack():
    (basic,) = basic_entry_points()
    with pytest.raises(PluginError) as info:
        load_registry([basic, FakeEntryPoint("extra", plugin("extra", lambda: [old_clip()]), dist_name="extra")],
                      environ={"FRAME_STRICT": "1"})
    assert "FRAME_DISABLE_PLUGINS=extra" in str(info.value) and "extra::clip" in str(info.value)
