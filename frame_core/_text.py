"""Text that is always safe to show: in a terminal, a file, a message.

A graph's names and string attributes come from users and from JSON, which
can hold lone UTF-16 surrogates (``"\\ud800"``) that no UTF-8 stream can
write, and integers with more digits than Python will turn into text.
Messages and printed graphs go through these two helpers so that showing a
bad value never raises in place of the error that describes it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["printable", "short_repr"]


def printable(text: str) -> str:
    """``text`` with every character UTF-8 cannot encode (lone surrogates) written as a backslash escape (``\\udc80``)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, printable and cut to ``limit`` characters; an integer too long to print says its size."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 256:
        return f"<an integer of about {int(abs(value).bit_length() * 0.30103) + 1} digits>"
    try:
        text = repr(value)
    except ValueError:  # past sys.get_int_max_str_digits somewhere inside
        return f"<a {type(value).__name__} too large to show>"
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
