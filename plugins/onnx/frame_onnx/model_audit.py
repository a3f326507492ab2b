"""``frame onnx audit``: for every node of an ONNX model, whether frame imports it and to which order the
frame ops it becomes are differentiable (the closure audit of ``frame audit gradients``, applied to a
real model).

A node is *imported* (it became frame ops), *folded* (its inputs were known while importing, so it became
a constant: shape arithmetic), *unsupported* (no rule, or a configuration the rule refuses) or *skipped*
(it reads the output of an unsupported node). Its order is the smallest closure order of the frame nodes
it became, through control-flow bodies (``closure.graph_order``); nodes whose outputs are integers or
booleans never limit it. Findings (exit status 1): an unsupported node, and an imported node
differentiable to a lower order than ``--order``.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["audit_model"]


def audit_model(source: Any, *, order: int = 1, dims: dict[str, int] | None = None) -> dict[str, Any]:
    """The audit as data: ``{"ok", "model", "required_order", "opset", "nodes": [...], "findings": [...]}``."""
    import frame_core as fc
    from frame_core import Graph
    from frame_core import graph_order

    from ._import import import_model
    from ._read import read_model
    from .errors import UnsupportedModelError

    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise fc.ArgumentError(f"order must be an int of 1 or more, got {order!r}")
    model, _ = read_model(source)
    records: list[dict[str, Any]] = []
    try:
        import_model(model, dims=dims, records=records)
    except UnsupportedModelError:
        pass  # every node was tried: the records say which ones failed
    reg = fc.registry()
    reg.closure  # noqa: B018 - the deep audit, computed once
    nodes, findings = [], []
    for r in records:
        created = r.pop("frame_nodes")
        ops = sorted({n.op for n in created})
        if r["status"] == "imported" and not created:  # Constant, Shape: known while importing
            r["status"] = "folded"
        row = {**r, "frame_ops": ops, "order": None}
        if r["status"] == "imported" and created:
            sub = Graph("node")
            sub.nodes = list(created)
            floating = [n for n in created if any(v.type.dtype.is_float for v in n.outputs)]
            if floating:
                value, path = graph_order(sub, reg)
                row["order"] = value
                if isinstance(value, int) and value < order:
                    where = " > ".join(path)
                    findings.append({"kind": "order", "node": r["node"], "op_type": r["op_type"],
                                     "message": f"node {r['node']} ({r['op_type']}) is differentiable to order "
                                                f"{value}, {order} required (limited by {where})"})
            else:
                row["order"] = "n/a"
        elif r["status"] == "folded":
            row["order"] = "n/a"
        elif r["status"] == "unsupported":
            findings.append({"kind": "unsupported", "node": r["node"], "op_type": r["op_type"],
                             "message": f"node {r['node']} ({r['op_type']}, {r['domain']}, opset {r['opset']}) is not "
                                        f"imported: {r['reason']}"})
        nodes.append(row)
    counts = {s: sum(n["status"] == s for n in nodes) for s in ("imported", "folded", "unsupported", "skipped")}
    if isinstance(source, (str, os.PathLike)):
        shown = os.fspath(source)
    else:
        shown = f"<model {model.graph.name!r}>"
    return {"ok": not findings, "model": shown, "required_order": order, "opset": max(
        (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0),
        "counts": counts, "nodes": nodes, "findings": findings}


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def render_text(report: dict[str, Any]) -> str:
    rows = [[n["node"], n["op_type"], n["status"], ", ".join(n["frame_ops"]) or "-",
             "-" if n["order"] is None else str(n["order"]), n["reason"] or ""] for n in report["nodes"]]
    out = [format_table(["NODE", "OP", "STATUS", "FRAME OPS", "ORDER", "NOTE"], rows)]
    if report["findings"]:
        out += ["", f"findings ({len(report['findings'])}):"] + [f"  - {f['message']}" for f in report["findings"]]
    out += ["", summary(report)]
    return "\n".join(out)


def summary(report: dict[str, Any]) -> str:
    c = report["counts"]
    total = sum(c.values())
    head = (f"{total} node{'s' if total != 1 else ''} in {report['model']} (opset {report['opset']}): "
            f"{c['imported']} imported, {c['folded']} folded to constants, {c['unsupported']} unsupported, "
            f"{c['skipped']} skipped; required order {report['required_order']}")
    n = len(report["findings"])
    return head + ("\naudit: clean" if not n else f"\naudit: {n} finding{'s' if n != 1 else ''}")


def _escape(text: str, *, property_value: bool = False) -> str:
    """GitHub workflow-command escaping (% CR LF always; also : and , in property values)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text


def github_line(finding: dict[str, Any]) -> str:
    title = f"frame onnx audit ({finding['kind']} {finding['op_type']})"
    return f"::error title={_escape(title, property_value=True)}::{_escape(finding['message'])}"
