"""The store of clean start-up audits (audit_cache.py): reused only for exactly the same code, never for an
audit that found a problem, off with FRAME_AUDIT_CACHE=0, and never read by a direct load_registry()."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from frame_core.ops_registry import audit_cache, closure
from frame_core.ops_registry.loader import load_registry

from .fakepacks import pack_source


@pytest.fixture
def env(tmp_path, site):
    site.pack("frame-cachedpack", pack_source(["cached_ident"]), ep_name="cachedpack")
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "FRAME_LOAD_PLUGINS": "cachedpack"}


@pytest.fixture
def audits(monkeypatch):
    """The number of closure audits run through the store."""
    calls = []
    real = closure.run_closure_audit
    # (the store imports the audit when it runs one, so the audit is counted where it is defined)
    monkeypatch.setattr(closure, "run_closure_audit", lambda reg, *a, **k: calls.append(1) or real(reg, *a, **k))
    return calls


def stored(env) -> list:
    folder = Path(audit_cache.directory(env))
    return sorted(folder.glob("*.marshal")) if folder.exists() else []


def test_a_clean_audit_is_stored_and_reused_with_the_same_orders(env, audits):
    first = load_registry(audit_cache=True, environ=env)
    assert "cached_ident" in first.closure and len(stored(env)) == 1 and len(audits) == 1
    second = load_registry(audit_cache=True, environ=env)
    assert len(audits) == 1  # not audited again
    assert second.closure == first.closure and second.closure["cached_ident"].closed


def test_editing_a_pack_file_audits_again(env, audits, site):
    load_registry(audit_cache=True, environ=env)
    path = site.root / f"{site.modules[-1]}.py"
    path.write_text(path.read_text() + "\n# an edit\n")
    load_registry(audit_cache=True, environ=env)
    assert len(audits) == 2 and len(stored(env)) == 2


def test_an_edit_of_the_same_size_at_once_with_its_modification_time_set_back_is_another_key(env, site):
    # no pause past the file system's timestamp tick: within one tick (a few ms on Linux before 6.13, 2 s on FAT)
    # the status-change time need not move either, and on Windows st_ctime is the creation time; the bytes key it
    reg = load_registry(audit=False, environ=env)
    path = site.root / f"{site.modules[-1]}.py"
    before, old = audit_cache.key(reg), path.stat()
    text = path.read_text()
    path.write_text(text.replace("identity", "identitY", 1))
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert path.stat().st_size == old.st_size and path.stat().st_mtime_ns == old.st_mtime_ns
    assert audit_cache.key(reg) != before


def test_new_file_times_with_the_same_bytes_keep_the_key(env, site):
    # a branch switched away and back (or a fresh checkout) gives new times to the same code: the stored audit
    # still applies
    reg = load_registry(audit=False, environ=env)
    path = site.root / f"{site.modules[-1]}.py"
    before = audit_cache.key(reg)
    text = path.read_text()
    path.write_text(text + "# another version\n")
    assert audit_cache.key(reg) != before
    path.unlink()
    path.write_text(text)  # another inode and times, the same bytes
    os.utime(path, ns=(1, 1))
    assert audit_cache.key(reg) == before


def test_a_file_that_cannot_be_read_means_no_key(env, site, monkeypatch):
    reg = load_registry(audit=False, environ=env)
    path = str(site.root / f"{site.modules[-1]}.py")
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a: (_ for _ in ()).throw(PermissionError(13, "denied", p))
                        if os.fspath(p) == path else real_open(p, *a))
    assert audit_cache.key(reg) is None


def test_a_file_read_short_is_read_to_its_end(tmp_path, monkeypatch):
    path = tmp_path / "module.py"
    path.write_bytes(b"x = 1\n" * 1000)
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, 100)))  # a reader that returns 100 at most
    assert audit_cache._read(str(path)) == b"x = 1\n" * 1000


def test_a_file_added_to_a_pack_package_is_another_key(env, tmp_path, monkeypatch):
    package = tmp_path / "pkgsite" / "fake_cache_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__pycache__").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "pkgsite"))
    import fake_cache_package  # noqa: F401 - the key reads the files of an imported package

    try:
        files = audit_cache._package_files("fake_cache_package.plugin")
        assert files == [str(package / "__init__.py")]  # __pycache__ is not read
        (package / "kernels").mkdir()
        (package / "kernels" / "fast.py").write_text("X = 1\n")
        assert audit_cache._package_files("fake_cache_package") == [str(package / "__init__.py"),
                                                                   str(package / "kernels" / "fast.py")]
    finally:
        sys.modules.pop("fake_cache_package", None)


def test_another_pack_version_or_status_is_another_key(env):
    reg = load_registry(audit=False, environ=env)
    before = audit_cache.key(reg)
    reg.packs["cachedpack"].version = "2.0"
    assert audit_cache.key(reg) != before
    reg.packs["cachedpack"].version = "1.0"
    assert audit_cache.key(reg) == before
    reg.packs["cachedpack"].status = "disabled"
    assert audit_cache.key(reg) != before


def test_an_audit_that_finds_a_problem_is_never_stored(tmp_path, site, audits):
    broken = "lambda ctx: ctx.grad_graph(lambda x, y, gy: [gy, gy])"  # one gradient too many
    site.pack("frame-brokencache", pack_source(register=f"return [op('bad_ident', gradient={broken})]"),
              ep_name="brokencache")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "FRAME_LOAD_PLUGINS": "brokencache"}
    for _ in range(2):
        reg = load_registry(audit_cache=True, environ=env)
        assert reg.packs["brokencache"].status == "failed"
    assert stored(env) == [] and len(audits) == 2


def test_the_store_is_off_with_frame_audit_cache_0(env, audits):
    off = {**env, "FRAME_AUDIT_CACHE": "0"}
    load_registry(audit_cache=True, environ=off)
    load_registry(audit_cache=True, environ=off)
    assert stored(off) == [] and len(audits) == 2


def test_an_unreadable_entry_means_a_fresh_audit(env, audits):
    load_registry(audit_cache=True, environ=env)
    (entry,) = stored(env)
    good = entry.read_bytes()
    for bad in (b"{not marshal", good[:len(good) // 2], b"", b"N"):  # garbage, cut short, empty, a lone None
        entry.write_bytes(bad)
        reg = load_registry(audit_cache=True, environ=env)
        assert reg.closure["cached_ident"].closed
    assert len(audits) == 5


def test_a_direct_load_registry_always_audits_afresh(env, audits, monkeypatch):
    load_registry(audit_cache=True, environ=env)
    monkeypatch.setattr(audit_cache, "audit", lambda *a: pytest.fail("load_registry() read the store"))
    reg = load_registry(environ=env)
    assert reg.closure["cached_ident"].closed


def test_a_stored_audit_is_read_back_without_importing_the_audit(tmp_path):
    """Start-up reads a stored audit without loading the audit and the graph checker it uses (start-up cost,
    benchmarks/startup.py); test_a_clean_audit_is_stored_and_reused_with_the_same_orders checks what it reads."""
    import subprocess

    script = ("import sys, frame_core; reg = frame_core.registry(); "
              "print(sorted(m for m in ('frame_core.ops_registry.closure', 'frame_core.ir.verify') if m in sys.modules), "
              "len(reg.closure) == len(reg.schemas))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "FRAME_AUDIT_CACHE": "1"}
    first, second = (subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                                    check=True).stdout.split("\n") for _ in range(2))
    assert not first[0].startswith("[] ")  # nothing stored yet: the first process audits
    assert second[0] == "[] True"


def test_files_are_keyed_by_the_hash_pythons_pyc_files_check():
    import importlib.util

    for data in (b"", b"x = 1\n", bytes(range(256)) * 40):
        assert audit_cache.source_hash(data) == importlib.util.source_hash(data)
