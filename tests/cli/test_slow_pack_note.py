"""A pack that is slow to load is named under ``frame plugins list``, with its time in the JSON.

Found by writing a pack from the docs: a module that took 3 s to import (a heavy dependency at module level)
slowed every ``frame`` command and program by 3 s, and nothing said which pack it was.
"""

from __future__ import annotations

import json

from frame_core.cli import listing

SLOW = '''
import time
from frame_core import hookimpl
FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    time.sleep(0.06)  # as a heavy import would: this runs at every load, the module's import only once per process
    return []
'''


def test_a_slow_pack_is_named_with_its_load_time(invoke, site, monkeypatch):
    site.add("sluggish", SLOW, dist="frame-sluggish")
    site.add("quick", 'FRAME_PLUGIN_API = "1.0"\n', dist="frame-quick")
    monkeypatch.setattr(listing, "SLOW_LOAD_SECONDS", 0.05)  # the real threshold, 0.5 s, would cost the test 0.5 s
    result = invoke("plugins", "list")
    assert result.exit_code == 0
    assert "note: pack sluggish (frame-sluggish 0.1) took 0.1 s to load" in result.stdout, result.stdout
    assert "import heavy dependencies inside kernel builders" in result.stdout
    assert "note: pack quick" not in result.stdout
    rows = {r["name"]: r for r in json.loads(invoke("plugins", "list", "--format", "json").stdout)}
    assert rows["sluggish"]["load_seconds"] >= 0.06 and rows["quick"]["load_seconds"] < 0.05


def test_the_core_has_a_load_time_too(invoke):
    # issue 17: the core's row said load_seconds: null although it loads like a pack (its built-in ops)
    rows = {r["name"]: r for r in json.loads(invoke("plugins", "list", "--format", "json").stdout)}
    assert isinstance(rows["core"]["load_seconds"], float) and rows["core"]["load_seconds"] >= 0.0
