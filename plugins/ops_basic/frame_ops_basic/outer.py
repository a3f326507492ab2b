"""``outer_products_as_products``: a matmul with a contraction length of 1 becomes ``a * b + 0.0``.

``[n, 1] @ [1, h]`` (a network's first layer on scalar inputs, and every
Taylor or forward-mode tangent of it: ``ones[1, 1] @ w``) is an outer
product. The matmul kernel already computes it as a broadcast multiply plus
``+0.0`` (bitwise numpy's matmul, see ``linalg``: the one product is summed
into a zero, which only turns ``-0.0`` into ``+0.0``); as graph ops instead,
the multiply and the add fuse with the elementwise ops around them, and
``simplify_algebra`` (which runs next) drops a product with ones:
``ones[1, 1] @ w`` becomes ``w + 0.0``. So does the gradient ``a^T @ gy`` of such a product with
respect to its right operand (``matmul_grad_rhs_internal`` with a one-row ``a``), and the gradient
``gy @ b^T`` of a product ``[n, h] @ b[h, 1]`` with respect to its left operand
(``matmul_grad_lhs_internal`` with one-column ``gy`` and ``b``: a network's last layer to one output, as
``gy * b^T + 0.0``, ``b^T`` a view). Only float operands of rank 2 or more
whose product shape is plain broadcasting of the two shapes are rewritten,
not half precision (its matmul accumulates in float32).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

import numpy as np

from frame_core import Graph, Node, PassSpec, Rewriter

from ._shapes import accumulation_dtype


#: Every op ``_is_outer`` may accept (an op it tests belongs here too): a walk tests the op first, in C, and
#: calls ``_is_outer`` only for these.
_OUTER_OPS = frozenset({"matmul", "matmul_grad_rhs_internal", "matmul_grad_lhs_internal"})
_type = attrgetter("type")


def _is_outer(node: Node) -> bool:
    if node.op == "matmul_grad_rhs_internal":  # a^T @ gy with a one-row a: the gradient of the product above
        a, gy = (v.type for v in node.inputs)
        return (a.rank == 2 and gy.rank == 2 and a.shape[0] == 1 and a.dtype.is_float
                and accumulation_dtype(a) == a.dtype.np and node.outputs[0].type.shape == (a.shape[1], gy.shape[1]))
    if node.op == "matmul_grad_lhs_internal":  # gy @ b^T with one column each: the outer product gy b^T
        gy, b = (v.type for v in node.inputs)
        return (gy.rank == 2 and b.rank == 2 and gy.shape[1] == 1 and b.shape[1] == 1 and gy.dtype.is_float
                and accumulation_dtype(gy) == gy.dtype.np and node.outputs[0].type.shape == (gy.shape[0], b.shape[0]))
    if node.op != "matmul":
        return False
    a, b = (v.type for v in node.inputs)
    if a.rank < 2 or b.rank < 2 or a.shape[-1] != 1 or not a.dtype.is_float or accumulation_dtype(a) != a.dtype.np:
        return False
    try:
        return np.broadcast_shapes(a.shape, b.shape) == node.outputs[0].type.shape
    except ValueError:
        return False


def _outer_test() -> Callable[[Node], bool]:
    """``_is_outer``, answered once per signature: it reads only the op and the input and output types
    (interned, so a tuple of them hashes by identity), and a graph repeats a few signatures many times."""
    known: dict[tuple, bool] = {}

    def is_outer(node: Node) -> bool:
        key = (node.op, *map(_type, node.inputs), node.outputs[0].type)
        answer = known.get(key)
        if answer is None:
            answer = known[key] = _is_outer(node)
        return answer
    return is_outer


def outer_products_as_products(graph: Graph, ctx) -> Graph:  # noqa: ANN001 - a CompileContext
    nodes = graph.nodes
    is_outer = _outer_test()
    first = None
    for i, node in enumerate(nodes):  # (a plain loop: most graphs have no outer product, and it walks them all)
        if node.op in _OUTER_OPS and is_outer(node):
            first = i
            break
    if first is None:
        return graph
    rw = Rewriter(graph, ctx)
    rw.keep(nodes[:first])
    zeros: dict = {}  # one +0.0 constant per dtype
    rewritten = []
    for node in nodes[first:]:
        if node.op not in _OUTER_OPS or not is_outer(node):
            rw.copy(node)
            continue
        a, b = rw.read(node.inputs)
        if node.op == "matmul_grad_rhs_internal" and a.type.shape[1] != 1:
            a = rw.new.apply("reshape", a, shape=(a.type.shape[1], 1))  # a one-row a^T is its column: a view
        if node.op == "matmul_grad_lhs_internal":
            b = rw.new.apply("reshape", b, shape=(1, b.type.shape[0]))  # a one-column b^T is its row: a view
        dtype = node.outputs[0].type.dtype.np
        zero = zeros.get(dtype)
        if zero is None:
            zero = zeros[dtype] = rw.new.constant(np.zeros((), dtype))
        product = rw.new.apply("mul", a, b)
        rw.alias(node.outputs[0], rw.new.apply("add", product, zero))  # -0.0 -> +0.0, as the sum into zero
        rewritten.append(node)
    ctx.note("outer_products_as_products", f"rewrote {len(rewritten)} matmuls")
    ctx.dropped = rewritten
    return rw.finish()


PASSES = [PassSpec("outer_products_as_products", outer_products_as_products, after="fold_constants", min_level=1,
                   doc="a @ b (and a^T @ gy, gy @ b^T) with a contraction length of 1 -> a * b + 0.0 (bitwise the same; fuses)")]
