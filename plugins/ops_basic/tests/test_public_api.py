"""The pack imports frame_core only through its public API, as a third-party pack would."""

from __future__ import annotations

import ast
from pathlib import Path

import frame_core

PACKAGE = Path(__file__).resolve().parents[1] / "frame_ops_basic"


def frame_core_imports() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, module, names) for every import of frame_core or one of its submodules in the pack."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("frame_core"):
                found.append((path.name, node.lineno, node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(path.name, node.lineno, a.name, []) for a in node.names if a.name.startswith("frame_core")]
    return found


def test_the_pack_uses_frame_core_and_nothing_below_it():
    imports = frame_core_imports()
    assert imports, "the scan found no frame_core imports at all"
    private = [f"{f}:{line}: {module}" for f, line, module, _ in imports if module != "frame_core"]
    assert private == [], "import these names from frame_core instead: " + ", ".join(private)


def test_every_imported_name_is_in_frame_core_all():
    missing = [f"{f}:{line}: {name}" for f, line, module, names in frame_core_imports() if module == "frame_core"
               for name in names if name not in frame_core.__all__]
    assert missing == []
