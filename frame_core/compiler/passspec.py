"""``PassSpec``: how a plugin contributes a compile pass (kept free of heavy imports)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PassSpec"]


@dataclass
class PassSpec:
    """A plugin pass: ``fn(graph, ctx) -> graph`` run ``before`` or ``after`` the named built-in stage.

    Exactly one of ``before``/``after`` is set, naming a stage up to ``before="plan_memory"``
    (stages 8 and 9 do not make graphs, so nothing runs after them). ``min_level`` is the lowest
    ``opt_level`` at which it runs. ``pack`` is filled in by the loader.
    """

    name: str
    fn: Callable[[Any, Any], Any]
    before: str | None = None
    after: str | None = None
    min_level: int = 1
    doc: str = ""
    pack: str | None = None
