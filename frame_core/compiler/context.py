"""``CompileContext``: what every compile stage may read (backend, registry, options, a log).

Its own module so that passes depend on it and ``pipeline.py`` depends on
the passes, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..ops_registry.registry import Registry

__all__ = ["CompileContext"]

_op = attrgetter("op")


@dataclass
class CompileContext:
    """What every stage may read: backend, registry, options, and a log of what each stage did.

    ``types_checked`` is ``(graph, its nodes)`` when stage 1's walk found every recorded type equal to the
    inferred one on exactly that graph (stage 2 then returns it at once), else ``None``. ``protected`` is
    the set of the caller's nodes while the graph stages run: a ``Rewriter`` made with the context rewires
    every other node in place (see ``Rewriter``). A stage that does so may set ``dropped`` to the list of
    its input's nodes that its result no longer holds (the pipeline then releases just those). ``source`` is
    the caller's graph itself: no stage edits its lists (a pack's pass that does is refused).
    """

    backend: str
    registry: "Registry"
    opt_level: int = 2
    decompose: frozenset[str] = frozenset()
    checks: bool = False
    disable: frozenset[str] = frozenset()
    fast_math: bool = False  # compile(fast_math=True): packs may approximate functions (docs/fast-math.md)
    log: list[tuple[str, str]] = field(default_factory=list)
    types_checked: Any = field(default=None, repr=False, compare=False)
    protected: Any = field(default=None, repr=False, compare=False)
    dropped: Any = field(default=None, repr=False, compare=False)
    source: Any = field(default=None, repr=False, compare=False)

    _ops: Any = field(default=None, repr=False, compare=False)

    def note(self, stage: str, message: str) -> None:
        self.log.append((stage, message))

    def ops(self, graph: Any) -> set[str]:
        """The set of ops of ``graph``'s nodes. Memoised for the graph last asked about: stages that change
        nothing return their input, so the stages after them ask about the same graph (a node's op never
        changes; a graph's node list is not edited once a stage has returned it)."""
        cached = self._ops
        if cached is not None and cached[0] is graph and cached[1] == len(graph.nodes):
            return cached[2]
        ops = set(map(_op, graph.nodes))
        self._ops = (graph, len(graph.nodes), ops)
        return ops

    def know_ops(self, graph: Any, ops: set[str]) -> None:
        """Record ``ops`` as the set of ``graph``'s ops (a stage whose walk met every node of the graph it
        returns, or built it, knows it): ``ops(graph)`` then answers without a walk of its own."""
        self._ops = (graph, len(graph.nodes), ops)
