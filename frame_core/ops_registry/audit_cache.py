"""A store of clean start-up audits, so that a process does not repeat one that nothing has changed since.

The start-up closure audit (ARCH-068, ``closure.py``) instantiates every GradientFn on its op's examples:
about half of what ``frame_core.registry()`` costs. Its result depends only on the code of frame-core and of
the packs that loaded, so the process-wide registry keeps each *clean* result (no pack unloaded, nothing
noted) in ``$XDG_CACHE_HOME/frame/audit`` (else ``~/.cache/frame/audit``) under a key that hashes:

* the Python, numpy and frame-core versions, and each pack's name, distribution, version and load status;
* the path, size and content hash of every ``.py`` file of frame-core and of each loaded pack's top-level
  package (SipHash-1-3, 64 bits: ``importlib.util.source_hash``, the check Python's own hash-based ``.pyc``
  files trust).

Any change to any of those (an edited file, a file added, removed or replaced, another version, a pack enabled
or disabled) is another key, so a stored result is never stale. The files' bytes, not their status, key it:
a status key (size, modification and status-change times, inode) was cheaper by about a millisecond but can be
stale where the times do not move with an edit: timestamps of one clock tick (a few milliseconds on Linux
before 6.13, where two same-size writes in one tick leave every field alike), file systems with coarse or
missing times (FAT's 2 s, some network and FUSE file systems), and Windows, whose ``st_ctime`` is the creation
time, so an edit that sets the modification time back (``touch -r``, ``cp -p``, an archive) goes unseen.
Reading and hashing the some 140 files costs about 2.5 ms. The content key also means that switching a branch
away and back (new times, the same bytes) finds the stored audit again. An audit that found a problem is never
stored (it runs, and reports, every time).
``frame audit gradients`` and ``load_registry()`` called directly always audit afresh;
``FRAME_AUDIT_CACHE=0`` turns the store off. A missing or read-only directory, or an unreadable entry, just
means a fresh audit. Entries are ``marshal`` data (never pickle: marshal holds only plain values, strings,
numbers, lists, tuples and dicts), written atomically; marshal, not JSON, because it is built into the
interpreter (importing json costs about 5 M instructions, a percent of ``import numpy``) and because an entry
needs no more trust than the ``.pyc`` files, also marshal data, that Python loads from the same user's
folders. The key holds the Python version, so marshal's format never changes under a stored entry.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import sys
from typing import Any

from .closure_info import ClosureInfo
from .registry import Registry

try:  # importlib.util.source_hash(data) is _siphash(_PYC_KEY, data): start-up need not import importlib.util for it
    from _imp import source_hash as _siphash
    from importlib._bootstrap_external import _RAW_MAGIC_NUMBER as _PYC_KEY  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - an interpreter whose import system is laid out otherwise
    _PYC_KEY = None


def source_hash(data: bytes) -> bytes:
    """``importlib.util.source_hash(data)``: the hash Python's hash-based ``.pyc`` files check."""
    if _PYC_KEY is None:  # pragma: no cover
        from importlib.util import source_hash as reference

        return reference(data)
    return _siphash(_PYC_KEY, data)


try:  # the hash itself, without hashlib's import of OpenSSL (about a tenth of the start-up this store saves)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

#: Bump when the stored format, the key or what the audit computes changes.
FORMAT = 4
#: Opening flags of the files read for the key (O_BINARY exists, and matters, on Windows only).
_READ = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def enabled(environ: Any = os.environ) -> bool:
    return environ.get("FRAME_AUDIT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def directory(environ: Any = os.environ) -> str:
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "frame", "audit")


def _package_files(module_name: str | None) -> list[str] | None:
    """The ``.py`` files of the top-level package (or lone module) that ``module_name`` belongs to, in a fixed
    order; None when it has none to key (a module made in memory: such a registry is not cached) or a folder
    cannot be read."""
    if not module_name:
        return None
    top = sys.modules.get(module_name.split(":")[0].strip().split(".")[0])
    origin = getattr(top, "__file__", None)
    if not origin:
        return None
    if os.path.basename(origin) != "__init__.py":
        return [origin]
    files: list[str] = []
    folders = [os.path.dirname(origin)]
    while folders:  # os.scandir, not os.walk or pathlib: fewer calls, and no import
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            return None
        for entry in entries:
            if entry.name.endswith(".py"):
                files.append(entry.path)
            elif entry.name != "__pycache__" and entry.is_dir():
                folders.append(entry.path)
    return files


def key(reg: Registry) -> str | None:
    """The key a clean audit of ``reg`` is stored under (see the module's docstring), or None when a pack's
    code has no files to key."""
    from .loader import core_version

    numpy = sys.modules.get("numpy")
    parts = [f"{FORMAT}|{sys.version}|{getattr(numpy, '__version__', '-')}|{core_version()}"]
    modules: list[str | None] = [__name__]
    for name in sorted(reg.packs):
        record = reg.packs[name]
        parts.append(f"{name}|{record.distribution}|{record.version}|{record.status}|{record.module}")
        if record.status == "loaded" and name != "core":
            modules.append(record.module)
    for module in modules:
        files = _package_files(module)
        if files is None:
            return None
        for path in files:
            data = _read(path)
            if data is None:
                return None
            parts.append(f"{path}|{len(data)}|{source_hash(data).hex()}")
    return blake2b("\n".join(parts).encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()


def _read(path: str) -> bytes | None:
    """The bytes of the file at ``path`` (None when it cannot be read). ``os.read`` of the size ``fstat`` gives,
    not ``open().read()``: a third of the cost, which is most of what keying by content costs."""
    try:
        fd = os.open(path, _READ)
        try:
            size = os.fstat(fd).st_size
            data = os.read(fd, size + 1)
            if len(data) != size:  # a file that changed size meanwhile, or a short read: read on to the end
                chunks = [data]
                while chunks[-1]:
                    chunks.append(os.read(fd, 1 << 16))
                data = b"".join(chunks)
        finally:
            os.close(fd)
    except OSError:
        return None
    return data


def _load(path: str, reg: Registry) -> dict[str, ClosureInfo] | None:
    try:
        with open(path, "rb") as f:
            stored = marshal.load(f)
        closure = {op: _info(op, row) for op, row in stored["closure"].items()}
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError):
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
        with open(tmp, "wb") as f:
            marshal.dump({"format": FORMAT, "closure": rows}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full disk: the next process audits afresh


def audit(reg: Registry, environ: Any = os.environ) -> None:
    """``run_closure_audit(reg)``, or the stored result of a clean audit of exactly this code."""
    digest = key(reg) if enabled(environ) else None
    path = os.path.join(directory(environ), f"{digest}.marshal") if digest else None
    if path is not None:
        closure = _load(path, reg)
        if closure is not None:
            reg.closure = closure
            return
    from .closure import run_closure_audit  # (not imported when a stored audit is found)

    statuses = {name: r.status for name, r in reg.packs.items()}
    notes, problems = len(reg.notes), len(reg.problems)
    run_closure_audit(reg)
    clean = ({name: r.status for name, r in reg.packs.items()} == statuses and len(reg.notes) == notes
             and len(reg.problems) == problems and not any(c.problems for c in reg.closure.values()))
    if path is not None and clean:
        _store(path, reg.closure)
