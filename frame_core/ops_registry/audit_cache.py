"""A store of clean start-up audits, so that a process does not repeat one that nothing has changed since.

The start-up closure audit (ARCH-068, ``closure.py``) instantiates every GradientFn on its op's examples:
about half of what ``frame_core.registry()`` costs. Its result depends only on the code of frame-core and of
the packs that loaded, so the process-wide registry keeps each *clean* result (no pack unloaded, nothing
noted) in ``$XDG_CACHE_HOME/frame/audit`` (else ``~/.cache/frame/audit``) under a key that hashes:

* the Python and frame-core versions, and each pack's name, distribution, version and load status;
* the bytes of every ``.py`` file of frame-core and of each loaded pack's top-level package.

Any change to any of those (an edited file, another version, a pack enabled or disabled) is another key, so a
stored result is never stale; an audit that found a problem is never stored (it runs, and reports, every
time). ``frame audit gradients`` and ``load_registry()`` called directly always audit afresh;
``FRAME_AUDIT_CACHE=0`` turns the store off. A missing or read-only directory, or an unreadable entry, just
means a fresh audit. Entries are JSON (never pickle), written atomically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from typing import Any

from .closure import ClosureInfo, run_closure_audit
from .registry import Registry

#: Bump when the stored format or what the audit computes changes.
FORMAT = 1


def enabled(environ: Any = os.environ) -> bool:
    return environ.get("FRAME_AUDIT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def directory(environ: Any = os.environ) -> str:
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "frame", "audit")


def _package_files(module_name: str | None) -> list[str] | None:
    """The ``.py`` files of the top-level package (or lone module) that ``module_name`` belongs to; None when
    it has no files to hash (a module made in memory: such a registry is not cached)."""
    if not module_name:
        return None
    top = sys.modules.get(module_name.split(":")[0].strip().split(".")[0])
    origin = getattr(top, "__file__", None)
    if not origin:
        return None
    if os.path.basename(origin) != "__init__.py":
        return [origin]
    files = []
    for folder, dirs, names in os.walk(os.path.dirname(origin)):  # os.walk, not pathlib: importing it costs ms
        dirs.sort()
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return files


def key(reg: Registry) -> str | None:
    """The content hash a clean audit of ``reg`` is stored under, or None when a pack's code cannot be hashed."""
    from .loader import core_version

    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{FORMAT}|{sys.version}|{core_version()}".encode())
    modules: list[tuple[str, str | None]] = [("core", __name__)]
    for name in sorted(reg.packs):
        record = reg.packs[name]
        digest.update(f"|{name}|{record.distribution}|{record.version}|{record.status}|{record.module}".encode())
        if record.status == "loaded" and name != "core":
            modules.append((name, record.module))
    for _, module in modules:
        files = _package_files(module)
        if files is None:
            return None
        for path in files:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                return None
            digest.update(f"|{os.path.basename(path)}|{len(data)}|".encode())
            digest.update(data)
    return digest.hexdigest()


def _load(path: str, reg: Registry) -> dict[str, ClosureInfo] | None:
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        closure = {op: _info(op, row) for op, row in stored["closure"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return closure if closure.keys() == reg.schemas.keys() else None


# Every field of ClosureInfo but `op` is stored, so a field added later (forward mode's) is kept too; a
# stored row missing one is a miss (KeyError), never a default filled in.
_FIELDS = [f.name for f in dataclasses.fields(ClosureInfo) if f.name != "op"]
_TUPLES = {"chain", "uses"}


def _info(op: str, row: dict[str, Any]) -> ClosureInfo:
    values = {name: row[name] for name in _FIELDS}
    for name in _TUPLES:
        values[name] = tuple(values[name])
    return ClosureInfo(op=op, **values)


def _store(path: str, closure: dict[str, ClosureInfo]) -> None:
    rows = {op: {name: (list(v) if isinstance(v, tuple) else v) for name in _FIELDS for v in [getattr(c, name)]}
            for op, c in closure.items()}
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "closure": rows}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full disk: the next process audits afresh


def audit(reg: Registry, environ: Any = os.environ) -> None:
    """``run_closure_audit(reg)``, or the stored result of a clean audit of exactly this code."""
    digest = key(reg) if enabled(environ) else None
    path = os.path.join(directory(environ), f"{digest}.json") if digest else None
    if path is not None:
        closure = _load(path, reg)
        if closure is not None:
            reg.closure = closure
            return
    statuses = {name: r.status for name, r in reg.packs.items()}
    notes, problems = len(reg.notes), len(reg.problems)
    run_closure_audit(reg)
    clean = ({name: r.status for name, r in reg.packs.items()} == statuses and len(reg.notes) == notes
             and len(reg.problems) == problems and not any(c.problems for c in reg.closure.values()))
    if path is not None and clean:
        _store(path, reg.closure)
