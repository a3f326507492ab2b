"""Fixtures for the CLI tests: a CliRunner, the installed console script, and fake op packs.

A fake pack is a ``<dist>-<version>.dist-info`` directory (``METADATA`` and
``entry_points.txt``) plus the pack's module, written into a temporary
directory that is put on ``sys.path`` (in-process, for ``CliRunner``) and on
``PYTHONPATH`` (for the console script): the loader's real discovery code
finds it, and nothing is installed. Module names are unique per test and
removed from ``sys.modules`` afterwards.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frame_core.cli.main import app

FRAME = Path(sys.executable).parent / "frame"
_counter = itertools.count()

#: ops for fake packs: a relu-like op whose gradient uses a declared non-differentiable step (order 1)
ORDER_ONE_PACK = '''
import numpy as np
from frame_core import Example, OpSchema, hookimpl, ops

FRAME_PLUGIN_API = "1.0"


def same(ctx):
    return [ctx.input_types[0]]


STEP = OpSchema(
    "{prefix}_step", inputs=("x",), shape_infer=same,
    kernels={{"cpu": lambda ctx: lambda x: np.asarray(x > 0, dtype=x.dtype)}},
    not_differentiable="piecewise constant", examples=[Example(["f32[3]"])],
)
RAMP = OpSchema(
    "{prefix}_ramp", inputs=("x",), shape_infer=same,
    kernels={{"cpu": lambda ctx: lambda x: np.maximum(x, 0)}},
    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy * ops.{prefix}_step(x)),
    examples=[Example(["f32[3]"], min_abs=0.1)],
)


@hookimpl
def frame_register_ops():
    return [STEP, RAMP]
'''


class FakeSite:
    """A temporary directory of fake distributions, on ``sys.path`` and in ``env["PYTHONPATH"]``."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.root.mkdir()
        self.modules: list[str] = []
        monkeypatch.syspath_prepend(str(root))
        self.env = {"PYTHONPATH": str(root)}

    def add(self, pack: str, source: str, *, dist: str | None = None, version: str = "0.1") -> str:
        """Write a pack called ``pack`` whose module holds ``source``; return the module's name."""
        module = f"cli_fake_{pack}_{next(_counter)}"
        dist = dist or f"frame-fake-{pack.replace('_', '-')}"
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\n")
        (info / "entry_points.txt").write_text(f"[frame]\n{pack} = {module}\n")
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))
        self.modules.append(module)
        return module

    def cleanup(self) -> None:
        for module in self.modules:
            sys.modules.pop(module, None)


@pytest.fixture(autouse=True)
def clean_frame_environment(monkeypatch):
    """No test sees the caller's FRAME_* settings."""
    for name in ("FRAME_STRICT", "FRAME_LOAD_PLUGINS", "FRAME_DISABLE_PLUGINS", "FRAME_DEBUG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def site(tmp_path, monkeypatch):
    s = FakeSite(tmp_path / "site", monkeypatch)
    yield s
    s.cleanup()


@pytest.fixture
def broken_site(site):
    """A site with a pack whose import fails."""
    site.add("broken", 'raise ImportError("needs libfoo, which is not installed")\n', dist="frame-broken-pack")
    return site


@pytest.fixture
def invoke():
    """``invoke(*args, env=None)`` runs ``frame`` in-process and returns the ``Result``."""
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None):
        result = runner.invoke(app, list(args), env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback escaped the command: that is a bug in itself
        return result

    return run


def run_frame(*args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """The installed console script in a fresh process; ``env`` is added to the caller's (less FRAME_*)."""
    assert FRAME.exists(), f"the console script is not installed at {FRAME}; run `make setup`"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")} | (env or {})
    return subprocess.run([str(FRAME), *args], capture_output=True, text=True, env=environ, cwd=cwd, timeout=120)


def parse_json(text: str):
    return json.loads(text)
