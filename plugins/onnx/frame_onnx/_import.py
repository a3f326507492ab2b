"""ONNX model -> frame graph: the driver (``load``); the per-op rules live in ``rules_*.py``.

The model's main graph is *traced*: ``frame_core.trace`` calls a function that walks the ONNX nodes in
order and applies each node's rule to frame tensors, so sub-graphs of ``If``/``Loop``/``Scan`` become
frame bodies through the same front end users write (outer values they read are captured, gradients
reach them). Values whose contents are known while importing (``Constant`` nodes, ``Shape`` of a
statically shaped tensor, integer initializers) stay numpy arrays, and a node whose inputs are all known
is folded with ``onnx.reference`` instead of becoming graph nodes: the shape sub-graphs torch writes
(``Shape -> Gather -> Concat -> Reshape``) become plain attributes.

Floating initializers become parameters: graph inputs named by their ONNX names, after the data inputs,
in the order of the flattened parameter tree (``docs/design-parameters-and-shapes.md``).
"""

from __future__ import annotations

import math

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

import frame_core as fc
from frame_core import FrameError
from frame_core import Tensor, current_graph

from ._follow import CONSUMERS, followable, track
from ._read import read_model_bytes, run_checker
from .errors import OnnxError, OnnxFormatError, UnsupportedModelError, UnsupportedNode

__all__ = ["ImportedModel", "load", "NodeContext", "Unsupported", "import_rules", "DTYPES"]

#: ONNX element type -> frame dtype name
DTYPES: dict[int, str] = {  # keyed by elem_type, a plain int in the protobuf
    onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.DOUBLE: "f64", onnx.TensorProto.FLOAT16: "f16",
    onnx.TensorProto.BFLOAT16: "bf16", onnx.TensorProto.INT32: "i32", onnx.TensorProto.INT64: "i64",
    onnx.TensorProto.BOOL: "bool",
}

#: Folding a node whose inputs are all known is skipped above this many elements (a weight-sized
#: computation stays in the graph, where the compiler folds it once).
FOLD_LIMIT = 1 << 20
#: ... and when its result would hold more elements than this (a ``ConstantOfShape``, ``Range``, ``Tile``,
#: ``Expand`` or broadcast of small known inputs): the node's rule puts it in the graph instead, so a model
#: cannot make the importer allocate what its few bytes declare.
FOLD_OUTPUT_LIMIT = 1 << 24
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
            "If", "Loop", "Scan"}


class Unsupported(Exception):
    """Raised by a rule for a configuration it cannot import (the node is listed, the import goes on)."""


class _Poison:
    """The value of an output of a node that could not be imported: its consumers are skipped silently."""


POISON = _Poison()


@dataclass
class ImportedModel:
    """What ``load`` returns.

    ``graph`` takes the data inputs (``input_names``, the ONNX graph inputs) then the parameters
    (``param_names``, flattened names of ``params``); ``params`` is the nested tree of initializer
    arrays split on ``.``; ``dims`` the sizes symbolic dimensions were traced at; ``any_batch`` whether the
    graph means the same at other sizes of those dimensions (``compile(graph, dynamic_shapes=True)`` serves
    them; otherwise it refuses to re-specialise the graph).
    """

    graph: fc.Graph
    params: dict[str, Any]
    input_names: list[str]
    param_names: list[str]
    output_names: list[str]
    dims: dict[str, int] = field(default_factory=dict)
    opset: int = 0
    any_batch: bool = False
    _exe: Any = field(default=None, repr=False)

    def flat_params(self, params: Mapping[str, Any] | None = None) -> list[np.ndarray]:
        """The leaves of ``params`` (default: the imported ones) in the graph's parameter order."""
        tree = self.params if params is None else params
        return [_leaf(tree, name) for name in self.param_names]

    def arguments(self, inputs: Any, params: Mapping[str, Any] | None = None) -> list[np.ndarray]:
        """The full argument list of ``graph``: ``inputs`` (a list in order, or a dict by name) then the
        parameters."""
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise fc.InputError(f"inputs {missing} are missing; the model takes {self.input_names}")
            inputs = [inputs[n] for n in self.input_names]
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise fc.InputError(f"the model takes {len(self.input_names)} inputs ({self.input_names}), "
                                f"got {len(inputs)}")
        return [*inputs, *self.flat_params(params)]

    def run(self, inputs: Any, params: Mapping[str, Any] | None = None) -> list[np.ndarray]:
        """Compile ``graph`` once and run it on ``inputs`` (and ``params``, default the imported ones)."""
        if self._exe is None:
            self._exe = fc.compile(self.graph)
        return self._exe.run(self.arguments(inputs, params))


def _leaf(tree: Mapping[str, Any], name: str) -> Any:
    node: Any = tree
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise fc.InputError(f"parameter {name!r} is missing from the parameter tree")
        node = node[part]
    return node


def _tree(names_arrays: Iterable[tuple[str, np.ndarray]]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, array in names_arrays:
        parts = name.split(".")
        node = tree
        for k, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise OnnxFormatError(f"initializer {name!r} cannot be a parameter: {'.'.join(parts[:k + 1])!r} is "
                                      "a parameter of its own, and a name cannot be both a leaf and a folder of the "
                                      "parameter tree")
            node = child
        if parts[-1] in node:
            raise OnnxFormatError(f"initializer {name!r} cannot be a parameter: other parameters are named "
                                  f"{name!r}.<...>")
        node[parts[-1]] = array
    return tree


def _flat_names(tree: Mapping[str, Any]) -> list[str]:
    """The flattened names of the parameter tree, in the core's order (``frame_core.params``)."""
    from frame_core.params import names_of  # a public module (frame_core.params)

    return names_of(tree)


# -- the rules table -------------------------------------------------------------------------------------
Rule = Callable[["NodeContext"], Any]
_RULES: dict[tuple[str, str], Rule] = {}


def rule(*op_types: str, domain: str = "") -> Callable[[Rule], Rule]:
    """Register the decorated function as the import rule of ``op_types`` (in ``domain``)."""
    def register(fn: Rule) -> Rule:
        for op_type in op_types:
            _RULES[(domain, op_type)] = fn
        return fn
    return register


def import_rules() -> dict[tuple[str, str], Rule]:
    """Every import rule: the built-in ones and those packs give through ``frame_onnx_import_rules``."""
    from . import rules_control, rules_math, rules_nn, rules_ops, rules_sample  # noqa: F401 - they register themselves
    from .hooks import plugin_import_rules

    return {**_RULES, **plugin_import_rules()}


# -- one node's view -------------------------------------------------------------------------------------
class NodeContext:
    """What a rule sees: the node, its inputs (frame tensors or known arrays), typed attributes, its opset."""

    def __init__(self, node: onnx.NodeProto, values: list[Any], opset: int, scope: "_Scope") -> None:
        self.node = node
        self.values = values
        self.opset = opset
        self.scope = scope
        self._attrs = {a.name: a for a in node.attribute}

    @property
    def name(self) -> str:
        return self.scope.node_label(self.node)

    def __len__(self) -> int:
        return len(self.values)

    def has(self, i: int) -> bool:
        """Whether optional input ``i`` is given."""
        return i < len(self.values) and self.values[i] is not None

    def input(self, i: int) -> Any:
        """Input ``i``: a frame tensor, or a numpy array when it is known while importing."""
        if not self.has(i):
            raise OnnxFormatError(f"node {self.name} ({self.node.op_type}): input {i} is required but not given")
        return self.values[i]

    def known(self, i: int) -> np.ndarray | None:
        """Input ``i`` as an array when it is known while importing (a constant), else ``None``."""
        v = self.values[i] if self.has(i) else None
        return v if isinstance(v, np.ndarray) else None

    def sources(self, i: int) -> np.ndarray | None:
        """Where known input ``i``'s elements came from (``_follow``): per element ``(tensor, axis)`` for a size
        read with ``Shape``, ``None`` for a literal; ``None`` when no element has a source."""
        if not self.has(i) or self.known(i) is None:
            return None
        return self.scope.sources_of(self.node.input[i])

    def need_known(self, i: int, what: str) -> np.ndarray:
        v = self.known(i)
        if v is None:
            raise Unsupported(f"{what} (input {i}) must be a constant or computed from shapes; here it depends on "
                              "the data")
        return v

    def attr(self, name: str, kind: str, default: Any = None) -> Any:
        """Attribute ``name`` checked to be of ``kind`` (int, float, ints, floats, string, tensor, graph)."""
        a = self._attrs.get(name)
        if a is None:
            return default
        expected = {"int": onnx.AttributeProto.INT, "float": onnx.AttributeProto.FLOAT,
                    "ints": onnx.AttributeProto.INTS, "floats": onnx.AttributeProto.FLOATS,
                    "string": onnx.AttributeProto.STRING, "tensor": onnx.AttributeProto.TENSOR,
                    "graph": onnx.AttributeProto.GRAPH}[kind]
        if a.type != expected:
            raise OnnxFormatError(
                f"node {self.name} ({self.node.op_type}): attribute {name!r} is of type "
                f"{onnx.AttributeProto.AttributeType.Name(a.type)}, expected {kind.upper()}; the model is malformed")
        value = onnx.helper.get_attribute_value(a)
        if kind == "string":
            return value.decode("utf-8", "replace")
        if kind in ("ints", "floats"):
            return list(value)
        return value


# -- scopes: the main graph and each sub-graph -------------------------------------------------------------
class _Scope:
    """ONNX names visible in one graph (a sub-graph also sees its enclosing graphs' names)."""

    def __init__(self, parent: "_Scope | None", opsets: dict[str, int], rules: dict, report: list[UnsupportedNode],
                 path: str = "", records: list[dict[str, Any]] | None = None) -> None:
        self.records = records  # the audit's per-node log, when asked for
        self.parent = parent
        self.opsets = opsets
        self.rules = rules
        self.report = report
        self.path = path
        self.names: dict[str, Any] = {}
        # the sources of known shape arrays (``_follow``), by ONNX name; ``fixed``: per graph-input tensor (by id)
        # its axes of a fixed size; ``follow``: whether sizes are tracked at all (the model has symbolic dims)
        self.sources: dict[str, np.ndarray] = {}
        self.fixed: dict[int, set[int]] = parent.fixed if parent is not None else {}
        self.follow: bool = parent.follow if parent is not None else False
        self.followable: frozenset[str] = parent.followable if parent is not None else frozenset()
        self._index = 0  # the position of the node being imported, for nodes without a name

    def lookup(self, name: str) -> Any:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        raise OnnxFormatError(f"{self.where()}: value {name!r} is read before any node produces it (the graph "
                              "is not in topological order, or the name is undefined)")

    def sources_of(self, name: str) -> np.ndarray | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.sources.get(name)
            scope = scope.parent
        return None

    def where(self) -> str:
        return f"sub-graph {self.path}" if self.path else "the main graph"

    def node_label(self, node: onnx.NodeProto) -> str:
        label = repr(node.name) if node.name else f"#{self._index}"
        return f"{self.path} > {label}" if self.path else label

    def child(self, label: str) -> "_Scope":
        return _Scope(self, self.opsets, self.rules, self.report, label if not self.path else f"{self.path} > {label}",
                      self.records)

    def run(self, graph: onnx.GraphProto) -> None:
        """Apply every node of ``graph`` in order (they are checked to be topologically sorted)."""
        for index, node in enumerate(graph.node):
            self._index = index  # (protobuf hands out a new wrapper per access: ids cannot key the nodes)
            self.run_node(node)

    def run_node(self, node: onnx.NodeProto) -> None:
        values = [None if not name else self.lookup(name) for name in node.input]
        outputs: Any
        record: dict[str, Any] | None = None
        if self.records is not None:
            record = {"node": self.node_label(node), "op_type": node.op_type, "domain": node.domain or "ai.onnx",
                      "opset": self.opsets.get(_domain(node.domain), 0), "status": "imported", "reason": None,
                      "frame_nodes": []}
            self.records.append(record)
            graph = current_graph()
            start = len(graph.nodes)
        if any(v is POISON for v in values):
            outputs = None
            if self.rules.get((_domain(node.domain), node.op_type)) is None:  # listed too: no rule at all
                self._unsupported(node, self.opsets.get(_domain(node.domain), 0), "no import rule for this op")
            elif record is not None:
                record.update(status="skipped", reason="an input comes from a node that was not imported")
        else:
            opset = self.opsets.get(node.domain or "", 0)
            fn = self.rules.get((_domain(node.domain), node.op_type))
            if (node.op_type not in _NO_FOLD and not self._follows(node)
                    and values and all(v is None or isinstance(v, np.ndarray) for v in values)
                    and sum(v.size for v in values if v is not None) <= FOLD_LIMIT and _domain(node.domain) == ""
                    and _folded_size(node, values) <= FOLD_OUTPUT_LIMIT
                    and (fn is not None or _reference_knows(node.op_type))):
                outputs = _fold(node, values, opset)
                if record is not None:
                    record["status"] = "folded"
            elif fn is None:
                self._unsupported(node, opset, "no import rule for this op")
                outputs = None
            else:
                cx = NodeContext(node, values, opset, self)
                try:
                    outputs = fn(cx)
                except Unsupported as exc:
                    self._unsupported(node, opset, str(exc))
                    outputs = None
                except OnnxError:
                    raise
                except FrameError as exc:
                    raise OnnxError(f"node {cx.name} ({node.op_type}) could not be imported: {exc}") from exc
                except Exception as exc:  # noqa: BLE001 - a rule met a node it does not expect: named, not a traceback
                    raise OnnxError(f"node {cx.name} ({node.op_type}) could not be imported: the import rule failed "
                                    f"with {type(exc).__name__}: {exc} (a node the rule does not expect, or a bug in "
                                    "the rule: please report it with the model)") from exc
        if record is not None:
            record["frame_nodes"] = graph.nodes[start:]
            if outputs is None and record["status"] == "imported":
                record["status"] = "unsupported"
                record["reason"] = next((r.reason for r in reversed(self.report) if r.node == record["node"]),
                                        "a sub-graph holds nodes that were not imported")
        if outputs is None:
            for name in node.output:
                if name:
                    self.names[name] = POISON
            return
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        if self.follow and len(outputs) == 1 and node.output and node.output[0] in self.followable \
                and _domain(node.domain) == "" and isinstance(outputs[0], np.ndarray):
            self._track(node, values, outputs[0])
        for k, name in enumerate(node.output):
            if not name:
                continue
            if k >= len(outputs) or outputs[k] is None:
                self._unsupported(node, self.opsets.get(node.domain or "", 0), f"output {k} ({name!r}) is not supported")
                self.names[name] = POISON
            else:
                self.names[name] = outputs[k]

    def _track(self, node: onnx.NodeProto, values: list[Any], output: Any) -> None:
        """Record where ``output``'s elements came from when it is a size read from ``Shape`` or moved from one."""
        sources = [self.sources_of(n) if n else None for n in node.input]
        if node.op_type != "Shape" and all(s is None for s in sources):
            return
        ints = {a.name: int(a.i) for a in node.attribute if a.type == onnx.AttributeProto.INT}
        found = track(node.op_type, values, sources, ints, output, self.fixed)
        if found is not None:
            self.sources[node.output[0]] = found

    def _follows(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` materialises a shape read from a tensor (``_follow``): built to follow it, not folded."""
        at = CONSUMERS.get(node.op_type) if self.follow and _domain(node.domain) == "" else None
        return at is not None and len(node.input) > at and self.sources_of(node.input[at]) is not None

    def _unsupported(self, node: onnx.NodeProto, opset: int, reason: str) -> None:
        self.report.append(UnsupportedNode(node.op_type, node.domain, opset, self.node_label(node), reason))


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _reference_knows(op_type: str) -> bool:
    from onnx.reference.ops import load_op

    try:
        load_op("", op_type)
    except Exception:  # noqa: BLE001 - an op the reference evaluator lacks
        return False
    return True


def _folded_size(node: onnx.NodeProto, values: list[Any]) -> int:
    """An upper estimate of the elements folding ``node`` on known ``values`` creates (Python ints: no overflow);
    0 when the inputs say nothing (the reference evaluator then reports the node's own error)."""
    def count(shape: Any) -> int:
        n = 1
        for d in shape:
            n *= max(int(d), 0)
        return n

    try:
        op, v = node.op_type, values
        if op == "ConstantOfShape":
            return count(v[0].reshape(-1))
        if op == "Range":
            start, limit, delta = (float(a.reshape(-1)[0]) for a in v[:3])
            return max(math.ceil((limit - start) / delta), 0) if delta else 0
        if op == "Tile":
            return count(v[0].shape) * count(v[1].reshape(-1))
        if op == "Expand":
            return count(np.broadcast_shapes(v[0].shape, tuple(int(d) for d in v[1].reshape(-1))))
        if op == "OneHot":
            return v[0].size * int(v[1].reshape(-1)[0])
        if op in ("Resize", "Upsample"):
            sizes = v[3] if len(v) > 3 and v[3] is not None and v[3].size else None
            if sizes is not None:
                return count(sizes.reshape(-1))
            scales = v[2] if op == "Resize" and len(v) > 2 and v[2] is not None else v[1] if op == "Upsample" else None
            if scales is None:
                return 0
            return count(math.floor(d * float(f)) for d, f in zip(v[0].shape, scales.reshape(-1)))
        if op == "Pad" and len(v) > 1 and v[1] is not None:
            pads = [int(p) for p in v[1].reshape(-1)]
            rank = v[0].ndim
            return count(d + pads[i] + pads[rank + i] for i, d in enumerate(v[0].shape)) if len(pads) == 2 * rank else 0
        shapes = [a.shape for a in v if a is not None]
        return count(np.broadcast_shapes(*shapes)) if shapes else 0
    except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError, AttributeError):
        return 0


def _fold(node: onnx.NodeProto, values: list[Any], opset: int) -> list[np.ndarray]:
    """Evaluate a node on known arrays with onnx's reference implementation (no code from the model runs:
    the reference evaluator implements the standard ops in numpy)."""
    from onnx.reference import ReferenceEvaluator

    renamed = onnx.NodeProto()
    renamed.CopyFrom(node)
    del renamed.input[:]
    feeds = {}
    for k, v in enumerate(values):
        renamed.input.append(f"in{k}" if v is not None else "")
        if v is not None:
            feeds[f"in{k}"] = v
    del renamed.output[:]
    renamed.output.extend([f"out{k}" if name else "" for k, name in enumerate(node.output)])
    try:
        results = ReferenceEvaluator(renamed, opsets={"": opset}).run(None, feeds)
    except Exception as exc:  # the reference evaluator's own errors are of many kinds
        raise OnnxError(f"node {node.name or node.op_type!r} ({node.op_type}) on constant inputs could not be "
                        f"evaluated: {type(exc).__name__}: {exc}") from None
    outs: list[Any] = []
    it = iter(results)
    for name in node.output:
        outs.append(np.asarray(next(it)) if name else None)
    return outs


# -- load ------------------------------------------------------------------------------------------------
def _input_type(vi: onnx.ValueInfoProto, dims: Mapping[str, int], default: int, used: dict[str, int]) -> str:
    t = vi.type
    if not t.HasField("tensor_type"):
        raise OnnxFormatError(f"graph input {vi.name!r} is not a tensor ({t.WhichOneof('value')}); frame imports "
                              "tensor inputs only")
    elem = t.tensor_type.elem_type
    if elem not in DTYPES:
        raise OnnxFormatError(f"graph input {vi.name!r} has element type "
                              f"{onnx.TensorProto.DataType.Name(elem)}, which frame has no dtype for (it has "
                              "float16/32/64, bfloat16, int32, int64, bool)")
    if not t.tensor_type.HasField("shape"):
        raise OnnxFormatError(f"graph input {vi.name!r} has no shape (not even a rank); give the model input "
                              "shapes (torch.onnx.export writes them)")
    shape = []
    for axis, d in enumerate(t.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise OnnxFormatError(f"graph input {vi.name!r} declares size {d.dim_value} for axis {axis}; sizes are 0 "
                                      "or more (a symbolic size is a dim_param): fix the model")
            shape.append(int(d.dim_value))
        else:
            label = d.dim_param or f"{vi.name}:{axis}"
            size = int(dims.get(d.dim_param, dims.get(label, default))) if d.dim_param else int(dims.get(label, default))
            used[label] = size
            shape.append(size)
    return f"{DTYPES[elem]}[{', '.join(map(str, shape))}]"


def _check_graph(graph: onnx.GraphProto, outer: set[str], path: str = "the main graph") -> None:
    """Topological order (and therefore no cycle), and no input that is also an initializer, at any depth."""
    inits = {t.name for t in graph.initializer}
    both = [vi.name for vi in graph.input if vi.name in inits]
    if both:
        raise OnnxFormatError(
            f"{path}: {both} {'are' if len(both) > 1 else 'is'} both graph input{'s' if len(both) > 1 else ''} and "
            "initializer: an input that defaults to a stored value is ambiguous (parameter or data?); export "
            "with keep_initializers_as_inputs=False, or remove them from the inputs")
    defined = set(outer) | inits | {vi.name for vi in graph.input}
    producers = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined:
                if name in producers and producers[name] >= i:
                    cyc = _find_cycle(graph, producers)
                    raise OnnxFormatError(
                        f"{path}: node {node.name or '#%d' % i} ({node.op_type}) reads {name!r} before it is "
                        + (f"produced: the nodes form a cycle ({' -> '.join(cyc)}); a model must be acyclic"
                           if cyc else "produced: the nodes are not in topological order; sort them "
                                       "(onnx.utils or re-export)"))
                raise OnnxFormatError(f"{path}: node {node.name or '#%d' % i} ({node.op_type}) reads {name!r}, "
                                      "which no node, input or initializer defines")
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                _check_graph(sub, defined, f"{path} > {node.name or node.op_type}.{attr.name}")
        defined.update(o for o in node.output if o)


def _find_cycle(graph: onnx.GraphProto, producers: dict[str, int]) -> list[str]:
    """Node labels along one cycle, or [] when reading ahead is only a sorting problem."""
    edges = {i: [producers[x] for x in n.input if x in producers] for i, n in enumerate(graph.node)}
    state: dict[int, int] = {}
    stack: list[int] = []

    def visit(i: int) -> list[int] | None:
        state[i] = 1
        stack.append(i)
        for j in edges[i]:
            if state.get(j) == 1:
                return stack[stack.index(j):] + [j]
            if j not in state:
                found = visit(j)
                if found:
                    return found
        state[i] = 2
        stack.pop()
        return None

    for i in edges:
        if i not in state:
            found = visit(i)
            if found:
                return [graph.node[k].name or f"#{k}" for k in found]
    return []


def load(source: Any, *, dims: Mapping[str, int] | None = None, default_dim: int = 1,
         name: str | None = None, check_any_batch: bool = True) -> ImportedModel:
    """Import an ONNX model (a path, bytes or ``onnx.ModelProto``) as a frame graph with named parameters.

    ``dims`` gives the sizes to trace symbolic dimensions at, by their ``dim_param`` name (``{"batch": 32}``);
    the others are traced at ``default_dim``. With ``check_any_batch`` (the default) a model with symbolic
    dimensions is imported a second time at other sizes (``probe_sizes``): when the two graphs hold the same ops,
    attributes and constants, no traced size is baked in and ``compile(graph, dynamic_shapes=True)`` may run
    it at any size (``any_batch``); otherwise (and for a model without symbolic dimensions) the graph is marked
    so that re-specialising it is refused. Raises ``OnnxFormatError``/``ExternalDataError`` for a bad file
    and ``UnsupportedModelError`` listing every node frame cannot import.
    """
    model, _, data = read_model_bytes(source)
    prepared = _prepare(model, data)
    imported = prepared.trace(dims=dims, default_dim=default_dim, name=name)
    why = "the model has no symbolic dimensions"
    if imported.dims and check_any_batch:
        # the same model traced again at other sizes; the model was checked and its arrays decoded once, so
        # this costs one more trace, not one more import
        try:
            probe = prepared.trace(dims=probe_sizes(imported.dims), default_dim=2 * default_dim + 5)
        except FrameError:  # the model does not import at the other size (a reshape fixed to the traced one)
            imported.any_batch = False
            why = f"the model does not import at other sizes than its symbolic dimensions' {imported.dims}"
        else:
            imported.any_batch = same_structure(imported.graph, probe.graph) or \
                _batch_free_reshapes(imported.graph, probe.graph)
            why = (f"frame_onnx traced its symbolic dimensions at {imported.dims}, and a trace at other sizes gave "
                   "other ops, attributes or constants (a size written into a Reshape, say)")
    elif imported.dims:
        why = f"frame_onnx traced its symbolic dimensions at {imported.dims} with check_any_batch=False"
    if not imported.any_batch:  # fixed shapes (none symbolic), or sizes baked in: never re-specialised wrongly
        from frame_core import holds_traced_sizes

        holds_traced_sizes(imported.graph, f"{why}; import it again with frame_onnx.load(..., dims={{...}}) for "
                                           "the new sizes")
    return imported


def probe_sizes(dims: Mapping[str, int]) -> dict[str, int]:
    """The sizes the any-batch probe traces at: each dimension more than doubled and moved by a different
    amount, so that sizes computed from them (``seq // 3``, ``batch - seq``, ``max(batch, 2)``) change too;
    one step larger (1 -> 2) left ``seq // 3`` and ``batch - seq`` equal and passed graphs that were wrong at
    other sizes."""
    return {name: 2 * size + 5 + 2 * k for k, (name, size) in enumerate(sorted(dims.items()))}


def _batch_free_reshapes(graph: fc.Graph, probe: fc.Graph) -> bool:
    """Whether ``graph`` and ``probe`` (the model traced at two sizes) hold the same structure once each reshape
    target that differs between them writes -1 for its one changing dimension; if so, ``graph`` is rewritten so.

    A model computes its reshape targets from ``Shape`` (torch's MultiheadAttention: ``[T, B * H, Dh]``), which
    the importer evaluates at the traced sizes. When one dimension of the result changes with the sizes, -1 is
    exactly it at every size the model is valid at (the element count fixes it); with two, no -1 can say it,
    and the graph stays marked."""
    if len(graph.nodes) != len(probe.nodes):
        return False
    rewrites = []
    for na, nb in zip(graph.nodes, probe.nodes):
        if na.op != "reshape" or nb.op != "reshape" or na.attrs == nb.attrs:
            continue
        sa, sb = na.outputs[0].type.shape, nb.outputs[0].type.shape
        changing = [i for i, (x, y) in enumerate(zip(sa, sb)) if x != y]
        if len(sa) != len(sb) or len(changing) != 1 or set(na.attrs) != {"shape"}:
            return False
        target = tuple(-1 if i in changing else d for i, d in enumerate(sa))
        rewrites.append((na, nb, target, tuple(-1 if i in changing else d for i, d in enumerate(sb))))
    if not rewrites:
        return False
    saved = [(na, na.attrs, nb, nb.attrs) for na, nb, _, _ in rewrites]
    for na, nb, ta, tb in rewrites:
        na.attrs, nb.attrs = {"shape": ta}, {"shape": tb}
    if same_structure(graph, probe):
        return True
    for na, attrs_a, nb, attrs_b in saved:
        na.attrs, nb.attrs = attrs_a, attrs_b
    return False


def same_structure(a: fc.Graph, b: fc.Graph) -> bool:
    """Whether two graphs hold the same ops, wiring, attributes and constants (types aside)."""
    if len(a.nodes) != len(b.nodes) or len(a.inputs) != len(b.inputs) or len(a.outputs) != len(b.outputs):
        return False
    where_a: dict[Any, Any] = {v: ("in", i) for i, v in enumerate(a.inputs)}
    where_b: dict[Any, Any] = {v: ("in", i) for i, v in enumerate(b.inputs)}
    for k, (na, nb) in enumerate(zip(a.nodes, b.nodes)):
        if na.op != nb.op or len(na.inputs) != len(nb.inputs) or set(na.attrs) != set(nb.attrs):
            return False
        if [where_a.get(v) for v in na.inputs] != [where_b.get(v) for v in nb.inputs]:
            return False
        for key, va in na.attrs.items():
            vb = nb.attrs[key]
            if isinstance(va, fc.Graph):
                if not isinstance(vb, fc.Graph) or not same_structure(va, vb):
                    return False
            elif isinstance(va, np.ndarray) or isinstance(vb, np.ndarray):
                if not (isinstance(va, np.ndarray) and isinstance(vb, np.ndarray) and va.shape == vb.shape
                        and va.dtype == vb.dtype and np.array_equal(va, vb, equal_nan=va.dtype.kind == "f")):
                    return False
            elif va != vb:
                return False
        for j, (oa, ob) in enumerate(zip(na.outputs, nb.outputs)):
            where_a[oa], where_b[ob] = (k, j), (k, j)
    return [where_a.get(v) for v in a.outputs] == [where_b.get(v) for v in b.outputs]


def import_model(model: onnx.ModelProto, *, dims: Mapping[str, int] | None = None, default_dim: int = 1,
                 name: str | None = None, records: list[dict[str, Any]] | None = None) -> ImportedModel:
    """``load`` for a model already read; with ``records`` (a list), every node's import is logged there and an
    unsupported model is still refused (after every node was tried)."""
    return _prepare(model).trace(dims=dims, default_dim=default_dim, name=name, records=records)


def _prepare(model: onnx.ModelProto, data: bytes | None = None) -> "_Prepared":
    """The checks and decoding a model needs once, whatever sizes it is traced at. ``data``: the model's
    serialised bytes when they are at hand (the checker then reads them instead of serialising the model)."""
    graph = model.graph
    _check_graph(graph, set())  # before the checker: its messages for these two cases are less direct
    run_checker(model, data)
    opsets = {_domain(o.domain): int(o.version) for o in model.opset_import}
    # parameters: floating initializers; other initializers, and floating ones read only where an op needs a
    # value known while importing (Resize's scales, Range's bounds), are known arrays (shapes, indices)
    params, consts = [], {}
    structural = _structural_only(graph)
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                              onnx.TensorProto.BFLOAT16) and init.name not in structural:
            params.append((init.name, np.array(array)))
        else:
            consts[init.name] = np.array(array)
    tree = _tree(params)
    param_names = _flat_names(tree)
    arrays = dict(params)
    param_types = [_type_of(arrays[n], n) for n in param_names]
    return _Prepared(model, opsets, import_rules(), tree, param_names, param_types, consts, followable(graph))


# inputs that must be known while importing and so cannot be parameters: (op type, input position)
_STRUCTURAL_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("Range", 0), ("Range", 1), ("Range", 2)}


def _structural_only(graph: onnx.GraphProto) -> set[str]:
    """Names of the main graph's initializers read by at least one node, and only at the inputs of
    ``_STRUCTURAL_INPUTS`` (anywhere, sub-graphs included): exporters store Resize scales as float initializers."""
    uses: dict[str, bool] = {}

    def visit(g: onnx.GraphProto) -> None:
        for node in g.node:
            for i, name in enumerate(node.input):
                if name:
                    uses[name] = uses.get(name, True) and (node.op_type, i) in _STRUCTURAL_INPUTS
            for attr in node.attribute:
                for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    visit(body)
        for out in g.output:  # a graph output is a use that needs the value as it is
            uses[out.name] = False

    visit(graph)
    return {name for name, only in uses.items() if only}


@dataclass
class _Prepared:
    """A checked model with its initializers decoded: ``trace`` imports it at given sizes of its symbolic dims."""

    model: onnx.ModelProto
    opsets: dict[str, int]
    rules: dict
    tree: dict[str, Any]
    param_names: list[str]
    param_types: list[str]
    consts: dict[str, np.ndarray]
    followable: frozenset[str] = frozenset()

    def trace(self, *, dims: Mapping[str, int] | None = None, default_dim: int = 1, name: str | None = None,
              records: list[dict[str, Any]] | None = None) -> ImportedModel:
        dims = dict(dims or {})
        if not isinstance(default_dim, int) or isinstance(default_dim, bool) or default_dim < 0:
            raise fc.ArgumentError(f"default_dim must be an int of 0 or more, got {default_dim!r}")
        bad = {k: v for k, v in dims.items()
               if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0}
        if bad:
            raise fc.ArgumentError(f"dims must map symbolic dimension names to ints of 0 or more, got {bad}")
        graph = self.model.graph
        used: dict[str, int] = {}
        input_names = [vi.name for vi in graph.input]
        types = [_input_type(vi, dims, default_dim, used) for vi in graph.input] + self.param_types
        names = input_names + self.param_names
        report: list[UnsupportedNode] = []
        scope = _Scope(None, self.opsets, self.rules, report, records=records)
        scope.follow = bool(used)  # sizes follow only where some can change, and only those a node materialises
        scope.followable = self.followable

        def forward(*tensors: Tensor) -> list[Any]:
            scope.names.update(self.consts)
            scope.names.update(zip(names, tensors))
            for vi, tensor in zip(graph.input, tensors):
                scope.fixed[id(tensor)] = {axis for axis, d in enumerate(vi.type.tensor_type.shape.dim)
                                           if d.HasField("dim_value")}
            scope.run(graph)
            if report:
                return []
            return [_output(scope.lookup(o.name), o.name) for o in graph.output]

        g = fc.trace(forward, *types, name=name or (graph.name or "onnx_model"))
        if report:
            raise UnsupportedModelError(report)
        for value, n in zip(g.inputs, names):
            value.name = n
        _check_output_types(graph, g)
        for k, o in enumerate(graph.output):
            g.name_output(k, o.name)
        unknown = sorted(set(dims) - set(used))
        if unknown:
            raise fc.ArgumentError(f"dims names {unknown}, which no input of the model has; its symbolic dims are "
                                   f"{sorted(used) or 'none'}")
        return ImportedModel(g, self.tree, input_names, self.param_names, [o.name for o in graph.output], used,
                             self.opsets.get("", 0))


def _check_output_types(graph: onnx.GraphProto, traced: fc.Graph) -> None:
    """The element type each graph output declares against the one computed (ONNX Runtime refuses a
    mismatch): a model that says int64 and computes float is not run as if it were right."""
    wrong = []
    for out, value in zip(graph.output, traced.outputs):
        declared = out.type.tensor_type.elem_type if out.type.HasField("tensor_type") else 0
        if declared and DTYPES.get(declared) != value.dtype.short:
            wrong.append(f"{out.name!r} is declared {onnx.TensorProto.DataType.Name(declared)} but computes "
                         f"{value.dtype.short}")
    if wrong:
        raise OnnxFormatError(f"the model's outputs do not have the types it declares: {'; '.join(wrong)}; fix "
                              "the declared types (ONNX Runtime refuses such a model too)")


def _type_of(array: np.ndarray, name: str) -> str:
    from frame_core import as_dtype

    try:
        return f"{as_dtype(array.dtype).short}[{', '.join(map(str, array.shape))}]"
    except FrameError:
        raise OnnxFormatError(f"initializer {name!r} has dtype {array.dtype}, which frame has no dtype for") from None


def _output(value: Any, name: str) -> Any:
    if value is POISON:  # pragma: no cover - reported before
        raise OnnxError(f"output {name!r} could not be imported")
    return value
