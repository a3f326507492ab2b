"""Named checkpoints: parameter trees, optimizer state, step and metadata in one safetensors file.

``save_checkpoint(path, {"params": params, "opt_state": state}, step=120, metadata={...})`` writes each
tree's leaves as tensors keyed ``<section>/<name>`` (``params/enc.0.w``) with a JSON header (under the
safetensors metadata key ``frame``) of the sections' names, dtypes and shapes, the step and the
metadata. No pickle: safetensors holds only raw tensors and a JSON header, and can be memory-mapped.

The write is atomic: a temporary file in the same folder, fsynced, then ``os.replace``d over the
path, so the path holds the previous complete checkpoint or the new one, never a mix.

``load_checkpoint(path, like=...)`` checks the file against the trees it should fill and raises
``CheckpointError`` listing every missing, unexpected, wrongly shaped or typed name at once. Arrays
come back bit for bit, so resuming reproduces an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import CheckpointError, ParameterError

__all__ = ["save_checkpoint", "load_checkpoint", "Checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "frame-checkpoint/1"


@dataclass
class Checkpoint:
    """What a checkpoint holds: ``trees`` by section (``params``, ``opt_state``...), ``step``, ``metadata``."""

    trees: dict[str, Any]
    step: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, section: str) -> Any:
        return self.trees[section]


def _safetensors() -> Any:
    try:
        from safetensors import numpy as st
    except ImportError:  # pragma: no cover - a core dependency
        raise CheckpointError("checkpoints need the 'safetensors' package: pip install safetensors") from None
    return st


def _storable(name: str, leaf: Any) -> tuple[np.ndarray, str]:
    array = np.asarray(leaf)
    from .ir.dtypes import bfloat16

    if array.dtype == bfloat16.np:  # safetensors' numpy API has no bfloat16: store the bits
        return np.require(array, requirements="C").view(np.uint16), "bf16"
    if array.dtype.hasobject or array.dtype.kind in "USVc":
        raise CheckpointError(f"save_checkpoint: {name} has dtype {array.dtype}, which a checkpoint cannot hold; "
                              "checkpoints hold real, integer and boolean arrays")
    from .ir.dtypes import as_dtype

    if not array.dtype.isnative and array.dtype.itemsize > 1:  # big-endian ('>f4'): safetensors is little-endian
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        dtype = as_dtype(array.dtype)
    except Exception:  # noqa: BLE001 - e.g. uint8: stored as numpy names it
        return np.require(array, requirements="C"), array.dtype.name
    return np.require(array, requirements="C"), dtype.name


def _digest(array: np.ndarray) -> str:
    """A checksum of the stored bytes: safetensors has none, and a flipped bit must not load as a value."""
    import hashlib

    data = array.tobytes() if array.size == 0 or array.ndim == 0 else memoryview(array).cast("B")  # type: ignore[arg-type]
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def checkpoint_bytes(trees: Mapping[str, Any], *, step: int | None = None,
                     metadata: Mapping[str, Any] | None = None) -> bytes:
    """The bytes ``save_checkpoint`` writes (for writers with their own atomic-write rules)."""
    return _payload(trees, step, metadata)


def save_checkpoint(path: str | os.PathLike[str], trees: Mapping[str, Any], *, step: int | None = None,
                    metadata: Mapping[str, Any] | None = None) -> pathlib.Path:
    """Write ``trees`` (section name -> parameter tree) atomically to ``path``; return the path.

    ``metadata`` must be JSON-serialisable (a schedule's position, a data-loader epoch). Raises
    ``CheckpointError`` for a bad argument or a failed write (the previous checkpoint then stays).
    """
    target = pathlib.Path(os.fspath(path))
    if target.is_dir():
        raise CheckpointError(f"save_checkpoint: {str(target)!r} is a folder; give a file path such as "
                              f"{str(target / 'checkpoint.safetensors')!r}")
    if not target.parent.is_dir():
        raise CheckpointError(f"save_checkpoint: the folder {str(target.parent)!r} does not exist; create it first")
    payload = _payload(trees, step, metadata)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CheckpointError(f"save_checkpoint: writing {str(target)!r} failed: {exc.strerror or exc}; the "
                              "previous checkpoint, if any, is unchanged") from None
    return target


def _payload(trees: Mapping[str, Any], step: int | None, metadata: Mapping[str, Any] | None) -> bytes:
    from .params import flatten

    if not isinstance(trees, Mapping) or not all(isinstance(k, str) and k and "/" not in k for k in trees):
        raise CheckpointError("save_checkpoint(path, trees): trees maps section names (non-empty, without '/') "
                              "to parameter trees, such as {'params': params, 'opt_state': state}")
    if step is not None and (not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step < 0):
        raise CheckpointError(f"save_checkpoint: step is a non-negative int, got {step!r}")
    try:
        meta_text = json.dumps(dict(metadata or {}), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"save_checkpoint: metadata must be JSON (str, numbers, lists, dicts): {exc}") from None
    tensors: dict[str, np.ndarray] = {}
    sections: dict[str, dict[str, list[Any]]] = {}
    for section, tree in trees.items():
        try:
            names, leaves, _ = flatten(tree)
        except ParameterError as exc:
            raise CheckpointError(f"save_checkpoint: section {section!r}: {exc}") from None
        entry: dict[str, list[Any]] = {"names": [], "dtypes": [], "shapes": [], "digests": []}
        for name, leaf in zip(names, leaves):
            array, dtype = _storable(f"{section}/{name}", leaf)
            tensors[f"{section}/{name}"] = array
            entry["names"].append(name)
            entry["dtypes"].append(dtype)
            entry["shapes"].append(list(array.shape))
            entry["digests"].append(_digest(array))
        sections[section] = entry
    header = {"format": CHECKPOINT_FORMAT, "step": None if step is None else int(step), "sections": sections,
              "metadata": json.loads(meta_text)}
    return bytes(_safetensors().save(tensors, metadata={"frame": json.dumps(header)}))


def _read(target: pathlib.Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not target.is_file():
        raise CheckpointError(f"load_checkpoint: {str(target)!r} is not a file" + ("" if target.exists() else
                              " (it does not exist)"))
    try:
        data = target.read_bytes()
        tensors = _safetensors().load(data)
        size = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8:8 + size]).get("__metadata__", {})
        header = json.loads(meta["frame"])
    except (CheckpointError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors and json raise several types for a damaged file
        raise CheckpointError(f"load_checkpoint: {str(target)!r} is not a readable frame checkpoint "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(header, dict) or header.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"load_checkpoint: {str(target)!r} is not a {CHECKPOINT_FORMAT} file "
                              f"(format {header.get('format') if isinstance(header, dict) else None!r})")
    return header, tensors


def _nested(names: list[str], leaves: list[np.ndarray]) -> Any:
    """A tree from dotted names: dicts, and lists where a level's keys are exactly 0..n-1."""
    root: dict[str, Any] = {}
    for name, leaf in zip(names, leaves):
        parts = name.split(".") if name else [""]
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = leaf

    def listify(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        items = {k: listify(v) for k, v in node.items()}
        if items and all(k.isdigit() for k in items) and sorted(int(k) for k in items) == list(range(len(items))):
            return [items[str(i)] for i in range(len(items))]
        return items
    tree = listify(root)
    return tree[""] if isinstance(tree, dict) and list(tree) == [""] else tree


def _expected(section: str, name: str, leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and numpy dtype a ``like`` leaf asks for: an array, a ``TensorType`` or a type string
    (``'f32[3, 4]'``), as ``trace_params`` takes them; ``CheckpointError`` for anything else."""
    from .ir.types import TensorType, as_type

    if isinstance(leaf, (TensorType, str)):
        try:
            t = as_type(leaf)
        except Exception as exc:  # noqa: BLE001 - the type parser's IRError
            raise CheckpointError(f"load_checkpoint(like=...): {section}/{name} is {leaf!r:.40}, neither an array "
                                  f"nor a type such as 'f32[3, 4]' ({exc})") from None
        return tuple(t.shape), np.dtype(t.dtype.np)
    array = leaf if hasattr(leaf, "shape") and hasattr(leaf, "dtype") else np.asarray(leaf)
    try:
        return tuple(array.shape), np.dtype(array.dtype)
    except TypeError:
        raise CheckpointError(f"load_checkpoint(like=...): {section}/{name} is {type(leaf).__name__}, not an array "
                              "or a type such as 'f32[3, 4]'") from None


def load_checkpoint(path: str | os.PathLike[str], like: Mapping[str, Any] | None = None) -> Checkpoint:
    """Read a checkpoint; with ``like`` (section -> tree), check it and return trees of ``like``'s structure.

    Without ``like``, each section comes back as nested dicts (lists where keys are 0..n-1). A ``like`` leaf
    is an array, a ``TensorType`` or a type string (``'f32[3, 4]'``). A big-endian array is stored, and comes
    back, in native byte order (same values).
    """
    from .params import flatten, unflatten

    target = pathlib.Path(os.fspath(path))
    header, tensors = _read(target)
    from .ir.dtypes import bfloat16

    trees: dict[str, Any] = {}
    flat: dict[str, dict[str, np.ndarray]] = {}
    try:
        for section, entry in header["sections"].items():
            arrays = {}
            keys = ("names", "dtypes", "shapes", "digests")
            if len({len(entry[k]) for k in keys}) != 1:
                raise ValueError(f"section {section!r} lists different numbers of names, dtypes, shapes, digests")
            for name, dtype, shape, digest in zip(*(entry[k] for k in keys)):
                stored = tensors[f"{section}/{name}"]
                if _digest(stored) != digest:
                    raise ValueError(f"{section}/{name} does not match its checksum")
                array = stored.reshape(shape)  # safetensors gives a 0-d tensor as [1]
                arrays[name] = array.view(bfloat16.np) if dtype == "bf16" else array
            if len(arrays) != sum(k.startswith(f"{section}/") for k in tensors):
                raise ValueError(f"section {section!r} holds tensors its header does not list")
            flat[section] = arrays
        step = header.get("step")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            raise ValueError(f"its step {step!r} is not a non-negative int")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"load_checkpoint: {str(target)!r} is damaged ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); restore it from a copy or save again") from None
    if like is None:
        for section, arrays in flat.items():
            trees[section] = _nested(list(arrays), list(arrays.values()))
        return Checkpoint(trees, header.get("step"), header.get("metadata") or {})
    problems: list[str] = []
    missing_sections = [s for s in like if s not in flat]
    if missing_sections:
        problems.append(f"sections missing from the file: {missing_sections} (it has {list(flat)})")
    for section, tree in like.items():
        if section not in flat:
            continue
        names, leaves, treedef = flatten(tree)
        arrays = flat[section]
        for name in names:
            if name not in arrays:
                problems.append(f"{section}/{name}: expected, not in the checkpoint")
        for name in arrays:
            if name not in names:
                problems.append(f"{section}/{name}: in the checkpoint, not expected")
        for name, leaf in zip(names, leaves):
            if name in arrays:
                want_shape, want_dtype = _expected(section, name, leaf)
                got = arrays[name]
                if tuple(got.shape) != want_shape or np.dtype(got.dtype) != want_dtype:
                    problems.append(f"{section}/{name}: expected {want_dtype.name}{list(want_shape)}, "
                                    f"the checkpoint has {np.dtype(got.dtype).name}{list(got.shape)}")
        if not problems:
            trees[section] = unflatten(treedef, [arrays[n] for n in names])
    if problems:
        raise CheckpointError(f"load_checkpoint: {str(target)!r} is a checkpoint of another model "
                              f"({len(problems)} mismatch{'es' if len(problems) != 1 else ''}):\n  "
                              + "\n  ".join(problems[:50]) + ("\n  ..." if len(problems) > 50 else ""))
    return Checkpoint(trees, header.get("step"), header.get("metadata") or {})
