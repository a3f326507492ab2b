"""The exception hierarchy of frame.

Every error frame raises on purpose is a subclass of :class:`FrameError`, so a
caller can catch them all in one place. Messages follow one shape: what was
expected, what was found, where (op, node, input position, document path),
and what to do about it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = [
    "FrameError",
    "IRError",
    "VerifyError",
    "ShapeError",
    "AttributeSpecError",
    "UnknownOpError",
    "AmbiguousOpError",
    "GraphFormatError",
    "PluginError",
    "RegistrationError",
    "GradientError",
    "NonScalarLossError",
    "TangentError",
    "MissingGradientError",
    "CompileError",
    "InputError",
    "KernelError",
    "ArgumentError",
    "DataError",
    "ParameterError",
    "CheckpointError",
    "suggest",
    "FrameWarning",
    "GraphFileError",
    "UnsizedTensorError",
    "ValuelessTensorError",
    "MemoryLimitError",
]


class FrameError(Exception):
    """Base class of every error frame raises deliberately."""


class IRError(FrameError):
    """A graph was built or edited in a way the IR does not allow."""


class VerifyError(FrameError):
    """``verify`` found graphs that break one or more named rules.

    ``problems`` holds one :class:`~frame_core.ir.verify.Problem` per finding.
    """

    def __init__(self, problems: list) -> None:
        self.problems = list(problems)
        head = f"graph failed verification ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):"
        lines = [head] + [f"  {p}" for p in self.problems[:20]]
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more")
        super().__init__("\n".join(lines))


class ShapeError(FrameError):
    """Shape or dtype inference rejected an op's inputs or attributes."""


class AttributeSpecError(FrameError):
    """An attribute is missing, unknown, or of the wrong kind."""


class UnknownOpError(FrameError, KeyError):
    """An op name is not in the registry. The message suggests close matches.

    The suggestions are computed when the message is first read, so code that
    only counts unknown ops (``verify`` on a large document) does not pay for them.
    """

    def __init__(self, name: str, known: Iterable[str] = (), hint: "str | Callable[[], str]" = "") -> None:
        self.name = name
        self._known = known
        self._hint = hint  # a callable is called when the message is first read
        self._message: str | None = None
        super().__init__(name)

    def _hint_text(self) -> str:
        if callable(self._hint):
            self._hint = self._hint()
        return self._hint or " (run `frame ops list` to see the registered ops; is the pack that provides it installed?)"

    @property
    def message(self) -> str:
        if self._message is None:
            matches = suggest(self.name, self._known)
            msg = f"unknown op {self.name!r}"
            if matches:
                msg += f"; did you mean {', '.join(repr(m) for m in matches)}?"
            self._message = msg + self._hint_text()
            self._known = ()
        return self._message

    @property
    def brief(self) -> str:
        """The message without the close-match suggestions (cheap: no name comparisons)."""
        if self._message is not None:
            return self._message
        return f"unknown op {self.name!r}" + self._hint_text()

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class AmbiguousOpError(UnknownOpError):
    """A short op name that several third-party packs register, none of them bundled with frame.

    frame never picks one in silence (installing a second pack must not change what user code means):
    ``candidates`` are the qualified names (``pack::name``) to use instead. A subclass of
    :class:`UnknownOpError`, so code that handles "this name does not resolve" handles it too.
    """

    def __init__(self, name: str, candidates: Iterable[str]) -> None:
        super().__init__(name)
        self.candidates = list(candidates)
        self._message = (
            f"op name {name!r} is ambiguous: the packs {', '.join(c.split('::')[0] for c in self.candidates)} all "
            f"register it; use a qualified name ({' or '.join(repr(c) for c in self.candidates)}), "
            f"e.g. ops.op({self.candidates[0]!r})(x) or apply({self.candidates[0]!r}, ...), or uninstall or disable "
            "one of the packs (FRAME_DISABLE_PLUGINS)"
        )


class GraphFormatError(FrameError):
    """A serialised graph is malformed; ``path`` says where in the document."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.detail = message
        super().__init__(f"{path}: {message}")


class PluginError(FrameError):
    """A plugin (op pack) could not be loaded. Raised only in strict mode."""


class RegistrationError(PluginError):
    """An op schema breaks the registration contract (ARCH-062, ARCH-063)."""


class GradientError(FrameError):
    """``build_backward_graph`` cannot differentiate the given graph."""


class NonScalarLossError(GradientError):
    """The loss output is not a scalar (ARCH-061)."""


class MissingGradientError(GradientError):
    """An op on the loss's dependency chain has no GradientFn (ARCH-062).

    ``paths`` names each offending node, through the bodies of control-flow
    nodes when it sits inside one: ``node 3 (loop) > body node 1 (foo) (...)``.
    """

    def __init__(self, message: str, paths: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.paths = list(paths)


class TangentError(GradientError):
    """A tangent does not match its primal (shape, dtype, an integer input), or a forward-mode operator is asked
    for a derivative with respect to a value that cannot carry one."""


class CompileError(FrameError):
    """The compile pipeline could not turn a graph into an executable."""


class InputError(FrameError, TypeError):
    """``Executable.run`` (or ``profile``) was given inputs of the wrong count, dtype or shape, or a bad argument."""


class KernelError(FrameError):
    """A kernel failed while running; the message names the node and the op."""


class DataError(FrameError, ValueError):
    """Input data breaks an op's run-time precondition (an index out of range, a label past the class count).

    Kernels raise it with a message naming the offending value and the valid range; ``Executable.run``
    re-raises it with the node it came from. It is the caller's data at fault, not the kernel.
    """


class ArgumentError(FrameError, TypeError, ValueError):
    """A public function was given an argument of the wrong type or value where no more specific error
    applies (``use_registry("x")``, ``check_op(order=0)``); the message says what was expected. A ``TypeError``
    and a ``ValueError`` too, so code catching either keeps working."""


class ParameterError(FrameError, TypeError, ValueError):
    """A parameter (or optimizer-state) tree does not match what a graph or checkpoint expects; the message
    lists every missing, unexpected, wrongly shaped or wrongly typed name at once."""


class CheckpointError(FrameError):
    """A checkpoint file is missing, unreadable, not a frame checkpoint, or of another model."""


class FrameWarning(UserWarning):
    """Something frame did not refuse but will not do as written (an environment variable it does not understand,
    an op name two packs share); shown once per process, as Python shows warnings."""


class GraphFileError(FrameError, OSError):
    """Saving a graph hit a limit of the file system (a file-size limit, a full disk): an ``OSError`` with its
    ``errno`` and ``filename`` too, so code catching ``OSError`` keeps working."""


class UnsizedTensorError(ShapeError, TypeError):
    """``len()`` or iteration of a rank-0 tensor, which has no first axis: a ``TypeError`` too, as numpy's is."""


class ValuelessTensorError(IRError, TypeError):
    """A traced Tensor was used where Python needs its value: ``bool()``, ``int()``, ``float()``, ``complex()``,
    an index (``operator.index``, ``range(x)``), ``math.trunc`` or a format spec. It has none until the graph
    runs. A ``TypeError`` too, so code that probes with ``operator.index`` keeps working."""


class MemoryLimitError(CompileError, MemoryError):
    """A compiled graph would need more memory than this machine has: the memory plan's buffers, or a temporary
    a kernel makes (a padded copy), refused when the graph is compiled rather than after minutes of swapping.
    A ``MemoryError`` too."""


def machine_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the system does not say."""
    import os

    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def human_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.4g} {unit}"
        size /= 1024
    return f"{size:.4g} PiB"


def suggest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` names from ``known`` that look like ``name``."""
    import difflib

    return difflib.get_close_matches(name, list(known), n=n, cutoff=0.6)
