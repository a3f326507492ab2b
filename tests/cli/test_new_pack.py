"""``frame new-pack``: name checks, refusing to overwrite, the generated files, and the pack end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import uuid

import pytest

import frame_core
from frame_core.ops_registry.entrypoints import EntryPoint
from frame_core.ops_registry.loader import discover_entry_points

from .conftest import run_frame


@pytest.mark.parametrize("name, hint", [
    ("My-Pack", "try 'my_pack'"), ("2d_ops", "try 'ops_2d_ops'"), ("ops-x", "try 'ops_x'"), ("class", "keyword"),
    ("fast_internal", "_internal"), ("a__b", "'__'"), ("", "lowercase"),
    ("core", "namespace of frame-core's own ops"),  # the loader would refuse such a pack wherever it is installed
])
def test_invalid_names_are_refused(invoke, tmp_path, name, hint):
    result = invoke("new-pack", name, "--dir", str(tmp_path / "p"))
    assert result.exit_code == 2
    assert "invalid pack name" in result.stderr and hint in result.stderr
    assert not (tmp_path / "p").exists()


def test_a_non_empty_folder_is_refused(invoke, tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "notes.txt").write_text("mine")
    result = invoke("new-pack", "mine", "--dir", str(tmp_path / "p"))
    assert result.exit_code == 2 and "not empty" in result.stderr
    assert os.listdir(tmp_path / "p") == ["notes.txt"]


def test_a_file_in_the_way_is_refused(invoke, tmp_path):
    (tmp_path / "p").write_text("x")
    result = invoke("new-pack", "mine", "--dir", str(tmp_path / "p"))
    assert result.exit_code == 2 and "not a folder" in result.stderr


def test_default_folder_and_empty_folder(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("new-pack", "my_ops").exit_code == 0
    assert (tmp_path / "frame-ops-my-ops" / "frame_ops_my_ops" / "plugin.py").is_file()
    (tmp_path / "empty").mkdir()
    assert invoke("new-pack", "other", "--dir", "empty").exit_code == 0
    assert (tmp_path / "empty" / "pyproject.toml").is_file()


def test_generated_project(invoke, tmp_path):
    target = tmp_path / "pack"
    result = invoke("new-pack", "demo", "--dir", str(target))
    assert result.exit_code == 0
    assert "pip install -e" in result.stderr  # what to do next
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == ["README.md", "frame_ops_demo/__init__.py", "frame_ops_demo/plugin.py", "frame_ops_demo/py.typed",
                     "pyproject.toml",
                     "tests/test_conformance.py", "tests/test_plugin.py"]
    meta = tomllib.loads((target / "pyproject.toml").read_text())
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    assert meta["project"]["name"] == "frame-ops-demo"
    assert "frame-core>=0.1,<0.2" in meta["project"]["dependencies"]
    assert meta["project"]["entry-points"]["frame"] == {"demo": "frame_ops_demo.plugin"}
    plugin = (target / "frame_ops_demo" / "plugin.py").read_text()
    assert 'FRAME_PLUGIN_API = "1.0"' in plugin and "ctx.grad_graph" in plugin and "accepts_out" in plugin
    assert "conformance_tests(\"demo\")" in (target / "tests" / "test_conformance.py").read_text()
    for path in target.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")


def test_generated_pack_registers_a_closed_op(invoke, tmp_path, monkeypatch):
    # load the generated plugin through a hand-made entry point, without installing anything
    name = f"gen{uuid.uuid4().hex[:8]}"
    target = tmp_path / "pack"
    assert invoke("new-pack", name, "--dir", str(target)).exit_code == 0
    monkeypatch.syspath_prepend(str(target))
    module = f"frame_ops_{name}.plugin"
    try:
        ep = EntryPoint(name, module, "frame", f"frame-ops-{name}", "0.1.0")
        # next to the installed packs, as a user would have it (the kit itself needs only the core)
        reg = frame_core.load_registry(entry_points=[*discover_entry_points(), ep], environ={})
        assert reg.packs[name].status == "loaded", reg.packs[name].error
        op = f"{name}_scale"
        assert reg.packs[name].ops == [op]
        assert reg.closure[op].order == "closed"
        from frame_core.testing import check_op

        report = check_op(reg.get(op), order=2, registry=reg)
        assert report.ok, report.describe()
    finally:
        for key in (module, f"frame_ops_{name}"):
            sys.modules.pop(key, None)


def test_generated_tests_pass_once_the_example_op_is_replaced(invoke, tmp_path, monkeypatch):
    """issue 17: the generated test asserted the pack's ops were exactly the example op, so it failed as soon as
    the author followed "replace the example op with yours"."""
    name = f"gen{uuid.uuid4().hex[:8]}"
    target = tmp_path / "pack"
    assert invoke("new-pack", name, "--dir", str(target)).exit_code == 0
    plugin = target / f"frame_ops_{name}" / "plugin.py"
    plugin.write_text(plugin.read_text().replace(f"{name}_scale", f"{name}_mine"))  # the author's op
    monkeypatch.syspath_prepend(str(target))
    module = f"frame_ops_{name}.plugin"
    ep = EntryPoint(name, module, "frame", f"frame-ops-{name}", "0.1.0")
    real = frame_core.load_registry
    # as if the pack were installed: its entry point next to the installed ones
    monkeypatch.setattr(frame_core, "load_registry",
                        lambda **kw: real(entry_points=[*discover_entry_points(), ep], **kw))
    try:
        tests: dict = {}
        exec(compile((target / "tests" / "test_plugin.py").read_text(), "test_plugin.py", "exec"), tests)
        tests["test_plugin_loads"]()
        tests["test_plugin_loads_alone"]()
        values: dict = {}
        source = (target / "tests" / "test_conformance.py").read_text().replace('conformance_tests("', 'str("')
        exec(compile(source, "test_conformance.py", "exec"), values)
        with pytest.raises(pytest.skip.Exception, match=f"no longer registers '{name}_scale'"):
            values["test_values_against_numpy"](f"{name}_scale")  # a visible skip that says what to do
        values["REFERENCES"][f"{name}_mine"] = values["REFERENCES"].pop(f"{name}_scale")  # the author's row
        values["test_values_against_numpy"](f"{name}_mine")
    finally:
        for key in (module, f"frame_ops_{name}"):
            sys.modules.pop(key, None)


@pytest.mark.slow
def test_scaffold_end_to_end(tmp_path):
    """Generate, pip install, run its tests, list it, audit it; always uninstall (issue 5 §2)."""
    name = f"scaffold{uuid.uuid4().hex[:6]}"
    dist = f"frame-ops-{name}"
    target = tmp_path / dist
    created = run_frame("new-pack", name, "--dir", str(target))
    assert created.returncode == 0, created.stderr
    pip = [sys.executable, "-m", "pip"]
    try:
        install = subprocess.run([*pip, "install", "--no-deps", "-e", str(target)],
                                 capture_output=True, text=True, timeout=600)
        assert install.returncode == 0, install.stdout + install.stderr

        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=target,
                               capture_output=True, text=True, timeout=600,
                               env={k: v for k, v in os.environ.items() if not k.startswith("FRAME_")})
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert " passed" in tests.stdout and "failed" not in tests.stdout

        listed = run_frame("ops", "list", "--pack", name, "--format", "json")
        assert listed.returncode == 0, listed.stderr
        assert [(r["name"], r["closure_order"]) for r in json.loads(listed.stdout)] == [(f"{name}_scale", "closed")]

        audit = run_frame("audit", "gradients", "--pack", name, "--order", "2", "--numeric")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert "audit: clean" in audit.stdout
    finally:
        removed = subprocess.run([*pip, "uninstall", "-y", dist], capture_output=True, text=True, timeout=300)
    assert removed.returncode == 0, removed.stderr
    after = json.loads(run_frame("plugins", "list", "-f", "json").stdout)
    assert name not in {r["name"] for r in after}


def test_a_name_an_installed_pack_has_is_warned_about(invoke, tmp_path):
    result = invoke("new-pack", "ops_basic", "--dir", str(tmp_path / "p"))
    assert result.exit_code == 0
    assert "already called 'ops_basic'" in result.stderr and "frame-ops-basic" in result.stderr
