"""Loading op packs from entry points into a :class:`Registry` (SPEC §4).

The loader iterates the ``frame`` entry points itself, one ``try`` per pack,
so one broken pack never takes the others down (pluggy's
``load_setuptools_entrypoints`` would let it). For every pack it records
distribution, version, status and error. It de-duplicates distributions seen
twice on ``sys.path``, refuses a second pack under an entry-point name (a
namespace) already taken, refuses packs written for another plugin API major
version, and honours:

``FRAME_LOAD_PLUGINS=a,b``   load only these packs (empty: none)
``FRAME_DISABLE_PLUGINS=a,b``  skip these packs
``FRAME_STRICT=1``           any plugin problem raises ``PluginError``

Packs are matched by entry-point name or distribution name. The core's
built-in plugin always loads first, through the same hooks.

Op names may collide across packs (SPEC §4, op identity): both packs load,
every op keeps its qualified name ``namespace::name`` (the namespace is the
entry-point name made an identifier), the op bundled with frame keeps the
short name (:data:`BUNDLED_DISTRIBUTIONS`), and the collision is a warning
naming both distributions (an error under ``FRAME_STRICT=1``).
"""

from __future__ import annotations

import copy
import os
import re
import time
import types
from collections.abc import Iterable, Mapping
from typing import Any

import pluggy

from ..errors import PluginError
from . import builtin
from .entrypoints import normalize
from .hookspecs import PLUGIN_API_VERSION, PROJECT, FrameHookSpecs
from .registry import RANK_BUNDLED, RANK_CORE, RANK_OTHER, PackRecord, Registry, strict_from_env
from .schema import OpSchema

__all__ = ["load_registry", "discover_entry_points", "core_version", "namespace_of", "BUNDLED_DISTRIBUTIONS"]

GROUP = "frame"

#: Distributions bundled with frame (PEP 503 names): their ops keep their short names whatever else is
#: installed; an op of another pack with the same name is reachable by its qualified name only.
BUNDLED_DISTRIBUTIONS = frozenset({"frame-core", "frame-ops-basic", "frame-ops-fft", "frame-ops-sequence"})


def namespace_of(entry_point_name: str) -> str:
    """The namespace of a pack's ops: its entry-point name as an identifier (``my-pack`` -> ``my_pack``)."""
    name = re.sub(r"\W", "_", entry_point_name.strip(), flags=re.ASCII) or "_"
    return "_" + name if name[0].isdigit() else name


def core_version() -> str:
    from .. import __version__

    return __version__


def _names(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {normalize(v.strip()) for v in value.split(",") if v.strip()}  # "a, b" is as good as "a,b"


def discover_entry_points() -> list[Any]:
    """The ``frame`` entry points of the installed distributions, sorted by (distribution, name)."""
    from .entrypoints import entry_points

    return sorted(entry_points(GROUP), key=lambda ep: (_dist_name(ep), ep.name))


def _dist_name(ep: Any) -> str:
    """Distribution name of an entry point (ours, or an ``importlib.metadata.EntryPoint``)."""
    name = getattr(ep, "dist_name", None)
    if name:
        return name
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None and dist.metadata["Name"] else "<unknown distribution>"


def _dist_version(ep: Any) -> str:
    version = getattr(ep, "dist_version", None)
    if version:
        return version
    dist = getattr(ep, "dist", None)
    return dist.version if dist is not None else "?"


def load_registry(
    entry_points: Iterable[Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    strict: bool | None = None,
    audit: bool = True,
    audit_cache: bool = False,
) -> Registry:
    """Build a registry from the built-in plugin and ``entry_points`` (default: the installed ones).

    Runs the start-up gradient-closure audit (ARCH-068) unless ``audit=False``; with ``audit_cache=True`` (the
    process-wide ``registry()``) a clean audit of exactly this code is reused (``audit_cache.py``).
    In strict mode (``strict=True`` or ``FRAME_STRICT=1``) any pack problem
    raises :class:`PluginError` listing every problem.
    """
    from ..errors import ArgumentError

    if environ is not None and not isinstance(environ, Mapping):
        raise ArgumentError(f"load_registry(environ=) takes a mapping such as {{'FRAME_LOAD_PLUGINS': ''}}, got "
                            f"{type(environ).__name__}")
    if entry_points is not None and (isinstance(entry_points, (str, bytes)) or not isinstance(entry_points, Iterable)):
        raise ArgumentError(f"load_registry(entry_points) takes a list of entry points (objects with name, value, "
                            f"dist_name, dist_version and load()), got {type(entry_points).__name__}")
    for flag, value in (("strict", strict), ("audit", audit), ("audit_cache", audit_cache)):
        if not isinstance(value, bool) and not (flag == "strict" and value is None):
            raise ArgumentError(f"load_registry({flag}=) is True or False, got {type(value).__name__}")
    env = os.environ if environ is None else environ
    if strict is None:
        strict = strict_from_env(env)
    only = _names(env.get("FRAME_LOAD_PLUGINS"))
    skip = _names(env.get("FRAME_DISABLE_PLUGINS")) or set()

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(FrameHookSpecs)
    reg = Registry()

    started = time.perf_counter()
    pm.register(builtin, name="core")
    reg.packs["core"] = PackRecord("core", "frame-core", core_version(), "loaded", module=builtin.__name__,
                                   api_version=builtin.FRAME_PLUGIN_API, namespace="core")
    _collect(pm, reg, "core")
    reg.packs["core"].load_seconds = time.perf_counter() - started  # measured like every pack's (issue 17)

    seen: set[tuple[str, str]] = set()
    matched: set[str] = set()  # names in FRAME_LOAD_PLUGINS / FRAME_DISABLE_PLUGINS that some pack answered to
    for ep in discover_entry_points() if entry_points is None else entry_points:
        if not isinstance(getattr(ep, "name", None), str) or not callable(getattr(ep, "load", None)):
            raise ArgumentError(f"load_registry(entry_points): {ep!r:.60} is not an entry point (it needs a name "
                                "string, value, dist_name, dist_version and a load() method)")
        dist, version = _dist_name(ep), _dist_version(ep)
        key = (normalize(dist), ep.name)
        if key in seen:  # the same distribution found twice on sys.path (editable installs)
            continue
        seen.add(key)
        name = ep.name
        namespace = namespace_of(name)
        other = reg.packs.get(name) or next((r for r in reg.packs.values() if r.namespace == namespace), None)
        if other is not None and _yields(other, dist):  # a pack not loaded, or a third party, gives way
            if other.status == "loaded":
                _refuse(reg, pm, other.name,
                        f"its entry point name {other.name!r} (namespace {namespace!r}) is the namespace of {dist} "
                        f"{version}, which is bundled with frame; a third-party pack cannot take it (it would "
                        "replace frame's own ops in every saved graph): rename the entry point")
            reg.packs[f"{other.name}@{other.distribution}"] = reg.packs.pop(other.name)
            other = None
        if other is not None:  # the namespace qualifies op names, so it must be unique
            same = "entry point name" if other.name == name else f"namespace {namespace!r} (entry point {other.name!r})"
            reg.packs[f"{name}@{dist}"] = PackRecord(
                name, dist, version, "failed",
                f"entry point name {name!r} is already used by {other.distribution} {other.version} ({same}); the "
                "entry-point name is the namespace of a pack's ops, so it must be unique: rename one of them",
            )
            continue
        record = PackRecord(name, dist, version, "loaded", module=getattr(ep, "value", None), namespace=namespace)
        reg.packs[name] = record
        wanted = {normalize(name), normalize(dist)}
        matched |= wanted
        if (only is not None and not wanted & only) or wanted & skip:
            record.status = "disabled"
            record.error = "disabled by FRAME_LOAD_PLUGINS" if only is not None and not wanted & only else "disabled by FRAME_DISABLE_PLUGINS"
            continue
        started = time.perf_counter()
        try:
            module = ep.load()
            record.api_version = _check_api(module, dist)
            pm.register(_own_object(pm, module), name=name)
        except (Exception, SystemExit) as exc:  # a broken pack is reported, never fatal (even if it calls exit())
            package = str(record.module or "").split(":")[0].strip().split(".")[0]
            reg.drop_pack(name, f"cannot load {record.module}: {type(exc).__name__}: {exc}{_where(exc, package)}")
            record.traceback = _traceback(exc)
            continue
        unknown = _unknown_hooks(pm, name)
        if unknown:  # a misspelt hook would otherwise be ignored in silence
            reg.notes.append(
                f"{name} ({dist} {version}): implements {', '.join(unknown)}, which frame-core {core_version()} "
                f"does not define (its hooks: {', '.join(_HOOKS)}); the implementation is ignored. Check the "
                "spelling, or install the frame-core the pack was written for"
            )
        _collect(pm, reg, name)
        record.load_seconds = time.perf_counter() - started

    for variable, names in (("FRAME_LOAD_PLUGINS", only or set()), ("FRAME_DISABLE_PLUGINS", skip)):
        for unknown_name in sorted(names - matched - {"core", "frame-core"}):
            reg.notes.append(f"{variable} names {unknown_name!r}, which no installed pack answers to (installed: "
                             f"{', '.join(sorted(p.name for p in reg.packs.values() if p.name != 'core')) or 'none'})")
    _collect_passes(pm, reg)
    if audit and audit_cache:
        from . import audit_cache as cache

        cache.audit(reg, env)
    elif audit:
        from .closure import run_closure_audit

        run_closure_audit(reg)
    if strict and reg.problems:
        raise PluginError("plugin problems (FRAME_STRICT is set):\n  " + "\n  ".join(reg.problems))
    return reg


def _yields(holder: PackRecord, dist: str) -> bool:
    """Whether the pack ``holder``, which has the namespace that distribution ``dist`` now claims, gives it up: when
    it is not loaded (disabled, or failed: it holds nothing), or when ``dist`` is bundled with frame and the
    holder is not (a third-party pack that sorts first must not take frame-ops-basic's namespace, and with it
    frame-ops-basic, down)."""
    if holder.status != "loaded":
        return True
    return normalize(dist) in BUNDLED_DISTRIBUTIONS and normalize(holder.distribution) not in BUNDLED_DISTRIBUTIONS


def _own_object(pm: pluggy.PluginManager, module: Any) -> Any:
    """What pluggy registers for a pack: the module itself, or a stand-in when another pack's entry point
    already registered that very module (pluggy refuses an object twice, which would fail the second pack:
    a third-party entry point naming ``frame_ops_basic.plugin`` would take frame-ops-basic down)."""
    if not pm.is_registered(module):
        return module
    stand_in = types.ModuleType(getattr(module, "__name__", "pack"))
    stand_in.__dict__.update({k: v for k, v in vars(module).items() if k not in ("__spec__", "__loader__")})
    return stand_in


def _check_api(module: Any, dist: str) -> str:
    declared = getattr(module, "FRAME_PLUGIN_API", None)
    if declared is None:
        raise PluginError(
            f"{module.__name__} does not declare FRAME_PLUGIN_API; add FRAME_PLUGIN_API = \"{PLUGIN_API_VERSION}\" to it"
        )
    if isinstance(declared, bool) or not isinstance(declared, (str, int, float)) \
            or not re.fullmatch(r"(0|[1-9][0-9]*)(\.[0-9]+)*", str(declared)):
        # " 1.0" or b"1.0" would otherwise read as another major version: "written for API  1.0 ... provides 1.0"
        raise PluginError(f"{dist} declares FRAME_PLUGIN_API = {declared!r:.40}, which is not a version; write "
                          f"FRAME_PLUGIN_API = \"{PLUGIN_API_VERSION}\" (a string MAJOR.MINOR)")
    declared = str(declared)
    if declared.split(".")[0] != PLUGIN_API_VERSION.split(".")[0]:
        raise PluginError(
            f"{dist} was written for frame plugin API {declared}, but frame-core {core_version()} provides API "
            f"{PLUGIN_API_VERSION}; install a frame-core that provides API {declared.split('.')[0]}.x, "
            f"or a release of {dist} built for API {PLUGIN_API_VERSION.split('.')[0]}.x"
        )
    return declared


_HOOKS = tuple(n for n in vars(FrameHookSpecs) if n.startswith("frame_"))


def _unknown_hooks(pm: pluggy.PluginManager, name: str) -> list[str]:
    """Hook implementations of pack ``name`` that match no hook specification."""
    callers = pm.get_hookcallers(pm.get_plugin(name)) or []
    return sorted(c.name for c in callers if not c.has_spec())


def _impls(pm: pluggy.PluginManager, hook: str, plugin_name: str) -> list[Any]:
    caller = getattr(pm.hook, hook)
    return [impl for impl in caller.get_hookimpls() if impl.plugin_name == plugin_name]


def _collect(pm: pluggy.PluginManager, reg: Registry, name: str) -> None:
    """Call one pack's ``frame_register_ops`` and add its schemas, or mark the pack failed."""
    record = reg.packs[name]
    schemas: list[OpSchema] = []
    for impl in _impls(pm, "frame_register_ops", name):
        try:
            result = impl.function()
        except (Exception, SystemExit) as exc:
            where = _where(exc, _package(pm, name))
            _refuse(reg, pm, name, f"frame_register_ops raised {type(exc).__name__}: {exc}{where}", exc)
            return
        if result is None:
            continue
        if not isinstance(result, (list, tuple)):
            _refuse(reg, pm, name, f"frame_register_ops returned {type(result).__name__}, expected a list of OpSchema")
            return
        schemas.extend(result)
    problems = []
    names = set()
    for position, schema in enumerate(schemas):
        if not isinstance(schema, OpSchema):
            problems.append(f"item {position} returned by frame_register_ops is a {type(schema).__name__}, "
                            "expected an OpSchema")
            continue
        try:
            problems.extend(schema.check_definition())
        except Exception as exc:  # a schema malformed past what the checks foresee: still this pack's problem
            problems.append(f"item {position} ({schema.name!r}): checking the schema raised {type(exc).__name__}: {exc}")
            continue
        if schema.name in names:
            problems.append(f"op {schema.name!r} is registered twice by this pack")
        names.add(schema.name)
    if problems:
        _refuse(reg, pm, name, "; ".join(problems))
        return
    rank = RANK_CORE if name == "core" else RANK_BUNDLED if normalize(record.distribution) in BUNDLED_DISTRIBUTIONS \
        else RANK_OTHER
    # the registry owns its schemas: a pack that returns another pack's OpSchema object (a re-export), or a
    # module loaded under two entry-point names, must not re-stamp (and, failing, take away) the other's op
    schemas = [copy.copy(schema) for schema in schemas]
    for schema in schemas:
        schema.pack = name
        schema.distribution = record.distribution
        schema.namespace = record.namespace
        reg.schemas.register(schema, rank)
        record.ops.append(schema.name)


def _collect_passes(pm: pluggy.PluginManager, reg: Registry) -> None:
    """Add each loaded pack's passes; a pack whose hook raises or returns a bad PassSpec is refused whole."""
    from ..compiler.passspec import pass_problems

    for name, record in list(reg.packs.items()):
        if record.status != "loaded":
            continue
        try:
            specs = [spec for impl in _impls(pm, "frame_register_passes", name) for spec in impl.function() or []]
        except (Exception, SystemExit) as exc:  # a pack's hook may even call exit(): it fails, frame goes on
            where = _where(exc, _package(pm, name))
            _refuse(reg, pm, name, f"frame_register_passes raised {type(exc).__name__}: {exc}{where}", exc)
            continue
        try:
            problems = [p for spec in specs for p in pass_problems(spec)]
            if not problems:
                names = [spec.name for spec in specs]
                problems += [f"the pack registers two passes named {n!r}" for n in sorted(set(names))
                             if names.count(n) > 1]
        except Exception as exc:  # a PassSpec malformed past what pass_problems foresees
            problems = [f"checking its passes raised {type(exc).__name__}: {exc}"]
        if problems:
            _refuse(reg, pm, name, "frame_register_passes: " + "; ".join(problems))
            continue
        for spec in specs:
            # another pack's pass of this name is a warning, never a refusal: refusing the later pack would let
            # a pack that sorts first (a third-party "aaa") take frame-ops-basic down by naming a pass as its own
            holders = [p for p in reg.passes if p.name == spec.name]
            if holders:
                who = " and ".join(f"{_label(reg, p.pack)}" for p in holders)
                reg.notes.append(f"pass name collision: {spec.name!r} is registered by {who} and by "
                                 f"{_label(reg, name)}; both run, and compile(disable=[{spec.name!r}]) skips both")
            spec = copy.copy(spec)  # a spec shared with another pack keeps that pack's name
            spec.pack = name
            reg.passes.append(spec)


def _label(reg: Registry, pack: str | None) -> str:
    record = reg.packs.get(pack or "")
    return f"pack {pack!r} ({record.distribution} {record.version})" if record is not None else f"pack {pack!r}"


def _refuse(reg: Registry, pm: pluggy.PluginManager, name: str, reason: str, exc: BaseException | None = None) -> None:
    """A registered pack fails: the registry drops what it added, pluggy forgets its hooks."""
    reg.drop_pack(name, reason)
    if exc is not None:
        reg.packs[name].traceback = _traceback(exc)
    pm.unregister(name=name)


def _where(exc: BaseException, package: str | None = None) -> str:
    """`` (at FILE:LINE)``: the innermost line of ``package`` (the pack's top-level package) that ``exc`` passed
    through, and where it was raised when that is elsewhere (in numpy, say); for a syntax error, the line."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" (at {exc.filename}:{exc.lineno})"
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith("<frozen"):
            frames.append((str(tb.tb_frame.f_globals.get("__name__", "")), code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    if not frames:
        return ""
    raised = frames[-1]
    own = [f for f in frames if package and (f[0] == package or f[0].startswith(package + "."))]
    if not own and raised[0].split(".")[0] in ("frame_core", "importlib"):
        return ""  # frame's own refusal (no FRAME_PLUGIN_API, a missing attribute): no line of the pack to show
    if not own or own[-1] is raised:
        return f" (at {raised[1]}:{raised[2]})"
    return f" (at {own[-1][1]}:{own[-1][2]}; raised in {raised[1]}:{raised[2]})"


def _package(pm: pluggy.PluginManager, name: str) -> str | None:
    module = pm.get_plugin(name)
    return getattr(module, "__name__", "").split(".")[0] or None


def _traceback(exc: BaseException) -> str:
    """The whole traceback of ``exc`` (``frame --verbose`` and ``FRAME_DEBUG=1`` show it)."""
    import traceback  # (only for a pack that fails: not imported by every start-up)

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
