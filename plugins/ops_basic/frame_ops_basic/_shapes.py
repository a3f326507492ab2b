"""Shape-inference helpers shared by the pack's ops."""

from __future__ import annotations

from frame_core import TensorType
from frame_core.ops_registry.schema import NodeContext


def broadcast(ctx: NodeContext) -> list[TensorType]:
    """numpy broadcasting of all inputs, which must share one dtype."""
    types = ctx.input_types
    first = types[0]
    for i, t in enumerate(types[1:], 1):
        if t.dtype is not first.dtype:
            raise ctx.error(f"inputs must share a dtype, got {first} and {t} (input {i}); cast one of them first")
    shape = broadcast_shapes(ctx, [t.shape for t in types])
    return [TensorType(first.dtype, shape)]


def broadcast_shapes(ctx: NodeContext, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0}
        dims.discard(1)
        if len(dims) > 1:
            listed = " and ".join(f"[{', '.join(map(str, s))}]" for s in shapes)
            raise ctx.error(
                f"cannot broadcast shapes {listed}: at axis {axis - rank} (counting from the end) the sizes are "
                f"{sorted(dims)}; numpy broadcasting needs equal sizes or 1"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def float_unary(ctx: NodeContext) -> list[TensorType]:
    """Same type as the input, which must be floating."""
    (t,) = ctx.input_types
    if not t.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {t}; cast it to a float dtype first")
    return [t]


def float_broadcast(ctx: NodeContext) -> list[TensorType]:
    (out,) = broadcast(ctx)
    if not out.dtype.is_float:
        raise ctx.error(f"needs floating inputs, got {', '.join(map(str, ctx.input_types))}")
    return [out]


def normalize_axes(ctx: NodeContext, axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """Axes as sorted non-negative ints (``None`` means all); errors name the bad axis."""
    if axes is None:
        return tuple(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.error(f"axis {a} is out of range for rank {rank} (valid: {-rank}..{rank - 1})")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(out))
