"""The runnable examples of README.md and docs/*.md run.

Convention: a block fenced as ```python is complete and runs (blocks of one
file share a namespace, in order); a fragment that needs surrounding context
is fenced as ```py and is only shown.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks(path: pathlib.Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", [p for p in FILES if _blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path):
    namespace: dict = {"__name__": "__docs__"}
    for number, code in enumerate(_blocks(path)):
        exec(compile(code, f"{path.name}[block {number}]", "exec"), namespace)
