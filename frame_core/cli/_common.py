"""What every ``frame`` command shares: exit codes, output streams, strict mode, loading the registry.

Exit status (SPEC §8): ``0`` clean, ``1`` findings (including plugin
problems under ``--strict``), ``2`` usage or internal error. Machine-readable
output goes to stdout; diagnostics (warnings, errors) go to stderr. Commands
raise :class:`CliFailure` for an expected failure; :func:`guarded` turns it,
any ``FrameError`` and any unexpected exception into a message on stderr and
an exit status, never a traceback (``--verbose`` or ``FRAME_DEBUG=1`` shows one for bugs,
and the whole traceback of a pack that failed to load).

This module imports neither typer, rich nor the compiler: ``frame ops list`` and ``frame audit gradients``
must start fast (issue 21: within 2.0x and 2.5x of ``python -c "import numpy"``), and ``entry.route`` runs
them without typer.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from ..ops_registry.registry import PackRecord, Registry

__all__ = [
    "EXIT_OK", "EXIT_FINDINGS", "EXIT_USAGE", "CliFailure", "guarded", "call_guarded", "one_pack", "state", "load",
    "emit_json", "echo", "warn", "debugging", "show_tracebacks", "format_table", "resolve_pack", "plugin_problems", "failed_pack", "strict_failure",
]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])


class CliFailure(Exception):
    """An expected failure of a command: ``message`` goes to stderr, ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class _State:
    """Options of the ``frame`` group that its sub-commands read (reset on every invocation).

    ``stdout`` is the command's real standard output while it runs: :func:`guarded` points ``sys.stdout``
    at stderr meanwhile, so whatever a pack prints (on import, in a hook, in a kernel) cannot corrupt
    ``--format json``.

    ``verdict`` is the exit status a command has decided on before it prints (an audit with findings: 1), so
    that a reader who leaves early (``frame audit gradients | head -1``) still sees it.
    """

    strict = False
    verbose = False
    stdout: Any = None
    verdict = 0


state = _State()


def echo(text: str = "") -> None:
    """One line (or block) of output on stdout (a lone surrogate from a loaded name is escaped, never fatal)."""
    from .._text import printable

    _echo(printable(text), state.stdout if state.stdout is not None else sys.stdout)


def warn(text: str) -> None:
    """A diagnostic on stderr."""
    from .._text import printable

    _echo(printable(text), None)


def _echo(text: str, file: Any) -> None:
    """``typer.echo(text, file=file)`` (``err=True`` when ``file`` is None), without importing typer where that
    is a plain write and flush: no escape sequence to strip from output that is not a terminal, not Windows
    (colour wrapping), and a stderr that click would use as it is (a text stream with an encoding other than
    ASCII and an ``errors`` setting; click re-wraps any other). Everything else is click's own echo."""
    if file is None:
        file = sys.stderr
        encoding, errors = getattr(file, "encoding", None), getattr(file, "errors", None)
        plain = type(file) is io.TextIOWrapper and encoding is not None and errors is not None and _not_ascii(encoding)
    else:
        plain = True
    if plain and "\x1b" not in text and sys.platform != "win32":
        file.write(text + "\n")
        file.flush()
        return
    import typer

    if file is sys.stderr:
        typer.echo(text, err=True)
    else:
        typer.echo(text, file=file)


def _not_ascii(encoding: str) -> bool:
    """Whether click would keep a stream of this encoding (it re-wraps ASCII ones: ``is_ascii_encoding``)."""
    import codecs

    try:
        return codecs.lookup(encoding).name != "ascii"
    except LookupError:
        return True


def emit_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    import json  # (only --format json needs it: the text and github formats start without it)

    echo(json.dumps(data, indent=2, sort_keys=False))


def debugging() -> bool:
    """Whether to show whole tracebacks: ``frame --verbose`` or ``FRAME_DEBUG`` set (to anything but 0/empty)."""
    from .._args import env_flag

    return state.verbose or env_flag("FRAME_DEBUG")


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (state.stdout if state.stdout is not None else sys.stdout).fileno())
    except (OSError, ValueError, AttributeError):
        pass


def guarded(fn: F) -> F:
    """Run a command body, turning failures into a message on stderr and the documented exit status."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import typer

        result, code = call_guarded(fn, *args, **kwargs)
        if code is not None:
            raise typer.Exit(code)
        return result

    return wrapper  # type: ignore[return-value]


def call_guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int | None]:
    """What :func:`guarded` does, without typer: ``(fn's result, None)``, or ``(None, exit status)`` after the
    failure's message went to stderr. typer's own exceptions (``typer.Exit`` from a command body) pass through."""
    from ..errors import FrameError

    state.stdout, state.verdict = sys.stdout, EXIT_OK
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a pack's print() lands on stderr, never in our output
            return fn(*args, **kwargs), None
    except BrokenPipeError:  # `frame ops list | head`: the reader left; stop quietly, like other tools, but keep
        _silence_stdout()    # the verdict already reached (findings are not hidden by a short read)
        return None, state.verdict
    except CliFailure as failure:
        warn(failure.message)
        return None, failure.code
    except FrameError as exc:
        warn(f"error: {exc}")
        return None, EXIT_USAGE
    except (Exception, SystemExit) as exc:  # a bug in frame or in a pack: one paragraph, not a traceback
        if _typer_control(exc):
            raise
        if debugging():
            import traceback

            traceback.print_exc()
        warn(f"internal error: {type(exc).__name__}: {exc}\n"
             "This is a bug in frame or in a pack; rerun with --verbose (or FRAME_DEBUG=1) for the traceback "
             "and report it.")
        return None, EXIT_USAGE
    finally:
        state.stdout = None


def _typer_control(exc: BaseException) -> bool:
    """Whether ``exc`` is typer's (``Exit``, ``Abort``, a ``TyperException``): typer, not the guard, ends the
    command then. Without typer imported, nothing can have raised one."""
    typer = sys.modules.get("typer")
    return typer is not None and isinstance(exc, (typer.Exit, typer.Abort, typer.TyperException))


def one_pack(packs: list[str] | None) -> str | None:
    """The one ``--pack`` given (typer alone would keep the last of several, silently showing less)."""
    if not packs:
        return None
    if len(set(packs)) > 1:
        raise CliFailure(f"error: --pack takes one pack, got {', '.join(map(repr, packs))}; run the command once per "
                         "pack, or leave --pack out for every pack", EXIT_USAGE)
    return packs[0]


def silence_streams() -> None:
    """Point stdout and stderr at /dev/null after the reader of a pipe left (what click's standalone mode does
    with its flush wrapper): the interpreter's final flush then fails on neither."""
    for stream in (sys.stdout, sys.stderr):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass


def load(*, strict: bool | None = None, quiet: bool = False, deep: bool = False) -> "Registry":
    """Load the installed packs into a fresh registry and report their problems on stderr.

    ``strict`` (default: ``--strict`` or ``FRAME_STRICT``) makes any plugin
    problem a :class:`CliFailure` with exit status 1. Without it, failed
    packs are one warning line each unless ``quiet``. ``deep`` runs the deep
    closure audit (ARCH-068), always afresh (``frame audit gradients``), instead of the start-up one, which
    reuses a clean audit of exactly the same code (``ops_registry/audit_cache.py``).
    """
    from ..ops_registry.closure import run_closure_audit
    from ..ops_registry.loader import load_registry

    strict = state.strict if strict is None else strict
    reg = load_registry(strict=False, audit=False)
    if deep:
        run_closure_audit(reg, deep=True, collect=False)  # the command ends soon after: no collection
    else:
        from ..ops_registry import audit_cache  # (and its hashing and JSON: not for the deep audit)

        audit_cache.audit(reg)
    problems = plugin_problems(reg)
    if strict and problems:
        raise strict_failure(problems)
    if not quiet:
        for problem in problems:
            warn(f"warning: {problem}")
    show_tracebacks(reg)
    return reg


def show_tracebacks(reg: "Registry") -> None:
    """With ``--verbose`` or ``FRAME_DEBUG=1``: the whole traceback of every pack that failed by raising."""
    if not debugging():
        return
    for record in reg.packs.values():
        if record.status == "failed" and record.traceback:
            warn(f"traceback of pack {record.name!r} ({record.distribution} {record.version}):\n"
                 f"{record.traceback.rstrip()}")


def failed_pack(record: "PackRecord") -> str:
    """How the CLI reports a pack that failed to load."""
    return f"pack {record.name!r} ({record.distribution} {record.version}) failed to load: {record.error}"


def plugin_problems(reg: "Registry", skip: Sequence[str] = ()) -> list[str]:
    """Every plugin problem of ``reg`` (failed packs, op-name collisions, then the loader's notes), less the
    failed packs in ``skip``."""
    failed = [failed_pack(r) for r in reg.packs.values() if r.status == "failed" and r.name not in skip]
    return failed + reg.collision_warnings() + reg.notes


def strict_failure(problems: Sequence[str]) -> CliFailure:
    """The failure strict mode turns plugin problems into (exit status 1)."""
    return CliFailure("plugin problems (strict mode):\n  " + "\n  ".join(problems), EXIT_FINDINGS)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as left-aligned text columns under ``headers`` (plain text: pipes and greps well)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def resolve_pack(reg: "Registry", pack: str | None) -> str | None:
    """The pack name that ``--pack`` means (a pack name or its distribution's name); usage failure if none."""
    if pack is None:
        return None
    from ..errors import suggest
    from ..ops_registry.entrypoints import normalize

    records = list(reg.packs.values())
    # an entry-point name first: one distribution may ship several packs, and `--pack aaa-pack` must not mean
    # another entry point of the distribution aaa-pack that happens to be listed first
    for same in (lambda r: r.name == pack, lambda r: normalize(r.name) == normalize(pack)):
        found = [r.name for r in records if same(r)]
        if found:
            return found[0]
    found = [r.name for r in records if normalize(r.distribution) == normalize(pack)]
    if len(found) == 1:
        return found[0]
    if found:
        raise CliFailure(f"error: the distribution {pack!r} ships several packs ({', '.join(map(repr, found))}); "
                         "name one with --pack", EXIT_USAGE)

    by_label = {r.name: r.name for r in reg.packs.values()} | {r.distribution: r.name for r in reg.packs.values()}
    close = list(dict.fromkeys(by_label[m] for m in suggest(pack, by_label)))
    message = f"error: unknown pack {pack!r}"
    if close:
        message += f"; did you mean {', '.join(repr(m) for m in close)}?"
    raise CliFailure(message + " (run `frame plugins list` to see the installed packs)", EXIT_USAGE)
