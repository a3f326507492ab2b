"""The docs this part of frame owns stay true: hook examples run, the CLI reference covers every command.

``docs/hooks.md`` promises runnable examples; each ``python`` block there is
run as a script in a fresh interpreter. ``docs/cli.md`` must have a section
for every command of the ``frame`` app and mention each of its options.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from frame_core.cli.main import app

DOCS = Path(__file__).resolve().parents[2] / "docs"


def python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), re.S)


def commands(group, prefix=("frame",)):
    """(path, click command) for every leaf command of the app."""
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


@pytest.mark.parametrize("index", range(len(python_blocks("hooks.md"))))
def test_hook_examples_run(tmp_path, index):
    script = tmp_path / "example.py"
    script.write_text(python_blocks("hooks.md")[index])
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hook_has_a_section():
    from frame_core.ops_registry.hookspecs import FrameHookSpecs

    text = (DOCS / "hooks.md").read_text()
    hooks = [name for name in vars(FrameHookSpecs) if name.startswith("frame_")]
    assert hooks
    for hook in hooks:
        assert f"## `{hook}`" in text, hook


def test_cli_reference_covers_every_command_and_option():
    text = (DOCS / "cli.md").read_text()
    found = list(commands(get_command(app)))
    assert len(found) >= 8
    for path, command in found:
        heading = " ".join(path)
        found_heading = re.search(rf"^## .*`{re.escape(heading)}( [^`]*)?`.*$", text, re.M)
        assert found_heading, f"no section for {heading}"
        following = re.search(r"^## ", text[found_heading.end():], re.M)
        section = text[found_heading.start(): found_heading.end() + (following.start() if following else len(text))]
        for param in command.params:
            for option in param.opts:
                if option.startswith("--") and option != "--help":
                    assert option in section, f"{heading}: {option} is not documented in its own section"
