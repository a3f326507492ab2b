"""What the gradient-closure audit (``closure.py``, ARCH-068) finds for one op.

Its own module, so that the start-up's stored audit (``audit_cache.py``) reads a stored result back without
importing the audit itself (and the graph checker it uses).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CLOSED", "ClosureInfo"]

CLOSED = "closed"


@dataclass
class ClosureInfo:
    """Closure facts for one op: ``order`` is an int or ``"closed"``; ``chain`` shows what breaks it.

    ``bodies`` marks a control-flow op: its nodes are differentiable as often as ``order`` and the ops in
    their bodies allow (``graph_order``).
    """

    op: str
    differentiable: str
    order: int | str
    chain: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)
    bodies: bool = False
    #: forward mode: ``"direct"`` (the op's JvpFn), ``"derived"`` (from its GradientFn) or ``"none"``
    forward_rule: str = "none"
    #: how many times ``build_jvp_graph`` can be applied to a graph holding the op (int or ``"closed"``)
    forward_order: int | str = 0

    @property
    def closed(self) -> bool:
        return self.order == CLOSED

    def at_least(self, order: int) -> bool:
        return self.order == CLOSED or (isinstance(self.order, int) and self.order >= order)

    def json_forward_order(self) -> int | str | None:
        """The forward-mode order as JSON shows it: int, ``"closed"``, or ``None`` without any forward rule."""
        return None if self.forward_rule == "none" else self.forward_order

    def json_order(self) -> int | str | None:
        """What ``frame ops list --format json`` shows: int, ``"closed"``, or ``None`` without a GradientFn."""
        return None if self.differentiable != "yes" else self.order
