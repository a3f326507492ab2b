"""Scan-input hoisting: a row of ``xs`` times an invariant matrix, computed for every step before the loop.

A scan body of an RNN reads its input row through a projection, ``x_t @ W``,
that does not depend on the carry. ``scan``'s front end moves each such
product out of the body: the enclosing graph computes ``xs @ W`` for all steps
(``[L, ..., K] @ [K, N]``, one batched matmul call instead of ``L`` runs of a
body instruction), and the body reads its row as a new scanned input. Rows and
invariants the body no longer reads leave the node.

The forward results are bitwise those of the body computing the product: the
batched matmul multiplies row by row with the same BLAS call per row. What
changes is the gradient with respect to ``W``: it becomes one batched product
summed over the steps after the reverse loop (the matmul's own gradient)
instead of ``L`` products accumulated one per step inside it, so its last bits
differ (a different summation order; ``docs/control-flow.md`` states the bound
the tests check). Gradients of the rows ``xs`` stay bitwise the same.

Only a matmul whose left operand is a row of rank 2 or more (a batch of rows:
a rank-1 row is a vector-matrix product, which BLAS computes differently from
a batch of them) and whose right operand is an invariant float32/float64
matrix is hoisted; a body given as a ``Graph`` is hoisted too.
"""

from __future__ import annotations

from collections.abc import Sequence

from frame_core import Graph, Node, Tensor, Value, apply

__all__ = ["hoist_row_products"]

_FLOATS = ("float32", "float64")


def _hoistable(node: Node, rows: dict, invariants: dict) -> bool:
    if node.op.rpartition("::")[2] != "matmul" or len(node.inputs) != 2:
        return False
    x, w = node.inputs
    return (x in rows and w in invariants and x.type.rank >= 2 and w.type.rank == 2
            and x.type.dtype is w.type.dtype and x.type.dtype.name in _FLOATS)


def hoist_row_products(body: Graph, nc: int, scanned: Sequence[Tensor],
                       invariants: Sequence[Tensor]) -> tuple[Graph, list[Tensor], list[Tensor]]:
    """``(body, scanned, invariants)`` with every hoistable ``row @ invariant`` of ``body`` computed before the
    loop, in the graph being traced (module docstring). ``body`` takes ``nc`` carries, one row of each
    ``scanned`` tensor, then one input per ``invariants`` tensor; what is returned keeps that layout."""
    scanned, invariants = list(scanned), list(invariants)
    while True:
        nx = len(scanned)
        rows = {v: k for k, v in enumerate(body.inputs[nc:nc + nx])}
        invs = {v: k for k, v in enumerate(body.inputs[nc + nx:])}
        picks = [n for n in body.nodes if _hoistable(n, rows, invs)]
        if not picks:
            return body, scanned, invariants
        alias, new_rows = {}, []
        for node in picks:
            x, w = node.inputs
            scanned.append(apply("matmul", scanned[rows[x]], invariants[invs[w]]))
            row = Value(node.outputs[0].type, None, -1, f"{x.name or 'x'}@{w.name or 'w'}")
            alias[node.outputs[0]] = row
            new_rows.append(row)
        body = _rebuilt(body, nc, nx, picks, alias, new_rows)
        # rows and invariants nothing reads any more leave the body and the node
        read = {v for n in body.nodes for v in n.inputs} | set(body.outputs)
        n_rows = nx + len(new_rows)
        keep_rows = [k for k in range(n_rows) if body.inputs[nc + k] in read]
        keep_invs = [k for k in range(len(invariants)) if body.inputs[nc + n_rows + k] in read]
        body.inputs = [*body.inputs[:nc], *(body.inputs[nc + k] for k in keep_rows),
                       *(body.inputs[nc + n_rows + k] for k in keep_invs)]
        scanned = [scanned[k] for k in keep_rows]
        invariants = [invariants[k] for k in keep_invs]


def _rebuilt(body: Graph, nc: int, nx: int, picks: list[Node], alias: dict[Value, Value],
             new_rows: list[Value]) -> Graph:
    """``body`` without ``picks``, their outputs read from ``new_rows`` (inputs after the rows)."""
    g = Graph(body.name)
    g.inputs = [*body.inputs[:nc + nx], *new_rows, *body.inputs[nc + nx:]]
    dropped = set(picks)
    for node in body.nodes:
        if node in dropped:
            continue
        ins = tuple(alias.get(v, v) for v in node.inputs)
        if ins == node.inputs:
            g.nodes.append(node)
            continue
        copy = Node(node.op, ins, node.attrs)
        copy.outputs = tuple(Value(v.type, copy, v.index, v.name) for v in node.outputs)
        alias.update(zip(node.outputs, copy.outputs))
        g.nodes.append(copy)
    g.outputs = [alias.get(v, v) for v in body.outputs]
    g._output_names = dict(body._output_names)
    return g
