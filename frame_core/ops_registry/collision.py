"""``Collision``: several packs register one short op name (``Registry.collisions``, op identity in SPEC §4).

Its own module, so that loading the registry does not build the class when no names collide (start-up cost).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Collision"]


@dataclass(frozen=True)
class Collision:
    """Several packs register the short op name ``name``: their qualified names (load order) and the owner.

    ``owner`` is the qualified name the short name means, or ``None`` when it is ambiguous.
    """

    name: str
    qualnames: tuple[str, ...]
    owner: str | None
