"""Compile passes of conv1d (contributed through ``frame_register_passes``).

merge_conv1d_gradients (after ``eliminate_dead_nodes``)
    conv1d's GradientFn makes two nodes on the same ``gy``: ``conv1d_grad_input_internal(gy, w)`` and
    ``conv1d_grad_weight_internal(x, gy)``. When both are live (the input needs a gradient too: every layer
    but the first), they become one ``conv1d_grads_internal(x, gy, w)`` node, whose kernel builds gy's
    columns once for both products where the input gradient is a correlation (``conv.conv_grads``;
    the input gradient keeps its bits, the weight gradient's last bits change, bounded by
    tests/test_conv_paths.py). The node stands where the first of the two stood; a pair whose second node reads
    a value made between the two is left alone. Without this pass (``opt_level=0``, or
    ``disable=["merge_conv1d_gradients"]``) the two kernels run in turn.

merge_conv1d_multiply (after ``eliminate_dead_nodes``)
    A ``conv1d`` whose output only one ``mul`` reads, against a value of the output's own type (float32 or float64,
    no broadcasting), and that is no output of the graph, becomes ``conv1d_mul_internal(x, w, g)`` where the
    ``mul`` stood: each sample's product is multiplied while it is in cache, and the convolution's output is never
    written out and read back (frame's loss ``sum(y * g)``, a mask). Same products, same multiplications: the same
    bits. Only rows of at least 512 outputs (one sample per product) are merged, where this is measured faster.
"""

from __future__ import annotations

from typing import Any

from frame_core import Graph, Node, PassSpec, Rewriter

__all__ = ["PASSES", "merge_conv1d_gradients", "merge_conv1d_multiply"]

_ATTRS = ("stride", "padding", "dilation", "groups")


def _short(node: Node) -> str:
    return node.op.rpartition("::")[2]


def _pairs(graph: Graph) -> dict[Node, Node]:
    """First node -> second node of each grad_input / grad_weight pair on the same gy (with the same input
    channels, input length, kernel size and attributes), the second reading nothing made between the two. Two
    convolutions whose outputs share a gradient (``conv(x1, w1) + conv(x2, w2)``) may pair one's input gradient
    with the other's weight gradient: the merged node computes exactly the two ops, so that is as good."""
    inputs: dict[tuple, list[Node]] = {}
    weights: dict[tuple, list[Node]] = {}
    made_at = {v: i for i, node in enumerate(graph.nodes) for v in node.outputs}
    where = {node: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        short = _short(node)
        if short == "conv1d_grad_input_internal":
            gy, w = node.inputs
            c_in = w.type.shape[1] * node.attrs["groups"]
            key = (gy, c_in, node.attrs["length"], w.type.shape[2], *(str(node.attrs[a]) for a in _ATTRS))
            inputs.setdefault(key, []).append(node)
        elif short == "conv1d_grad_weight_internal":
            x, gy = node.inputs
            key = (gy, x.type.shape[1], x.type.shape[2], node.attrs["kernel_size"],
                   *(str(node.attrs[a]) for a in _ATTRS))
            weights.setdefault(key, []).append(node)
    pairs = {}
    for key, grad_inputs in inputs.items():
        for grad_input, grad_weight in zip(grad_inputs, weights.get(key, ())):
            if grad_weight.inputs[0].type.dtype is not grad_input.inputs[0].type.dtype:
                continue
            first, second = sorted((grad_input, grad_weight), key=where.__getitem__)
            if all(made_at.get(v, -1) < where[first] for v in second.inputs):
                pairs[first] = second
    return pairs


def merge_conv1d_gradients(graph: Graph, ctx: Any) -> Graph:
    """Run each convolution's two gradients as one node (module docstring)."""
    ops = {op.rpartition("::")[2] for op in ctx.ops(graph)}  # (the set of ops, memoised per graph)
    if "conv1d_grad_input_internal" not in ops or "conv1d_grad_weight_internal" not in ops:
        return graph
    pairs = _pairs(graph)
    if not pairs:
        return graph
    seconds = set(pairs.values())
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in seconds:
            continue
        second = pairs.get(node)
        if second is None:
            rw.copy(node)
            continue
        grad_input, grad_weight = (node, second) if _short(node) == "conv1d_grad_input_internal" else (second, node)
        (gy, w), x = rw.read(grad_input.inputs), rw.read(grad_weight.inputs)[0]
        merged = rw.emit("conv1d_grads_internal", [x, gy, w], {a: grad_input.attrs[a] for a in _ATTRS},
                         [grad_input.outputs[0].type, grad_weight.outputs[0].type])
        rw.alias(grad_input.outputs[0], merged.outputs[0])
        rw.alias(grad_weight.outputs[0], merged.outputs[1])
    ctx.note("merge_conv1d_gradients", f"{len(pairs)} conv1d input and weight gradient pair(s) run as one node")
    return rw.finish()


def _multiplied(graph: Graph) -> dict[Node, tuple[Node, Any]]:
    """mul node -> (the conv1d node it alone reads, the other factor), for the pairs merge_conv1d_multiply takes."""
    from .conv import _COLUMNS  # the one-sample-per-product threshold (the pass module stays free of numpy)

    reads: dict[Any, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            reads[v] = reads.get(v, 0) + 1
    outputs = set(graph.outputs)
    found = {}
    for node in graph.nodes:
        if _short(node) != "mul":
            continue
        for y, g in (node.inputs, node.inputs[::-1]):
            conv = y.producer
            if (conv is None or _short(conv) != "conv1d" or reads[y] != 1 or y in outputs or g.type != y.type
                    or y.type.dtype.name not in ("float32", "float64") or y.type.shape[2] < _COLUMNS):
                continue
            found[node] = (conv, g)
            break
    return found


def merge_conv1d_multiply(graph: Graph, ctx: Any) -> Graph:
    """Run a convolution and the one product that reads it as one node (module docstring)."""
    ops = {op.rpartition("::")[2] for op in ctx.ops(graph)}
    if "conv1d" not in ops or "mul" not in ops:
        return graph
    found = _multiplied(graph)
    if not found:
        return graph
    convs = {conv for conv, _ in found.values()}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in convs:
            continue
        pair = found.get(node)
        if pair is None:
            rw.copy(node)
            continue
        conv, g = pair
        x, w = rw.read(conv.inputs)
        merged = rw.emit("conv1d_mul_internal", [x, w, rw.read([g])[0]], dict(conv.attrs), [node.outputs[0].type])
        rw.alias(node.outputs[0], merged.outputs[0])
    ctx.note("merge_conv1d_multiply", f"{len(found)} conv1d and product pair(s) run as one node")
    return rw.finish()


PASSES = [
    PassSpec("merge_conv1d_gradients", merge_conv1d_gradients, after="eliminate_dead_nodes", min_level=1,
             doc="a conv1d's input and weight gradients on the same gy run as one node that builds gy's columns "
                 "once"),
    PassSpec("merge_conv1d_multiply", merge_conv1d_multiply, after="eliminate_dead_nodes", min_level=1,
             doc="a conv1d that only one mul reads (by a value of its own type) runs with the product as one node: "
                 "its output is never written out and read back"),
]
