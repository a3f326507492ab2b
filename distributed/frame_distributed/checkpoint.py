"""Checkpoints: parameters and step count in one ``.npz`` file, replaced atomically.

``save_checkpoint`` writes a temporary file in the checkpoint's own folder,
flushes and fsyncs it, then ``os.replace``s it over the checkpoint (an atomic
rename on POSIX and Windows within one file system) and fsyncs the folder.
Whatever kills the writer, and whenever, the checkpoint path holds either the
previous complete checkpoint or the new complete one, never a mix or a
truncated file. A writer killed mid-write can leave its temporary file
(``.<name>.<random>.tmp``) behind; nothing reads those.

The file holds ``format`` (``frame-distributed-checkpoint/1``), ``step`` and
``param_0 .. param_{k-1}``; no pickles (loaded with ``allow_pickle=False``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CheckpointError

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "frame-distributed-checkpoint/1"


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint holds: the parameters after ``step`` completed steps."""

    params: list[np.ndarray]
    step: int


def save_checkpoint(path: str | os.PathLike[str], params: Sequence[np.ndarray], step: int) -> pathlib.Path:
    """Write ``params`` and ``step`` to ``path`` atomically; return the path.

    Raises ``CheckpointError`` for arguments that cannot be saved; ``OSError``
    from the file system propagates (and the previous checkpoint stays).
    """
    target = pathlib.Path(path)
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise CheckpointError(f"save_checkpoint: step must be a non-negative int, got {step!r}")
    if isinstance(params, np.ndarray) or not isinstance(params, Sequence) or isinstance(params, (str, bytes)):
        got = "a single ndarray" if isinstance(params, np.ndarray) else type(params).__name__
        raise CheckpointError(f"save_checkpoint: params must be a list of numpy arrays, got {got}; wrap one array "
                              "in a list: [w]")
    arrays: dict[str, Any] = {"format": np.array(CHECKPOINT_FORMAT), "step": np.array(int(step), np.int64)}
    for i, p in enumerate(params):
        if not isinstance(p, np.ndarray):
            raise CheckpointError(f"save_checkpoint: parameter {i} must be a numpy array, got {type(p).__name__}")
        if p.dtype.hasobject:  # np.savez would pickle it, and load_checkpoint (allow_pickle=False) could not read it
            raise CheckpointError(f"save_checkpoint: parameter {i} has dtype {p.dtype}, which cannot be saved "
                                  "without pickling; convert it to a numeric dtype")
        arrays[f"param_{i}"] = p
    folder = target.parent
    if not folder.is_dir():
        raise CheckpointError(f"save_checkpoint: the folder {str(folder)!r} of {str(target)!r} does not exist; "
                              "create it first")
    if target.is_dir():
        raise CheckpointError(f"save_checkpoint: {str(target)!r} is a folder; give a file path such as "
                              f"{str(target / 'checkpoint.npz')!r}")
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would make the checkpoint unreadable to the group
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)
    return target


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


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; ``CheckpointError`` if it is missing or not one."""
    source = pathlib.Path(path)
    if not source.is_file():
        raise CheckpointError(f"no checkpoint at {str(source)!r}; check the path (save_checkpoint writes it)")
    try:
        loaded = np.load(source, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise CheckpointError(f"{str(source)!r} holds one .npy array, not a checkpoint (an .npz archive written "
                                  "by save_checkpoint)")
        with loaded as data:
            fields = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{str(source)!r} is not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    for name, value in fields.items():
        if not isinstance(value, np.ndarray):  # np.load hands a member that is not .npy back as raw bytes
            raise CheckpointError(f"{str(source)!r} is not a checkpoint: its member {name!r} is not a numpy array "
                                  "(.npy)")
    fmt = fields.get("format")
    if fmt is None or fmt.shape != () or str(fmt) != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{str(source)!r} is not a frame-distributed checkpoint: its 'format' field is "
                              f"{None if fmt is None else str(fmt)!r}, expected {CHECKPOINT_FORMAT!r}")
    step = fields.get("step")
    if step is None or step.shape != () or step.dtype.kind not in "iu":
        raise CheckpointError(f"{str(source)!r} has no integer 'step' field")
    if not 0 <= int(step) < 2**62:
        raise CheckpointError(f"{str(source)!r} is damaged: its step {int(step)} is negative or absurdly large")
    count = sum(name.startswith("param_") for name in fields)
    try:
        params = [fields[f"param_{i}"] for i in range(count)]
    except KeyError as exc:
        raise CheckpointError(f"{str(source)!r} lacks {exc.args[0]!r} among its {count} parameters") from None
    return Checkpoint(params, int(step))
