"""Checkpoints: parameters and step count in one file of the core's named format, replaced atomically.

``save_checkpoint`` writes a temporary file in the checkpoint's own folder,
flushes and fsyncs it, then ``os.replace``s it over the checkpoint (an atomic
rename on POSIX and Windows within one file system) and fsyncs the folder.
Whatever kills the writer, and whenever, the checkpoint path holds either the
previous complete checkpoint or the new complete one, never a mix or a
truncated file. A writer killed mid-write can leave its temporary file
(``.<name>.<random>.tmp``) behind; nothing reads those.

The file is a core checkpoint (``frame_core.save_checkpoint``'s format,
``frame-checkpoint/1``: safetensors with a JSON header of names, dtypes, shapes
and checksums) whose section ``params`` holds the k parameters named ``0 ..
k-1``, with the step; ``frame_core.load_checkpoint`` reads it too. Checkpoints
of the earlier ``.npz`` formats (``frame-distributed-checkpoint/1`` and ``/2``:
``format``, ``step``, ``count``, ``param_0 .. param_{k-1}``, loaded with
``allow_pickle=False``) still load. ``save_checkpoint`` replaces only a
checkpoint: any other file at the path is left alone and refused.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from frame_core import CheckpointError as CoreCheckpointError, checkpoint as _core_checkpoint

from .errors import CheckpointError, CheckpointWriteError

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = _core_checkpoint.CHECKPOINT_FORMAT  # what save_checkpoint writes
LEGACY_FORMAT = "frame-distributed-checkpoint/2"  # the .npz format before the core's: still read
_FORMAT_1 = "frame-distributed-checkpoint/1"  # before ``count``: still read
_MAX_STEP = 2**62  # a larger step is refused on save and taken for damage on load
_ZIP_MAGIC, _NPY_MAGIC = b"PK\x03\x04", b"\x93NUMPY"  # how .npz and .npy files start


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint holds: the parameters after ``step`` completed steps."""

    params: list[np.ndarray]
    step: int


def save_checkpoint(path: str | os.PathLike[str], params: Sequence[np.ndarray], step: int) -> pathlib.Path:
    """Write ``params`` and ``step`` to ``path`` atomically; return the path.

    Raises ``CheckpointError`` for arguments that cannot be saved, and
    ``CheckpointWriteError`` (a ``CheckpointError`` and an ``OSError``) when the
    file system refuses the write; the previous checkpoint then stays.
    """
    _check_path(path, "save_checkpoint")
    target = pathlib.Path(path)
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step < _MAX_STEP:
        raise CheckpointError(f"save_checkpoint: step must be a non-negative int below 2**62, got {step!r}")
    if isinstance(params, np.ndarray) or not isinstance(params, Sequence) or isinstance(params, (str, bytes)):
        got = "a single ndarray" if isinstance(params, np.ndarray) else type(params).__name__
        raise CheckpointError(f"save_checkpoint: params must be a list of numpy arrays, got {got}; wrap one array "
                              "in a list: [w]")
    for i, p in enumerate(params):
        if not isinstance(p, np.ndarray):
            raise CheckpointError(f"save_checkpoint: parameter {i} must be a numpy array, got {type(p).__name__}")
        if p.dtype.hasobject:
            raise CheckpointError(f"save_checkpoint: parameter {i} has dtype {p.dtype}, which cannot be saved "
                                  "without pickling; convert it to a numeric dtype")
    folder = target.parent
    if not folder.is_dir():
        raise CheckpointError(f"save_checkpoint: the folder {str(folder)!r} of {str(target)!r} does not exist; "
                              "create it first")
    if target.is_dir():
        raise CheckpointError(f"save_checkpoint: {str(target)!r} is a folder; give a file path such as "
                              f"{str(target / 'checkpoint.npz')!r}")
    if target.exists() and target.stat().st_size > 0 and not _is_checkpoint(target):
        raise CheckpointError(f"save_checkpoint: {str(target)!r} exists and is not a frame-distributed checkpoint; "
                              "replacing it could destroy someone's data, so it is left as it is: give another path, "
                              "or delete the file")
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise _write_error(target, exc) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would make the checkpoint unreadable to the group
            try:
                payload = _core_checkpoint.checkpoint_bytes({"params": list(params)}, step=int(step),
                                                            metadata={"writer": "frame-distributed"})
            except CoreCheckpointError as exc:
                raise CheckpointError(str(exc)) from None
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise _write_error(target, exc) from exc
        raise
    _fsync_folder(folder)
    return target


def _write_error(target: pathlib.Path, exc: OSError) -> CheckpointWriteError:
    """The OSError of a failed write, as one that names the checkpoint rather than its temporary file."""
    reason = exc.strerror or str(exc)
    return CheckpointWriteError(exc.errno, f"save_checkpoint could not write {str(target)!r} ({type(exc).__name__}: "
                                           f"{reason}, on a temporary file in its folder); the previous checkpoint "
                                           "there, if any, is unchanged: make the folder writable (or free space), or "
                                           "give another path")


def _is_core_file(path: pathlib.Path) -> bool:
    """Whether ``path`` starts as a safetensors file does: an 8-byte header length, then a JSON object."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    return len(head) == 9 and head[8:9] == b"{" and 0 < int.from_bytes(head[:8], "little") < 100_000_000


def _is_checkpoint(path: pathlib.Path) -> bool:
    """Whether ``path`` is a checkpoint: a core checkpoint file, or an .npz archive with a checkpoint's
    ``format`` field (only that member is read)."""
    if _is_core_file(path):
        try:
            _core_checkpoint.load_checkpoint(path)
            return True
        except Exception:  # noqa: BLE001 - unreadable or damaged: not something we may replace unseen
            return False
    try:
        with open(path, "rb") as f:
            if f.read(len(_ZIP_MAGIC)) != _ZIP_MAGIC:
                return False
        with np.load(path, allow_pickle=False) as data:
            return "format" in data.files and str(data["format"]) in (LEGACY_FORMAT, _FORMAT_1)
    except Exception:  # unreadable or damaged: not something we may replace unseen
        return False


def _fsync_folder(folder: pathlib.Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _check_path(path: Any, where: str) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise CheckpointError(f"{where}: the path must be a str or os.PathLike (such as pathlib.Path), got "
                              f"{type(path).__name__}")


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; ``CheckpointError`` if it is missing or not one."""
    _check_path(path, "load_checkpoint")
    source = pathlib.Path(path)
    if not source.is_file():
        raise CheckpointError(f"no checkpoint at {str(source)!r}; check the path (save_checkpoint writes it)")
    if _is_core_file(source):
        return _load_core(source)
    try:
        with open(source, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise CheckpointError(f"{str(source)!r} is not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    if not magic.startswith(_ZIP_MAGIC) and magic != _NPY_MAGIC:
        # np.load would take anything else for a pickle and advise loading it unsafely
        raise CheckpointError(f"{str(source)!r} is not a readable checkpoint: it is neither a frame checkpoint nor an "
                              f".npz archive (it starts with {magic!r}); give the path save_checkpoint wrote")
    try:
        loaded = np.load(source, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise CheckpointError(f"{str(source)!r} holds one .npy array, not a checkpoint (an .npz archive written "
                                  "by save_checkpoint)")
        with loaded as data:
            fields = {name: data[name] for name in data.files}
    except CheckpointError:
        raise
    except Exception as exc:  # a damaged archive fails in zipfile or numpy in many ways, each its own type
        raise CheckpointError(f"{str(source)!r} is not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    for name, value in fields.items():
        if not isinstance(value, np.ndarray):  # np.load hands a member that is not .npy back as raw bytes
            raise CheckpointError(f"{str(source)!r} is not a checkpoint: its member {name!r} is not a numpy array "
                                  "(.npy)")
    fmt = fields.get("format")
    if fmt is None or fmt.shape != () or str(fmt) not in (LEGACY_FORMAT, _FORMAT_1):
        raise CheckpointError(f"{str(source)!r} is not a frame-distributed checkpoint: its 'format' field is "
                              f"{None if fmt is None else str(fmt)!r}, expected {LEGACY_FORMAT!r}")
    step = fields.get("step")
    if step is None or step.shape != () or step.dtype.kind not in "iu":
        raise CheckpointError(f"{str(source)!r} has no integer 'step' field")
    if not 0 <= int(step) < _MAX_STEP:
        raise CheckpointError(f"{str(source)!r} is damaged: its step {int(step)} is negative or absurdly large")
    found = sum(name.startswith("param_") for name in fields)
    count = found
    if str(fmt) != _FORMAT_1:
        stored = fields.get("count")
        if stored is None or stored.shape != () or stored.dtype.kind not in "iu":
            raise CheckpointError(f"{str(source)!r} is damaged: it has no integer 'count' field")
        count = int(stored)
        if count < found:
            raise CheckpointError(f"{str(source)!r} is damaged: it holds {found} parameters, but its count says "
                                  f"{count}")
    try:
        params = [fields[f"param_{i}"] for i in range(count)]
    except KeyError as exc:
        raise CheckpointError(f"{str(source)!r} lacks {exc.args[0]!r} among its {count} parameters") from None
    return Checkpoint(params, int(step))


def _load_core(source: pathlib.Path) -> Checkpoint:
    """A checkpoint in the core's format: section ``params`` holds the parameters named 0 .. k-1."""
    try:
        loaded = _core_checkpoint.load_checkpoint(source)
    except CoreCheckpointError as exc:
        raise CheckpointError(str(exc)) from None
    params = loaded.trees.get("params")
    if loaded.step is None or params is None:
        raise CheckpointError(f"{str(source)!r} is a frame checkpoint but not one of frame-distributed: it has no "
                              f"{'step' if loaded.step is None else 'params section'}")
    if isinstance(params, np.ndarray):  # a single parameter named '0' comes back as a one-item dict
        params = [params]
    elif isinstance(params, dict):
        params = [params[k] for k in sorted(params, key=lambda k: int(k) if k.isdigit() else -1)]
    if not 0 <= loaded.step < _MAX_STEP:
        raise CheckpointError(f"{str(source)!r} is damaged: its step {loaded.step} is absurdly large")
    return Checkpoint(list(params), int(loaded.step))
