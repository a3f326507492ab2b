"""frame-native: compiled fused elementwise kernels for frame, tiered behind numpy.

Installed, it is active: after ``fuse_elementwise``, groups of exactly
rounded ops (add, sub, mul, div, neg, square, sqrt, relu and its gradient,
accumulation) on float32/float64 become ``native_fused_internal`` nodes. They
run frame's numpy code at first; a background thread compiles them with
llvmlite into explicit-vector machine code and swaps it in; both give the
same bits. ``FRAME_NATIVE=0`` turns it off. See ``docs/native.md``.

Public helpers: ``wait(timeout)`` blocks until queued kernels are compiled,
``status()`` reports what the compiler has done, ``tier_of(executable)``
lists the tier of every tiered kernel of a compiled graph.
"""

from __future__ import annotations

from typing import Any

from .jit import status, wait

__version__ = "0.1.0"
__all__ = ["wait", "status", "tier_of"]


def tier_of(executable: Any) -> list[str]:
    """The tier (``numpy``, ``queued``, ``native``, ``failed``, ``off``) of each tiered kernel of ``executable``.
    In a forked child a kernel the parent had queued is ``off``: the child never compiles it."""
    import os

    tiers = [ins.kernel.native for ins in executable.instructions if hasattr(ins.kernel, "native")]
    return ["off" if t.state == "queued" and t.pid != os.getpid() else t.state for t in tiers]
