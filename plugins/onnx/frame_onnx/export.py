"""frame graph -> ONNX model: ``to_onnx(graph)`` and ``save(graph, path)``.

Every node becomes one or a few ONNX nodes through an *export rule* (``rules_export.py``; a pack adds its own
through ``frame_onnx_export_rules``). Graph inputs keep their names (parameters stay ``fc1.weight``), outputs
take the graph's output names (or ``output_<i>``), constants become initializers. Bodies of ``if_else``,
``loop`` and ``scan`` become ONNX ``If``/``Loop``/``Scan`` sub-graphs that read captured values from the
enclosing scope by name. The result passes ``onnx.checker.check_model(full_check=True)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import frame_core as fc
from frame_core import Graph, Node, Value

from .errors import OnnxError, UnmappedOpError

__all__ = ["Exporter", "to_onnx", "save", "DEFAULT_OPSET", "export_rules", "ONNX_TYPES"]

#: The default-domain opset exported graphs import (LayerNormalization, DFT and axes-as-input reductions
#: are all there; ONNX Runtime 1.16 and newer run it).
DEFAULT_OPSET = 18

ONNX_TYPES = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
              "bfloat16": TensorProto.BFLOAT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
              "bool": TensorProto.BOOL}

ExportRule = Callable[["Exporter", Node], Sequence[str]]


def export_rules() -> dict[str, ExportRule]:
    """The built-in export rules and those packs give through ``frame_onnx_export_rules``."""
    from .hooks import plugin_export_rules
    from .rules_export import RULES

    return {**RULES, **plugin_export_rules()}


def onnx_type(value: Value) -> int:
    """The ONNX element type of a frame value."""
    return ONNX_TYPES[value.dtype.name]


class Exporter:
    """Builds the ONNX nodes of one (sub-)graph; shared names and initializers live in the top-level one."""

    def __init__(self, rules: dict[str, ExportRule], opset: int, parent: "Exporter | None" = None) -> None:
        self.rules = rules
        self.opset = opset
        self.parent = parent
        self.root: Exporter = parent.root if parent else self
        self.nodes: list[onnx.NodeProto] = []
        self.names: dict[Value, str] = {}
        if parent is None:
            self.initializers: list[onnx.TensorProto] = []
            self.used: set[str] = set()
            self._consts: dict[tuple, str] = {}
            self.counter = 0

    # -- names ------------------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        root = self.root
        while True:
            root.counter += 1
            name = f"{hint}_{root.counter}"
            if name not in root.used:
                root.used.add(name)
                return name

    def claim(self, name: str) -> str:
        """``name`` if no other value has it yet, else a fresh variant."""
        if name not in self.root.used:
            self.root.used.add(name)
            return name
        return self.fresh(name)

    def name_of(self, value: Value) -> str:
        scope: Exporter | None = self
        while scope is not None:
            if value in scope.names:
                return scope.names[value]
            scope = scope.parent
        raise OnnxError("internal: a value is read before it is defined in the exported graph")

    # -- building -----------------------------------------------------------------------------------
    def input(self, node: Node, i: int) -> str:
        """The ONNX name of input ``i`` of ``node``."""
        return self.name_of(node.inputs[i])

    def emit(self, op_type: str, inputs: Sequence[str], n_out: int = 1, *, outputs: Sequence[str] | None = None,
             domain: str = "", **attrs: Any) -> Any:
        """Append an ONNX node; return its output name (a list when ``n_out`` > 1)."""
        outs = list(outputs) if outputs is not None else [self.fresh(op_type.lower()) for _ in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(f"n_{op_type}"),
                                           domain=domain or None, **attrs))
        return outs[0] if n_out == 1 and outputs is None else outs

    def const(self, value: Any, dtype: Any = None) -> str:
        """An initializer holding ``value`` (as ``dtype``: a frame DType, numpy dtype or dtype name)."""
        if dtype is not None and not isinstance(dtype, np.dtype):
            dtype = dtype.np if hasattr(dtype, "np") else np.dtype(dtype)
        array = np.asarray(value, dtype)
        root = self.root
        key = (array.dtype.str, array.shape, array.tobytes()) if array.size <= 64 else None
        if key is not None and key in root._consts:
            return root._consts[key]
        name = self.fresh("const")
        root.initializers.append(_tensor_proto(array, name))
        if key is not None:
            root._consts[key] = name
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), np.int64))

    def value_info(self, value: Value, name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, onnx_type(value), list(value.shape))

    # -- graphs ---------------------------------------------------------------------------------------
    def run_nodes(self, graph: Graph, path: str = "") -> None:
        for index, node in enumerate(graph.nodes):
            if _has_rule(self.rules, node.op):
                outs = list(_rule_for(self.rules, node.op)(self, node))
            else:  # no rule: the op's DecomposeFn, written with other ops, exported in its place
                sub = _decomposition(node)
                if sub is None:  # collected beforehand by _unmapped; reached only inside a rule's own sub-graphs
                    raise UnmappedOpError({node.op: [f"{path}node {index} of a sub-graph"]})
                for value, name in zip(sub.inputs, (self.input(node, i) for i in range(len(node.inputs)))):
                    self.names[value] = name
                self.run_nodes(sub)
                outs = [self.emit("Identity", [self.name_of(v)]) if v in sub.inputs else self.name_of(v)
                        for v in sub.outputs]
            if len(outs) != len(node.outputs):
                raise OnnxError(f"the export rule of {node.op!r} gave {len(outs)} outputs for {len(node.outputs)}")
            for value, name in zip(node.outputs, outs):
                self.names[value] = name

    def subgraph(self, graph: Graph, bound: Sequence[str | None], declared: Sequence[tuple[str, Value | tuple]],
                 extra_outputs: Sequence[tuple[str, int, list]] = (), label: str = "body") -> onnx.GraphProto:
        """``graph`` as an ONNX sub-graph.

        ``bound[i]`` is the ONNX name body input ``i`` reads (an outer name, or a declared input's name);
        ``declared`` lists the sub-graph's formal inputs (name, value or (onnx type, shape)).
        """
        inner = Exporter(self.rules, self.opset, parent=self)
        for value, name in zip(graph.inputs, bound):
            if callable(name):  # computed inside the body (a loop's row of a scanned input)
                name = name(inner)
            if name is not None:
                inner.names[value] = name
        inner.run_nodes(graph)
        inputs = [inner.value_info(v, n) if isinstance(v, Value) else helper.make_tensor_value_info(n, v[0], v[1])
                  for n, v in declared]
        outputs = []
        for value in graph.outputs:
            name = inner.fresh(f"{label}_out")
            inner.emit("Identity", [inner.name_of(value)], outputs=[name])
            outputs.append(inner.value_info(value, name))
        for name, elem, shape in extra_outputs:
            outputs.append(helper.make_tensor_value_info(name, elem, shape))
        return helper.make_graph(inner.nodes, self.fresh(label), inputs, outputs)


def _has_rule(rules: dict[str, ExportRule], op: str) -> bool:
    return op in rules or ("::" in op and op.split("::", 1)[1] in rules)


def _decomposition(node: Node) -> Graph | None:
    """The node's DecomposeFn graph (the op written with other ops), or None when its op declares none.

    An op without an export rule is exported through it: internal ops that exist for speed (a fused gradient
    kernel) declare one, so the training graphs that use them still export."""
    schema = fc.registry().schemas.get(node.op)
    if schema is None or schema.decomposition is None:
        return None
    ctx = fc.NodeContext(schema, [v.type for v in node.inputs], node.attrs, [v.type for v in node.outputs])
    try:
        sub = schema.decomposition(ctx)
    except Exception as exc:  # the pack's code: this export's error, naming the op
        raise OnnxError(f"op {node.op!r} has no export rule and its DecomposeFn raised {type(exc).__name__}: "
                        f"{exc} (a bug in pack {schema.pack})") from exc
    if not isinstance(sub, Graph) or [v.type for v in sub.outputs] != [v.type for v in node.outputs]:
        raise OnnxError(f"op {node.op!r} has no export rule and its DecomposeFn does not return a graph of its "
                        f"outputs' types (a bug in pack {schema.pack})")
    return sub


def _rule_for(rules: dict[str, ExportRule], op: str) -> ExportRule:
    rule = rules.get(op) or (rules.get(op.split("::", 1)[1]) if "::" in op else None)
    if rule is None:  # collected beforehand by _unmapped; reached only through a rule's own sub-graphs
        raise UnmappedOpError({op: ["a sub-graph"]})
    return rule


def _unmapped(graph: Graph, rules: dict[str, ExportRule], path: str = "") -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for index, node in enumerate(graph.nodes):
        where = f"{path}node {index}"
        if not _has_rule(rules, node.op):
            sub = _decomposition(node)
            if sub is None:
                found.setdefault(node.op, []).append(where)
            else:  # exported through its decomposition: what that lacks is what is missing
                for op, places in _unmapped(sub, rules, f"{where} ({node.op}) decomposition > ").items():
                    found.setdefault(op, []).extend(places)
        for key, attr in node.attrs.items():
            if isinstance(attr, Graph):
                for op, places in _unmapped(attr, rules, f"{where} ({node.op}).{key} > ").items():
                    found.setdefault(op, []).extend(places)
    return found


def _tensor_proto(array: np.ndarray, name: str) -> onnx.TensorProto:
    if array.dtype.name == "bfloat16":
        return helper.make_tensor(name, TensorProto.BFLOAT16, array.shape,
                                  array.view(np.uint16).tobytes(), raw=True)
    return numpy_helper.from_array(np.array(array, order="C"), name)  # (ascontiguousarray makes a scalar 1-D)


def _flat(params: Any, prefix: str = "") -> dict[str, Any]:
    if params is None:
        return {}
    out: dict[str, Any] = {}
    items = params.items() if isinstance(params, dict) else enumerate(params)
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, (dict, list, tuple)):
            out.update(_flat(value, path + "."))
        else:
            out[path] = value
    return out


def to_onnx(graph: Graph, *, params: Any = None, opset: int | None = None, name: str | None = None,
            check: bool = True, producer: str = "frame-onnx") -> onnx.ModelProto:
    """``graph`` as an ONNX model (default opset ``DEFAULT_OPSET``).

    ``params`` (a parameter tree, or a dict of flattened names to arrays) stores the graph inputs of those
    names as initializers: the model carries its weights, and ``frame_onnx.load`` gives them back as the same
    named parameters. Other inputs stay inputs.

    Raises ``UnmappedOpError`` listing every op (with the nodes using it) that has no export rule, and
    ``OnnxError`` when the checker refuses the result (a bug in a rule: please report it).
    """
    if not isinstance(graph, Graph):
        compiled = isinstance(graph, (fc.Executable, fc.DynamicExecutable))
        hint = ": export the graph you gave fc.compile (docs/onnx.md, compiled graphs)" if compiled else ""
        raise OnnxError(f"to_onnx takes a frame Graph, got {type(graph).__name__}{hint}")
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not 17 <= opset <= int(onnx.defs.onnx_opset_version()):
        raise OnnxError(f"export opset {opset} is outside 17..{onnx.defs.onnx_opset_version()}")
    rules = export_rules()
    missing = _unmapped(graph, rules)
    if missing:
        from .rules_export import NOT_EXPORTED, not_exported_reason

        raise UnmappedOpError(missing, {op: why for op in missing if (why := not_exported_reason(op))})
    ex = Exporter(rules, opset)
    stored = _flat(params)
    names = {v.name for v in graph.inputs}
    unknown = sorted(set(stored) - names)
    if unknown:
        raise OnnxError(f"params names {unknown}, which are not inputs of the graph (its inputs: "
                        f"{[v.name for v in graph.inputs]})")
    inputs, weights = [], []
    for k, value in enumerate(graph.inputs):
        n = ex.claim(value.name or f"input_{k}")
        ex.names[value] = n
        if value.name in stored:
            array = np.asarray(stored[value.name])
            if array.shape != value.shape or array.dtype != value.dtype.np:
                raise OnnxError(f"parameter {value.name!r} is {array.dtype}{list(array.shape)}, the graph input is "
                                f"{value.type}")
            weights.append(_tensor_proto(array, n))
        else:
            inputs.append(ex.value_info(value, n))
    ex.run_nodes(graph)
    outputs = []
    for k, (value, out_name) in enumerate(zip(graph.outputs, graph.output_names)):
        n = ex.claim(_safe(out_name) if out_name else f"output_{k}")
        ex.emit("Identity", [ex.name_of(value)], outputs=[n])
        outputs.append(ex.value_info(value, n))
    g = helper.make_graph(ex.nodes, name or graph.name, inputs, outputs, initializer=weights + ex.initializers)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name=producer,
                              producer_version=_version())
    model.ir_version = min(model.ir_version, 10)  # ONNX Runtime reads IR 10 since 1.20
    if check:
        try:
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            raise OnnxError(f"the exported model fails onnx.checker (a bug in an export rule; please report "
                            f"it): {str(exc).strip()[:2000]}") from None
    return model


def _safe(name: str) -> str:
    return name if name.isprintable() else repr(name)


def _version() -> str:
    from . import __version__

    return __version__


def save(graph: Graph, path: str | os.PathLike[str], **options: Any) -> None:
    """Write ``to_onnx(graph, **options)`` to ``path``."""
    model = to_onnx(graph, **options)
    try:
        with open(path, "wb") as handle:
            handle.write(model.SerializeToString())
    except OSError as exc:
        raise OnnxError(f"cannot write the ONNX model to {str(path)!r}: {exc.strerror or exc}; check that the "
                        "folder exists and is writable") from None
