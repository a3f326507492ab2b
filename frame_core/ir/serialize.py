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
import json
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import FrameError, GraphFormatError
from .dtypes import DType, as_dtype
from .graph import Graph, Node, Value
from .types import TensorType

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
        raise GraphFormatError("$", f"cannot serialise the list attribute {value!r}: mixed element kinds")
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
    return doc


def _source(registry: "SchemaSource | None") -> "SchemaSource":
    return registry if registry is not None else default_source()


def to_document(graph: Graph, *, registry: "SchemaSource | None" = None) -> dict[str, Any]:
    """The JSON-ready document for ``graph`` (format version 2: ops by qualified name, from ``registry``)."""
    return {"format": FORMAT, "version": VERSION, "graph": _graph_doc(graph, _source(registry).qualname_of)}


def dumps(graph: Graph, indent: int | None = None, *, registry: "SchemaSource | None" = None) -> str:
    """``graph`` as a JSON document (see the module docstring)."""
    return json.dumps(to_document(graph, registry=registry), indent=indent)


def save_graph(graph: Graph, path: str | os.PathLike[str], indent: int | None = 1, *,
               registry: "SchemaSource | None" = None) -> None:
    """Write ``graph`` to ``path`` as JSON."""
    text = dumps(graph, indent=indent, registry=registry)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# -- reading ------------------------------------------------------------------
def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: messages stay short whatever a document holds."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr (sys.set_int_max_str_digits)
        text = f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expect(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise GraphFormatError(path, message)


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str) -> Any:
    _expect(key in obj, path, f"missing field {key!r}")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    names = " or ".join(k.__name__ for k in kinds).replace("dict", "object").replace("list", "array")
    _expect(ok, f"{path}.{key}", f"expected {names}, got {type(value).__name__} {str(value)[:40]!r}")
    return value


def _type(text: Any, path: str) -> TensorType:
    _expect(isinstance(text, str), path, f"expected a type string such as 'f32[2, 3]', got {text!r}")
    try:
        return TensorType.parse(text)
    except FrameError as exc:
        raise GraphFormatError(path, str(exc)) from None


def _float_in(x: Any, path: str) -> float:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    _expect(isinstance(x, (int, float)) and not isinstance(x, bool), path, f"expected a number, got {x!r}")
    return float(x)


def _decode_attr(doc: Any, path: str, op_key: Callable[[str], str] = str) -> Any:
    _expect(isinstance(doc, dict), path, "expected an attribute object {\"kind\": ..., \"value\": ...}")
    kind = _get(doc, "kind", str, path)
    _expect("value" in doc, path, "missing field 'value'")
    v = doc["value"]
    vpath = f"{path}.value"
    if kind == "bool":
        _expect(isinstance(v, bool), vpath, f"expected true or false, got {v!r}")
        return v
    if kind == "int":
        _expect(isinstance(v, int) and not isinstance(v, bool), vpath, f"expected an integer, got {v!r}")
        return v
    if kind == "float":
        return _float_in(v, vpath)
    if kind == "str":
        _expect(isinstance(v, str), vpath, f"expected a string, got {v!r}")
        return v
    if kind == "none":
        return None
    if kind in ("ints", "floats", "strs"):
        _expect(isinstance(v, list), vpath, f"expected an array, got {type(v).__name__}")
        out = []
        for i, item in enumerate(v):
            ipath = f"{vpath}[{i}]"
            if kind == "ints":
                _expect(isinstance(item, int) and not isinstance(item, bool), ipath, f"expected an integer, got {item!r}")
                out.append(item)
            elif kind == "floats":
                out.append(_float_in(item, ipath))
            else:
                _expect(isinstance(item, str), ipath, f"expected a string, got {item!r}")
                out.append(item)
        return tuple(out)
    if kind == "dtype":
        try:
            return as_dtype(v)
        except FrameError as exc:
            raise GraphFormatError(vpath, str(exc)) from None
    if kind == "tensor":
        _expect(isinstance(v, dict), vpath, "expected a tensor object {dtype, shape, data}")
        dtype_name = _get(v, "dtype", str, vpath)
        try:
            dtype = as_dtype(dtype_name)
        except FrameError as exc:
            raise GraphFormatError(f"{vpath}.dtype", str(exc)) from None
        shape = _get(v, "shape", list, vpath)
        for i, d in enumerate(shape):
            _expect(isinstance(d, int) and not isinstance(d, bool) and d >= 0, f"{vpath}.shape[{i}]",
                    f"expected a non-negative integer, got {d!r}")
        data = _get(v, "data", str, vpath)
        try:
            raw = base64.b64decode(data.encode("ascii"), validate=True)
        except (ValueError, UnicodeError):
            raise GraphFormatError(f"{vpath}.data", "expected base64-encoded bytes") from None
        count = math.prod(shape)  # exact: np.prod would wrap around for absurd shapes
        expected = count * dtype.itemsize
        _expect(len(raw) == expected, f"{vpath}.data",
                f"holds {len(raw)} bytes but {dtype.short}{shape} needs {expected}")
        array = np.frombuffer(raw, dtype=dtype.np.newbyteorder("<")).astype(dtype.np).reshape(shape)
        array.flags.writeable = False  # constants in graphs are read-only (see ir.tensors)
        return array
    if kind == "graph":
        return _read_graph(v, vpath, op_key)
    raise GraphFormatError(f"{path}.kind", f"unknown attribute kind {kind!r}; expected one of bool, int, float, str, "
                                          "none, ints, floats, strs, dtype, tensor, graph")


def _read_graph(doc: Any, path: str, op_key: Callable[[str], str] = str) -> Graph:
    _expect(isinstance(doc, dict), path, "expected a graph object {name, inputs, nodes, outputs}")
    graph = Graph(_get(doc, "name", str, path))
    values: dict[int, Value] = {}
    pending: list[tuple[Node, list[int], str]] = []

    def define(entry: Any, epath: str, producer: Node | None, index: int) -> Value:
        _expect(isinstance(entry, dict), epath, "expected a value object {id, type}")
        vid = _get(entry, "id", int, epath)
        _expect(vid not in values, f"{epath}.id", f"value id {vid} is defined twice")
        name = entry.get("name")
        _expect(name is None or isinstance(name, str), f"{epath}.name", "expected a string")
        value = Value(_type(_get(entry, "type", str, epath), f"{epath}.type"), producer, index, name)
        values[vid] = value
        return value

    for i, entry in enumerate(_get(doc, "inputs", list, path)):
        graph.inputs.append(define(entry, f"{path}.inputs[{i}]", None, -1))
    for i, entry in enumerate(_get(doc, "nodes", list, path)):
        npath = f"{path}.nodes[{i}]"
        _expect(isinstance(entry, dict), npath, "expected a node object {op, inputs, outputs}")
        op = op_key(_get(entry, "op", str, npath))
        refs = _get(entry, "inputs", list, npath)
        for j, r in enumerate(refs):
            _expect(isinstance(r, int) and not isinstance(r, bool), f"{npath}.inputs[{j}]", f"expected a value id, got {r!r}")
        attrs_doc = entry.get("attrs", {})
        _expect(isinstance(attrs_doc, dict), f"{npath}.attrs", "expected an object")
        attrs = {k: _decode_attr(a, f"{npath}.attrs.{k}", op_key) for k, a in attrs_doc.items()}
        node = Node(op, (), attrs)
        node.outputs = tuple(define(o, f"{npath}.outputs[{j}]", node, j)
                             for j, o in enumerate(_get(entry, "outputs", list, npath)))
        graph.nodes.append(node)
        pending.append((node, refs, npath))
    for node, refs, npath in pending:  # second pass: forward references load, and verify reports them
        resolved = []
        for j, r in enumerate(refs):
            _expect(r in values, f"{npath}.inputs[{j}]", f"refers to value id {r}, which no input or node defines")
            resolved.append(values[r])
        node.inputs = tuple(resolved)
    for i, r in enumerate(_get(doc, "outputs", list, path)):
        _expect(isinstance(r, int) and not isinstance(r, bool) and r in values, f"{path}.outputs[{i}]",
                f"expected the id of a defined value, got {r!r}")
        graph.outputs.append(values[r])
    return graph


def from_document(doc: Any, *, registry: "SchemaSource | None" = None) -> Graph:
    """The graph described by a parsed document; ``GraphFormatError`` with a path if malformed.

    Qualified op names (version 2) become ``registry``'s canonical keys (the current registry unless one is given).
    """
    _expect(isinstance(doc, dict), "$", "expected a JSON object with fields format, version, graph")
    fmt = doc.get("format")
    _expect(fmt == FORMAT, "$.format", f"expected {FORMAT!r}, got {_short(fmt)}: this is not a frame graph document")
    version = doc.get("version")
    _expect(isinstance(version, int) and not isinstance(version, bool), "$.version",
            f"expected an integer, got {_short(version)}")
    _expect(version in READS, "$.version",
            f"unknown format version {_short(version)}; this frame-core reads versions "
            f"{', '.join(map(str, READS))} (upgrade frame-core to read newer files)")
    if version == 1:  # short names, kept as written
        return _read_graph(doc.get("graph"), "$.graph")
    canonical = _source(registry).canonical
    return _read_graph(doc.get("graph"), "$.graph", lambda op: canonical(op) if "::" in op else op)


def loads(text: str | bytes, *, registry: "SchemaSource | None" = None) -> Graph:
    """The graph of a JSON document (see :func:`from_document`)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphFormatError(f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise GraphFormatError("$", "the document is nested too deeply to read") from None
    except UnicodeDecodeError:
        raise GraphFormatError("$", "the bytes are not UTF-8 text (a frame graph is JSON)") from None
    try:
        return from_document(doc, registry=registry)
    except RecursionError:  # sub-graphs nested thousands deep: a hostile or corrupt document
        raise GraphFormatError("$.graph", "sub-graph attributes are nested too deeply to read") from None


def load_graph(path: str | os.PathLike[str], *, registry: "SchemaSource | None" = None) -> Graph:
    """The graph saved in the file ``path`` (see :func:`from_document`)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise GraphFormatError(str(path), f"cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GraphFormatError(str(path), "the file is not UTF-8 text (a frame graph is JSON)") from None
    try:
        return loads(text, registry=registry)
    except GraphFormatError as exc:
        raise GraphFormatError(f"{path}: {exc.path}", exc.detail) from None
