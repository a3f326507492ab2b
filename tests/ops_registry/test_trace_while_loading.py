"""A pack that traces ops while the process-wide registry loads gets a PluginError, not a hang.

Found by writing a pack from the docs: an op with a ``graph`` attribute needs a Graph in its Example, and the
natural way to make one, ``frame_core.trace(...)`` at module level, called ``registry()`` while that very call was
loading the packs under a lock: the first ``frame_core.registry()`` of the program (the conformance kit's, any
trace) hung for ever.
"""

from __future__ import annotations

import threading
import types

import frame_ops_basic.plugin
from frame_core import ops, trace
from frame_core.ops_registry import loader, registry as registry_module
from frame_core.ops_registry.hookspecs import hookimpl

from ..fakes import FakeEntryPoint


def test_tracing_inside_a_hook_while_the_registry_loads_fails_that_pack_only(monkeypatch):
    module = types.ModuleType("tracing_pack_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: [trace(lambda x: ops.tanh(x), "f32[3]")] and [])
    points = [FakeEntryPoint("ops_basic", frame_ops_basic.plugin, "frame-ops-basic"),
              FakeEntryPoint("tracing_pack", module, "frame-tracing-pack")]
    monkeypatch.setattr(loader, "discover_entry_points", lambda *a, **k: points)
    monkeypatch.setattr(registry_module, "_global", None)
    monkeypatch.setenv("FRAME_STRICT", "0")
    got = []
    worker = threading.Thread(target=lambda: got.append(registry_module.registry()), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert got, "registry() hung: the pack's trace waited for the lock its own loading held"
    record = got[0].packs["tracing_pack"]
    assert record.status == "failed"
    assert "registry() was called while the registry is loading" in record.error
    assert "Graph.add_input/add_node" in record.error
    assert got[0].packs["ops_basic"].status == "loaded"
