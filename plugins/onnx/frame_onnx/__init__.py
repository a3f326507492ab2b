"""frame-onnx: ONNX models in and out of frame.

- ``load(path_or_bytes_or_proto, dims=...)`` imports a model as a frame graph with its initializers as a
  nested parameter tree (``ImportedModel``);
- ``save(graph, path)`` / ``to_onnx(graph)`` exports a forward or training graph;
- ``audit(model, order=N)`` says, per node, whether frame imports it and to which order it differentiates.

Packs teach it their ops through the hooks in ``frame_onnx.hooks`` (entry-point group ``frame_onnx``).
The reference is ``docs/onnx.md``.
"""

from __future__ import annotations

from typing import Any

from ._import import ImportedModel, NodeContext, Unsupported, load
from .errors import (
    ExternalDataError, OnnxError, OnnxFormatError, UnmappedOpError, UnsupportedModelError, UnsupportedNode,
)
from .hooks import hookimpl, register, unregister

__version__ = "0.1.0"

__all__ = [
    "load", "save", "to_onnx", "audit", "ImportedModel", "NodeContext", "Unsupported",
    "OnnxError", "OnnxFormatError", "ExternalDataError", "UnsupportedModelError", "UnsupportedNode",
    "UnmappedOpError", "hookimpl", "register", "unregister", "__version__",
]


def save(graph: Any, path: Any, **options: Any) -> None:
    """Export ``graph`` to the ONNX file ``path`` (see ``to_onnx`` for the options)."""
    from .export import save as run

    run(graph, path, **options)


def to_onnx(graph: Any, **options: Any) -> Any:
    """``graph`` as a checked ``onnx.ModelProto`` (``frame_onnx.export.to_onnx``)."""
    from .export import to_onnx as run

    return run(graph, **options)


def audit(source: Any, *, order: int = 1, **options: Any) -> dict[str, Any]:
    """Per node of an ONNX model: imported or not, and the order to which it differentiates
    (``frame_onnx.model_audit.audit_model``)."""
    from .model_audit import audit_model

    return audit_model(source, order=order, **options)
