"""``reuse_norm_statistics``: a training graph's normalisation computes its statistics once.

A training graph holds ``y = layer_norm(x, w, b)`` and, from autodiff, ``layer_norm_grad_internal(x, w, gy)``,
which normalises the same ``x`` again. The pass replaces the pair by ``layer_norm_train_internal(x, w, b) ->
(y, xhat, rstd)`` and ``layer_norm_grad_saved_internal(xhat, rstd, w, gy)``, so the backward starts from the
forward's normalised ``x`` (likewise ``group_norm``, and training-mode ``batch_norm``, whose train op returns
the centred ``x``). The new
kernels do the pair's arithmetic in the same order: the results are the same bits, with fewer passes over
the data. float16/bfloat16 pairs (computed in float32) are left alone, as is a forward whose gradient is not
in the graph.
"""

from __future__ import annotations

import numpy as np

from frame_core import Graph, Node, PassSpec, Rewriter, TensorType

#: forward op -> (its gradient op, the forward's attributes the gradient must share)
_PAIRS = {"layer_norm": ("layer_norm_grad_internal", ("eps",)),
          "batch_norm": ("batch_norm_grad_internal", ("momentum", "eps")),
          "group_norm": ("group_norm_grad_internal", ("num_groups", "eps"))}
_GRADS = {grad: fwd for fwd, (grad, _) in _PAIRS.items()}


def _key(node) -> tuple | None:  # noqa: ANN001 - a graph node
    """What a forward node and its gradient node have in common: op, x, weight and the shared attributes."""
    fwd = _GRADS.get(node.op, node.op)
    if fwd not in _PAIRS or node.inputs[0].type.dtype.np not in (np.float32, np.float64):
        return None
    if node.op == "batch_norm" and not node.attrs["training"]:
        return None
    return (fwd, node.inputs[0], node.inputs[1], *(node.attrs[a] for a in _PAIRS[fwd][1]))


def reuse_norm_statistics(graph: Graph, ctx) -> Graph:  # noqa: ANN001 - a CompileContext
    if ctx.ops(graph).isdisjoint(_GRADS):
        return graph
    forward: dict[tuple, Node] = {}  # key -> the first forward node
    gradients: set[tuple] = set()  # keys of gradient nodes
    for node in graph.nodes:
        key = _key(node)
        if key is not None:
            if node.op in _GRADS:
                gradients.add(key)
            else:
                forward.setdefault(key, node)
    paired = forward.keys() & gradients
    if not paired:
        return graph
    rw = Rewriter(graph, ctx)
    saved = {}  # key -> (xhat or xc, rstd) of the rewritten forward
    for node in graph.nodes:
        key = _key(node)
        if key not in paired or (forward[key] is not node and (node.op not in _GRADS or key not in saved)):
            rw.copy(node)  # (a gradient computed before its forward, not autodiff's order, is left alone too)
            continue
        ins = rw.read(node.inputs)
        if node is forward[key]:
            xt = node.inputs[0].type
            if node.op == "layer_norm":
                rstd_t = TensorType(xt.dtype, xt.shape[:xt.rank - node.inputs[1].type.rank])
                new = rw.emit("layer_norm_train_internal", ins, dict(node.attrs),
                              [node.outputs[0].type, xt, rstd_t])
            elif node.op == "group_norm":
                rstd_t = TensorType(xt.dtype, (xt.shape[0], node.attrs["num_groups"]))
                new = rw.emit("group_norm_train_internal", ins, dict(node.attrs), [node.outputs[0].type, xt, rstd_t])
            else:
                new = rw.emit("batch_norm_train_internal", ins, dict(node.attrs),
                              [*(o.type for o in node.outputs), xt, node.inputs[1].type])
            for old, value in zip(node.outputs, new.outputs):
                rw.alias(old, value)
            saved[key] = new.outputs[len(node.outputs):]
        else:  # every gradient node of this normalisation
            xhat, rstd = saved[key]
            if node.op == "layer_norm_grad_internal":  # (x, w, gy)
                new = rw.emit("layer_norm_grad_saved_internal", [xhat, rstd, ins[1], ins[2]], {},
                              [o.type for o in node.outputs])
            elif node.op == "group_norm_grad_internal":  # (x, w, gy)
                new = rw.emit("group_norm_grad_saved_internal", [xhat, rstd, ins[1], ins[2]],
                              {"num_groups": node.attrs["num_groups"]}, [o.type for o in node.outputs])
            else:  # (x, w, gy, g_rm, g_rv)
                new = rw.emit("batch_norm_grad_saved_internal", [xhat, rstd, *ins[1:]],
                              {"momentum": node.attrs["momentum"]}, [o.type for o in node.outputs])
            for old, value in zip(node.outputs, new.outputs):
                rw.alias(old, value)
    ctx.note("reuse_norm_statistics", f"{len(paired)} normalisation{'s' if len(paired) > 1 else ''} "
                                      "computed once for the forward and its gradient")
    return rw.finish()


PASSES = [PassSpec("reuse_norm_statistics", reuse_norm_statistics, after="eliminate_common_subexpressions",
                   min_level=1, doc="layer_norm / batch_norm / group_norm and their gradient in one graph: the "
                                    "gradient starts from the forward's statistics instead of normalising x again")]
