"""``CompileContext``: what every compile stage may read (backend, registry, options, a log).

Its own module so that passes depend on it and ``pipeline.py`` depends on
the passes, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..ops_registry.registry import Registry

__all__ = ["CompileContext"]


@dataclass
class CompileContext:
    """What every stage may read: backend, registry, options, and a log of what each stage did."""

    backend: str
    registry: "Registry"
    opt_level: int = 2
    decompose: frozenset[str] = frozenset()
    checks: bool = False
    disable: frozenset[str] = frozenset()
    log: list[tuple[str, str]] = field(default_factory=list)

    def note(self, stage: str, message: str) -> None:
        self.log.append((stage, message))
