"""frame_core's public API is what op packs build with (issue 17).

The bundled packs import only ``frame_core``'s public names (plus the documented ``frame_core.testing`` kit),
exactly as a third-party pack must: what a bundled pack needs, a third-party pack needs too. And every lazily
loaded public name is visible to type checkers, so that ``fc.trace`` is not ``Any`` in an editor.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import frame_core

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: frame_core's public modules: the package itself, its ``ops`` namespace and the conformance kit.
PUBLIC_MODULES = {"frame_core", "frame_core.ops", "frame_core.testing", "frame_core.params"}


def _pack_sources() -> list[pathlib.Path]:
    """The importable code of every bundled distribution (its tests may reach into the core, as the core's do)."""
    roots = [p.parent for p in ROOT.glob("plugins/*/pyproject.toml")]
    roots += [ROOT / "distributed"] + [p.parent for p in ROOT.glob("examples/*/pyproject.toml")]
    files = []
    for root in roots:
        for package in root.glob("frame_*/"):
            files += [f for f in package.rglob("*.py") if "tests" not in f.relative_to(root).parts]
    return sorted(files)


def internal_imports(source: str) -> list[str]:
    """The imports in ``source`` that reach past frame_core's public names: ``lineno: statement`` each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "frame_core":
                bad = [a.name for a in node.names if a.name not in frame_core.__all__]
                if bad:
                    found.append(f"{node.lineno}: from frame_core import {', '.join(bad)} (not in __all__)")
            elif node.module.startswith("frame_core.") and node.module not in PUBLIC_MODULES:
                found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("frame_core.") and alias.name not in PUBLIC_MODULES:
                    found.append(f"{node.lineno}: import {alias.name}")
    return found


def test_the_scan_finds_internal_imports():
    assert internal_imports("from frame_core.frontend.trace import apply\n") == [
        "1: from frame_core.frontend.trace import ..."]
    assert internal_imports("import frame_core.ir.graph as g\n") == ["1: import frame_core.ir.graph"]
    assert internal_imports("from frame_core import _current_registry\n") == [
        "1: from frame_core import _current_registry (not in __all__)"]
    assert internal_imports("from frame_core import apply, ops\nfrom frame_core.testing import check_gradients\n") == []


def test_bundled_packs_import_only_public_names():
    sources = _pack_sources()
    assert len(sources) > 20, "the scan found no pack sources: has the layout changed?"
    problems = [f"{f.relative_to(ROOT)}:{line}" for f in sources for line in internal_imports(f.read_text())]
    assert not problems, ("bundled packs import frame_core internals; export what they need from frame_core "
                          "(a third-party pack needs it too):\n  " + "\n  ".join(problems))


@pytest.mark.parametrize("name", ["apply", "check_arity", "inline_graph", "current_graph", "flatten_result",
                                  "graph_key", "attrs_key", "node_has_side_effect", "build_fused_kernel"])
def test_what_packs_build_with_is_public(name):
    namespace: dict = {}
    exec(f"from frame_core import {name}", namespace)  # noqa: S102 - the import statement a pack author writes
    assert callable(namespace[name]) and name in frame_core.__all__


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """name -> (module, attribute) of the imports under frame_core/__init__.py's ``if TYPE_CHECKING:``."""
    tree = ast.parse((ROOT / "frame_core" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {a.asname or a.name: ("frame_core" + (f".{n.module}" if n.module else ""), a.name)
            for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}


def _lazy_target(module: str, attribute: str | None) -> tuple[str, str]:
    """A ``_LAZY`` entry as the import that names the same object (a lazy module is ``from parent import mod``)."""
    return (module, attribute) if attribute is not None else tuple(module.rsplit(".", 1))  # type: ignore[return-value]


def test_every_lazy_name_is_visible_to_type_checkers():
    # a name in _LAZY but not imported under TYPE_CHECKING would type as Any (the module's __getattr__)
    seen = _type_checking_imports()
    assert set(frame_core._LAZY) | {"ops"} == set(seen), "frame_core/__init__.py: _LAZY and TYPE_CHECKING differ"
    assert {name: seen[name] for name in frame_core._LAZY} == \
        {name: _lazy_target(*target) for name, target in frame_core._LAZY.items()}
