"""JSON save and load of graphs (versioned format; loading never executes code).

Document layout (``version`` 2)::

    {"format": "frame-graph", "version": 2,
     "graph": {"name": "g",
               "inputs": [{"id": 0, "type": "f32[2, 3]", "name": "x"}],
               "nodes": [{"op": "ops_basic::relu", "inputs": [0],
                          "outputs": [{"id": 1, "type": "f32[2, 3]"}],
                          "attrs": {"axes": {"kind": "ints", "value": [0]}}}],
               "outputs": [1]}}

Version 2 names every op by its qualified name (``namespace::name``, SPEC §4),
looked up in the registry (the current one unless one is given); an op the
registry does not know is written as the graph has it. Reading maps qualified
names back to the registry's canonical keys (``ops_basic::relu`` -> ``relu``).
Version 1 documents (short names) still load, their names kept as written.

Attribute values are tagged with their kind. Tensors store dtype, shape and
little-endian bytes in base64 (exact, including NaN and infinities).
Sub-graphs nest as graph documents. Malformed documents and unknown versions
raise :class:`~frame_core.errors.GraphFormatError` whose ``path`` (a JSONPath
such as ``$.graph.nodes[3].inputs[1]``) says where the problem is. Loading
checks the document's structure; ``verify`` then checks the graph's meaning.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import functools
import json
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .._gc import gc_paused
from .._text import short_repr
from ..errors import ArgumentError, FrameError, GraphFormatError, IRError
from .dtypes import DType, as_dtype
from .graph import MAX_NESTING, Graph, Node, Value, mark_traced_sizes, nesting_message, tie_types, traced_sizes, \
    type_ties, walking
from .types import MAX_DIM, TensorType

from .schemas import SchemaSource, default_source

__all__ = ["FORMAT", "VERSION", "READS", "to_document", "from_document", "dumps", "loads", "save_graph", "load_graph"]

FORMAT = "frame-graph"
VERSION = 2
#: Versions this reader accepts: 1 (short op names), 2 (qualified op names).
READS = (1, 2)


# -- writing ------------------------------------------------------------------
def _encode_attr(value: Any, qualify: Callable[[str], str] = str) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": value}
    if isinstance(value, float):
        return {"kind": "float", "value": _float_out(value)}
    if isinstance(value, str):
        return {"kind": "str", "value": value}
    if value is None:
        return {"kind": "none", "value": None}
    if isinstance(value, DType):
        return {"kind": "dtype", "value": value.short}
    if isinstance(value, (tuple, list)):
        items = list(value)
        if all(isinstance(v, str) for v in items) and items:
            return {"kind": "strs", "value": items}
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return {"kind": "ints", "value": items}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return {"kind": "floats", "value": [_float_out(float(v)) for v in items]}
        raise GraphFormatError("$", f"cannot serialise the list attribute {_short(value)}: mixed element kinds")
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        if data.dtype.byteorder == ">":
            data = data.byteswap().view(data.dtype.newbyteorder("<"))
        return {"kind": "tensor", "value": {"dtype": as_dtype(value.dtype).short, "shape": list(value.shape),
                                            "data": base64.b64encode(data.tobytes()).decode("ascii")}}
    if isinstance(value, Graph):
        return {"kind": "graph", "value": _graph_doc(value, qualify)}
    raise GraphFormatError("$", f"cannot serialise attribute value of type {type(value).__name__}")


def _float_out(x: float) -> Any:
    if x != x or x in (float("inf"), float("-inf")):
        return repr(x)  # "nan", "inf", "-inf": strict JSON has no literals for them
    return x


def _graph_doc(graph: Graph, qualify: Callable[[str], str] = str) -> dict[str, Any]:
    with walking(graph):  # a body holding its own graph: an IRError, not a RecursionError
        return _graph_entries(graph, qualify)


def _graph_entries(graph: Graph, qualify: Callable[[str], str]) -> dict[str, Any]:
    ids: dict[Value, int] = {}

    def vid(v: Value) -> int:
        if v not in ids:
            ids[v] = len(ids)
        return ids[v]

    doc: dict[str, Any] = {"name": graph.name}
    doc["inputs"] = [{"id": vid(v), "type": str(v.type), **({"name": v.name} if v.name else {})} for v in graph.inputs]
    nodes = []
    for node in graph.nodes:
        entry: dict[str, Any] = {"op": qualify(node.op), "inputs": [vid(v) for v in node.inputs],
                                 "outputs": [{"id": vid(v), "type": str(v.type), **({"name": v.name} if v.name else {})}
                                             for v in node.outputs]}
        if node.attrs:
            entry["attrs"] = {k: _encode_attr(a, qualify) for k, a in node.attrs.items()}
        nodes.append(entry)
    doc["nodes"] = nodes
    doc["outputs"] = [vid(v) for v in graph.outputs]
    if any(n is not None for n in graph.output_names):
        doc["output_names"] = graph.output_names
    reason = traced_sizes(graph)
    if reason is not None:  # the refusal to run at other sizes survives a save and a load
        doc["traced_sizes"] = reason
    ties = [[ids[t.value], ids[t.like], t.role] for t in type_ties(graph) if t.value in ids and t.like in ids]
    if ties:  # a seed's tie to its output's (or primal's) type survives too: specialize checks it
        doc["type_ties"] = ties
    return doc


def _source(registry: "SchemaSource | None") -> "SchemaSource":
    if registry is None:
        return default_source()
    if not (callable(getattr(registry, "qualname_of", None)) and callable(getattr(registry, "canonical", None))):
        raise ArgumentError(f"registry= takes a frame_core Registry (frame_core.registry(), load_registry(...)), got "
                            f"{type(registry).__name__} {_short(registry)}")
    return registry


def _indent(indent: Any) -> int | None:
    if indent is None or (isinstance(indent, int) and not isinstance(indent, bool) and 0 <= indent <= 64):
        return indent
    raise ArgumentError(f"indent= is None (one line) or the number of spaces per level, 0 to 64; got {_short(indent)}")


def _path(path: Any, what: str) -> str:
    """``path`` as a str: a str, bytes or os.PathLike naming a file (never an int: open() would take a file
    descriptor, and close it)."""
    if isinstance(path, (str, bytes, os.PathLike)):
        name = os.fsdecode(os.fspath(path))
        if name:
            return name
    raise ArgumentError(f"{what} takes a file path (a str or pathlib.Path such as 'model.json'), got "
                        f"{type(path).__name__} {_short(path)}")


def to_document(graph: Graph, *, registry: "SchemaSource | None" = None) -> dict[str, Any]:
    """The JSON-ready document for ``graph`` (format version 2: ops by qualified name, from ``registry``)."""
    if not isinstance(graph, Graph):
        raise IRError(f"only a Graph can be saved, got {type(graph).__name__}")
    return {"format": FORMAT, "version": VERSION, "graph": _graph_doc(graph, _source(registry).qualname_of)}


def dumps(graph: Graph, indent: int | None = None, *, registry: "SchemaSource | None" = None) -> str:
    """``graph`` as a JSON document (see the module docstring)."""
    return json.dumps(to_document(graph, registry=registry), indent=_indent(indent))


def save_graph(graph: Graph, path: str | os.PathLike[str], indent: int | None = 1, *,
               registry: "SchemaSource | None" = None) -> None:
    """Write ``graph`` to ``path`` as JSON, atomically: ``path`` holds the old file or the whole new one.

    The document is made in memory first, written to a temporary file in the same folder, flushed and
    synced to disk, then renamed over ``path`` (an existing file keeps its permissions). A serialisation
    error, a full disk or a file-size limit leaves an existing file as it was and no temporary file behind.
    A file ``open(path, "w")`` could not write (read-only, a folder) is refused with the ``OSError`` open
    would raise, naming ``path``; something that is not a regular file (a FIFO, ``/dev/null``) is written
    into, never replaced. ``path`` is a str, bytes or ``os.PathLike`` (``ArgumentError`` otherwise).
    """
    import errno
    import secrets
    import stat

    name = _path(path, "save_graph(path)")
    text = dumps(graph, indent=indent, registry=registry)
    target = os.path.realpath(name)  # through a symlink: replace the file it points to
    folder = os.path.dirname(target) or "."
    try:
        info: os.stat_result | None = os.stat(name)  # what `name` opens (a /proc/self/fd link has no real path)
    except FileNotFoundError:
        info = None  # a new file: the umask decides, as for open(path, "w")
    if name.endswith(os.sep) or (info is not None and stat.S_ISDIR(info.st_mode)):
        raise IsADirectoryError(errno.EISDIR, "Is a directory (give a file name)", name)
    if info is not None and (not stat.S_ISREG(info.st_mode) or not os.path.exists(target)):
        # a FIFO, a device, /dev/stdout (a pipe's link resolves to no path): renaming would replace the node, or
        # there is no folder to rename in; write into it as open(path, "w") would
        with _file_errors(name, len(text)), open(name, "w", encoding="utf-8") as f:
            f.write(text)
        return
    if info is not None and not os.access(target, os.W_OK):  # the rename would bypass the file's protection
        raise PermissionError(errno.EACCES, "Permission denied (the file is read-only)", name)
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "No such folder", os.path.dirname(name) or folder)
    while True:  # a short name of its own: the target's name may already be as long as the system allows
        temporary = os.path.join(folder, f".frame-save-{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as exc:  # name the file the caller asked for, not our temporary one
            if info is not None:  # the file exists, its folder takes no new file (/proc, a read-only mount)
                raise type(exc)(exc.errno, f"the file exists, but its folder {folder} takes no new file "
                                           f"({exc.strerror.lower() if exc.strerror else exc}); save_graph writes a "
                                           "temporary file beside the target and renames it over the target",
                                name) from None
            raise type(exc)(exc.errno, exc.strerror, name) from None
    try:
        with _file_errors(name, len(text)), os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if info is not None:
            os.chmod(temporary, info.st_mode & 0o7777)
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError) and exc.filename == temporary:  # name the caller's file, not our temporary one
            raise type(exc)(exc.errno, exc.strerror, name) from None
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable (POSIX; not possible everywhere)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def _file_errors(name: str, size: int) -> Any:
    """A write the file system refuses for its size (a file-size limit, a full disk or quota) as a
    ``GraphFileError``: a frame error that is still the ``OSError`` (same errno), saying what to do."""
    import errno

    from ..errors import GraphFileError

    try:
        yield
    except OSError as exc:
        why = {errno.EFBIG: "the file is larger than this process may write (a file-size limit: see `ulimit -f`)",
               errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up"}.get(exc.errno or 0)
        if why is None:
            raise
        raise GraphFileError(exc.errno, f"{exc.strerror}: cannot write the {size}-character graph document, {why}; "
                                        "an existing file is left as it was", name) from None


# -- reading ------------------------------------------------------------------
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("frame_load_depth", default=0)  # bodies being read

def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: messages stay short whatever a document holds."""
    return short_repr(value, limit)


def _expect(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise GraphFormatError(path, message)


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str = "") -> Any:
    # messages are made only on failure: a document of a million nodes must not format a million of them
    try:
        value = obj[key]
    except KeyError:
        raise GraphFormatError(path, f"missing field {key!r}") from None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, kinds) and not (value.__class__ is bool and bool not in kinds):
        return value
    names = " or ".join(k.__name__ for k in kinds).replace("dict", "object").replace("list", "array")
    raise GraphFormatError(f"{path}.{key}", f"expected {names}, got {type(value).__name__} {_short(value)}")


@functools.lru_cache(maxsize=4096)
def _parse_type(text: str) -> TensorType:
    return TensorType.parse(text)  # documents repeat a handful of types thousands of times


def _type(text: Any, path: str = "") -> TensorType:
    if not isinstance(text, str):
        raise GraphFormatError(path, f"expected a type string such as 'f32[2, 3]', got {_short(text)}")
    try:
        return _parse_type(text)
    except FrameError as exc:
        raise GraphFormatError(path, str(exc)) from None


_DOCUMENT_FIELDS = ("format", "version", "graph")
_GRAPH_FIELDS = ("name", "inputs", "nodes", "outputs", "output_names", "traced_sizes", "type_ties")
_NODE_FIELDS = ("op", "inputs", "outputs", "attrs")
_VALUE_FIELDS = ("id", "type", "name")
_ATTR_FIELDS = ("kind", "value")
_TENSOR_FIELDS = ("dtype", "shape", "data")


def _only(obj: dict[str, Any], fields: tuple[str, ...], path: str, what: str) -> None:
    """A field this format does not have is a typo or an edit that would be ignored without a word (a misspelt
    ``attrs`` would leave a node with its default attributes): refuse it, naming the fields there are."""
    if len(obj) <= len(fields) and all(k in fields for k in obj):
        return
    import difflib

    key = next(k for k in obj if k not in fields)
    close = difflib.get_close_matches(str(key), fields, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise GraphFormatError(f"{path}.{key}", f"unknown field {_short(key)}: {what} has the fields "
                                            f"{', '.join(fields)}{hint}")


def _within(prefix: str, exc: GraphFormatError) -> GraphFormatError:
    """``exc`` with its (relative) path under ``prefix``; paths are built only when something is wrong."""
    return GraphFormatError(prefix + exc.path, exc.detail)


def _float_in(x: Any, path: str) -> float:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    _expect(isinstance(x, (int, float)) and not isinstance(x, bool), path, f"expected a number, got {_short(x)}")
    return float(x)


def _decode_attr(doc: Any, path: str, op_key: Callable[[str], str] = str) -> Any:
    _expect(isinstance(doc, dict), path, "expected an attribute object {\"kind\": ..., \"value\": ...}")
    _only(doc, _ATTR_FIELDS, path, "an attribute")
    kind = _get(doc, "kind", str, path)
    _expect("value" in doc, path, "missing field 'value'")
    v = doc["value"]
    vpath = f"{path}.value"
    if kind == "bool":
        _expect(isinstance(v, bool), vpath, f"expected true or false, got {_short(v)}")
        return v
    if kind == "int":
        _expect(isinstance(v, int) and not isinstance(v, bool), vpath, f"expected an integer, got {_short(v)}")
        return v
    if kind == "float":
        return _float_in(v, vpath)
    if kind == "str":
        _expect(isinstance(v, str), vpath, f"expected a string, got {_short(v)}")
        return v
    if kind == "none":  # a value beside "none" is an edit that would be dropped without a word: refuse it
        _expect(v is None, vpath, f"an attribute of kind none has the value null, got {_short(v)}; give the kind of "
                                  "the value (int, ints, str, ...) or null")
        return None
    if kind in ("ints", "floats", "strs"):
        _expect(isinstance(v, list), vpath, f"expected an array, got {type(v).__name__}")
        out = []
        for i, item in enumerate(v):
            ipath = f"{vpath}[{i}]"
            if kind == "ints":
                _expect(isinstance(item, int) and not isinstance(item, bool), ipath, f"expected an integer, got {_short(item)}")
                out.append(item)
            elif kind == "floats":
                out.append(_float_in(item, ipath))
            else:
                _expect(isinstance(item, str), ipath, f"expected a string, got {_short(item)}")
                out.append(item)
        return tuple(out)
    if kind == "dtype":
        try:
            return as_dtype(v)
        except FrameError as exc:
            raise GraphFormatError(vpath, str(exc)) from None
    if kind == "tensor":
        _expect(isinstance(v, dict), vpath, "expected a tensor object {dtype, shape, data}")
        _only(v, _TENSOR_FIELDS, vpath, "a tensor")
        dtype_name = _get(v, "dtype", str, vpath)
        try:
            dtype = as_dtype(dtype_name)
        except FrameError as exc:
            raise GraphFormatError(f"{vpath}.dtype", str(exc)) from None
        shape = _get(v, "shape", list, vpath)
        for i, d in enumerate(shape):
            _expect(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < MAX_DIM, f"{vpath}.shape[{i}]",
                    f"expected a non-negative integer below 2**63, got {_short(d)}")
        data = _get(v, "data", str, vpath)
        try:
            raw = base64.b64decode(data.encode("ascii"), validate=True)
        except (ValueError, UnicodeError):
            raise GraphFormatError(f"{vpath}.data", "expected base64-encoded bytes") from None
        count = math.prod(shape)  # exact: np.prod would wrap around for absurd shapes
        expected = count * dtype.itemsize
        _expect(expected < MAX_DIM, f"{vpath}.shape", f"{dtype.short}{_short(shape)} would need more bytes than "
                                                     "any machine addresses (2**63)")
        _expect(len(raw) == expected, f"{vpath}.data",
                f"holds {len(raw)} bytes but {dtype.short}{shape} needs {expected}")
        array = np.frombuffer(raw, dtype=dtype.np.newbyteorder("<")).astype(dtype.np).reshape(shape)
        array.flags.writeable = False  # constants in graphs are read-only (see ir.tensors)
        return array
    if kind == "graph":
        depth = _depth.get()
        if depth >= MAX_NESTING:  # refused here, with its path: past it the graph could not run (RecursionError)
            raise GraphFormatError(vpath, nesting_message(depth + 1))
        token = _depth.set(depth + 1)
        try:
            return _read_graph(v, vpath, op_key)
        finally:
            _depth.reset(token)
    either = f" ({kind!r}, as `frame ops show` prints it, means the value may be any of {', '.join(kind.split('|'))}: " \
             f"write the kind of the value given)" if "|" in kind and len(kind) < 40 else ""
    raise GraphFormatError(f"{path}.kind", f"unknown attribute kind {_short(kind)}; expected one of bool, int, float, str, "
                                          f"none, ints, floats, strs, dtype, tensor, graph{either}")


def _read_graph(doc: Any, path: str, op_key: Callable[[str], str] = str) -> Graph:
    _expect(isinstance(doc, dict), path, "expected a graph object {name, inputs, nodes, outputs}")
    _only(doc, _GRAPH_FIELDS, path, "a graph")
    graph = Graph(_get(doc, "name", str, path))
    values: dict[int, Value] = {}
    pending: list[tuple[Node, list[int], int]] = []

    def define(entry: Any, producer: Node | None, index: int) -> Value:  # errors carry paths relative to the entry
        if not isinstance(entry, dict):
            raise GraphFormatError("", "expected a value object {id, type}")
        _only(entry, _VALUE_FIELDS, "", "a value")
        vid = _get(entry, "id", int)
        if vid in values:
            raise GraphFormatError(".id", f"value id {vid} is defined twice")
        name = entry.get("name")
        if name is not None and not isinstance(name, str):
            raise GraphFormatError(".name", "expected a string")
        value = Value(_type(_get(entry, "type", str), ".type"), producer, index, name)
        values[vid] = value
        return value

    for i, entry in enumerate(_get(doc, "inputs", list, path)):
        try:
            graph.inputs.append(define(entry, None, -1))
        except GraphFormatError as exc:
            raise _within(f"{path}.inputs[{i}]", exc) from None
    for i, entry in enumerate(_get(doc, "nodes", list, path)):
        try:
            if not isinstance(entry, dict):
                raise GraphFormatError("", "expected a node object {op, inputs, outputs}")
            _only(entry, _NODE_FIELDS, "", "a node")
            op = op_key(_get(entry, "op", str))
            refs = _get(entry, "inputs", list)
            for j, r in enumerate(refs):
                if not isinstance(r, int) or isinstance(r, bool):
                    raise GraphFormatError(f".inputs[{j}]", f"expected a value id, got {_short(r)}")
            attrs_doc = entry.get("attrs", {})
            if not isinstance(attrs_doc, dict):
                raise GraphFormatError(".attrs", "expected an object")
            attrs = {k: _decode_attr(a, f".attrs.{k}", op_key) for k, a in attrs_doc.items()} if attrs_doc else {}
            node = Node(op, (), attrs)
            outs = []
            for j, o in enumerate(_get(entry, "outputs", list)):
                try:
                    outs.append(define(o, node, j))
                except GraphFormatError as exc:
                    raise _within(f".outputs[{j}]", exc) from None
            node.outputs = tuple(outs)
        except GraphFormatError as exc:
            raise _within(f"{path}.nodes[{i}]", exc) from None
        graph.nodes.append(node)
        pending.append((node, refs, i))
    for node, refs, i in pending:  # second pass: forward references load, and verify reports them
        try:
            node.inputs = tuple([values[r] for r in refs])
        except KeyError:
            j, r = next((j, r) for j, r in enumerate(refs) if r not in values)
            raise GraphFormatError(f"{path}.nodes[{i}].inputs[{j}]",
                                   f"refers to value id {r}, which no input or node defines") from None
    for i, r in enumerate(_get(doc, "outputs", list, path)):
        if not isinstance(r, int) or isinstance(r, bool) or r not in values:
            raise GraphFormatError(f"{path}.outputs[{i}]", f"expected the id of a defined value, got {_short(r)}")
        graph.outputs.append(values[r])
    names = doc.get("output_names")
    if names is not None:
        if not isinstance(names, list) or len(names) != len(graph.outputs):
            raise GraphFormatError(f"{path}.output_names", f"expected a list of {len(graph.outputs)} names (or nulls), "
                                                           f"one per output, got {_short(names)}")
        for i, name in enumerate(names):
            if name is not None and (not isinstance(name, str) or not name):
                raise GraphFormatError(f"{path}.output_names[{i}]", f"expected a name or null, got {_short(name)}")
            graph.name_output(i, name)
    reason = doc.get("traced_sizes")
    if reason is not None:
        if not isinstance(reason, str) or not reason:
            raise GraphFormatError(f"{path}.traced_sizes", f"expected why the graph holds traced sizes (a non-empty "
                                                           f"string), got {_short(reason)}")
        mark_traced_sizes(graph, reason)
    ties = doc.get("type_ties")
    if ties is not None:
        _load_ties(graph, ties, values, f"{path}.type_ties")
    return graph


def _load_ties(graph: Graph, ties: Any, values: dict[int, Value], path: str) -> None:
    if not isinstance(ties, list):
        raise GraphFormatError(path, f"expected a list of [value id, id of the value whose type it has, role], got "
                                     f"{_short(ties)}")
    for i, tie in enumerate(ties):
        ok = isinstance(tie, list) and len(tie) == 3 and isinstance(tie[2], str) and bool(tie[2]) and \
            all(isinstance(r, int) and not isinstance(r, bool) and r in values for r in tie[:2])
        if not ok:
            raise GraphFormatError(f"{path}[{i}]", f"expected [value id, id of the value whose type it has, role] "
                                                   f"with ids of defined values, got {_short(tie)}")
        value, like = values[tie[0]], values[tie[1]]
        if value.type != like.type:
            raise GraphFormatError(f"{path}[{i}]", f"ties {tie[2]} (of type {value.type}) to a value of type "
                                                   f"{like.type}; the two must have one type")
        tie_types(graph, value, like, tie[2])


def from_document(doc: Any, *, registry: "SchemaSource | None" = None) -> Graph:
    """The graph described by a parsed document; ``GraphFormatError`` with a path if malformed.

    Qualified op names (version 2) become ``registry``'s canonical keys (the current registry unless one is given).
    """
    if registry is not None:
        _source(registry)  # a wrong registry= is the caller's ArgumentError whatever the document's version
    _expect(isinstance(doc, dict), "$", "expected a JSON object with fields format, version, graph")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise GraphFormatError("$.format", f"expected {FORMAT!r}, got {_short(fmt)}: this is not a frame graph document")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise GraphFormatError("$.version", f"expected an integer, got {_short(version)}")
    if version not in READS:
        raise GraphFormatError("$.version", f"unknown format version {_short(version)}; this frame-core reads versions "
                                            f"{', '.join(map(str, READS))} (upgrade frame-core to read newer files)")
    _only(doc, _DOCUMENT_FIELDS, "$", "a frame graph document")
    if version == 1:  # short names, kept as written
        return _read_graph(doc.get("graph"), "$.graph")
    canonical = _source(registry).canonical
    return _read_graph(doc.get("graph"), "$.graph", lambda op: canonical(op) if "::" in op else op)


def loads(text: str | bytes, *, registry: "SchemaSource | None" = None) -> Graph:
    """The graph of a JSON document (see :func:`from_document`)."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise ArgumentError(f"loads() takes the JSON text of a graph (a str or bytes; load_graph reads a file), got "
                            f"{type(text).__name__} {_short(text)}")
    if isinstance(text, str) and text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark (editors on Windows write one): json reads bytes with one, not str
    duplicates: list[tuple[dict[str, Any], str]] = []

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):  # rare: which key, and where, is worked out only then
            keys = [k for k, _ in pairs]
            duplicates.append((obj, next(k for i, k in enumerate(keys) if k in keys[:i])))
        return obj

    try:
        with gc_paused():  # parsing makes no cycles: collections would only walk the growing document
            doc = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise GraphFormatError(f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise GraphFormatError("$", "the document is nested too deeply to read") from None
    except UnicodeDecodeError:
        raise GraphFormatError("$", "the bytes are not UTF-8 text (a frame graph is JSON)") from None
    except ValueError as exc:  # a number of thousands of digits (int_max_str_digits): a hostile or corrupt document
        raise GraphFormatError("$", f"the document holds a number too long to read ({exc}); frame graphs hold "
                                    "no such numbers") from None
    if duplicates:
        obj, key = duplicates[0]
        raise GraphFormatError(f"{_where(doc, obj) or '$'}.{key}", f"the field {_short(key)} is written twice in one "
                               "object; JSON readers differ on which one counts (frame would have kept the last), so "
                               "a graph document may not repeat a field: keep the one meant")
    try:
        return from_document(doc, registry=registry)
    except RecursionError:  # sub-graphs nested thousands deep: a hostile or corrupt document
        raise GraphFormatError("$.graph", "sub-graph attributes are nested too deeply to read") from None


def _where(doc: Any, target: dict[str, Any]) -> str | None:
    """The JSONPath of the object ``target`` inside ``doc`` (found by identity), or None."""
    stack: list[tuple[Any, str]] = [(doc, "$")]
    while stack:
        obj, path = stack.pop()
        if obj is target:
            return path
        if isinstance(obj, dict):
            stack.extend((v, f"{path}.{k}") for k, v in obj.items() if isinstance(v, (dict, list)))
        elif isinstance(obj, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(obj) if isinstance(v, (dict, list)))
    return None


def load_graph(path: str | os.PathLike[str], *, registry: "SchemaSource | None" = None) -> Graph:
    """The graph saved in the file ``path`` (see :func:`from_document`)."""
    path = _path(path, "load_graph(path)")
    try:
        with open(path, encoding="utf-8-sig") as f:  # UTF-8, with or without a byte-order mark
            text = f.read()
    except OSError as exc:
        raise GraphFormatError(str(path), f"cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GraphFormatError(str(path), "the file is not UTF-8 text (a frame graph is JSON)") from None
    try:
        return loads(text, registry=registry)
    except GraphFormatError as exc:
        raise GraphFormatError(f"{path}: {exc.path}", exc.detail) from None
