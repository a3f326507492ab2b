"""The work behind ``frame onnx import|export|audit`` (the core's CLI parses the options and calls these).

Exit status as every ``frame`` command: 0 clean, 1 findings (``audit``), 2 usage or input error. Errors are
``CliFailure``s with a one-line message, never a traceback.
"""

from __future__ import annotations

import os
from typing import Any

from frame_core.cli._common import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, CliFailure, echo, emit_json, warn

__all__ = ["import_command", "export_command", "audit_command", "parse_dims"]


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """``["batch=32", "seq=128"]`` -> ``{"batch": 32, "seq": 128}``."""
    dims: dict[str, int] = {}
    for item in items or []:
        for part in item.split(","):
            name, sep, size = part.partition("=")
            if not sep or not name.strip() or not size.strip().isdigit():
                raise CliFailure(f"error: --dim takes NAME=SIZE (such as batch=32), got {part!r}", EXIT_USAGE)
            dims[name.strip()] = int(size)
    return dims


def _check_output(source: str, output: str, force: bool) -> None:
    if os.path.exists(output) and os.path.exists(source) and os.path.samefile(source, output):
        raise CliFailure(f"error: -o {output} is the input file itself; choose another file", EXIT_USAGE)
    if os.path.isdir(output):
        raise CliFailure(f"error: -o {output} is a folder; give a file name", EXIT_USAGE)
    if os.path.lexists(output) and not force:
        raise CliFailure(f"error: {output} already exists; pass --force to overwrite it, or choose another file",
                         EXIT_USAGE)


def _failure(exc: Exception) -> CliFailure:
    return CliFailure(f"error: {exc}", EXIT_USAGE)


def import_command(path: str, output: str | None, params: str | None, dims: list[str] | None, force: bool) -> None:
    """Import ``path`` and save the graph as JSON (stdout without ``-o``); parameters to ``--params`` (.npz)."""
    import numpy as np

    import frame_core as fc

    from . import load
    from .errors import OnnxError

    for target in (output, params):
        if target and target != "-":
            _check_output(path, target, force)
    try:
        model = load(path, dims=parse_dims(dims))
    except (OnnxError, fc.ArgumentError) as exc:
        raise _failure(exc) from None
    if output is None or output == "-":
        echo(fc.dumps(model.graph))
    else:
        fc.save_graph(model.graph, output)
    if params:
        np.savez(params, **{n: a for n, a in zip(model.param_names, model.flat_params())})
    where = output if output and output != "-" else "stdout"
    warn(f"imported {path}: {len(model.graph.nodes)} frame nodes, {len(model.input_names)} inputs, "
         f"{len(model.param_names)} parameters ({sum(a.size for a in model.flat_params()):,} values)"
         + (f", traced at {model.dims}" if model.dims else "") + f"; graph -> {where}"
         + (f", parameters -> {params}" if params else ""))


def export_command(path: str, output: str, opset: int | None, force: bool) -> None:
    """Export the saved frame graph ``path`` to the ONNX file ``output``."""
    import frame_core as fc

    from .errors import OnnxError
    from .export import save

    _check_output(path, output, force)
    try:
        graph = fc.load_graph(path)
    except fc.GraphFormatError as exc:
        raise CliFailure(f"error: cannot load graph {exc.path}: {exc.detail}", EXIT_USAGE) from None
    try:
        save(graph, output, opset=opset)
    except OnnxError as exc:
        raise _failure(exc) from None
    warn(f"exported {path} ({len(graph.nodes)} nodes) -> {output}")


def audit_command(path: str, order: int | None, dims: list[str] | None, fmt: str) -> int:
    """Run the audit, print it in ``fmt`` (text, json, github) and return the exit status."""
    import frame_core as fc

    from .audit import audit_model, github_line, render_text, summary
    from .errors import OnnxError

    if order is not None and order < 1:
        raise CliFailure(f"error: --order must be 1 or more, got {order}; use --order 2 to require second "
                         "derivatives", EXIT_USAGE)
    try:
        report = audit_model(path, order=order or 1, dims=parse_dims(dims))
    except (OnnxError, fc.ArgumentError) as exc:
        raise _failure(exc) from None
    if fmt == "json":
        emit_json(report)
    elif fmt == "github":
        for finding in report["findings"]:
            echo(github_line(finding))
        warn(summary(report))
    else:
        echo(render_text(report))
    return EXIT_OK if report["ok"] else EXIT_FINDINGS


