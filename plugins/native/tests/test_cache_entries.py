"""What the disk cache loads (found in QA): an entry with a self-consistent checksum but junk bytes killed the
process with SIGSEGV inside LLVM's loader, and a FIFO planted as an entry blocked the compiler thread for good
(``frame_native.wait()`` never returned). Only regular files, read bounded and without blocking, whose object
code passes a structural check, reach LLVM; anything else is compiled afresh."""

from __future__ import annotations

import hashlib
import os
import platform

import pytest

import frame_native
from frame_core import ArgumentError
from frame_native import jit
from frame_native.objcheck import MAX_OBJECT_BYTES, object_problem

from .test_tiering import PROGRAM, run_python

llvmlite = pytest.importorskip("llvmlite.binding")
pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"),
                                reason="the cache loads objects only where their format is checked")


def emit(ir: str) -> bytes:
    """An object file made by LLVM from ``ir`` (never loaded)."""
    llvm = llvmlite
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    module = llvm.parse_assembly(ir)
    return bytes(target.create_target_machine(opt=2).emit_object(module))


KERNEL = "define i32 @frame_kernel_ab(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n"
CALLS_OUT = ("declare i32 @puts(ptr)\n@s = private constant [3 x i8] c\"hi\\00\"\n"
             "define i32 @frame_kernel_ab(i32 %x) {\n  %r = call i32 @puts(ptr @s)\n  ret i32 %r\n}\n")
TWO = KERNEL + "define i32 @other(i32 %x) {\n  ret i32 %x\n}\n"


def test_the_object_check_accepts_a_kernel_and_refuses_what_is_not_one():
    good = emit(KERNEL)
    assert object_problem(good, "frame_kernel_ab") is None
    assert "not exactly 'frame_kernel_cd'" in object_problem(good, "frame_kernel_cd")
    assert "'puts', defined elsewhere" in object_problem(emit(CALLS_OUT), "frame_kernel_ab")
    assert "not exactly" in object_problem(emit(TWO), "frame_kernel_ab")
    assert object_problem(b"\x7fELF" + os.urandom(200), "frame_kernel_ab") is not None
    assert object_problem(good[:100], "frame_kernel_ab") is not None
    assert "larger than" in object_problem(good + bytes(MAX_OBJECT_BYTES), "frame_kernel_ab")


def test_the_object_check_never_raises_on_damaged_objects():
    good = emit(KERNEL)
    rng = __import__("random").Random(0)
    refused = 0
    for _ in range(400):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        problem = object_problem(bytes(data), "frame_kernel_ab")  # a str or None, never an exception
        assert problem is None or isinstance(problem, str)
        refused += problem is not None
    assert refused > 100  # damage to the headers, tables and names is caught


def _entry(obj: bytes) -> bytes:
    return jit._MAGIC + hashlib.sha256(obj).digest() + obj


@pytest.fixture(scope="module")
def good_entry(tmp_path_factory):
    """The cache entry PROGRAM's one kernel gets (its name and bytes), made once."""
    folder = tmp_path_factory.mktemp("first") / "k"
    first = run_python(PROGRAM, {"FRAME_NATIVE_CACHE": str(folder), "FRAME_NATIVE_AFTER": "1"})
    assert first.returncode == 0, first.stderr
    (entry,) = list(folder.glob("*.o"))
    return entry.name, entry.read_bytes()


@pytest.mark.parametrize("plant", ["junk", "elf junk", "calls out", "fifo", "symlink", "folder"])
def test_a_bad_entry_is_compiled_afresh_and_never_crashes_or_blocks(tmp_path, good_entry, plant):
    name, _ = good_entry
    (tmp_path / "k").mkdir(mode=0o700)
    entry = tmp_path / "k" / name
    if plant == "junk":  # a checksum that matches its junk: LLVM's loader crashed on it
        entry.write_bytes(_entry(os.urandom(4000)))
    elif plant == "elf junk":
        entry.write_bytes(_entry(b"\x7fELF\x02\x01\x01" + os.urandom(2000)))
    elif plant == "calls out":
        entry.write_bytes(_entry(emit(CALLS_OUT.replace("frame_kernel_ab", "frame_kernel_" + name[:32]))))
    elif plant == "fifo":  # opening it for reading blocked the compiler thread for good
        os.mkfifo(entry)
    elif plant == "symlink":
        (tmp_path / "elsewhere.o").write_bytes(good_entry[1])
        entry.symlink_to(tmp_path / "elsewhere.o")
    else:
        entry.mkdir()
    again = run_python(PROGRAM, {"FRAME_NATIVE_CACHE": str(tmp_path / "k"), "FRAME_NATIVE_AFTER": "1"}, timeout=120)
    assert again.returncode == 0, again.stderr  # no SIGSEGV, no hang
    assert again.stdout.split() == ["1", "0"]  # compiled afresh, not loaded
    assert "is not used" in again.stderr
    if plant != "folder":  # the entry is replaced by a good one (a folder cannot be: it stays refused)
        assert entry.is_file() and not entry.is_symlink() and entry.read_bytes() == good_entry[1]


def test_a_good_entry_is_loaded(tmp_path, good_entry):
    name, data = good_entry
    (tmp_path / "k").mkdir(mode=0o700)
    (tmp_path / "k" / name).write_bytes(data)
    done = run_python(PROGRAM, {"FRAME_NATIVE_CACHE": str(tmp_path / "k"), "FRAME_NATIVE_AFTER": "1"})
    assert done.stdout.split() == ["0", "1"], done.stderr


def test_wait_has_a_bounded_default_and_checks_its_timeout():
    assert jit.wait.__defaults__ == (jit.WAIT_DEFAULT,) and 0 < jit.WAIT_DEFAULT <= 600
    assert frame_native.wait() is True  # nothing queued
    for bad in (-1, float("nan"), "5", True):
        with pytest.raises(ArgumentError, match="number of seconds"):
            frame_native.wait(bad)
