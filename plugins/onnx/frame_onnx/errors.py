"""The errors of frame-onnx: every one is a ``frame_core.FrameError``, named for what went wrong."""

from __future__ import annotations

from dataclasses import dataclass

from frame_core import FrameError

__all__ = ["OnnxError", "OnnxFormatError", "ExternalDataError", "UnsupportedModelError", "UnsupportedNode",
           "UnmappedOpError"]


class OnnxError(FrameError):
    """Base class of the errors frame-onnx raises on purpose."""


class OnnxFormatError(OnnxError):
    """The file is not a valid ONNX model: truncated or corrupt bytes, a checker failure, an opset outside
    the supported range, an attribute of the wrong type, a cycle, a graph input that is also an initializer."""


class ExternalDataError(OnnxError):
    """External tensor data that is missing, too short, or that would be read from outside the model's folder
    (an absolute path, a ``..`` component, a link leading out of the folder)."""


@dataclass(frozen=True)
class UnsupportedNode:
    """One node frame cannot import: its op type, domain, the opset the model imports for that domain, the
    node's name (or ``#index`` when it has none) and why."""

    op_type: str
    domain: str
    opset: int
    node: str
    reason: str

    def __str__(self) -> str:
        domain = self.domain or "ai.onnx"
        return f"{self.op_type} ({domain}, opset {self.opset}) at node {self.node}: {self.reason}"


class UnsupportedModelError(OnnxError):
    """The model uses ops (or op configurations) frame cannot import; ``nodes`` lists every one of them."""

    def __init__(self, nodes: list[UnsupportedNode]) -> None:
        self.nodes = list(nodes)
        kinds = sorted({(n.domain or "ai.onnx", n.op_type) for n in self.nodes})
        head = (f"the model cannot be imported: {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''} of "
                f"{len(kinds)} kind{'s' if len(kinds) != 1 else ''} ({', '.join(t for _, t in kinds)}) "
                "have no frame mapping:")
        lines = [head] + [f"  - {n}" for n in self.nodes]
        lines.append("install the pack that provides these ops (or register an import rule through the "
                     "frame_onnx_import_rules hook, docs/onnx.md), or export the model without them")
        super().__init__("\n".join(lines))


class UnmappedOpError(OnnxError):
    """A frame graph holds ops that have no ONNX mapping; ``ops`` maps each op to the node paths using it,
    ``reasons`` the ops frame-onnx leaves out on purpose to why."""

    def __init__(self, ops: dict[str, list[str]], reasons: dict[str, str] | None = None) -> None:
        self.ops = dict(ops)
        self.reasons = {op: why for op, why in (reasons or {}).items() if op in self.ops}
        lines = [f"the graph cannot be exported to ONNX: {len(self.ops)} op{'s' if len(self.ops) != 1 else ''} "
                 "have no ONNX mapping:"]
        for op, where in sorted(self.ops.items()):
            shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
            lines.append(f"  - {op} (at {shown})")
        for why in dict.fromkeys(self.reasons.values()):  # each reason once, naming its ops
            lines.append(f"{', '.join(sorted(op for op, r in self.reasons.items() if r == why))}: {why}")
        lines.append("a pack can provide a mapping through the frame_onnx_export_rules hook (docs/onnx.md); "
                     "or compile the graph with frame instead")
        super().__init__("\n".join(lines))
