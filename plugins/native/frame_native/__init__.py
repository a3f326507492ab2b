"""frame-native: compiled fused elementwise kernels for frame, tiered behind numpy.

Installed, it is active: after ``fuse_elementwise``, groups of exactly
rounded ops (add, sub, mul, div, neg, square, sqrt, relu and its gradient,
accumulation) on float32/float64 become ``native_fused_internal`` nodes. They
run frame's numpy code at first; a background thread compiles them with
llvmlite into explicit-vector machine code and swaps it in; both give the
same bits. The training pairs of layer_norm and of batch_norm of x[N, C]
(frame-ops-nn) tier up the same way to compiled row and column kernels
(``rows.py``), and so do sums over the rows of ``x[N, C]`` (bias gradients:
``reduce_to_shape_internal``, ``colsums.py``), and so does an inference CNN layer
``relu(max_pool2d(conv2d(x, w), 2) + b)``: its columns and pool around frame-ops-nn's own matrix product
(``conv.py``). ``FRAME_NATIVE=0`` turns it off. See ``docs/native.md``.

Public helpers: ``wait(timeout)`` blocks until queued kernels are compiled,
``status()`` reports what the compiler has done, ``tier_of(executable)``
lists the tier of every tiered kernel of a compiled graph.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["wait", "status", "tier_of"]


def __getattr__(name: str) -> Any:
    # ``wait`` and ``status`` live in the compiler module, imported on first use: loading the pack (every
    # ``frame`` command does) then reads neither the compiler nor the code generator.
    if name in ("wait", "status"):
        from . import jit

        return getattr(jit, name)
    raise AttributeError(f"module 'frame_native' has no attribute {name!r}")


def tier_of(executable: Any) -> list[str]:
    """The tier (``numpy``, ``queued``, ``native``, ``failed``, ``off``) of each tiered kernel of ``executable``.
    In a forked child a kernel the parent had queued is ``off``: the child never compiles it."""
    import os

    tiers = [ins.kernel.native for ins in executable.instructions if hasattr(ins.kernel, "native")]
    return ["off" if t.state == "queued" and t.pid != os.getpid() else t.state for t in tiers]
