"""Checks of public API arguments, shared so every function refuses the same mistakes the same way.

The classic one is a bare string where a list of names is expected: Python
happily iterates ``"fold_constants"`` into fifteen one-letter names. Each
helper raises the error class its caller passes (``CompileError`` from
``compile``, ``ArgumentError`` where no domain error fits), with a message
saying what was expected, what was given and, for the bare string, how to
write it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._text import short_repr

__all__ = ["name_list", "positive_int", "env_flag", "refuse_unordered", "warn_environment"]

#: The words every FRAME_* on/off switch accepts (any case, spaces ignored); empty or unset leaves its default.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_warned: set[tuple[str, str]] = set()  # (variable, value) pairs already warned about in this process


def warn_environment(name: str, value: str, accepted: str, meaning: str) -> None:
    """Warn once per process that ``name=value`` is not a word ``name`` accepts, saying what it accepts and
    what frame does instead (``meaning``)."""
    if (name, value) in _warned:
        return
    _warned.add((name, value))
    import warnings

    from .errors import FrameWarning

    warnings.warn(FrameWarning(f"{name}={short_repr(value)} is not understood: {name} accepts {accepted}; "
                               f"{meaning}"), stacklevel=3)


def env_flag(name: str, environ: Any = None, default: bool = False) -> bool:
    """The on/off switch ``name``: 1, true, yes or on is on; 0, false, no or off is off (any case, spaces
    ignored); empty or unset is ``default``. Any other value (``disable``, ``n``, ``0.0``) is not guessed at: it
    warns once (``FrameWarning``) saying what is accepted, and ``default`` applies. Every ``FRAME_*`` switch reads
    its value this way."""
    import os

    env = os.environ if environ is None else environ
    raw = env.get(name)
    word = "" if raw is None else str(raw).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    if word:
        warn_environment(name, str(raw), f"{', '.join(TRUE_WORDS)} (on) or {', '.join(FALSE_WORDS)} (off), in any "
                         "case", f"it is taken as unset ({'on' if default else 'off'})")
    return default


def is_traced_tensor(value: Any) -> bool:
    """A traced ``frontend.Tensor`` (iterable over its first axis, each step tracing ops): lower layers refuse it
    before iterating, so a mistaken argument adds no nodes to the graph being traced."""
    return getattr(type(value), "_frame_traced_tensor", False) is True


def name_list(value: Any, what: str, error: type[Exception], example: str = "['a', 'b']") -> tuple[str, ...]:
    """``value`` as a tuple of strings: a list, tuple or set of names (``None`` counts as none)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)):
        raise error(f"{what} takes a list of names such as {example}, got the string {short_repr(value)}; for one "
                    f"name write [{short_repr(value)}]")
    if not isinstance(value, Iterable) or is_traced_tensor(value):
        raise error(f"{what} takes a list of names such as {example}, got {type(value).__name__} {short_repr(value)}")
    items = tuple(value)
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise error(f"{what} takes names (strings), got {short_repr(bad[0])} ({type(bad[0]).__name__}) in "
                    f"{short_repr(value)}")
    return items


def refuse_unordered(value: Any, what: str, error: type[Exception], example: str = "[0, 2]") -> None:
    """Refuse a set or a mapping where the order of a list means something (``wrt``: gradients come back in its
    order). A set iterates in hash order, which differs between runs for strings; a dict iterates as its keys,
    which is rarely what was meant."""
    if value.__class__ is list or value.__class__ is tuple or value is None:  # the usual answers, without the ABCs
        return
    from collections.abc import Mapping, Set

    if isinstance(value, (Set, Mapping)):
        kind = "a mapping" if isinstance(value, Mapping) else "a set"
        raise error(f"{what} is an ordered list such as {example}, got {kind} ({type(value).__name__} "
                    f"{short_repr(value)}): its order is not defined, and the results follow it; write a list in "
                    f"the order you want, e.g. sorted(...) or list(...)")


def positive_int(value: Any, what: str, error: type[Exception], low: int = 1) -> int:
    """``value`` as an int of at least ``low`` (never a bool, a float or a string)."""
    import numpy as np

    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value < low:
        raise error(f"{what} must be an int of {low} or more, got {short_repr(value)} ({type(value).__name__})")
    return int(value)
