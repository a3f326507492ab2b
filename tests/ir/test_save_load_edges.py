"""``save_graph``/``load_graph``/``loads`` at the edges QA found (issue 8 §3 and §4).

The atomic rename replaced whatever stood at the path: a FIFO (or, run as root, a device such as
``/dev/null``) became a regular file, a read-only file was overwritten where ``open(path, "w")`` is refused,
and errors named the temporary file. A target name near the system's limit could not be saved at all, bytes
paths failed, and wrong-typed arguments raised from deep inside ``os``/``json``; ``load_graph(1)`` even read
and closed the process's standard output.
"""

from __future__ import annotations

import os
import stat
import threading

import pytest

import frame_core as fc
from frame_core import ArgumentError, Graph

from .test_save_atomic import leftovers, small_graph


def test_a_fifo_is_written_into_never_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    fc.save_graph(small_graph(), fifo)
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a regular file put in its place
    assert fc.loads(got[0]).name == "small"
    assert not leftovers(tmp_path)


def test_a_read_only_file_is_refused_as_open_would(tmp_path, monkeypatch):
    path = tmp_path / "g.json"
    path.write_text("precious")
    real_access = os.access
    # as root every file is writable to open() too; pretend to be a user the file refuses
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p) == str(path) and mode == os.W_OK
                        else real_access(p, mode, **kw))
    with pytest.raises(PermissionError) as info:
        fc.save_graph(small_graph(), path)
    assert info.value.filename == str(path) and "read-only" in str(info.value)
    assert path.read_text() == "precious" and not leftovers(tmp_path)


@pytest.mark.parametrize("spelling", ["folder", "trailing-slash"])
def test_a_folder_is_refused_naming_the_callers_path(tmp_path, spelling):
    target = tmp_path / "d"
    target.mkdir()
    name = str(target) if spelling == "folder" else str(tmp_path / "new.json") + os.sep
    with pytest.raises(IsADirectoryError) as info:
        fc.save_graph(small_graph(), name)
    assert info.value.filename == name
    assert not (tmp_path / "new.json").exists() and not leftovers(tmp_path)


def test_a_missing_folder_names_the_folder_not_a_temporary_file(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        fc.save_graph(small_graph(), tmp_path / "nope" / "g.json")
    assert ".tmp" not in str(info.value) and "nope" in str(info.value)


def test_a_name_as_long_as_the_system_allows_is_saved(tmp_path):
    path = tmp_path / ("g" * 250 + ".json")  # 255 bytes: a temporary name built on it would be longer
    fc.save_graph(small_graph(), path)
    assert fc.load_graph(path).name == "small" and not leftovers(tmp_path)


def test_paths_may_be_bytes_or_pathlike(tmp_path):
    fc.save_graph(small_graph("b"), os.fsencode(tmp_path / "b.json"))
    assert fc.load_graph(os.fsencode(tmp_path / "b.json")).name == "b"
    assert fc.load_graph(tmp_path / "b.json").name == "b"


@pytest.mark.parametrize("path", [None, 1, 0, True, 2.5, ["g.json"], ""])
def test_a_path_that_is_not_a_path_is_an_argument_error(tmp_path, path):
    with pytest.raises(ArgumentError, match="takes a file path"):
        fc.save_graph(small_graph(), path)
    with pytest.raises(ArgumentError, match="takes a file path"):
        fc.load_graph(path)  # 1 would have read (and closed) stdout: open() takes file descriptors


@pytest.mark.parametrize("text", [None, 5, ["{}"], {"format": "frame-graph"}])
def test_loads_of_something_that_is_not_text_is_an_argument_error(text):
    with pytest.raises(ArgumentError, match="loads\\(\\) takes the JSON text"):
        fc.loads(text)


@pytest.mark.parametrize("indent", [-1, 10**30, b"x", 1.5, "  ", True])
def test_a_bad_indent_is_an_argument_error(tmp_path, indent):
    with pytest.raises(ArgumentError, match="indent="):
        fc.dumps(small_graph(), indent=indent)
    with pytest.raises(ArgumentError, match="indent="):
        fc.save_graph(small_graph(), tmp_path / "g.json", indent=indent)
    assert not (tmp_path / "g.json").exists()


@pytest.mark.parametrize("function", ["dumps", "loads", "save_graph", "load_graph"])
def test_a_registry_that_is_not_one_is_an_argument_error(tmp_path, function):
    path = tmp_path / "g.json"
    fc.save_graph(small_graph(), path)
    args = {"dumps": (small_graph(),), "loads": (path.read_text(),), "save_graph": (small_graph(), path),
            "load_graph": (path,)}[function]
    with pytest.raises(ArgumentError, match="registry= takes a frame_core Registry"):
        getattr(fc, function)(*args, registry="ops_basic")


def test_a_version_1_document_checks_its_registry_too():
    from frame_core.ir.serialize import from_document, to_document

    doc = to_document(small_graph())
    doc["version"] = 1
    assert isinstance(from_document(doc), Graph)
    with pytest.raises(ArgumentError):
        from_document(doc, registry=42)
