"""The ``frame`` command line (SPEC §8): ops, plugins, gradient audit, graph tools, pack scaffold.

Each command here only parses options; the work lives in ``listing``,
``audit``, ``graphs`` and ``scaffold``, imported when the command runs so
that start-up stays fast. Exit status: 0 clean, 1 findings, 2 usage or
internal error (``_common``). The reference is ``docs/cli.md``.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from ._common import EXIT_USAGE, echo, guarded, one_pack, state, warn
from .entry import main

__all__ = ["app", "main"]


class ListFormat(str, Enum):
    text = "text"
    json = "json"


class AuditFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


FormatOption = Annotated[ListFormat, typer.Option("--format", "-f", help="text (a table) or json (to stdout).")]
PackOption = Annotated[list[str] | None, typer.Option("--pack", "-p",
                                                     help="Only this pack (its name or distribution).")]
VerifyOption = Annotated[bool, typer.Option("--verify/--no-verify", help="Check the graph against the installed ops.")]

app = typer.Typer(
    name="frame",
    help="frame: list and inspect ops, audit gradient coverage, work with saved graphs, scaffold op packs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
ops_app = typer.Typer(help="List and inspect registered ops.", no_args_is_help=True)
plugins_app = typer.Typer(help="Installed op packs and how loading went.", no_args_is_help=True)
audit_app = typer.Typer(help="Audits for CI.", no_args_is_help=True)
graph_app = typer.Typer(help="Tools for graphs saved as JSON (frame_core.save_graph).", no_args_is_help=True)
app.add_typer(ops_app, name="ops")
app.add_typer(plugins_app, name="plugins")
app.add_typer(audit_app, name="audit")
app.add_typer(graph_app, name="graph")


def _show_version(value: bool) -> None:
    if value:
        from .listing import version_text

        try:  # eager: runs before any command's guard, so it guards itself
            text = version_text()
        except Exception as exc:  # noqa: BLE001 - never a traceback, even for a bug
            warn(f"error: cannot list the installed packs: {type(exc).__name__}: {exc}")
            raise typer.Exit(EXIT_USAGE) from None
        echo(text)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True,
        help="Print the core's version and every installed pack's, then exit.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Treat any plugin problem as a failure (exit 1); "
                                                          "also set by FRAME_STRICT=1.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show whole tracebacks: of packs that failed to "
                                                                  "load, and of internal errors (also FRAME_DEBUG=1).")]
    = False,
) -> None:
    from ..ops_registry.registry import strict_from_env

    state.strict = strict or strict_from_env()
    state.verbose = verbose


@plugins_app.command("list")
@guarded
def plugins_list(fmt: FormatOption = ListFormat.text) -> None:
    """List every pack: distribution, version, status (loaded, failed, disabled), the reason, op count."""
    from .listing import plugins_list as run

    problems = run(fmt.value)
    if state.strict and problems:
        from ._common import strict_failure

        raise strict_failure(problems)


@ops_app.command("list")
@guarded
def ops_list(
    fmt: FormatOption = ListFormat.text,
    pack: PackOption = None,
    internal: Annotated[bool, typer.Option("--internal", help="Include _internal ops.")] = False,
    missing_gradient: Annotated[bool, typer.Option("--missing-gradient",
                                                   help="Only ops without a GradientFn.")] = False,
) -> None:
    """List ops: pack, gradient (yes, no, missing), closure order, kernels."""
    from .listing import ops_list as run

    run(fmt.value, one_pack(pack), internal, missing_gradient)


@ops_app.command("show")
@guarded
def ops_show(
    name: Annotated[str, typer.Argument(help="The op's name.")],
    fmt: FormatOption = ListFormat.text,
) -> None:
    """Everything about one op, including its gradient micro-graph and closure order."""
    from .listing import ops_show as run

    run(name, fmt.value)


@audit_app.command("gradients")
@guarded
def audit_gradients(
    order: Annotated[int | None, typer.Option("--order", "-n", help="Require every op with a GradientFn to be "
                                                 "differentiable to this order (default 1).")] = None,
    numeric: Annotated[bool, typer.Option("--numeric", help="Also check gradients against finite differences "
                                          "(orders 1 and 2, every example).")] = False,
    pack: PackOption = None,
    strict: Annotated[bool, typer.Option("--strict", help="Plugin problems outside --pack are findings too.")] = False,
    fmt: Annotated[AuditFormat, typer.Option("--format", "-f", help="text, json, or github (::error lines).")]
    = AuditFormat.text,
) -> None:
    """Gradient coverage per pack and closure order per op; exit 1 on findings (for CI)."""
    from .audit import audit_gradients as run

    raise typer.Exit(run(order, numeric, one_pack(pack), strict, fmt.value))


@graph_app.command("show")
@guarded
def graph_show(path: Annotated[str, typer.Argument(metavar="FILE")], verify: VerifyOption = True) -> None:
    """Print a saved graph as text."""
    from .graphs import graph_show as run

    run(path, verify)


@graph_app.command("dot")
@guarded
def graph_dot(path: Annotated[str, typer.Argument(metavar="FILE")], verify: VerifyOption = True) -> None:
    """Print a saved graph in Graphviz DOT (pipe it to `dot -Tsvg`)."""
    from .graphs import graph_dot as run

    run(path, verify)


@graph_app.command("grad")
@guarded
def graph_grad(
    path: Annotated[str, typer.Argument(metavar="FILE")],
    loss: Annotated[int, typer.Option("--loss", help="Index of the (scalar) output to differentiate.")] = 0,
    wrt: Annotated[list[str] | None, typer.Option("--wrt", help="Input indices, comma-separated or the option "
                                                     "repeated (default: every floating input).")] = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Where to save the gradient graph "
                                                  "(default: JSON to stdout); never the input file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --output file if it exists.")] = False,
) -> None:
    """Build the backward graph of a saved graph (build_backward_graph) and save it as JSON."""
    from .graphs import graph_grad as run

    run(path, loss, None if not wrt else ",".join(wrt), output, force)  # --wrt 0 --wrt 1 means --wrt 0,1


@app.command("new-pack")
@guarded
def new_pack(
    name: Annotated[str, typer.Argument(help="The pack's name: lowercase letters, digits, '_'.")],
    directory: Annotated[str | None, typer.Option("--dir", "-d", help="Folder to create "
                                                     "(default ./frame-ops-NAME); must be new or empty.")] = None,
) -> None:
    """Scaffold a third-party op pack: pyproject, one complete op, conformance tests, README."""
    from .scaffold import new_pack as run

    run(name, directory)


# -- frame onnx: the commands live in frame-onnx (imported when one runs); without it, say what to install --
onnx_app = typer.Typer(help="ONNX models in and out, and what of them frame can differentiate (needs frame-onnx).",
                       no_args_is_help=True)
app.add_typer(onnx_app, name="onnx")
DimOption = Annotated[list[str] | None, typer.Option("--dim", "-d", help="Size of a symbolic dimension, NAME=SIZE "
                                                        "(repeat it; default 1).")]


def _onnx_cli():  # noqa: ANN202 - frame_onnx.cli
    try:
        from frame_onnx import cli
    except ImportError as exc:
        from ._common import CliFailure

        missing = getattr(exc, "name", None) or ""
        need = ("the frame-onnx distribution: pip install frame-onnx" if missing.startswith("frame_onnx") or not missing
                else f"the {missing!r} package, which frame-onnx needs: pip install frame-onnx")
        raise CliFailure(f"error: `frame onnx` needs {need} ({exc})", EXIT_USAGE) from None
    return cli


@onnx_app.command("import")
@guarded
def onnx_import(
    path: Annotated[str, typer.Argument(metavar="MODEL.onnx")],
    output: Annotated[str | None, typer.Option("--output", "-o", help="Where to save the graph as JSON "
                                                  "(default: stdout).")] = None,
    params: Annotated[str | None, typer.Option("--params", help="Also save the parameters (.npz, by name).")] = None,
    dims: DimOption = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing output files.")] = False,
) -> None:
    """Import an ONNX model as a frame graph (initializers become named parameter inputs)."""
    text, note = _onnx_cli().import_command(path, output, params, dims, force)
    if text is not None:
        echo(text)
    warn(note)


@onnx_app.command("export")
@guarded
def onnx_export(
    path: Annotated[str, typer.Argument(metavar="GRAPH.json")],
    output: Annotated[str, typer.Option("--output", "-o", help="The ONNX file to write.")],
    opset: Annotated[int | None, typer.Option("--opset", help="Default-domain opset (default 18).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
) -> None:
    """Export a saved frame graph (forward or training) to ONNX."""
    warn(_onnx_cli().export_command(path, output, opset, force))


@onnx_app.command("audit")
@guarded
def onnx_audit(
    path: Annotated[str, typer.Argument(metavar="MODEL.onnx")],
    order: Annotated[int | None, typer.Option("--order", "-n", help="Require every imported node to be "
                                                 "differentiable to this order (default 1).")] = None,
    dims: DimOption = None,
    fmt: Annotated[AuditFormat, typer.Option("--format", "-f", help="text, json, or github (::error lines).")]
    = AuditFormat.text,
) -> None:
    """Per node of a model: imported or not, differentiable to which order; exit 1 on findings (for CI)."""
    code, text, note = _onnx_cli().audit_command(path, order, dims, fmt.value)
    if text:
        echo(text)
    if note:
        warn(note)
    raise typer.Exit(code)
@app.command("plot")
@guarded
def plot(
    path: Annotated[str, typer.Argument(metavar="METRICS", help="JSON lines written by frame_train.fit(metrics_path=...).")],
    output: Annotated[str, typer.Option("--output", "-o", help="The image to write (.png, .svg, .pdf).")] = "curve.png",
    title: Annotated[str | None, typer.Option("--title", help="The plot's title (default: the file name).")] = None,
) -> None:
    """Plot the loss curve of a training run (frame-train, with matplotlib: pip install 'frame-train[plot]')."""
    from ._common import CliFailure

    try:
        from frame_train.plot import plot_metrics
    except ImportError:
        raise CliFailure("error: frame plot comes with the frame-train distribution: pip install 'frame-train[plot]'",
                         EXIT_USAGE) from None
    echo(f"wrote {plot_metrics(path, output, title)}")


if __name__ == "__main__":  # pragma: no cover
    main()
