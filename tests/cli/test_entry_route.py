"""The console script's typer-free route for `frame audit gradients` and `frame ops list` (cli/entry.py): it takes
only plain command lines, leaves every other to typer, and ends each exactly as typer would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from frame_core.cli.entry import parse

from .conftest import run_frame

TYPER = "import sys; from frame_core.cli.main import app; app(sys.argv[1:], prog_name='frame')"


def test_plain_command_lines_are_parsed_as_typer_parses_them():
    name, group, params = parse(["--strict", "-v", "audit", "gradients", "--order", "2", "-n", "3", "--numeric",
                                 "--pack=activations", "-f", "github", "--format=json", "--strict"])
    assert name == ("audit", "gradients") and group == {"strict": True, "verbose": True}
    assert params == {"order": 3, "numeric": True, "pack": ["activations"], "strict": True, "fmt": "json"}
    _, _, params = parse(["ops", "list", "-p", "a", "--pack", "b", "--internal", "--missing-gradient"])
    assert params == {"fmt": "text", "pack": ["a", "b"], "internal": True, "missing_gradient": True}
    assert parse(["ops", "list"])[2] == {"fmt": "text", "pack": None, "internal": False, "missing_gradient": False}


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["--version"], ["ops"], ["ops", "show", "add"], ["plugins", "list"], ["audit", "gradients", "--help"],
    ["audit", "gradients", "-n2"], ["audit", "gradients", "--order"], ["audit", "gradients", "--order", "-1"],
    ["audit", "gradients", "--order", "two"], ["audit", "gradients", "--order", "+2"], ["audit", "gradients", "--order", "٢"],
    ["audit", "gradients", "--format", "JSON"], ["audit", "gradients", "--numeric=1"], ["audit", "gradients", "--pack", ""],
    ["audit", "gradients", "extra"], ["audit", "gradients", "--"], ["ops", "list", "--format", "github"],
    ["ops", "list", "--strict"], ["ops", "list", "--numeric"], ["--strict", "--bogus", "ops", "list"],
    ["audit", "gradients", "--order", "1" * 5000], ["audit", "gradients", "-n=2"], ["--strict", "audit", "-v", "gradients"],
])
def test_everything_else_is_left_to_typer(argv):
    assert parse(argv) is None


def _both(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")} | (env or {})
    typer = subprocess.run([sys.executable, "-c", TYPER, *args], capture_output=True, text=True, env=environ,
                           timeout=120)
    return run_frame(*args, env=env), typer


@pytest.mark.parametrize("args", [
    ("ops", "list", "-p", "activations", "-f", "json"),
    ("ops", "list", "-p", "activations", "-p", "ops_basic"),  # refused: one pack
    ("audit", "gradients", "--order", "0"),  # refused before anything loads
    ("audit", "gradients", "-p", "activations", "-f", "github", "-n", "2"),
    ("audit", "gradients", "--order", "1" * 5000),  # over int()'s digit limit: typer's usage error, not a traceback
])
def test_the_route_ends_every_command_as_typer_does(args):
    routed, typer = _both(*args)
    assert (routed.returncode, routed.stdout, routed.stderr) == (typer.returncode, typer.stdout, typer.stderr)


def test_the_route_imports_neither_typer_nor_click():
    probe = ("import sys\nfrom frame_core.cli.entry import route\n"
             "code = route(['ops', 'list', '--pack', 'activations', '--format', 'json'])\n"
             "bad = [m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich')]\n"
             "print(code, bad, file=sys.stderr)\nsys.exit(1 if bad or code != 0 else 0)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("args", [("ops", "list"), ("audit", "gradients")])
def test_ctrl_c_ends_the_route_as_typer_ends_it(site, args):
    """typer (0.28) ends a command that Ctrl-C interrupted silently, with status 130 (not click's `Aborted!`, 1)."""
    site.add("interrupted", "raise KeyboardInterrupt\n")
    routed, typer = _both(*args, env=site.env | {"FRAME_LOAD_PLUGINS": "interrupted"})
    assert (routed.returncode, routed.stdout, routed.stderr) == (typer.returncode, typer.stdout, typer.stderr)
    assert routed.returncode == 130


def test_atexit_work_and_output_survive_the_skipped_final_collection(site):
    """`gc.freeze()` at exit skips the last cyclic collection only: atexit handlers, weakref.finalize callbacks
    and a file a pack closes at exit still run and write, through the route and through typer alike."""
    site.add("at_exit", '''
        import atexit, os, sys, weakref
        from frame_core import hookimpl

        FRAME_PLUGIN_API = "1.0"
        log = open(os.environ["QA_AT_EXIT_LOG"], "w")
        log.write("buffered line\\n")
        atexit.register(log.close)
        atexit.register(lambda: sys.stderr.write("atexit handler ran\\n"))


        class Held:
            pass


        held = Held()
        held.cycle = held
        weakref.finalize(held, sys.stderr.write, "finalize callback ran\\n")


        @hookimpl
        def frame_register_ops():
            return []
    ''')
    logs = [site.root / "routed.log", site.root / "typer.log"]
    env = site.env | {"FRAME_LOAD_PLUGINS": "at_exit"}
    routed = run_frame("ops", "list", "-f", "json", env=env | {"QA_AT_EXIT_LOG": str(logs[0])})
    typer = run_frame("ops", "list", "-fjson", env=env | {"QA_AT_EXIT_LOG": str(logs[1])})  # (`-fjson`: typer)
    assert routed.returncode == 0 and routed.stdout == typer.stdout and routed.stdout.endswith("]\n")
    for result, log in zip((routed, typer), logs):
        assert "atexit handler ran\n" in result.stderr and "finalize callback ran\n" in result.stderr
        assert log.read_text() == "buffered line\n"


@pytest.mark.parametrize("args", [("ops", "list", "-f", "json"), ("ops", "list", "-fjson")])  # route, typer
def test_no_resource_warning_for_the_stdout_the_console_script_owns(args):
    """The stdout `main` swaps in is closed at exit: `-W default` / `-X dev` show no ResourceWarning."""
    result = run_frame(*args, env={"PYTHONWARNINGS": "default", "FRAME_LOAD_PLUGINS": ""})
    assert result.returncode == 0 and result.stdout.startswith("[") and "ResourceWarning" not in result.stderr
