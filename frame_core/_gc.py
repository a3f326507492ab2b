"""``gc_paused()``: no cyclic garbage collection while a transform builds a large graph.

Graph building allocates many small objects that live on (nodes, values,
types); each generation-2 collection walks all of them, which makes building
a graph of n nodes cost more than linear time. Pausing the collector for the
duration of one transform keeps it linear; garbage is collected afterwards.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


_lock = threading.Lock()
_depth = 0  # transforms running now, in any thread
_was_enabled = True


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while any thread is inside; the state it had before the first one returns
    after the last one leaves (a per-call save and restore would let one thread re-enable it under another)."""
    global _depth, _was_enabled
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
            if _depth == 0 and _was_enabled:
                gc.enable()
