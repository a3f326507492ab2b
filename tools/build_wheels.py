"""Build a wheel of every distribution in this repository into one folder (``make dist``).

    python tools/build_wheels.py [OUT]        # OUT defaults to dist/

The distributions: frame-core (the repository root), each op pack under plugins/, frame-distributed and the
example pack(s) under examples/. Wheels are built offline, with the hatchling of the running Python
(``--no-build-isolation``; it comes with the ``test`` extra), so the result does not depend on an index.
Install them with ``pip install --no-index --find-links dist frame-core frame-ops-basic ...``
(docs/getting-started.md).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def distributions() -> list[pathlib.Path]:
    """The folders holding a pyproject.toml: the core first, then the packs, frame-distributed, the examples."""
    return [ROOT, *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml")), ROOT / "distributed",
            *sorted(p.parent for p in ROOT.glob("examples/*/pyproject.toml"))]


def build(out: pathlib.Path) -> list[pathlib.Path]:
    """Build every wheel into ``out``; return their paths. Raises ``SystemExit`` with pip's output on failure."""
    try:
        import hatchling  # noqa: F401 - the build backend, used in this interpreter
    except ImportError:
        raise SystemExit("building wheels needs hatchling in this Python: pip install 'hatchling>=1.18' "
                         "(it comes with pip install -e '.[test]')") from None
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(out), *map(str, distributions())],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"pip wheel failed:\n{done.stdout}{done.stderr}")
    built = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob("*.whl"))
    return built


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else ROOT / "dist"
    for wheel in build(out):
        print(wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
