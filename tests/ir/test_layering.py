"""The IR is the ground floor: importing it loads neither the registry, the packs nor the compiler.

Runs in a fresh interpreter, so modules this test process already imported cannot hide a problem.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import frame_core.ir.graph, frame_core.ir.verify, frame_core.ir.keys, frame_core.ir.serialize
import frame_core.ir.printer, frame_core.ir.dot, frame_core.ir.types, frame_core.ir.schemas
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("frame_core", "frame_ops_")))))
"""


def test_importing_the_ir_loads_no_registry_compiler_or_packs():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    layers = ("ops_registry", "compiler", "runtime", "autodiff", "frontend", "testing", "cli")
    above = [m for m in loaded if m.count(".") >= 1 and m.split(".")[1] in layers]
    assert above == [], f"importing frame_core.ir loaded {above}"
    assert not [m for m in loaded if m.startswith("frame_ops_")]
    assert "frame_core.ir.graph" in loaded  # the probe really imported something


def test_ir_sources_never_import_upward():
    """No module of frame_core/ir names a layer above it, not even inside a function."""
    upward = re.compile(r"^\s*(from|import)\s+(\.\.|frame_core\.)(ops_registry|compiler|runtime|autodiff|frontend|"
                        r"testing|cli)\b", re.M)
    offenders = []
    for path in sorted((ROOT / "frame_core" / "ir").glob("*.py")):
        for match in upward.finditer(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.name}: {match.group(0).strip()}")
    assert offenders == []


def test_graph_add_node_still_infers_types_through_the_default_source():
    done = subprocess.run([sys.executable, "-c", """
import frame_core as fc
g = fc.Graph()
x = g.add_input("f32[2]")
print(g.apply("accumulate_internal", x, x).type)
"""], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "f32[2]"


def test_passes_take_the_compile_context_from_its_own_module():
    """pipeline.py imports the passes; a pass importing pipeline.py back would close the circle."""
    offenders = [p.name for p in sorted((ROOT / "frame_core" / "compiler" / "passes").glob("*.py"))
                 if re.search(r"^\s*from\s+\.\.pipeline\s+import", p.read_text(encoding="utf-8"), re.M)]
    assert offenders == []
    from frame_core.compiler.context import CompileContext
    from frame_core.compiler.pipeline import CompileContext as reexported

    assert reexported is CompileContext
