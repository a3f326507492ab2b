"""The pack as the framework sees it: installed under the entry point ``ops_fft``, listed by ``frame plugins
list``, every op closed under differentiation in ``frame audit gradients`` (ARCH-068), and the pack's imports
limited to frame_core's public API with scipy loaded only when a kernel is built."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import frame_core
from frame_core.cli.main import app

OPS = {"rfft", "irfft", "fft", "ifft", "complex_mul", "conj", "complex_matmul"}
INTERNAL = {"rfft_grad_like_internal", "irfft_grad_like_internal", "irfft_like_internal"}  # (gradients reading n from an operand)
PACKAGE = Path(__file__).resolve().parents[1] / "frame_ops_fft"


def test_plugins_list_shows_the_pack_loaded_with_its_ops():
    result = CliRunner().invoke(app, ["plugins", "list", "--format", "json"])
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.stdout) if r["name"] == "ops_fft")
    assert (row["distribution"], row["status"], row["ops"]) == ("frame-ops-fft", "loaded", len(OPS | INTERNAL))


def test_the_audit_lists_every_op_of_the_pack_as_closed():
    result = CliRunner().invoke(app, ["audit", "gradients", "--pack", "ops_fft", "--order", "3", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and {row["name"]: row["closure_order"] for row in report["ops"]} == dict.fromkeys(OPS, "closed")


def test_the_pack_imports_only_frame_cores_public_names():
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("frame_core"):
                assert node.module == "frame_core", f"{path.name}:{node.lineno} imports {node.module}"
                assert {a.name for a in node.names} <= set(frame_core.__all__), f"{path.name}:{node.lineno}"


def test_importing_the_pack_and_registering_its_ops_does_not_import_scipy():
    code = ("import sys, frame_core, frame_ops_fft; frame_core.registry(); "
            "print('scipy' in sys.modules, 'frame_ops_fft.transforms' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
