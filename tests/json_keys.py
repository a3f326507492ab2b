"""Every key of a parsed JSON document (for the tests that check the docs describe each one)."""

from __future__ import annotations

from typing import Any


def json_keys(obj: Any, out: set[str] | None = None) -> set[str]:
    """The keys of every object in ``obj``, at any depth."""
    out = set() if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            json_keys(v, out)
    elif isinstance(obj, list):
        for v in obj:
            json_keys(v, out)
    return out
