"""``gc_paused()``: no cyclic garbage collection while a transform builds a large graph.

Graph building allocates many small objects that live on (nodes, values,
types); each generation-2 collection walks all of them, which makes building
a graph of n nodes cost more than linear time. Pausing the collector for the
duration of one transform keeps it linear; garbage is collected afterwards.

What a large transform leaves behind is a graph (or a program) that lives on:
when the pause ends after a transform said it made a graph of ``LARGE_GRAPH``
nodes or more (``made(n)``), or with more than ``PROMOTE_ABOVE`` objects
allocated and not freed, the young objects are moved straight into the oldest
generation (``gc.freeze()`` then ``gc.unfreeze()``, which relinks the lists
without walking them) instead of being walked by a young collection and then
again by a middle one on their way there. (The count alone misses a compile:
it frees about as many objects as it makes, yet what survives is the whole
program.) Nothing is leaked: the oldest generation's collections still examine
them, and any cycle among them is still freed. It is skipped when the program
froze objects itself (``gc.get_freeze_count()``), whose frozen set it would
otherwise release.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused", "made", "PROMOTE_ABOVE", "LARGE_GRAPH"]

#: New objects (net of those freed) above which the end of a pause promotes them to the oldest generation.
PROMOTE_ABOVE = 50_000
#: Nodes from which a transform's graph counts as large (``made``).
LARGE_GRAPH = 10_000

_lock = threading.Lock()
_depth = 0  # transforms running now, in any thread
_was_enabled = True
_large = False  # a transform inside the current pause made a large graph


def made(nodes: int) -> None:
    """Say, inside a pause, that the transform made (or compiled) a graph of ``nodes`` nodes: from
    ``LARGE_GRAPH`` on, what is young when the pause ends is promoted to the oldest generation."""
    global _large
    if nodes >= LARGE_GRAPH:
        _large = True


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while any thread is inside; the state it had before the first one returns
    after the last one leaves (a per-call save and restore would let one thread re-enable it under another)."""
    global _depth, _was_enabled, _large
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                large, _large = _large, False
                if _was_enabled:
                    if (large or gc.get_count()[0] > PROMOTE_ABOVE) and not gc.get_freeze_count():
                        gc.freeze()
                        gc.unfreeze()
                    gc.enable()
