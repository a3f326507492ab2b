"""Reading a model safely: bytes to a checked ``ModelProto`` with its external data read from inside its folder.

Nothing here runs code from a model (protobuf parsing only). External data is read by this module itself,
never by ``onnx.load_external_data``: a location must be a relative path without ``..`` whose real path
(links resolved) lies inside the real path of the model's folder, naming a regular file with one link.
That rule refuses every path-traversal variant reported against ONNX loaders so far (absolute paths,
``..``, symlinks and hardlinks leading out of the folder), whatever the installed ``onnx`` version.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx

from .errors import ExternalDataError, OnnxFormatError

__all__ = ["MIN_OPSET", "max_opset", "read_model", "read_model_bytes", "iter_graphs"]

#: The oldest default-domain opset the importer reads (what torch.onnx has written by default since 1.12).
MIN_OPSET = 13


def max_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` knows."""
    return int(onnx.defs.onnx_opset_version())


def read_model(source: Any, *, check: bool = False) -> tuple[onnx.ModelProto, Path | None]:
    """``source`` (a path, bytes or a ``ModelProto``) as a checked model and the folder its external data may
    come from (``None`` for bytes and protos: they may not use external data).

    Raises ``OnnxFormatError`` for bytes that are not a model or a model the checker refuses,
    ``ExternalDataError`` for external data that is missing or outside the folder.
    """
    model, folder, data = read_model_bytes(source)
    if check:
        run_checker(model, data)
    return model, folder


def read_model_bytes(source: Any) -> tuple[onnx.ModelProto, Path | None, bytes | None]:
    """``read_model`` (unchecked) and the model's serialised bytes when they were read and hold the whole model
    (no external data filled in afterwards), else ``None``."""
    folder: Path | None = None
    data: bytes | None = None
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # external data is filled in on a copy: the caller's proto is never changed
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        model = _parse(data, "the bytes given")
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise OnnxFormatError(f"no ONNX file at {str(path)!r}" + (" (it is a folder)" if path.is_dir() else ""))
        data = path.read_bytes()
        model = _parse(data, repr(str(path)))
        folder = path.resolve().parent
    else:
        raise OnnxFormatError(f"frame_onnx.load takes a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    _check_opsets(model)
    if _load_external(model, folder):
        data = None  # the proto now holds data the bytes do not
    return model, folder, data


def run_checker(model: onnx.ModelProto, data: bytes | None = None) -> None:
    """``onnx.checker.check_model`` with its refusal as an ``OnnxFormatError``. ``data``, when given, is ``model``
    serialised (as read): the checker reads it instead of serialising the model again."""
    stand_in = _deprecated_stand_ins(model)
    try:
        onnx.checker.check_model(stand_in or (model if data is None else data))
    except onnx.checker.ValidationError as exc:
        raise OnnxFormatError(f"the ONNX checker refuses the model: {_first_lines(str(exc))}") from None


def _deprecated_stand_ins(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``model`` for the checker where each ``GroupNormalization`` of opsets 18 to 20 is checked as an
    ``InstanceNormalization`` (the same inputs, without ``num_groups``), or ``None`` when it has none.

    The checker refuses GroupNormalization-18 as deprecated (opset 21 made its scale and bias per channel),
    ONNX Runtime runs it, and ``onnx.version_converter`` moves it to opset 21 without converting its per-group
    scale and bias; so frame imports it with its own semantics (``rules_nn``) rather than refusing it."""
    version = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if not 18 <= version < 21:
        return None

    def deprecated(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
        for node in graph.node:
            if node.op_type == "GroupNormalization" and node.domain in ("", "ai.onnx"):
                yield node
            for attr in node.attribute:
                for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    yield from deprecated(body)

    if next(deprecated(model.graph), None) is None:
        return None
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in deprecated(copy.graph):
        node.op_type = "InstanceNormalization"
        kept = [a for a in node.attribute if a.name == "epsilon"]
        del node.attribute[:]
        node.attribute.extend(kept)
    return copy


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    from google.protobuf.message import DecodeError

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise OnnxFormatError(f"{where} is not an ONNX model (truncated or corrupt protobuf: {exc}); "
                              "export the model again") from None
    if not model.HasField("graph") or not model.opset_import:
        raise OnnxFormatError(f"{where} is not an ONNX model: it has no graph or no opset import (a truncated file, "
                              "or another protobuf); export the model again")
    return model


def _check_opsets(model: onnx.ModelProto) -> None:
    newest = max_opset()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            if entry.version > newest:
                raise OnnxFormatError(
                    f"the model imports opset {entry.version} of the default domain, newer than the newest the "
                    f"installed onnx {onnx.__version__} knows ({newest}); upgrade onnx, or export at opset {newest} "
                    "or older")
            if entry.version < MIN_OPSET:
                raise OnnxFormatError(
                    f"the model imports opset {entry.version} of the default domain; frame imports opsets "
                    f"{MIN_OPSET} to {newest}: convert it first (onnx.version_converter.convert_version(model, "
                    f"{MIN_OPSET})) or export it again at a newer opset")


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every sub-graph in its nodes' attributes, at any depth."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from iter_graphs(sub)


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    for graph in iter_graphs(model.graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors


def _load_external(model: onnx.ModelProto, folder: Path | None) -> bool:
    """Fill in every external tensor's data from ``folder``; whether there was any."""
    found = False
    for tensor in _tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if folder is None:
            raise ExternalDataError(
                f"tensor {tensor.name!r} keeps its data in the external file {location!r}, but the model was given "
                "as bytes or a proto, which have no folder to read it from; pass the model's path instead")
        data = _read_external(folder, tensor.name, location, info)
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
        found = True
    return found


def _read_external(folder: Path, name: str, location: str, info: dict[str, str]) -> bytes:
    where = f"tensor {name!r}: external data location {location!r}"
    if not location:
        raise ExternalDataError(f"tensor {name!r} is marked external but names no location")
    pure = Path(location)
    if pure.is_absolute() or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise ExternalDataError(f"{where} is an absolute path; external data must lie in the model's folder, "
                                "named by a relative path")
    if any(part == ".." for part in location.replace("\\", "/").split("/")):
        raise ExternalDataError(f"{where} contains '..'; external data must lie in the model's folder")
    target = folder / pure
    real = Path(os.path.realpath(target))
    if real != folder and folder not in real.parents:
        raise ExternalDataError(f"{where} leads out of the model's folder {str(folder)!r} (through a link, to "
                                f"{str(real)!r}); refused")
    try:
        stat = real.stat()
    except OSError:
        raise ExternalDataError(f"{where}: the file {str(target)!r} does not exist; copy it next to the model") from None
    if not real.is_file():
        raise ExternalDataError(f"{where} is not a regular file")
    if stat.st_nlink > 1:
        raise ExternalDataError(f"{where} is a file with {stat.st_nlink} hard links, which may lead out of the "
                                "model's folder; refused (copy the data file instead of linking it)")
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise ExternalDataError(f"{where}: offset/length are not integers ({info})") from None
    if offset < 0 or (length is not None and length < 0):
        raise ExternalDataError(f"{where}: a negative offset or length ({info})")
    with open(real, "rb") as handle:
        handle.seek(offset)
        data = handle.read() if length is None else handle.read(length)
    if length is not None and len(data) != length:
        raise ExternalDataError(f"{where}: the file holds {len(data)} bytes from offset {offset}, the model "
                                f"expects {length}; the data file is truncated or belongs to another model")
    return data


def _first_lines(text: str, n: int = 6) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")
