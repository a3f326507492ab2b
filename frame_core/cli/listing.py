"""``frame --version``, ``frame plugins list``, ``frame ops list`` and ``frame ops show``.

Each command is a function that builds plain data (what ``--format json``
prints) and a text rendering of that data, so both formats always say the
same thing. JSON shapes are documented in ``docs/cli.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._common import echo, emit_json, format_table, load, plugin_problems, resolve_pack, warn

if TYPE_CHECKING:  # pragma: no cover
    from ..ops_registry.closure import ClosureInfo
    from ..ops_registry.registry import Registry
    from ..ops_registry.schema import OpSchema

__all__ = ["version_text", "plugins_list", "ops_list", "ops_show", "op_row", "describe_chain", "gradient_note"]


# -- frame --version ----------------------------------------------------------------------
def version_text() -> str:
    """The core's version and every installed pack's, read from metadata (no pack is imported)."""
    from .. import __version__
    from ..ops_registry.entrypoints import entry_points
    from ..ops_registry.hookspecs import PLUGIN_API_VERSION
    from ..ops_registry.loader import GROUP

    lines = [f"frame-core {__version__} (plugin API {PLUGIN_API_VERSION})"]
    seen = set()
    for ep in sorted(entry_points(GROUP), key=lambda ep: (ep.dist_name.lower(), ep.name)):
        if (ep.dist_name, ep.name) not in seen:
            seen.add((ep.dist_name, ep.name))
            lines.append(f"{ep.dist_name} {ep.dist_version} (pack {ep.name})")
    return "\n".join(lines)


# -- frame plugins list -------------------------------------------------------------------
def plugins_list(fmt: str) -> list[str]:
    """Print every pack; return the plugin problems (the caller fails on them under ``--strict``).

    Op-name collisions are warnings: listed under the table (text), in each involved pack's ``collisions``
    (json, and on stderr).
    """
    reg = load(strict=False, quiet=True)
    collisions = _collisions(reg)
    rows = []
    for record in reg.packs.values():
        row = record.to_json()
        row["passes"] = sum(1 for p in reg.passes if getattr(p, "pack", None) == record.name)
        row["collisions"] = [c for c in collisions if record.namespace in c["namespaces"]]
        rows.append(row)
    if fmt == "json":
        emit_json(rows)
        for c in collisions:
            warn(f"warning: {c['message']}")
        _warn_notes(reg)
        return plugin_problems(reg)
    echo(format_table(
        ["NAME", "NAMESPACE", "DISTRIBUTION", "VERSION", "STATUS", "OPS", "API"],
        [[r["name"], r["namespace"] or "-", r["distribution"], r["version"], r["status"], r["ops"],
          r["api_version"] or "-"] for r in rows],
    ))
    echo(f"{reg.op_census()}; the OPS column counts every op a pack registered, its _internal ones included")
    for r in rows:
        if r["error"]:
            echo(f"\n{r['name']} ({r['distribution']} {r['version']}) is {r['status']}: {r['error']}")
    for c in collisions:
        echo(f"\nwarning: {c['message']}")
    for r in rows:
        if (r["load_seconds"] or 0.0) > SLOW_LOAD_SECONDS and r["name"] != "core":
            echo(f"\nnote: pack {r['name']} ({r['distribution']} {r['version']}) took {r['load_seconds']:.1f} s to "
                 "load (its import and frame_register_ops); frame loads every pack the first time it needs ops, so "
                 "every frame command and program waits for it: import heavy dependencies inside kernel builders")
    _warn_notes(reg)
    return plugin_problems(reg)


#: A pack whose loading takes longer than this (seconds) gets a note under ``frame plugins list``.
SLOW_LOAD_SECONDS = 0.5


def _warn_notes(reg: "Registry") -> None:
    """The loader's notes (a FRAME_LOAD_PLUGINS name no pack answers to), which belong to no pack's row."""
    for note in reg.notes:
        warn(f"warning: {note}")


def _collisions(reg: "Registry") -> list[dict[str, Any]]:
    """Op-name collisions as data: the short name, the qualified names, what the short name means, the warning."""
    messages = reg.collision_warnings()
    return [{"name": c.name, "qualnames": list(c.qualnames), "owner": c.owner, "ambiguous": c.owner is None,
             "namespaces": [q.split("::")[0] for q in c.qualnames], "message": message}
            for c, message in zip(reg.schemas.collisions(), messages)]


# -- frame ops list -----------------------------------------------------------------------
def op_row(schema: "OpSchema", reg: "Registry") -> dict[str, Any]:
    """One op as ``frame ops list --format json`` shows it: ``name`` is its canonical key (the short name, or
    the qualified name when another pack owns the short name), ``qualname`` always ``namespace::name``."""
    key = reg.key_of(schema)
    info = reg.closure.get(key)
    return {
        "name": key,
        "qualname": schema.qualname,
        "pack": schema.pack,
        "distribution": schema.distribution,
        "internal": schema.internal,
        "kernels": sorted(schema.kernels),
        "differentiable": schema.differentiable,
        "not_differentiable": schema.not_differentiable,
        "closure_order": info.json_order() if info is not None else None,
        "closure_bodies": bool(info and info.bodies),
        "traits": sorted(schema.traits),
        "signature": schema.signature(key),  # the name it is called by: qualified when it does not own the short one
    }


def ops_list(fmt: str, pack: str | None, internal: bool, missing_gradient: bool) -> None:
    reg = load()
    pack = resolve_pack(reg, pack)
    schemas = [s for _, s in sorted(reg.schemas.items())]
    rows = [
        op_row(s, reg) for s in schemas
        if (internal or not s.internal)
        and (pack is None or s.pack == pack)
        and (not missing_gradient or s.gradient is None)
    ]
    if fmt == "json":
        emit_json(rows)
        return
    hidden = sum(1 for s in schemas if s.internal and (pack is None or s.pack == pack)) if not internal else 0
    echo(format_table(
        ["NAME", "PACK", "GRADIENT", "ORDER", "KERNELS", "NOTE"],
        [[r["name"], r["pack"], r["differentiable"], order_text(r), ",".join(r["kernels"]), gradient_note(r)]
         for r in rows],
    ))
    if any(r["closure_bodies"] for r in rows):
        echo(BODIES_NOTE)
    tail = f"\n{len(rows)} op{'s' if len(rows) != 1 else ''}"
    if pack is None and not internal and not missing_gradient:  # counted as the audit and the examples count
        tail = f"\n{reg.op_census()}"
    if hidden:
        tail += f" ({hidden} internal op{'s' if hidden != 1 else ''} hidden; add --internal to list them)"
    echo(tail)


BODIES_NOTE = "* control flow: a node of it is differentiable to that order when the ops in its bodies are"


def order_text(row: dict[str, Any]) -> str:
    """The ORDER column of the text listings: ``-`` without a GradientFn, ``*`` marking a control-flow op."""
    if row["closure_order"] is None:
        return "-"
    return f"{row['closure_order']}{'*' if row['closure_bodies'] else ''}"


def gradient_note(row: dict[str, Any]) -> str:
    """Why an op has no GradientFn, for the NOTE column of the text listings ('' when it has one)."""
    if row["differentiable"] == "no":
        return f"no gradient: {row['not_differentiable']}"
    if row["differentiable"] == "missing":
        return "MISSING: no GradientFn and no reason given"
    return ""


# -- frame ops show -----------------------------------------------------------------------
def describe_chain(info: "ClosureInfo", reg: "Registry") -> str:
    """Why ``info.op`` is not closed: the chain of ops its gradients reach, ending at the one that breaks it."""
    if not info.chain:
        return ""
    last = info.chain[-1]
    schema = reg.schemas.get(last)
    if schema is None:
        why = "is not registered (is the pack that provides it installed and loaded?)"
    elif schema.not_differentiable:
        why = f"is declared not differentiable: {schema.not_differentiable}"
    else:
        why = "has no GradientFn"
    if len(info.chain) == 1:
        return f"{last} {why}"
    return f"{' -> '.join(info.chain)} ({last} {why})"


def _example_text(example: Any) -> str:
    text = ", ".join(str(t) for t in example.inputs) or "(no inputs)"
    if example.attrs:
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in example.attrs.items())
        text += f"  {{{attrs}}}"
    extras = [f"values in [{example.low:g}, {example.high:g}]"] if example.values is None else ["fixed values"]
    if example.min_abs:
        extras.append(f"|x| >= {example.min_abs:g}")
    if example.tolerance is not None:
        extras.append(f"tolerance {example.tolerance:g}")
    if example.low_precision is not True:
        extras.append("no float16/bfloat16 gradient checks" if example.low_precision is False
                      else f"reduced-precision checks only in {', '.join(example.low_precision)}")
    if example.note:
        extras.append(example.note)
    return f"{text}  ({'; '.join(extras)})"


def _short(value: Any) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        return f"array({value.dtype}, shape={list(value.shape)})"
    return repr(value)


def _json_value(value: Any) -> Any:
    """An attribute default as JSON reads it: null, true/false, a number, a string, a list; a dtype by its
    short name (as graph files write it). Text stays for what JSON cannot hold (an array, a graph)."""
    import math

    from ..ir.dtypes import DType

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # "nan"/"inf", as graph files write them
    if isinstance(value, DType):
        return value.short
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    return _short(value)


def _text_value(value: Any, kind: str) -> str:
    if isinstance(value, str) and kind != "dtype":
        return repr(value)
    return "None" if value is None else str(value)


def _gradient_graph_text(schema: "OpSchema", reg: "Registry") -> str | None:
    if schema.gradient is None or not schema.examples:
        return None
    from ..ir.printer import format_graph
    from ..ops_registry.registry import op_scope, use_registry

    example = schema.examples[0]
    try:  # traced against the registry this command loaded, not the process-wide one
        with use_registry(reg), op_scope(schema.namespace):
            micro = schema.gradient(schema.context(example.inputs, example.attrs))
        return format_graph(micro)
    except Exception as exc:  # a broken GradientFn is shown, not raised: this is a diagnostic command
        return f"(the GradientFn raised {type(exc).__name__}: {exc})"


def op_details(schema: "OpSchema", reg: "Registry") -> dict[str, Any]:
    """Everything ``frame ops show`` prints, as data."""
    info = reg.closure.get(reg.key_of(schema))
    record = reg.packs.get(schema.pack or "")
    return {
        **op_row(schema, reg),
        "version": record.version if record else None,
        "inputs": list(schema.inputs),
        "outputs": list(schema.outputs),
        "nondiff_inputs": sorted(schema.nondiff_inputs),
        "attributes": [
            {"name": k, "kind": spec.kind, "required": spec.required,
             "default": None if spec.required else _json_value(spec.default), "doc": spec.doc}
            for k, spec in schema.attrs.items()
        ],
        "doc": schema.doc,
        "not_differentiable": schema.not_differentiable,
        "examples": [_example_text(e) for e in schema.examples],
        "gradient_uses": list(info.uses) if info else [],
        "closure_chain": list(info.chain) if info and not info.closed else [],
        "closure_breaks": describe_chain(info, reg) if info and not info.closed else None,
        "closure_problems": list(info.problems) if info else [],
        "gradient_graph": _gradient_graph_text(schema, reg),
    }


def ops_show(name: str, fmt: str) -> None:
    reg = load(deep=True)
    schema = reg.get(name)  # UnknownOpError suggests close matches and names a failed pack that provides it
    details = op_details(schema, reg)
    if fmt == "json":
        emit_json(details)
        return
    echo(_render_details(details))


def _render_details(d: dict[str, Any]) -> str:
    out = [f"{d['name']}  (pack {d['pack']}, {d['distribution']} {d['version']})", f"  {d['signature']}", ""]
    if d["doc"]:
        out += [d["doc"], ""]
    width = 12

    def field(label: str, value: str) -> None:
        out.append(f"{label + ':':{width}} {value}".rstrip())

    field("qualified", d["qualname"] + ("" if d["name"] == d["qualname"] else f" (short name {d['name']!r})"))
    if d["attributes"]:
        field("attributes", "")
        for a in d["attributes"]:
            default = "required" if a["required"] else f"default {_text_value(a['default'], a['kind'])}"
            out.append(f"  {a['name']}: {a['kind']} ({default})" + (f"  {a['doc']}" if a["doc"] else ""))
    else:
        field("attributes", "none")
    field("traits", ", ".join(d["traits"]) or "none")
    field("kernels", ", ".join(d["kernels"]))
    if d["nondiff_inputs"]:
        field("no gradient", "inputs " + ", ".join(f"{i} ({d['inputs'][i]})" for i in d["nondiff_inputs"]
                                                   if i < len(d["inputs"])))
    gradient = {"yes": "GradientFn", "no": f"declared not differentiable: {d['not_differentiable']}",
                "missing": "MISSING (no GradientFn and no reason given)"}[d["differentiable"]]
    field("gradient", gradient)
    order = d["closure_order"]
    if d["differentiable"] == "yes":
        closure = "closed (differentiable to any order)" if order == "closed" else f"order {order}"
        if d["closure_bodies"]:
            closure += " when the ops in its bodies are (control flow)"
        if d["gradient_uses"]:
            closure += f"; its gradient uses {', '.join(d['gradient_uses'])}"
        field("closure", closure)
        if d["closure_breaks"]:
            field("breaks at", d["closure_breaks"])
    for problem in d["closure_problems"]:
        field("problem", problem)
    out.append("examples:")
    out += [f"  [{i}] {e}" for i, e in enumerate(d["examples"])] or ["  none"]
    if d["gradient_graph"]:
        out += ["", "gradient micro-graph for example [0] (inputs [x.., y.., gy..], outputs [gx..]):"]
        out += ["  " + line for line in d["gradient_graph"].splitlines()]
    return "\n".join(out)
