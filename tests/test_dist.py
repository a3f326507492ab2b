"""``make dist``'s wheels install into a clean virtual environment and work there (issue 17: the getting-started
page said ``pip install frame-core frame-ops-basic``, which fails while nothing is published).

Offline and without touching this environment: the wheels are built with tools/build_wheels.py (what ``make
dist`` runs), installed with ``pip --no-index --no-deps`` into a new venv, and that venv finds the third-party
dependencies (numpy, pluggy, typer, ...) through a ``.pth`` file naming a folder of links to exactly those
distributions of this environment: none of the repository's own (editable) installs is visible there, so the
entry points, modules and console script it uses are the wheels'.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_wheels  # noqa: E402

OURS = re.compile(r"^frame[-_]")
#: every distribution of the repository (tools/build_wheels.py builds them all)
DISTRIBUTIONS = ("frame-core", "frame-ops-basic", "frame-ops-fft", "frame-ops-sequence", "frame-ops-nn", "frame-native",
        "frame-distributed", "frame-ops-activations", "frame-onnx", "frame-train")


def _requirement_names(dist: md.Distribution) -> list[str]:
    names = []
    for requirement in dist.requires or []:
        if "extra ==" in requirement:  # optional extras are not what the wheel needs to import
            continue
        names.append(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0])
    return names


def _third_party_closure() -> list[md.Distribution]:
    """The installed distributions the repository's distributions need, transitively, ours left out."""
    todo = [md.distribution(n) for n in DISTRIBUTIONS]
    seen: dict[str, md.Distribution] = {}
    while todo:
        dist = todo.pop()
        for name in _requirement_names(dist):
            key = name.lower().replace("_", "-")
            if OURS.match(key) or key in seen:
                continue
            try:
                seen[key] = md.distribution(name)
            except md.PackageNotFoundError:
                continue  # an optional dependency this environment lacks: the wheel's test below does not need it
            todo.append(seen[key])
    return list(seen.values())


def _link_dependencies(target: pathlib.Path) -> None:
    """Links in ``target`` to the top-level modules and metadata of every third-party dependency."""
    target.mkdir()
    for dist in _third_party_closure():
        base = pathlib.Path(dist.locate_file(""))
        tops = {pathlib.Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            source = base / top
            if top.endswith(".pth") or top == ".." or top.startswith("__") or not source.exists():
                continue
            link = target / top
            if not link.exists():
                link.symlink_to(source, target_is_directory=source.is_dir())


@pytest.mark.slow
def test_wheels_install_into_a_clean_venv_and_work(tmp_path):
    wheels = build_wheels.build(tmp_path / "dist")
    names = sorted(re.match(r"(.+?)-\d", w.name).group(1) for w in wheels)
    assert names == sorted(d.replace("-", "_") for d in DISTRIBUTIONS)
    import zipfile

    untyped = [w.name for w in wheels if not any(n.endswith("/py.typed") for n in zipfile.ZipFile(w).namelist())]
    assert not untyped, f"wheels without a py.typed marker (PEP 561: type checkers ignore their hints): {untyped}"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = pathlib.Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       capture_output=True, text=True, check=True).stdout.strip())
    _link_dependencies(tmp_path / "deps")
    (site / "frame_test_deps.pth").write_text(str(tmp_path / "deps") + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
                              "--no-deps", "--find-links", str(tmp_path / "dist"), *DISTRIBUTIONS], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRAME_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    check = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    facts = json.loads(check.stdout.splitlines()[-1])
    assert all(path.startswith(str(site)) for path in facts["files"].values()), facts["files"]  # the wheels' code
    assert facts["statuses"] == {p: "loaded" for p in ("core", "ops_basic", "ops_fft", "ops_sequence", "ops_nn",
                                                       "native", "activations")}, facts
    assert facts["y"] == [0.0, 1.0, 4.0]

    listed = subprocess.run([str(venv / "bin" / "frame"), "ops", "list", "--format", "json"], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    ops = {r["name"]: r["pack"] for r in json.loads(listed.stdout)}
    assert ops["relu"] == "ops_basic" and ops["rfft"] == "ops_fft" and ops["scan"] == "ops_sequence"
    assert ops["conv2d"] == "ops_nn"
    assert len(ops) == facts["user_ops"]


CHECK = """
import json
import numpy as np
import frame_core as fc, frame_ops_basic, frame_ops_fft, frame_ops_sequence, frame_native, frame_distributed
import frame_ops_activations, frame_ops_nn, frame_onnx, frame_train
from frame_core import ops
reg = fc.registry()
g = fc.trace(lambda x: ops.square(x), "f64[3]")
y, = fc.compile(g).run([np.array([0.0, 1.0, 2.0])])
modules = (fc, frame_ops_basic, frame_ops_fft, frame_ops_sequence, frame_native, frame_distributed, frame_ops_activations,
           frame_ops_nn, frame_onnx, frame_train)
print(json.dumps({
    "files": {m.__name__: m.__file__ for m in modules},
    "statuses": {name: record.status for name, record in reg.packs.items()},
    "user_ops": len(reg.names(internal=False)),
    "y": y.tolist(),
}))
"""
