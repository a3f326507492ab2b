"""``gc_paused()``: no cyclic garbage collection while a transform builds a large graph.

Graph building allocates many small objects that live on (nodes, values,
types); each generation-2 collection walks all of them, which makes building
a graph of n nodes cost more than linear time. Pausing the collector for the
duration of one transform keeps it linear; garbage is collected afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
