"""The ``frame`` console script's entry point: the two commands CI runs on every push without typer.

``frame audit gradients`` and ``frame ops list`` are what a CI job and a user run most, and their start-up
is measured (issue 21: within 2.5x and 2.0x of ``python -c "import numpy"``). Importing typer and building
its command tree costs about half an ``import numpy``, so :func:`route` parses those two commands' options
itself when they are given in their plain forms (``--order 2``, ``--order=2``, ``-n 2``, a flag, a format
name) and runs the very same command bodies under the very same guard (``_common.call_guarded``). Anything
else (``--help``, any other command, a short option with its value attached, a value typer would refuse or
convert) goes to typer (``main.py``), which then also writes the usage errors: the route never decides
what typer would refuse, so the two agree on every command line the route accepts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "route"]

#: Options of the ``frame`` group itself (all flags), before the command: name -> the state field it sets.
_GROUP_FLAGS = {"--strict": "strict", "--verbose": "verbose", "-v": "verbose"}


class _Command:
    """The options of one routed command: ``values`` (option -> (parameter, allowed values or ``int``, whether
    it may repeat)) and ``flags`` (option -> parameter); ``defaults`` are typer's."""

    def __init__(self, values: dict[str, tuple[str, Any, bool]], flags: dict[str, str], defaults: dict[str, Any]):
        self.values, self.flags, self.defaults = values, flags, defaults


_FORMATS = ("text", "json")
_PACK = ("pack", None, True)
_COMMANDS = {
    ("audit", "gradients"): _Command(
        values={"--order": ("order", int, False), "-n": ("order", int, False), "--pack": _PACK, "-p": _PACK,
                "--format": ("fmt", (*_FORMATS, "github"), False), "-f": ("fmt", (*_FORMATS, "github"), False)},
        flags={"--numeric": "numeric", "--strict": "strict"},
        defaults={"order": None, "numeric": False, "pack": None, "strict": False, "fmt": "text"},
    ),
    ("ops", "list"): _Command(
        values={"--pack": _PACK, "-p": _PACK, "--format": ("fmt", _FORMATS, False), "-f": ("fmt", _FORMATS, False)},
        flags={"--internal": "internal", "--missing-gradient": "missing_gradient"},
        defaults={"fmt": "text", "pack": None, "internal": False, "missing_gradient": False},
    ),
}


def parse(argv: Sequence[str]) -> tuple[tuple[str, str], dict[str, bool], dict[str, Any]] | None:
    """``(command, group flags, parameters)`` for a command line the route runs, else None (typer's)."""
    group = {"strict": False, "verbose": False}
    i = 0
    while i < len(argv) and argv[i] in _GROUP_FLAGS:
        group[_GROUP_FLAGS[argv[i]]] = True
        i += 1
    if len(argv) < i + 2:
        return None
    name = (argv[i], argv[i + 1])
    command = _COMMANDS.get(name)
    if command is None:
        return None
    params = dict(command.defaults)
    rest = argv[i + 2:]
    j = 0
    while j < len(rest):
        option, eq, value = rest[j].partition("=") if rest[j].startswith("--") else (rest[j], "", "")
        j += 1
        if option in command.flags and not eq:
            params[command.flags[option]] = True
            continue
        spec = command.values.get(option)
        if spec is None:  # --help, an unknown option, an argument, `--`, `-n2`: typer's to accept or refuse
            return None
        if not eq:
            if j == len(rest):
                return None
            value = rest[j]
            j += 1
        param, allowed, repeats = spec
        if not value or value.startswith("-"):  # typer decides what an option-like or empty value means
            return None
        if allowed is int:
            if not (value.isascii() and value.isdigit()):
                return None
            try:
                parsed: Any = int(value)
            except ValueError:  # over the interpreter's digit limit (4300): typer says it is not a valid int
                return None
        elif allowed is not None and value not in allowed:
            return None
        else:
            parsed = value
        if repeats:
            params[param] = [*(params[param] or []), parsed]
        else:  # the last one counts, as in typer
            params[param] = parsed
    return name, group, params


def route(argv: Sequence[str]) -> int | None:
    """Run ``frame *argv`` without typer and return its exit status, or None when typer must run it (also on
    Windows, where click expands wildcards in arguments, and for a shell-completion request)."""
    import os

    if sys.platform == "win32" or "_FRAME_COMPLETE" in os.environ:
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    name, group, params = parsed
    from ..ops_registry.registry import strict_from_env
    from ._common import EXIT_OK, call_guarded, state

    state.strict = group["strict"] or strict_from_env()  # what the group's callback (main._root) sets
    state.verbose = group["verbose"]
    if name == ("audit", "gradients"):
        result, code = call_guarded(_audit_gradients, params)
    else:
        result, code = call_guarded(_ops_list, params)
    return code if code is not None else (result if result is not None else EXIT_OK)


def _audit_gradients(params: dict[str, Any]) -> int:
    from ._common import one_pack
    from .audit import audit_gradients

    return audit_gradients(params["order"], params["numeric"], one_pack(params["pack"]), params["strict"],
                           params["fmt"])


def _ops_list(params: dict[str, Any]) -> None:
    from ._common import one_pack
    from .listing import ops_list

    ops_list(params["fmt"], one_pack(params["pack"]), params["internal"], params["missing_gradient"])


def main() -> None:
    """Console-script entry point (``frame``).

    Our output gets the process's standard output to itself: file descriptor 1 points at stderr while
    ``frame`` runs and ``sys.stdout`` writes to a duplicate of the real one. ``guarded`` already sends a
    pack's ``print()`` to stderr; this also catches what bypasses ``sys.stdout`` (``os.write(1, ...)``, C
    code's printf, a child process a pack starts), which would corrupt ``--format json``.
    """
    _own_stdout()
    try:
        code = _route_as_typer_would(sys.argv[1:])
        if code is None:
            from .main import app

            app(prog_name="frame")
    finally:
        _skip_final_collection()
    sys.exit(code)


def _route_as_typer_would(argv: Sequence[str]) -> int | None:
    """``route``, with what typer's standalone mode (``typer.core._main``) does around a command: Ctrl-C ends
    it silently with status 130, a closed pipe outside the command's guard is status 1, and a typer exception
    a pack raised ends the command as typer would end it (its rich ``Aborted.``, its rich error panel)."""
    import errno

    try:
        return route(argv)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        from ._common import silence_streams

        silence_streams()
        return 1
    except Exception as exc:
        typer = sys.modules.get("typer")  # only a pack can have imported it: end as typer's main would
        if typer is None:
            raise
        if isinstance(exc, typer.Exit):
            return int(exc.exit_code)
        if isinstance(exc, (typer.Abort, typer.core._click.exceptions.ClickException)):
            return _typer_error(exc)
        raise  # (a bare TyperException is not typer's to handle either: a traceback, as from typer's main)


def _typer_error(exc: Any) -> int:
    """Show a ``typer.Abort`` or ``ClickException`` exactly as ``typer.core._main`` does for our app (whose
    markup mode is typer's default), and return its exit status."""
    from typer import core

    rich = core.HAS_RICH and core.DEFAULT_MARKUP_MODE is not None
    if rich:
        from typer import rich_utils
    if isinstance(exc, core.Abort):
        if rich:
            rich_utils.rich_abort_error()
        else:
            sys.stderr.write("Aborted!\n")
        return 1
    if rich:
        rich_utils.rich_format_error(exc)
    else:
        exc.show()
    return int(exc.exit_code)


def _skip_final_collection() -> None:
    """Move every object into the collector's permanent generation as the process ends: the interpreter's
    shutdown then does not walk them all in one last cyclic collection (about 0.9x an `import numpy` after
    `frame audit gradients`, whose micro-graphs leave a large heap). atexit handlers and weakref.finalize
    callbacks run, streams are flushed and closed, objects freed by reference counting are freed as before;
    what changes is that objects in reference cycles are never finalized (no ``__del__``, an unclosed file
    in a cycle is not flushed) and modules are cleared without the collector, so a module-level object's
    ``__del__`` may see its globals as None (docs/cli.md, "Start-up")."""
    import gc

    gc.freeze()


def _own_stdout() -> None:
    import io
    import os

    for fd in (1, 2):  # started with stdout or stderr closed (`frame ... >&-`): the next file opened would get
        try:           # that descriptor and receive our output; hold it with /dev/null instead
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
            except OSError:
                pass
    if sys.stderr is None:  # Python found no stderr at start-up: diagnostics go nowhere, not into stdout
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    if sys.stdout is None:  # nor a stdout: our output goes nowhere, never to stderr
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        return
    try:
        sys.stdout.flush()
        real = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):  # no fd 1 or 2 (a closed stream): nothing to protect
        return
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    errors = getattr(sys.stdout, "errors", None) or "strict"
    line_buffering = bool(getattr(sys.stdout, "line_buffering", False))  # a terminal stays line-buffered
    ours = sys.stdout = io.TextIOWrapper(io.FileIO(real, "w", closefd=True), encoding=encoding, errors=errors,
                                         line_buffering=line_buffering)
    import atexit

    atexit.register(_give_stdout_back, ours)  # registered first, so it runs after every pack's handler


def _give_stdout_back(ours: Any) -> None:
    """At exit, after the atexit handlers: point file descriptor 1 at our stdout again, hand ``sys.stdout``
    back to Python's own and close ours, which would otherwise be left unclosed (a ``ResourceWarning`` on
    every run under ``-X dev`` or ``-W default``). Whatever writes later still reaches standard output."""
    import os

    if sys.stdout is not ours:
        return
    try:
        ours.flush()
    except (OSError, ValueError):  # the reader left: nothing more can reach it
        pass
    try:
        os.dup2(ours.fileno(), 1)
    except (OSError, ValueError):
        return
    if sys.__stdout__ is not None:
        sys.stdout = sys.__stdout__
    try:
        ours.close()
    except (OSError, ValueError):
        pass
