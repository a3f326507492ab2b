"""``frame audit gradients``: gradient coverage per pack, closure orders, optional numerical checks.

What counts as a finding (exit status 1):

- a selected pack that failed to load (import error, contract error, ...);
- a user-facing op that has neither a GradientFn nor a declared reason;
- an op with a GradientFn that is differentiable to a lower order than
  required (``--order N``, default 1: a GradientFn that reaches an
  unregistered op is not even usable once). Ops declared not
  differentiable are counted, never findings;
- with ``--numeric``: a failed check of ``frame_core.testing.check_op``
  (finite differences to order 2, or the op's closure order if lower);
- with ``--strict``: any other plugin problem, even outside ``--pack``, and
  op-name collisions between packs (warnings otherwise).

The closure orders come from the deep audit (ARCH-068): every op inside a
micro-graph is instantiated with the types it has there, recursively.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ._common import (
    EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, CliFailure, echo, emit_json, failed_pack, format_table, load,
    plugin_problems, resolve_pack, state, warn,
)
from .listing import BODIES_NOTE, describe_chain, gradient_note, order_text

if TYPE_CHECKING:  # pragma: no cover
    from ..ops_registry.registry import PackRecord, Registry
    from ..ops_registry.schema import OpSchema

__all__ = ["Finding", "audit_gradients", "collect_audit", "github_line"]


@dataclass
class Finding:
    """One problem the audit found: ``kind`` is pack-failed, missing-gradient, order, numeric, plugin or
    collision."""

    kind: str
    message: str
    pack: str | None = None
    op: str | None = None


def audit_gradients(order: int | None, numeric: bool, pack: str | None, strict: bool, fmt: str) -> int:
    """Run the audit, print it in ``fmt`` and return the exit status."""
    if order is not None and order < 1:
        raise CliFailure(
            f"error: --order must be 1 or more (the number of times every op must be differentiable), got {order}; "
            "use --order 2 to require second derivatives",
            EXIT_USAGE,
        )
    strict = strict or state.strict
    reg = load(strict=False, quiet=True, deep=True)
    report = collect_audit(reg, order=order or 1, numeric=numeric, pack=resolve_pack(reg, pack), strict=strict)
    state.verdict = EXIT_OK if report["ok"] else EXIT_FINDINGS  # (kept if the reader leaves while we print)
    for line in report["warnings"]:
        warn(f"warning: {line}")
    if fmt == "json":
        emit_json(report)
    elif fmt == "github":
        for finding in report["findings"]:
            echo(github_line(finding))
        for line in report["warnings"]:
            echo(github_line({"kind": "warning", "message": line}, level="warning"))
        warn(_summary(report))
    else:
        echo(_render_text(report))
    return EXIT_OK if report["ok"] else EXIT_FINDINGS


def collect_audit(reg: "Registry", *, order: int, numeric: bool, pack: str | None, strict: bool) -> dict[str, Any]:
    """The audit as data (what ``--format json`` prints; ``warnings`` also go to stderr)."""
    records = [r for r in reg.packs.values() if (r.name == pack if pack else r.name != "core")]
    findings: list[Finding] = []
    pack_rows, op_rows = [], []
    for record in records:
        schemas = sorted((s for s in reg.ops_of(record.name) if not s.internal), key=reg.key_of)
        pack_rows.append(_pack_row(record, schemas))
        if record.status == "failed":
            findings.append(Finding("pack-failed", failed_pack(record), pack=record.name))
        for schema in schemas:
            row, op_findings = _audit_op(schema, reg, order)
            op_rows.append(row)
            findings.extend(op_findings)
    if numeric:
        findings.extend(_numeric(reg, op_rows, order))
    warnings = []
    collisions = set(reg.collision_warnings())
    for problem in plugin_problems(reg, skip=[r.name for r in records]):  # the audited packs are findings above
        kind = "collision" if problem in collisions else "plugin"
        if strict:
            findings.append(Finding(kind, problem))
        elif kind == "collision":
            warnings.append(problem + " (--strict makes this a finding)")
        else:
            warnings.append(problem + " (not audited here; --strict makes this a finding)")
    for record in records:
        if record.status == "disabled":
            warnings.append(f"pack {record.name!r} is {record.error}; its ops were not audited")
    forward = {rule: sum(r["forward_rule"] == rule for r in op_rows) for rule in ("direct", "derived", "none")}
    forward["closed"] = sum(r["forward_order"] == "closed" for r in op_rows)
    keys = ("ops", "with_gradient", "not_differentiable", "missing")
    total = {"packs": len(pack_rows), **{k: sum(r[k] for r in pack_rows) for k in keys}}
    return {
        "ok": not findings,
        "required_order": order,
        "numeric": numeric,
        "strict": strict,
        "pack": pack,
        "packs": pack_rows,
        "total": total,
        "ops": op_rows,
        "forward": forward,
        "findings": [asdict(f) for f in findings],
        "warnings": warnings,
        "census": reg.op_census(),
    }


def _pack_row(record: "PackRecord", schemas: list["OpSchema"]) -> dict[str, Any]:
    return {
        "name": record.name,
        "distribution": record.distribution,
        "version": record.version,
        "status": record.status,
        "error": record.error,
        "ops": len(schemas),
        "with_gradient": sum(s.differentiable == "yes" for s in schemas),
        "not_differentiable": sum(s.differentiable == "no" for s in schemas),
        "missing": sum(s.differentiable == "missing" for s in schemas),
    }


def _audit_op(schema: "OpSchema", reg: "Registry", order: int) -> tuple[dict[str, Any], list[Finding]]:
    key = reg.key_of(schema)  # the short name, or the qualified one when another pack owns the short name
    info = reg.closure.get(key)
    findings = []
    breaks = describe_chain(info, reg) if info is not None and not info.closed else None
    row = {
        "name": key,
        "qualname": schema.qualname,
        "pack": schema.pack,
        "differentiable": schema.differentiable,
        "closure_order": info.json_order() if info is not None else None,
        "closure_bodies": bool(info is not None and info.bodies),
        "closure_breaks": breaks if schema.differentiable == "yes" else None,
        "not_differentiable": schema.not_differentiable,
        "forward_rule": info.forward_rule if info is not None else "none",
        "forward_order": info.json_forward_order() if info is not None else None,
    }
    if schema.differentiable == "missing":
        findings.append(Finding("missing-gradient", f"op {key!r} has no GradientFn and does not declare "
                                                    "not_differentiable='<reason>'", schema.pack, key))
    elif schema.differentiable == "yes" and info is not None and not info.at_least(order):
        extra = "".join(f"; {p}" for p in info.problems)
        findings.append(Finding(
            "order",
            f"op {key!r} is differentiable to order {info.order}, {order} required: {breaks}{extra}",
            schema.pack, key,
        ))
    return row, findings


def _numeric(reg: "Registry", op_rows: list[dict[str, Any]], order: int) -> list[Finding]:
    """Finite-difference checks of ``frame_core.testing`` on every user-facing op with a GradientFn.

    Orders 1 and 2 (or ``order`` when higher), every example, plus float16/bfloat16 against float32.
    """
    from ..testing import check_op

    findings = []
    for row in op_rows:
        row["numeric"] = None
        if row["differentiable"] != "yes":
            continue
        key = row["name"]
        schema = reg.schemas[key]
        try:
            report = check_op(schema, order=max(order, 2), registry=reg)  # orders above the closure order are skipped
        except Exception as exc:  # the kit reports a pack's crashes itself; this is the last line of defence
            findings.append(Finding("numeric", f"op {key!r}: the numerical check raised "
                                               f"{type(exc).__name__}: {exc}", schema.pack, key))
            continue
        failures = [r for r in report.results if not r.ok]
        row["numeric"] = {
            "ok": report.ok,
            "worst_error_order1": report.worst_error(1),
            "worst_error_order2": report.worst_error(2),
            "failed_checks": len(failures),
        }
        for r in failures:
            where = f" on example {r.example_index}" if r.example_index is not None else ""
            detail = r.detail or (f"relative error {r.error:.3g}" if r.error is not None else "failed")
            findings.append(Finding("numeric", f"op {key!r}: check {r.check!r}{where} failed: {detail}",
                                    schema.pack, key))
    return findings


# -- output ---------------------------------------------------------------------------------
def _escape(text: str, *, property_value: bool = False) -> str:
    """GitHub workflow-command escaping (% CR LF always; also : and , in property values)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def github_line(finding: dict[str, Any], level: str = "error") -> str:
    """One ``::error`` (or ``::warning``) workflow command for a finding (GitHub Actions makes it an annotation)."""
    title = f"frame audit gradients ({finding['kind']}" + (f" {finding['op']})" if finding.get("op") else ")")
    return f"::{level} title={_escape(title, property_value=True)}::{_escape(finding['message'])}"


def _summary(report: dict[str, Any]) -> str:
    total = report["total"]
    scope = f"pack {report['pack']}" if report["pack"] else f"{total['packs']} pack{'s' if total['packs'] != 1 else ''}"
    ops = f"{total['ops']} user-facing op{'s' if total['ops'] != 1 else ''}"
    forward = report.get("forward") or {}
    # the census is what `frame ops list` counts too; the audit then covers the packs' ops, not the core's
    census = "" if report["pack"] else f"{report['census']}; the audit covers the packs' ops:\n"
    head = (f"{census}{ops} in {scope}: {total['with_gradient']} with a GradientFn, "
            f"{total['not_differentiable']} declared not differentiable, {total['missing']} missing; "
            f"required order {report['required_order']}" + ("; numeric checks run" if report["numeric"] else "")
            + (f"\nforward mode: {forward.get('direct', 0)} direct JvpFn, {forward.get('derived', 0)} derived from the "
               f"GradientFn, {forward.get('none', 0)} none; {forward.get('closed', 0)} closed" if forward else ""))
    n = len(report["findings"])
    return head + ("\naudit: clean" if not n else f"\naudit: {n} finding{'s' if n != 1 else ''}")


def forward_text(row: dict[str, Any]) -> str:
    """The FORWARD column: ``-`` without any forward rule, else the order and how the JVP is had."""
    if row.get("forward_order") is None:
        return "-"
    return f"{row['forward_order']} ({row['forward_rule']})"


def _fmt_err(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def _render_text(report: dict[str, Any]) -> str:
    packs = report["packs"]
    total = report["total"]
    out = [format_table(
        ["PACK", "DISTRIBUTION", "VERSION", "STATUS", "OPS", "GRADIENT", "NOT-DIFF", "MISSING"],
        [[p["name"], p["distribution"], p["version"], p["status"], p["ops"], p["with_gradient"],
          p["not_differentiable"], p["missing"]] for p in packs]
        + [["total", "", "", "", total["ops"], total["with_gradient"], total["not_differentiable"], total["missing"]]],
    )]
    if report["ops"]:
        headers = ["OP", "PACK", "GRADIENT", "ORDER", "FORWARD"]
        if report["numeric"]:
            headers += ["ERR ORDER 1", "ERR ORDER 2"]
        headers.append("NOTE")
        rows = []
        for op in report["ops"]:
            row = [op["name"], op["pack"], op["differentiable"], order_text(op), forward_text(op)]
            if report["numeric"]:
                num = op.get("numeric") or {}
                row += [_fmt_err(num.get("worst_error_order1")), _fmt_err(num.get("worst_error_order2"))]
            rows.append(row + [gradient_note(op)])
        out += ["", format_table(headers, rows)]
        if any(op["closure_bodies"] for op in report["ops"]):
            out.append(BODIES_NOTE)
    if report["findings"]:
        out += ["", f"findings ({len(report['findings'])}):"]
        out += [f"  - {f['message']}" for f in report["findings"]]
    out += ["", _summary(report)]
    return "\n".join(out)
