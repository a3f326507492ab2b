"""The installed ``frame`` console script, in fresh processes: what a user and a CI job actually run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import FRAME, ORDER_ONE_PACK, run_frame

ACTIVATIONS = ["elu", "gelu_tanh", "leaky_relu", "softplus"]


def test_version():
    result = run_frame("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("frame-core ") and "frame-ops-basic" in result.stdout


def test_listings_are_json_on_stdout():
    for args in (("plugins", "list"), ("ops", "list"), ("ops", "show", "add"), ("audit", "gradients")):
        result = run_frame(*args, "--format", "json")
        assert result.returncode == 0, (args, result.stderr)
        json.loads(result.stdout)
        assert result.stderr == ""


def test_bad_input_exits_2_without_a_traceback(tmp_path):
    (tmp_path / "bad.json").write_text("[1, 2")
    for args in (("audit", "gradients", "--order", "0"), ("ops", "show", "matmull"),
                 ("graph", "show", str(tmp_path / "absent.json")), ("graph", "dot", str(tmp_path / "bad.json")),
                 ("ops", "list", "--pack", "nope"), ("new-pack", "Bad-Name", "--dir", str(tmp_path / "x"))):
        result = run_frame(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.startswith("error: "), (args, result.stderr)


def test_a_broken_pack_is_reported_and_the_rest_works(tmp_path, monkeypatch):
    from .conftest import FakeSite

    site = FakeSite(tmp_path / "site", monkeypatch)
    site.add("broken", 'raise RuntimeError("half-installed")\n')
    site.add("orderone", ORDER_ONE_PACK.format(prefix="cs"))
    plugins = {r["name"]: r for r in json.loads(run_frame("plugins", "list", "-f", "json", env=site.env).stdout)}
    assert plugins["broken"]["status"] == "failed" and "half-installed" in plugins["broken"]["error"]
    assert plugins["orderone"]["status"] == "loaded" and plugins["ops_basic"]["status"] == "loaded"

    listed = run_frame("ops", "list", "--pack", "orderone", "-f", "json", env=site.env)
    assert listed.returncode == 0 and {r["name"] for r in json.loads(listed.stdout)} == {"cs_ramp", "cs_step"}
    assert "half-installed" in listed.stderr

    audit = run_frame("audit", "gradients", "--format", "github", "--order", "2", env=site.env)
    assert audit.returncode == 1
    lines = audit.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("::error ") for line in lines)
    assert any("half-installed" in line for line in lines) and any("cs_ramp" in line for line in lines)

    strict = run_frame("ops", "list", env={**site.env, "FRAME_STRICT": "1"})
    assert strict.returncode == 1 and "half-installed" in strict.stderr

    # `frame audit gradients | head -1` under pipefail: a reader that leaves early does not hide the findings
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")} | site.env
    proc = subprocess.Popen([str(FRAME), "audit", "gradients", "--order", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=environ)
    proc.stdout.close()  # before the command writes anything
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and b"Traceback" not in err
    site.cleanup()


def test_the_cli_keeps_heavy_imports_out_of_its_start_up():
    # rich only for help and errors; no compiler passes for listing and auditing
    probe = (
        "import sys\n"
        "from frame_core.cli.main import app\n"
        "for args in (['ops', 'list'], ['audit', 'gradients']):\n"
        "    try:\n"
        "        app(args, prog_name='frame')\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), e.code\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] == 'rich' or m.startswith('frame_core.compiler.passes')\n"
        "         or m in ('frame_core.compiler.api', 'frame_core.runtime.executable')]\n"
        "print(heavy, file=sys.stderr)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_import_frame_core_does_not_import_the_cli_stack():
    probe = ("import sys, frame_core\nframe_core.registry()\n"
             "bad = [m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'click', 'pydantic')]\n"
             "print(bad)\nsys.exit(1 if bad else 0)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# -- the example third-party pack (examples/frame-ops-activations, installed by `make setup`) -----
def test_activations_pack_is_listed():
    result = run_frame("ops", "list", "--pack", "activations", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == ACTIVATIONS
    assert all(r["differentiable"] == "yes" and r["closure_order"] == "closed" for r in rows)


@pytest.mark.parametrize("extra", [("--order", "3"), ("--numeric",)])
def test_activations_pack_audits_clean(extra):
    result = run_frame("audit", "gradients", "--pack", "activations", "--format", "json", *extra)
    report = json.loads(result.stdout)
    assert result.returncode == 0, report["findings"]
    assert report["total"] == {"packs": 1, "ops": 4, "with_gradient": 4, "not_differentiable": 0, "missing": 0}


def test_a_reader_that_leaves_early_is_not_an_error():
    """`frame ops list | head -1`: the closed pipe ends the command quietly with status 0."""
    proc = subprocess.Popen([str(FRAME), "ops", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command writes anything
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"internal error" not in err and b"Traceback" not in err
