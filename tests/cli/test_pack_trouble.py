"""What a misbehaving pack (or a distribution that is not a pack) can do to ``frame``: nothing it should not.

A pack that prints must not corrupt JSON output; a distribution with non-UTF-8 metadata must not break
discovery or ``--version``; a pack that fails to import is reported with its file and line, and with its
whole traceback under ``--verbose`` or ``FRAME_DEBUG=1``.
"""

from __future__ import annotations

import json

import pytest

from .conftest import ORDER_ONE_PACK, run_frame

CHATTY_PACK = 'print("hello from a chatty pack")\n' + ORDER_ONE_PACK.format(prefix="chat").replace(
    "def frame_register_ops():\n", "def frame_register_ops():\n    print('registering, loudly')\n")


@pytest.mark.parametrize("command", [("ops", "list"), ("plugins", "list"), ("audit", "gradients"),
                                     ("ops", "show", "chat_ramp")])
def test_a_pack_that_prints_cannot_corrupt_json_output(invoke, site, command):
    site.add("chat", CHATTY_PACK)
    result = invoke(*command, "--format", "json")
    assert result.exit_code in (0, 1)
    json.loads(result.stdout)  # nothing but the document
    assert "hello from a chatty pack" in result.stderr and "registering, loudly" in result.stderr


def test_a_pack_that_prints_cannot_corrupt_json_output_of_the_console_script(site):
    site.add("chat", CHATTY_PACK)
    done = run_frame("ops", "list", "--format", "json", env=site.env)
    assert done.returncode == 0, done.stderr
    assert any(row["name"] == "chat_ramp" for row in json.loads(done.stdout))
    assert "hello from a chatty pack" in done.stderr


def write_latin1_distribution(root):
    info = root / "latin_tool-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: latin-tool\nVersion: 2.0\n\nCaf\xe9\n")
    (info / "entry_points.txt").write_bytes(b"[console_scripts]\ncaf\xe9 = latin_tool:main\n")


def test_version_and_listings_survive_a_non_utf8_distribution(invoke, site):
    write_latin1_distribution(site.root)
    site.add("chat", ORDER_ONE_PACK.format(prefix="fine"))
    version = invoke("--version")
    assert version.exit_code == 0 and "Traceback" not in version.stdout + version.stderr
    assert "frame-fake-chat 0.1 (pack chat)" in version.stdout
    assert invoke("ops", "list").exit_code == 0


def test_version_of_the_console_script_prints_no_traceback(site):
    write_latin1_distribution(site.root)
    done = run_frame("--version", env=site.env)
    assert done.returncode == 0 and "Traceback" not in done.stderr and done.stdout.startswith("frame-core ")


BROKEN_IMPORT = '''
import numpy as np

FRAME_PLUGIN_API = "1.0"


def helper():
    return np.definitely_not_a_numpy_function()


helper()
'''


def test_a_failed_import_names_its_file_and_line(invoke, site):
    module = site.add("broken", BROKEN_IMPORT, dist="frame-broken-import")
    result = invoke("plugins", "list")
    assert result.exit_code == 0
    path = site.root / f"{module}.py"
    line = BROKEN_IMPORT.splitlines().index("    return np.definitely_not_a_numpy_function()") + 1
    assert f"(at {path}:{line}; raised in " in result.stdout  # its own line first, then where numpy raised
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("how", ["--verbose", "-v", "FRAME_DEBUG"])
def test_verbose_shows_the_whole_traceback_of_a_failed_pack(invoke, site, how):
    site.add("broken", BROKEN_IMPORT, dist="frame-broken-import")
    if how == "FRAME_DEBUG":
        result = invoke("plugins", "list", env={"FRAME_DEBUG": "1"})
    else:
        result = invoke(how, "plugins", "list")
    assert result.exit_code == 0
    assert "traceback of pack 'broken' (frame-broken-import 0.1):" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr and "in helper" in result.stderr
    assert "AttributeError" in result.stderr
