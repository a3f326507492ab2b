"""The work behind ``frame onnx import|export|audit``.

frame-core's CLI parses the options, calls these, prints what they return (stdout text, then a note for
stderr) and turns a ``FrameError`` into one line on stderr with exit status 2. Audit findings are exit
status 1, as for ``frame audit gradients``.
"""

from __future__ import annotations

import json
import os

import frame_core as fc

__all__ = ["import_command", "export_command", "audit_command", "parse_dims"]


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """``["batch=32", "seq=128"]`` (or ``"batch=32,seq=128"``) -> ``{"batch": 32, "seq": 128}``."""
    dims: dict[str, int] = {}
    for item in items or []:
        for part in item.split(","):
            name, sep, size = part.partition("=")
            if not sep or not name.strip() or not size.strip().isdigit():
                raise fc.ArgumentError(f"--dim takes NAME=SIZE (such as batch=32), got {part!r}")
            dims[name.strip()] = int(size)
    return dims


def _check_output(source: str, output: str, force: bool) -> None:
    if os.path.exists(output) and os.path.exists(source) and os.path.samefile(source, output):
        raise fc.ArgumentError(f"-o {output} is the input file itself; choose another file")
    if os.path.isdir(output):
        raise fc.ArgumentError(f"-o {output} is a folder; give a file name")
    if os.path.lexists(output) and not force:
        raise fc.ArgumentError(f"{output} already exists; pass --force to overwrite it, or choose another file")


def import_command(path: str, output: str | None, params: str | None, dims: list[str] | None,
                   force: bool) -> tuple[str | None, str]:
    """Import ``path``; save the graph as JSON to ``output`` (or return it for stdout) and the parameters to
    ``params`` (.npz). Returns (stdout text or None, a summary for stderr)."""
    import numpy as np

    from . import load

    for target in (output, params):
        if target and target != "-":
            _check_output(path, target, force)
    model = load(path, dims=parse_dims(dims))
    text = None
    if output is None or output == "-":
        text = fc.dumps(model.graph)
    else:
        fc.save_graph(model.graph, output)
    if params:
        # numpy's stub types **kwds as if a key could be its allow_pickle flag; parameter names never are
        np.savez(params, **dict(zip(model.param_names, model.flat_params())))  # type: ignore[arg-type]
    where = output if output and output != "-" else "stdout"
    note = (f"imported {path}: {len(model.graph.nodes)} frame nodes, {len(model.input_names)} inputs, "
            f"{len(model.param_names)} parameters ({sum(a.size for a in model.flat_params()):,} values)"
            + (f", traced at {model.dims} ({'any batch size' if model.any_batch else 'these sizes only'})"
               if model.dims else "") + f"; graph -> {where}" + (f", parameters -> {params}" if params else ""))
    return text, note


def export_command(path: str, output: str, opset: int | None, force: bool) -> str:
    """Export the saved frame graph ``path`` to the ONNX file ``output``; returns a summary for stderr."""
    from .export import save

    _check_output(path, output, force)
    graph = fc.load_graph(path)
    save(graph, output, opset=opset)
    return f"exported {path} ({len(graph.nodes)} nodes) -> {output}"


def audit_command(path: str, order: int | None, dims: list[str] | None, fmt: str) -> tuple[int, str, str]:
    """Run the audit; returns (exit status, stdout text, stderr text) for ``fmt`` (text, json, github)."""
    from .model_audit import audit_model, github_line, render_text, summary

    if order is not None and order < 1:
        raise fc.ArgumentError(f"--order must be 1 or more, got {order}; use --order 2 to require second derivatives")
    report = audit_model(path, order=order or 1, dims=parse_dims(dims))
    code = 0 if report["ok"] else 1
    if fmt == "json":
        return code, json.dumps(report, indent=2, default=str), ""
    if fmt == "github":
        return code, "\n".join(github_line(f) for f in report["findings"]), summary(report)
    return code, render_text(report), ""
