"""Canonical, hashable keys for attributes and whole graphs.

``graph_key(g)`` is equal for two graphs exactly when they have the same
structure, types and attributes (value identity does not matter). The compile
cache, CSE and the closure audit's de-duplication use these keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._gc import gc_paused, made
from ..errors import IRError
from .dtypes import DType
from .graph import Graph, Value, walking
from .tensors import shared_zeros

__all__ = ["attr_key", "attrs_key", "graph_key", "plain_attrs_key"]

#: Arrays of at most this many bytes are keyed by their bytes (plain_attrs_key); a larger one makes a key of None.
_ARRAY_KEY_BYTES = 1024


def plain_attrs_key(attrs: Mapping[str, Any]) -> tuple | None:
    """An exact hashable key of ``attrs`` when every value is plain: ``None``, an int, bool, str, float (by its
    bits: -0.0 is not 0.0) or DType, a tuple or list of ints or of strs, or a small numpy array of booleans,
    integers or floats (by its dtype with byte order, shape and bytes: the constants of gradient micro-graphs,
    made by the thousand while the closure audit runs), or one of the zero arrays ``tensors.zeros`` shares, of any
    size (by the type it was made for); ``None`` otherwise (larger arrays, graphs, numpy scalars).
    Each value carries its class (and a sequence its own and its items'), so ``1``, ``1.0`` and ``True``, or
    ``[1]`` and ``(1,)``, never share a key."""
    if not attrs:
        return ()
    parts: list[tuple[Any, ...]] = []
    for name, value in attrs.items():
        kind = value.__class__
        if kind is int or kind is bool or kind is str or kind is DType or value is None:
            parts.append((name, kind, value))
        elif kind is float:
            parts.append((name, kind, value.hex()))
        elif kind is np.ndarray:
            zeros = shared_zeros(value)
            if zeros is not None:  # (most constants of micro-graphs: zero gradients) its contents without reading it
                parts.append((name, kind, zeros))
                continue
            if value.nbytes > _ARRAY_KEY_BYTES or value.dtype.kind not in "biuf":
                return None
            parts.append((name, kind, value.dtype.str, value.shape, value.tobytes()))
        elif kind is tuple or kind is list:
            items = value if kind is tuple else tuple(value)
            first = items[0].__class__ if items else None
            if first is int or first is str:  # every item of that very class: (int,) or (str,)
                for item in items:
                    if item.__class__ is not first:
                        return None
                classes: tuple[type, ...] = (first,)
            elif items:
                return None
            else:
                classes = ()
            parts.append((name, kind, classes, items))
        else:
            return None
    return tuple(parts)


def attr_key(value: Any) -> Any:
    """A hashable key for one attribute value."""
    t = type(value)
    if t is float:  # by bits: NaN must equal itself (a key compares with ==), and -0.0 differs from 0.0
        return ("float", value.hex())
    if t in (int, bool, str) or value is None:
        return (t.__name__, value)
    if t is tuple:
        return ("tuple",) + tuple(attr_key(v) for v in value)
    if t is DType:
        return ("dtype", value.name)
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        if not data.dtype.isnative:  # the same numbers in either byte order are the same attribute
            data = data.astype(data.dtype.newbyteorder("="))
        raw = data.tobytes()
        if len(raw) <= 64:
            digest = raw
        else:
            import hashlib

            digest = hashlib.blake2b(raw, digest_size=16).digest()
        return ("tensor", data.dtype.str, value.shape, digest)  # value's shape: ascontiguousarray makes 0-d 1-d
    if t is Graph:
        return ("graph", graph_key(value))
    if isinstance(value, list):
        return ("tuple",) + tuple(attr_key(v) for v in value)
    return ("repr", repr(value))


def attrs_key(attrs: Mapping[str, Any]) -> tuple:
    if not attrs:
        return ()
    if len(attrs) == 1:
        ((k, v),) = attrs.items()
        return ((k, attr_key(v)),)
    return tuple(sorted([(k, attr_key(v)) for k, v in attrs.items()]))


#: Graphs with more nodes than this pause the cyclic collector while their key is built (see graph_key).
_PAUSE_GC_ABOVE = 512


def graph_key(graph: Graph) -> tuple:
    """Structural key of ``graph``; memoised on the graph while its inputs, nodes and outputs stay the same.

    Nodes and values are immutable once in a graph (their fields and attribute dicts are not to be
    edited in place); edits to the graph's lists are detected.
    """
    # The memo holds the graph's inputs, nodes and outputs as they were: any edit of those lists (through the
    # methods or directly, `g.outputs[0] = v`) makes the comparison fail; it compares identities, at C speed.
    snapshot = (tuple(graph.inputs), tuple(graph.nodes), tuple(graph.outputs))
    cached = graph._key
    if cached is not None and cached[0] == snapshot:
        return cached[1]
    # A key allocates a few tuples per node. On a large graph the collections they would trigger walk
    # every object the caller's transforms left in the young generations: the cost would grow with the
    # heap, not with the graph (gc_paused explains).
    with walking(graph):  # a body holding its own graph: an IRError, not a RecursionError
        if len(graph.nodes) > _PAUSE_GC_ABOVE:
            with gc_paused():  # the key lives on in the compile cache: a large one goes to the oldest generation
                made(len(graph.nodes))
                key = _structure(graph)
        else:
            key = _structure(graph)
    graph._key = (snapshot, key)
    return key


def _structure(graph: Graph) -> tuple:
    """The key itself: input types, then per node (op, input positions, attributes, output type(s)), then
    the output positions. A value's position counts inputs and node outputs in order; an undefined value
    reads as None. A type appears as its ``id``: types are interned and never freed, so the id names one
    type for the life of the process, and a key made of ints and strings is one the cyclic collector stops
    tracking (compiled graphs' keys live on in the compile cache)."""
    ids: dict[Value, int] = {}
    parts: list[Any] = []
    # attribute keys by the identities of the values (every node is alive meanwhile, so an id names one
    # object): nodes inlined from one micro-graph share their attribute objects, and are keyed once
    attr_keys: dict[tuple, tuple] = {}
    for v in graph.inputs:
        ids[v] = len(ids)
        parts.append(id(v.type))
    parts.append("|")
    get = ids.get
    append = parts.append
    n = len(ids)
    for node in graph.nodes:
        ins = tuple(map(get, node.inputs))
        outs = node.outputs
        if len(outs) == 1:
            v = outs[0]
            ids[v] = n
            n += 1
            types: Any = id(v.type)
        else:
            for v in outs:
                ids[v] = n
                n += 1
            types = tuple([id(v.type) for v in outs])
        attrs = node.attrs
        if attrs:
            ident = (tuple(attrs), tuple(map(id, attrs.values())))
            akey = attr_keys.get(ident)
            if akey is None:
                akey = attr_keys[ident] = attrs_key(attrs)
            append((node.op, ins, akey, types))
        else:
            append((node.op, ins, (), types))
    append(tuple(map(get, graph.outputs)))
    return tuple(parts)
