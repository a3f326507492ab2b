"""``frame graph show|dot|grad``: tools for graphs saved as JSON (``frame_core.save_graph``).

A file that cannot be read, is not a frame graph document, or fails
``verify`` against the installed ops is a usage error (exit status 2) with
the file, the place in the document (a JSONPath) and what was wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import EXIT_USAGE, CliFailure, echo, load, warn

if TYPE_CHECKING:  # pragma: no cover
    from ..ir.graph import Graph
    from ..ops_registry.registry import Registry

__all__ = ["graph_show", "graph_dot", "graph_grad", "parse_indices"]


def _read(path: str, reg: "Registry", check: bool = True) -> "Graph":
    from ..errors import GraphFormatError
    from ..ir.serialize import load_graph
    from ..ir.verify import check_graph

    try:
        graph = load_graph(path, registry=reg)  # qualified op names become this registry's keys
    except GraphFormatError as exc:
        raise CliFailure(f"error: cannot load graph {exc.path}: {exc.detail}", EXIT_USAGE) from None
    if check:
        problems = check_graph(graph, reg)
        if problems:
            lines = "\n  ".join(str(p) for p in problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            hint = ("is the pack that provides its ops installed? `frame ops list` shows what is"
                    if any(p.unknown_op for p in problems) else
                    "the graph breaks rules that every graph frame builds keeps: was it written by hand, or "
                    "edited?")  # the pack hint only where an op is missing: it misleads about types and attributes
            raise CliFailure(
                f"error: {path} is not a valid graph for the installed ops ({len(problems)} problem"
                f"{'s' if len(problems) != 1 else ''}):\n  {lines}{more}\n"
                f"({hint}; --no-verify prints it anyway)",
                EXIT_USAGE,
            )
    return graph


def graph_show(path: str, verify: bool) -> None:
    from ..ir.printer import format_graph

    reg = load()
    echo(format_graph(_read(path, reg, verify)))


def graph_dot(path: str, verify: bool) -> None:
    from ..ir.dot import to_dot

    reg = load()
    echo(to_dot(_read(path, reg, verify)).rstrip("\n"))


def parse_indices(text: str, option: str) -> list[int]:
    """``"0,2"`` -> ``[0, 2]``; a usage failure naming ``option`` otherwise."""
    try:
        out = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliFailure(f"error: {option} takes comma-separated input indices such as 0,2; got {text!r}",
                         EXIT_USAGE) from None
    if not out:
        raise CliFailure(f"error: {option} needs at least one index, got {text!r}", EXIT_USAGE)
    return out


def _check_output(path: str, output: str, force: bool) -> None:
    """Refuse to write over the input (ever) or over another existing file (unless ``force``)."""
    import os

    if os.path.exists(output) and os.path.exists(path) and os.path.samefile(path, output):
        raise CliFailure(f"error: -o {output} is the input graph itself; frame graph grad never overwrites its "
                         "input, choose another file", EXIT_USAGE)
    if os.path.isdir(output):
        raise CliFailure(f"error: -o {output} is a folder; give a file name", EXIT_USAGE)
    if os.path.lexists(output) and not force:
        raise CliFailure(f"error: {output} already exists; pass --force to overwrite it, or choose another file",
                         EXIT_USAGE)


def _is_stdout(output: str) -> bool:
    """Whether ``output`` names this process's standard output (``/dev/stdout``, ``/dev/fd/1``, a path to the
    file or pipe stdout is), as ``-`` does."""
    import os
    import sys

    if output in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        return True
    try:
        here, there = os.fstat(sys.stdout.fileno()), os.stat(output)
    except (OSError, ValueError, AttributeError):
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino) and not os.path.isfile(output)


def graph_grad(path: str, loss: int, wrt: str | None, output: str | None, force: bool = False) -> None:
    """Differentiate output ``loss`` of the saved graph with respect to inputs ``wrt``; save the result.

    ``output`` is written atomically (``save_graph``); it must not be the input, nor (without ``force``) an
    existing file.
    """
    from ..autodiff.backward import build_backward_graph
    from ..errors import GradientError
    from ..ir.serialize import dumps, save_graph

    if output is not None and _is_stdout(output):
        output = "-"  # the CLI keeps fd 1 away from packs (it points at stderr meanwhile): print to the real stdout
    if output is not None and output != "-":
        _check_output(path, output, force)  # before any work: a refusal costs nothing
    reg = load()
    graph = _read(path, reg)
    if wrt is None:
        indices = [i for i, v in enumerate(graph.inputs) if v.type.dtype.is_float]
        if not indices:
            raise CliFailure(f"error: {path} has no floating input to differentiate with respect to", EXIT_USAGE)
    else:
        indices = parse_indices(wrt, "--wrt")
    try:
        grad = build_backward_graph(graph, loss, indices, registry=reg)
    except GradientError as exc:
        raise CliFailure(f"error: cannot differentiate {path}: {exc}", EXIT_USAGE) from None
    if output is None or output == "-":
        echo(dumps(grad, indent=1, registry=reg))
        return
    try:
        save_graph(grad, output, registry=reg)
    except OSError as exc:
        raise CliFailure(f"error: cannot write {output}: {exc.strerror or exc}", EXIT_USAGE) from None
    n_out = len(graph.outputs)
    n_grad = len(indices)
    warn(f"wrote {output}: {_span(0, n_out, 'the forward output')}, {_span(n_out, n_out + n_grad, 'the gradient')} "
         f"of output {loss % n_out} with respect to input{'s' if n_grad != 1 else ''} {', '.join(map(str, indices))}")


def _span(start: int, stop: int, what: str) -> str:
    """``output 0 is the forward output`` / ``outputs 0..2 are the forward outputs``."""
    return f"output {start} is {what}" if stop - start == 1 else f"outputs {start}..{stop - 1} are {what}s"
