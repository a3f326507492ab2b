"""The ``frame`` command line against a hostile pack and hand-edited files (issue 8 §1 and §4, found in QA).

A pack that writes to file descriptor 1 directly (``os.write(1, ...)``, C code's printf, a child process it
starts) bypassed the redirection of ``sys.stdout`` and corrupted ``--format json`` of the console script;
``frame graph show`` told a user whose file had a wrong type or attribute to install the pack that
provides its ops.
"""

from __future__ import annotations

import json
import os

import pytest

from .conftest import ORDER_ONE_PACK, run_frame

FD_PACK = ('import os\nos.write(1, b"import writes to fd 1\\n")\n'
           + ORDER_ONE_PACK.format(prefix="fdw").replace(
               "def frame_register_ops():\n", "def frame_register_ops():\n    os.write(1, b'hook writes to fd 1\\n')\n")
           .replace("lambda x: np.maximum(x, 0)", "lambda x: (os.write(1, b'kernel writes\\n'), np.maximum(x, 0))[1]"))


@pytest.mark.parametrize("command", [("plugins", "list"), ("ops", "list"), ("ops", "show", "fdw_ramp"),
                                     ("audit", "gradients", "--pack", "fdw", "--numeric")])
def test_a_pack_writing_to_file_descriptor_1_cannot_corrupt_json_of_the_console_script(site, command):
    site.add("fdw", FD_PACK)
    done = run_frame(*command, "--format", "json", env=site.env)
    assert done.returncode in (0, 1), done.stderr
    json.loads(done.stdout)  # nothing but the document
    assert "import writes to fd 1" in done.stderr and "hook writes to fd 1" in done.stderr
    if "--numeric" in command:
        assert "kernel writes" in done.stderr


def test_text_output_of_the_console_script_still_reaches_stdout(site):
    site.add("fdw", FD_PACK)
    done = run_frame("ops", "list", "--pack", "fdw", env=site.env)
    assert done.returncode == 0 and done.stdout.startswith("NAME") and "fdw_ramp" in done.stdout
    assert "writes to fd 1" not in done.stdout


def _saved(tmp_path, op: str, out_type: str, attrs: dict | None = None):
    node = {"op": op, "inputs": [0], "outputs": [{"id": 1, "type": out_type}], **({"attrs": attrs} if attrs else {})}
    doc = {"format": "frame-graph", "version": 2,
           "graph": {"name": "g", "inputs": [{"id": 0, "type": "f32[3]"}], "nodes": [node], "outputs": [1]}}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("op, out_type, attrs", [
    ("ops_basic::relu", "f64[3]", None),                                                 # V6: a wrong type
    ("ops_basic::sum", "f32[]", {"axes": {"kind": "str", "value": "x"}}),               # V4: a wrong attribute
])
def test_a_graph_broken_by_hand_is_not_blamed_on_a_missing_pack(invoke, tmp_path, op, out_type, attrs):
    result = invoke("graph", "show", _saved(tmp_path, op, out_type, attrs))
    assert result.exit_code == 2
    assert "is the pack that provides its ops installed" not in result.stderr
    assert "written by hand, or edited" in result.stderr and "--no-verify" in result.stderr


def test_a_graph_with_an_unknown_op_still_asks_for_the_pack(invoke, tmp_path):
    result = invoke("graph", "show", _saved(tmp_path, "nowhere::thing", "f32[3]"))
    assert result.exit_code == 2 and "is the pack that provides its ops installed" in result.stderr


def _two_pack_distribution(site, dist: str, names: tuple[str, str], prefixes: tuple[str, str]) -> None:
    """One distribution ``dist`` shipping two packs (entry points ``names``, op prefixes ``prefixes``)."""
    import shutil

    modules = [site.add(n, ORDER_ONE_PACK.format(prefix=p), dist=f"{dist}-{k}") for k, (n, p) in
               enumerate(zip(names, prefixes))]
    for k in range(2):
        shutil.rmtree(site.root / f"{dist.replace('-', '_')}_{k}-0.1.dist-info")
    info = site.root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n\n")
    (info / "entry_points.txt").write_text("[frame]\n" + "".join(f"{n} = {m}\n" for n, m in zip(names, modules)))


def test_pack_names_an_entry_point_before_a_distribution(invoke, site):
    # `alpha` sorts first and its distribution is called like the other pack: --pack frame-twins meant alpha
    _two_pack_distribution(site, "frame-twins", ("alpha", "frame_twins"), ("al", "tw"))
    result = invoke("ops", "list", "--pack", "frame-twins", "--format", "json")
    assert result.exit_code == 0 and {r["name"] for r in json.loads(result.stdout)} == {"tw_step", "tw_ramp"}
    result = invoke("ops", "list", "--pack", "alpha", "--format", "json")
    assert {r["name"] for r in json.loads(result.stdout)} == {"al_step", "al_ramp"}


def test_pack_naming_a_distribution_of_several_packs_asks_which(invoke, site):
    _two_pack_distribution(site, "frame-pair", ("left", "right"), ("le", "ri"))
    result = invoke("audit", "gradients", "--pack", "frame-pair")
    assert result.exit_code == 2 and "ships several packs ('left', 'right')" in result.stderr


def test_with_stdout_closed_the_output_goes_nowhere_not_to_stderr():
    import os
    import subprocess

    from .conftest import FRAME

    environ = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")}
    done = subprocess.run([str(FRAME), "ops", "list"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=environ, timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 0, done.stderr
    assert "NAME" not in done.stderr and "relu" not in done.stderr  # frame's table once landed on stderr


def test_writing_over_a_special_file_that_exists_never_says_it_does_not_exist(tmp_path):
    """Found in QA: `-o /dev/stdout --force` (stdout a pipe: its link resolves to no path) and
    `-o /proc/version --force` said "No such file or directory" for files that exist."""
    import frame_core as fc

    from .conftest import run_frame

    path = tmp_path / "g.json"
    fc.save_graph(fc.trace(lambda x: fc.ops.sum(x * x), "f32[3]"), path)
    done = run_frame("graph", "grad", str(path), "--wrt", "0", "-o", "/dev/stdout", "--force")
    assert done.returncode == 0, done.stderr
    assert fc.loads(done.stdout).name.endswith("_grad")  # the pipe got the document
    if os.path.exists("/proc/version"):
        done = run_frame("graph", "grad", str(path), "--wrt", "0", "-o", "/proc/version", "--force")
        assert done.returncode != 0
        assert "error: cannot write /proc/version: " in done.stderr
        assert "cannot write /proc/version: No such file" not in done.stderr
        assert "the file exists" in done.stderr or "Permission denied" in done.stderr
