"""frame_core and every bundled pack type-check with mypy (STYLE: typed package, mypy in CI). Configuration:
[tool.mypy] in pyproject.toml, whose ``packages`` lists them all."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_frame_core_and_the_bundled_packs_pass_mypy():
    """One mypy run over every package: the packs share frame_core's and numpy's parsed stubs, so they add about a
    quarter to the time of frame_core alone (cold cache, two runs: 61 -> 79 and 69 -> 85 s CPU)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


USER_CODE = '''\
import numpy as np

import frame_core as fc
from frame_core import ops

graph = fc.trace(lambda x, w: ops.tanh(x @ w), "f32[2, 3]", "f32[3]")
reveal_type(graph)
exe = fc.compile(graph)
reveal_type(exe)
reveal_type(fc.build_backward_graph(graph, 0, [1]))
reveal_type(fc.load_registry)
wrong: int = fc.trace(lambda x: x, "f32[3]")
'''


def test_a_users_code_sees_the_public_api_typed(tmp_path):
    """issue 17: fc.trace and fc.compile are lazy attributes (module __getattr__), so a type checker saw Any and an
    editor gave no help. The TYPE_CHECKING imports in frame_core/__init__.py give them their real types."""
    user = tmp_path / "user_code.py"
    user.write_text(USER_CODE)
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", str(user)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    report = done.stdout + done.stderr
    revealed = [line.split("Revealed type is ", 1)[1] for line in report.splitlines() if "Revealed type is" in line]
    assert revealed[:3] == ['"frame_core.ir.graph.Graph"', '"frame_core.runtime.executable.Executable"',
                            '"frame_core.ir.graph.Graph"'], report
    assert revealed[3].startswith('"def (') and "frame_core.ops_registry.registry.Registry" in revealed[3], report
    # a real mistake is caught, and it is the only error
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'expression has type "Graph", variable has type "int"' in errors[0], report


def test_the_mypy_run_covers_every_bundled_package():
    """A new pack under plugins/ (or distributed/, examples/) is type-checked once it is listed in [tool.mypy]."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["packages"]
    bundled = {p.parent.name for pattern in ("plugins/*/*/__init__.py", "distributed/*/__init__.py",
                                             "examples/*/*/__init__.py") for p in ROOT.glob(pattern)}
    assert bundled, "no bundled package found"
    assert sorted(listed) == sorted(bundled | {"frame_core"}), f"list these in [tool.mypy] packages: {bundled}"
