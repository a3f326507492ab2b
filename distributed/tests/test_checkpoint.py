"""Checkpoints: round trip, named errors, and no half-written file whenever the writer dies."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import zipfile

import numpy as np
import pytest

from frame_distributed import (LEGACY_FORMAT, CheckpointError, CheckpointWriteError, load_checkpoint,
                               save_checkpoint)
from frame_distributed import checkpoint as checkpoint_module


def test_round_trip_keeps_values_dtypes_and_step(tmp_path):
    params = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.5, -2.0]), np.zeros((0, 4))]
    path = save_checkpoint(tmp_path / "c.npz", params, 12)
    loaded = load_checkpoint(path)
    assert loaded.step == 12 and len(loaded.params) == 3
    for a, b in zip(loaded.params, params):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert sorted(os.listdir(tmp_path)) == ["c.npz"]  # no temporary file left
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_saving_again_replaces_the_checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, [np.zeros(3)], 1)
    save_checkpoint(path, [np.ones(3)], 2)
    loaded = load_checkpoint(path)
    assert loaded.step == 2 and np.array_equal(loaded.params[0], np.ones(3))


def test_a_write_that_fails_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    save_checkpoint(path, [np.zeros(1000)], 1)

    def fail(fd):  # the new checkpoint's bytes are in the temporary file, but never reach the disk
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full") as caught:
        save_checkpoint(path, [np.ones(1000)], 2)
    assert isinstance(caught.value, CheckpointError)  # a CheckpointWriteError: both
    monkeypatch.undo()
    loaded = load_checkpoint(path)
    assert loaded.step == 1 and not loaded.params[0].any()
    assert sorted(os.listdir(tmp_path)) == ["c.npz"]  # the temporary file was removed


WRITER = """
import sys, numpy as np
from frame_distributed import save_checkpoint
path, start = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
step = start
while True:
    save_checkpoint(path, [np.full(1_500_000, float(step)), np.full((3, 3), float(step))], step)
    step += 1
"""


def test_a_writer_killed_at_any_moment_never_leaves_a_half_written_checkpoint(tmp_path):
    """SIGKILL a process that saves 12 MB checkpoints back to back, several times: the checkpoint always loads
    whole and consistent (every value equals its step); leftover temporary files show the kill hit mid-write."""
    path = tmp_path / "c.npz"
    rng = np.random.default_rng(0)
    step, killed_mid_write = 0, 0
    for _ in range(6):
        writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(path), str(step)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 20
            while not path.exists() or load_checkpoint(path).step < step:
                assert time.monotonic() < deadline, "the writer wrote nothing within 20 s"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.05))
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=20)
        loaded = load_checkpoint(path)
        assert loaded.params[0].shape == (1_500_000,) and loaded.params[1].shape == (3, 3)
        assert np.all(loaded.params[0] == loaded.step) and np.all(loaded.params[1] == loaded.step)
        temporaries = [p for p in tmp_path.iterdir() if p.name.startswith(".c.npz.") and p.suffix == ".tmp"]
        killed_mid_write += bool(temporaries)
        for p in temporaries:
            p.unlink()
        step = loaded.step + 1
    assert killed_mid_write >= 1, "no kill landed during a write; the test did not test what it claims"


def test_load_errors_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(CheckpointError, match="is not a readable checkpoint"):
        load_checkpoint(tmp_path / "junk.npz")
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    with pytest.raises(CheckpointError, match=f"not a frame-distributed checkpoint.*expected '{LEGACY_FORMAT}'"):
        load_checkpoint(tmp_path / "plain.npz")
    np.savez(tmp_path / "gap.npz", format=np.array(LEGACY_FORMAT), step=np.array(1), count=np.array(2),
             param_0=np.zeros(1), param_2=np.zeros(1))
    with pytest.raises(CheckpointError, match="lacks 'param_1'"):
        load_checkpoint(tmp_path / "gap.npz")


def test_save_errors_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="step must be a non-negative int"):
        save_checkpoint(tmp_path / "c.npz", [np.zeros(1)], -1)
    with pytest.raises(CheckpointError, match="parameter 0 must be a numpy array"):
        save_checkpoint(tmp_path / "c.npz", [[0.0]], 1)
    assert not any(pathlib.Path(tmp_path).iterdir())


def test_files_that_are_not_checkpoints_in_other_ways_are_named_errors(tmp_path):
    # Before: a plain .npy array raised TypeError (no context manager), a zip of raw members AttributeError
    # (np.load hands non-.npy members back as bytes), and a negative step loaded as if valid.
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "array.npz").write_bytes((tmp_path / "array.npy").read_bytes())
    with pytest.raises(CheckpointError, match="holds one .npy array, not a checkpoint"):
        load_checkpoint(tmp_path / "array.npz")
    with zipfile.ZipFile(tmp_path / "raw.npz", "w") as z:
        z.writestr("format", b"frame-distributed-checkpoint/1")
    with pytest.raises(CheckpointError, match="its member 'format' is not a numpy array"):
        load_checkpoint(tmp_path / "raw.npz")
    np.savez(tmp_path / "negative.npz", format=np.array(LEGACY_FORMAT), step=np.array(-1), param_0=np.zeros(1))
    with pytest.raises(CheckpointError, match="its step -1 is negative"):
        load_checkpoint(tmp_path / "negative.npz")


def test_what_cannot_be_saved_or_read_back_is_refused_before_writing(tmp_path):
    # Before: a bare array was split into its rows (one "parameter" per row), an object array was pickled into
    # a checkpoint that load_checkpoint (allow_pickle=False) cannot read, and a missing folder or a folder as
    # the target gave raw OSErrors.
    with pytest.raises(CheckpointError, match="a list of numpy arrays, got a single ndarray"):
        save_checkpoint(tmp_path / "c.npz", np.zeros((3, 2)), 1)
    with pytest.raises(CheckpointError, match="parameter 1 has dtype object"):
        save_checkpoint(tmp_path / "c.npz", [np.zeros(1), np.array([None])], 1)
    with pytest.raises(CheckpointError, match="folder .* does not exist"):
        save_checkpoint(tmp_path / "missing" / "c.npz", [np.zeros(1)], 1)
    (tmp_path / "folder.npz").mkdir()
    with pytest.raises(CheckpointError, match="is a folder"):
        save_checkpoint(tmp_path / "folder.npz", [np.zeros(1)], 1)
    assert [p.name for p in tmp_path.iterdir()] == ["folder.npz"]


def test_save_never_replaces_a_file_that_is_not_a_checkpoint(tmp_path):
    # Before: a checkpoint path that named the user's data (a typo, a wrong argument) replaced it without a word.
    (tmp_path / "data.npz").write_bytes(b"a year of measurements")
    np.savez(tmp_path / "arrays.npz", x=np.arange(3))
    before = {name: (tmp_path / name).read_bytes() for name in ("data.npz", "arrays.npz")}
    for name in before:
        with pytest.raises(CheckpointError, match="exists and is not a frame-distributed checkpoint.*give another "
                                                  "path, or delete the file"):
            save_checkpoint(tmp_path / name, [np.zeros(2)], 1)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrays.npz", "data.npz"]  # no temporary file left
    (tmp_path / "empty.npz").touch()  # nothing to lose: replaced
    save_checkpoint(tmp_path / "empty.npz", [np.zeros(2)], 1)
    assert load_checkpoint(tmp_path / "empty.npz").step == 1


def test_a_damaged_checkpoint_loads_whole_or_is_a_named_error(tmp_path):
    """Truncations and flipped bytes of a small checkpoint (every byte of the archive's directory at the end, every
    fifth before it): the exact contents, or CheckpointError."""
    # Before: some flips raised NotImplementedError from zipfile, and a flip in the archive's directory dropped
    # both parameters, which loaded as a checkpoint with none.
    params = [np.arange(6.0).reshape(2, 3), np.ones(4, np.float32)]
    good = save_checkpoint(tmp_path / "good.npz", params, 7).read_bytes()
    damaged = tmp_path / "damaged.npz"
    positions = range(len(good))  # the core's format: every byte (the header's checksums catch flipped values)
    variants = [good[:n] for n in positions]
    for i in positions:
        flipped = bytearray(good)
        flipped[i] ^= 0xFF
        variants.append(bytes(flipped))
    for data in variants:
        damaged.write_bytes(data)
        try:
            loaded = load_checkpoint(damaged)
        except CheckpointError:
            continue
        assert loaded.step == 7 and len(loaded.params) == 2
        for p, q in zip(loaded.params, params):
            assert p.dtype == q.dtype
            np.testing.assert_array_equal(p, q)


def test_files_that_are_not_archives_and_bad_arguments_are_named(tmp_path):
    # Before: a text file got numpy's advice to load it with allow_pickle=True, a path of another type and a
    # step past int64 raised TypeError and OverflowError.
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="neither a frame checkpoint nor an .npz archive") as caught:
        load_checkpoint(tmp_path / "notes.txt")
    assert "pickle" not in str(caught.value)
    for call in (lambda: load_checkpoint(None), lambda: save_checkpoint(3, [np.zeros(1)], 1)):
        with pytest.raises(CheckpointError, match="path must be a str or os.PathLike"):
            call()
    with pytest.raises(CheckpointError, match="below 2\\*\\*62"):
        save_checkpoint(tmp_path / "c.npz", [np.zeros(1)], 2**70)


def test_a_format_1_checkpoint_without_a_count_still_loads(tmp_path):
    np.savez(tmp_path / "old.npz", format=np.array("frame-distributed-checkpoint/1"), step=np.array(4),
             param_0=np.ones(2))
    loaded = load_checkpoint(tmp_path / "old.npz")
    assert loaded.step == 4 and len(loaded.params) == 1
    save_checkpoint(tmp_path / "old.npz", [np.zeros(2)], 5)  # and is a checkpoint save may replace
    assert load_checkpoint(tmp_path / "old.npz").step == 5


def test_an_unwritable_folder_is_a_named_error_about_the_checkpoint(tmp_path, monkeypatch):
    # Before: a bare PermissionError (or FileNotFoundError, on /proc) naming '.c.npz.<random>.tmp', a file the
    # user never asked for. The tests run as root, for whom chmod does not refuse a write, so the refusal is
    # the one mkstemp would raise.
    save_checkpoint(tmp_path / "c.npz", [np.zeros(2)], 1)

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".c.npz.x1y2.tmp"))

    monkeypatch.setattr(checkpoint_module.tempfile, "mkstemp", refused)
    with pytest.raises(CheckpointWriteError, match=r"could not write '.*c\.npz' \(PermissionError: Permission "
                                                   r"denied.*previous checkpoint there, if any, is unchanged: make "
                                                   r"the folder writable") as caught:
        save_checkpoint(tmp_path / "c.npz", [np.ones(2)], 2)
    assert isinstance(caught.value, OSError)  # code that catches OSError still catches it
    assert caught.value.errno == 13 and ".tmp" not in str(caught.value)
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "c.npz").step == 1


def test_checkpoints_are_the_cores_format_and_legacy_npz_checkpoints_still_load(tmp_path):
    import frame_core as fc

    path = save_checkpoint(tmp_path / "c.ckpt", [np.arange(3.0), np.ones((2, 2), np.float32)], 9)
    core = fc.load_checkpoint(path)
    assert core.step == 9 and core.metadata == {"writer": "frame-distributed"}
    np.testing.assert_array_equal(core["params"][1], np.ones((2, 2), np.float32))
    np.savez(tmp_path / "old.npz", format=np.array(LEGACY_FORMAT), step=np.array(3), count=np.array(1),
             param_0=np.arange(2.0))
    old = load_checkpoint(tmp_path / "old.npz")
    assert old.step == 3 and old.params[0].tolist() == [0.0, 1.0]
    save_checkpoint(tmp_path / "old.npz", old.params, 4)  # a legacy checkpoint may be replaced by a new one
    assert load_checkpoint(tmp_path / "old.npz").step == 4
