"""No internal rule id (``ARCH-061``) in what frame prints or raises (issue 17): they mean something to the
authors of the design contract, nothing to a user. Docstrings and comments keep them (STYLE 13).

The scan covers every string literal of the core and the bundled packs that is not a docstring: error messages,
warnings, report notes, ``not_differentiable`` reasons and op ``doc=`` texts (shown by ``frame ops show``).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import frame_core

ROOT = pathlib.Path(__file__).resolve().parents[1]
RULE_ID = re.compile(r"\bARCH-\d+")


def _sources() -> list[pathlib.Path]:
    packages = [ROOT / "frame_core", ROOT / "distributed" / "frame_distributed"]
    packages += [p for d in ROOT.glob("plugins/*/") for p in d.glob("frame_*/")]
    packages += [p for d in ROOT.glob("examples/*/") for p in d.glob("frame_*/")]
    return sorted(f for p in packages for f in p.rglob("*.py") if "tests" not in f.parts)


def rule_ids_in_messages(source: str) -> list[str]:
    """``lineno: text`` of each non-docstring string literal of ``source`` that cites a rule id."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [f"{node.lineno}: {node.value.strip()[:90]}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and RULE_ID.search(node.value)]


def test_the_scan_sees_messages_and_not_docstrings():
    source = '"""module (ARCH-068)."""\ndef f():\n    """doc (ARCH-061)."""\n    raise ValueError(f"x {1} (ARCH-062)")\n'
    assert rule_ids_in_messages(source) == ["4: (ARCH-062)"]


def test_no_rule_ids_in_messages():
    found = [f"{f.relative_to(ROOT)}:{hit}" for f in _sources() for hit in rule_ids_in_messages(f.read_text())]
    assert not found, "rule ids in user-facing strings (move them to the docstring):\n  " + "\n  ".join(found)


def test_the_non_scalar_loss_error_reads_without_a_rule_id():
    g = frame_core.trace(lambda x: x * 2.0, "f64[3]")
    with pytest.raises(frame_core.NonScalarLossError) as caught:
        frame_core.build_backward_graph(g, 0, [0])
    assert "reduce it first" in str(caught.value) and not RULE_ID.search(str(caught.value))
