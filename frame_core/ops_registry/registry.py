"""The one registry of op schemas, and how code reaches it.

``frame_core.registry()`` returns the process-wide registry, loading the
installed packs on first use (never at import). ``use_registry(reg)``
temporarily makes another registry current (tests, tools that load a chosen
set of packs).

Op identity (SPEC §4). Every op has a qualified name ``namespace::name``
(the namespace is its pack's entry-point name; the core's ops are
``core::``) and a *canonical key*: its short name when it owns that name,
else its qualified name. It owns its short name when no other pack
registers the name, or when it is the one op of that name bundled with
frame (the core first, then the bundled packs). Two packs not bundled with
frame that register one name both keep only their qualified names, and the
short name is ambiguous: resolving it raises ``AmbiguousOpError`` instead
of picking one. Inside a pack's own code (GradientFn, DecomposeFn, shape
inference, kernel builders: see :func:`op_scope`) a short name resolves to
that pack's own op first.
"""

from __future__ import annotations

import contextvars
import threading
from types import MappingProxyType
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AmbiguousOpError, IRError, UnknownOpError

if TYPE_CHECKING:  # pragma: no cover
    from ..compiler.passspec import PassSpec
    from .collision import Collision
    from .closure import ClosureInfo
    from .schema import OpSchema

__all__ = ["PackRecord", "Registry", "SchemaTable", "Collision", "registry", "current_registry", "use_registry",
           "reset_registry", "strict_from_env", "op_scope", "current_scope", "RANK_CORE", "RANK_BUNDLED", "RANK_OTHER"]


def __getattr__(name: str) -> Any:
    if name == "Collision":  # defined in its own module, loaded when a collision is first reported or asked for
        from .collision import Collision

        return Collision
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Who owns a short name when several packs register it: the lowest rank, if only one op has it.
RANK_CORE, RANK_BUNDLED, RANK_OTHER = 0, 1, 2


@dataclass
class PackRecord:
    """What the loader knows about one pack: where it came from and how loading went.

    ``status`` is ``"loaded"``, ``"failed"`` or ``"disabled"``; ``error`` is the
    reason when it is not loaded (with the file and line where loading raised),
    ``traceback`` the whole traceback in that case.
    """

    name: str
    distribution: str
    version: str
    status: str
    error: str | None = None
    ops: list[str] = field(default_factory=list)
    module: str | None = None
    api_version: str | None = None
    namespace: str | None = None  # the qualifier of its ops (``namespace::op``): the entry-point name as an identifier
    traceback: str | None = None  # the whole traceback when loading raised (``frame --verbose`` shows it)
    load_seconds: float | None = None  # importing the pack and calling its frame_register_ops (None: not loaded)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "ops": len(self.ops),
            "op_names": list(self.ops),
            "module": self.module,
            "api_version": self.api_version,
            "load_seconds": self.load_seconds,
        }


class SchemaTable(dict[str, "OpSchema"]):
    """The registry's schemas: a mapping from canonical key to ``OpSchema`` (one entry per op).

    Iteration, ``len`` and ``items`` see canonical keys. Lookups (``[]``,
    ``get``, ``in``) also accept qualified names (``ops_basic::relu``); an
    ambiguous short name raises ``AmbiguousOpError`` (a ``KeyError``) from
    ``[]`` and is absent for ``get`` and ``in``. Lookups never apply the pack
    scope (a ``node.op`` is already a canonical key); names written by people
    go through :meth:`Registry.get`. The loader adds ops with :meth:`register`;
    assigning ``table[key] = schema`` by hand pins ``key`` to that schema. Every
    dict method that writes (``update``, ``|=``, ``setdefault``, ``pop``,
    ``popitem``, ``del``, ``clear``) keeps the qualified names in step and
    takes a qualified name as it takes a canonical key; ``copy`` and ``|``
    return tables with their own indices.
    """

    def __init__(self) -> None:
        super().__init__()
        self._by_qualname: dict[str, Any] = {}   # qualified name -> schema
        self._key_of: dict[str, str] = {}        # qualified name -> canonical key
        self._rank: dict[str, int] = {}          # qualified name -> RANK_*
        self._short: dict[str, list[str]] = {}   # short name -> qualified names the loader registered, load order

    # -- the loader's side ---------------------------------------------------------------------
    def register(self, schema: "OpSchema", rank: int = RANK_OTHER) -> None:
        """Add ``schema`` (its ``namespace`` set) and settle who owns its short name."""
        qualname = schema.qualname
        self._by_qualname[qualname] = schema
        self._rank[qualname] = rank
        self._short.setdefault(schema.name, []).append(qualname)
        self._settle(schema.name)

    def discard_namespace(self, namespace: str) -> None:
        """Remove every op of ``namespace`` (a pack that failed); names it shared are settled again."""
        prefix = f"{namespace}::"
        gone = [q for q in self._by_qualname if q.startswith(prefix)]
        touched = set()
        for qualname in gone:
            schema = self._by_qualname.pop(qualname)
            key = self._key_of.pop(qualname, None)
            if key is not None and dict.get(self, key) is schema:
                dict.__delitem__(self, key)
            self._rank.pop(qualname, None)
            names = self._short.get(schema.name)
            if names and qualname in names:
                names.remove(qualname)
                touched.add(schema.name)
        for short in touched:
            if not self._short[short]:
                del self._short[short]
            else:
                self._settle(short)

    def _settle(self, short: str) -> None:
        qualnames = self._short[short]
        for qualname in qualnames:
            key = self._key_of.pop(qualname, None)
            if key is not None and dict.get(self, key) is self._by_qualname[qualname]:
                dict.__delitem__(self, key)
        owner = self._owner(short)
        for qualname in qualnames:
            key = short if qualname == owner else qualname
            dict.__setitem__(self, key, self._by_qualname[qualname])
            self._key_of[qualname] = key

    def _owner(self, short: str) -> str | None:
        qualnames = self._short.get(short, [])
        if not qualnames:
            return None
        best = min(self._rank[q] for q in qualnames)
        first = [q for q in qualnames if self._rank[q] == best]
        return first[0] if len(first) == 1 else None

    # -- reading -------------------------------------------------------------------------------
    def __missing__(self, key: str) -> "OpSchema":
        schema = self._by_qualname.get(key)
        if schema is not None:
            return schema
        qualnames = self._short.get(key) if isinstance(key, str) else None
        if qualnames and len(qualnames) > 1:
            raise AmbiguousOpError(key, qualnames)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except (KeyError, TypeError):
            return default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (isinstance(key, str) and key in self._by_qualname)

    def __setitem__(self, key: str, schema: "OpSchema") -> None:
        dict.__setitem__(self, key, schema)
        qualname = schema.qualname
        if "::" in qualname and qualname != key:
            self._by_qualname[qualname] = schema
            self._key_of[qualname] = key

    def __delitem__(self, key: str) -> None:
        key = self._entry(key)
        schema = dict.pop(self, key)
        for qualname in [q for q, k in self._key_of.items() if k == key]:
            if self._by_qualname.get(qualname) is schema:
                del self._by_qualname[qualname], self._key_of[qualname]
                self._rank.pop(qualname, None)
                names = self._short.get(schema.name)
                if names and qualname in names:
                    names.remove(qualname)

    # every other way of writing the table goes through the two above, so the qualified-name index follows it
    def update(self, *args: Any, **kwargs: "OpSchema") -> None:
        for key, schema in dict(*args, **kwargs).items():
            self[key] = schema

    def __ior__(self, other: Any) -> "SchemaTable":  # type: ignore[override]
        self.update(other)
        return self

    def _entry(self, key: Any) -> Any:
        """The canonical key ``key`` names (a qualified name included), or ``key`` itself when none."""
        return key if dict.__contains__(self, key) else self._key_of.get(key, key) if isinstance(key, str) else key

    def setdefault(self, key: str, default: "OpSchema | None" = None) -> "OpSchema":
        entry = self._entry(key)
        if dict.__contains__(self, entry):
            return dict.__getitem__(self, entry)
        if default is None:
            raise TypeError("a schema table holds OpSchemas: setdefault needs one as its default")
        self[key] = default
        return default

    def pop(self, key: str, *default: Any) -> Any:
        entry = self._entry(key)
        if not dict.__contains__(self, entry):
            if default:
                return default[0]
            raise KeyError(key)
        schema = dict.__getitem__(self, entry)
        del self[entry]
        return schema

    def __or__(self, other: Any) -> "SchemaTable":  # type: ignore[override]
        table = self.copy()
        table.update(other)
        return table

    def popitem(self) -> "tuple[str, OpSchema]":
        if not dict.__len__(self):
            raise KeyError("popitem(): the schema table is empty")
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def clear(self) -> None:
        dict.clear(self)
        for index in (self._by_qualname, self._key_of, self._rank, self._short):
            index.clear()

    def copy(self) -> "SchemaTable":
        """A table of the same entries with its own indices (a plain ``dict.copy`` would lose qualified names)."""
        table = SchemaTable()
        dict.update(table, self)
        table._by_qualname, table._key_of, table._rank = (dict(self._by_qualname), dict(self._key_of),
                                                          dict(self._rank))
        table._short = {short: list(names) for short, names in self._short.items()}
        return table

    def resolve(self, name: str, scope: str | None = None) -> "tuple[str, OpSchema]":
        """``(canonical key, schema)`` for ``name``: in ``scope``'s own ops first, then a canonical key, then a
        qualified name. ``KeyError`` (``AmbiguousOpError`` for an ambiguous short name) when it does not resolve."""
        if scope is not None and "::" not in name:
            qualname = f"{scope}::{name}"
            schema = self._by_qualname.get(qualname)
            if schema is not None:
                return self._key_of.get(qualname, qualname), schema
        schema = dict.get(self, name)
        if schema is not None:
            return name, schema
        schema = self._by_qualname.get(name)  # (what self[name] finds for a qualified name, without __missing__)
        if schema is None:
            schema = self[name]
        return self._key_of.get(name, name), schema

    def canonical(self, name: str) -> str:
        """The canonical key of the op ``name`` (a canonical key or a qualified name) names; ``name`` itself
        when this table does not know it (loaders keep unknown ops as written, for ``verify`` to report)."""
        if dict.__contains__(self, name):
            return name
        return self._key_of.get(name, name)

    def qualname_of(self, name: str) -> str:
        """The qualified name of the op ``name`` names, or ``name`` itself when this table does not know it."""
        schema = self.get(name)
        return name if schema is None else schema.qualname

    def qualnames(self) -> list[str]:
        """Every op's qualified name."""
        return [s.qualname for s in self.values()]

    @property
    def qualified(self) -> Mapping[str, "OpSchema"]:
        """Qualified name -> schema (read-only view)."""
        return MappingProxyType(self._by_qualname)

    def collisions(self) -> list[Collision]:
        """Short names that several loaded packs register, in load order."""
        shared = [(short, qualnames) for short, qualnames in self._short.items() if len(qualnames) > 1]
        if not shared:  # (the usual case: the class is not even loaded)
            return []
        from .collision import Collision

        return [Collision(short, tuple(qualnames), self._owner(short)) for short, qualnames in shared]


class Registry:
    """Op schemas by canonical key, the packs they came from, and the closure audit's results.

    ``schemas`` is a :class:`SchemaTable`; ``closure[key]`` is a
    :class:`~frame_core.ops_registry.closure.ClosureInfo` (ARCH-068);
    ``passes`` are the compile passes packs contributed.
    """

    def __init__(self) -> None:
        self.schemas = SchemaTable()
        self.packs: dict[str, PackRecord] = {}
        self.closure: dict[str, ClosureInfo] = {}
        self.passes: list[PassSpec] = []
        self.notes: list[str] = []  # problems not tied to one failed pack (misspelt hooks, pass errors)

    @property
    def problems(self) -> list[str]:
        """Every plugin problem: one line per failed pack (with its reason), then op-name collisions, then the
        other notes."""
        failed = [f"{p.name} ({p.distribution} {p.version}): {p.error}" for p in self.packs.values() if p.status == "failed"]
        return failed + self.collision_warnings() + self.notes

    def collision_warnings(self) -> list[str]:
        """One line per short op name that several packs register: the distributions, the qualified names, and
        what the short name now means."""
        lines = []
        for c in self.schemas.collisions():
            who = " and ".join(f"{self._provider(q)} as {q}" for q in c.qualnames)
            others = [q for q in c.qualnames if q != c.owner]
            disable = " or ".join(f"FRAME_DISABLE_PLUGINS={self._pack_of(q)}" for q in others)
            if c.owner is not None:
                meaning = (f"{c.name!r} means {c.owner} (bundled with frame); call the other by its qualified name, "
                           f"{' or '.join(f'ops.op({q!r})' for q in others)}, or stop loading its pack with {disable}")
            else:
                meaning = (f"none is bundled with frame, so the short name {c.name!r} is ambiguous and refused; "
                           f"use the qualified names, or stop loading one pack with {disable}")
            lines.append(f"op name collision: {c.name!r} is registered by {who}; {meaning}")
        return lines

    def _pack_of(self, qualname: str) -> str:
        schema = self.schemas.get(qualname)
        return (schema.pack if schema is not None and schema.pack else qualname.split("::")[0])

    def collision_note(self, name: str) -> str | None:
        """For an error about the op the short name ``name`` means: that another pack registers an op of that
        name too, and how to call it (an older program may have meant that one). ``None`` without a collision."""
        if "::" in name:
            return None
        for c in self.schemas.collisions():
            if c.name == name:
                means = f"{name!r} means {c.owner} (bundled with frame)" if c.owner else f"{name!r} is ambiguous"
                others = [q for q in c.qualnames if q != c.owner]
                return (f"note: {means}, and {' and '.join(others)} share{'s' if len(others) == 1 else ''} the "
                        f"short name (an op name collision); if you meant "
                        f"{'that op' if len(others) == 1 else 'one of those'}, call it by its qualified name: "
                        f"{' or '.join(f'ops.op({q!r})' for q in others)}")
        return None

    def _provider(self, qualname: str) -> str:
        schema = self.schemas.get(qualname)
        record = self.packs.get(schema.pack or "") if schema is not None else None
        return f"{record.distribution} {record.version}" if record is not None else qualname.split("::")[0]

    def drop_pack(self, name: str, reason: str) -> None:
        """Mark pack ``name`` failed with ``reason`` and remove everything it contributed (a pack loads
        whole or not at all)."""
        record = self.packs[name]
        record.status = "failed"
        record.error = reason
        self.schemas.discard_namespace(record.namespace or name)
        for key in [k for k, s in self.schemas.items() if s.pack == name]:  # pinned by hand
            del self.schemas[key]
        self.passes = [p for p in self.passes if getattr(p, "pack", None) != name]

    def get(self, name: str) -> "OpSchema":
        """The schema ``name`` (short or qualified) means here; ``UnknownOpError`` with close matches otherwise,
        ``AmbiguousOpError`` listing the qualified candidates for an ambiguous short name. Inside
        :func:`op_scope` a short name means the scope's own op first."""
        return self.resolve(name)[1]

    def resolve(self, name: str) -> "tuple[str, OpSchema]":
        """``(canonical key, schema)`` of ``name`` with the rules of :meth:`get` (graph builders store the key)."""
        if not isinstance(name, str):
            raise IRError(f"an op is named by a string such as 'relu' or 'ops_basic::relu', got {name!r} "
                          f"({type(name).__name__})")
        try:
            return self.schemas.resolve(name, _scope.get())
        except AmbiguousOpError:
            raise
        except KeyError:
            known = self.schemas.qualified if "::" in name else self.schemas
            raise UnknownOpError(name, known, lambda: self._missing_hint(name)) from None

    def lookup(self, key: str) -> "OpSchema":
        """The schema of a stored op key (a canonical key or a qualified name; no pack scope applies), with the
        errors of :meth:`get`. ``verify`` and the compiler read ``node.op`` this way."""
        try:
            return self.schemas[key]
        except AmbiguousOpError:
            raise
        except (KeyError, TypeError):  # the names to suggest from are read only if the message is
            known = self.schemas.qualified if isinstance(key, str) and "::" in key else self.schemas
            raise UnknownOpError(str(key), known, lambda: self._missing_hint(str(key))) from None

    def qualname_of(self, name: str) -> str:
        """The qualified name of the op ``name`` (a stored key or qualified name) names; ``name`` if unknown."""
        return self.schemas.qualname_of(name)

    def canonical(self, name: str) -> str:
        """The canonical key of the op ``name`` (a stored key or qualified name) names; ``name`` if unknown."""
        return self.schemas.canonical(name)

    def key_of(self, schema: "OpSchema") -> str:
        """The canonical key of ``schema`` in this registry."""
        return self.schemas.canonical(schema.qualname) if schema.qualname in self.schemas else schema.name

    def _missing_hint(self, name: str) -> str:
        namespace, _, short = name.rpartition("::")
        for pack in self.packs.values():
            if short in pack.ops and pack.status != "loaded" and namespace in ("", pack.namespace, pack.name):
                return f" (pack {pack.name!r} from {pack.distribution} provides it but is {pack.status}: {pack.error})"
        elsewhere = [f"{p.namespace}::{short}" for p in self.packs.values()
                     if namespace and p.status == "loaded" and p.namespace != namespace and short in p.ops]
        # the right op under the wrong qualifier: name it, close spellings in the wrong namespace would not
        also = f"; {' and '.join(map(repr, elsewhere))} {'is' if len(elsewhere) == 1 else 'are'} registered" \
            if elsewhere else ""
        for pack in self.packs.values():  # a disabled pack never imported: its ops are unknown, its namespace is not
            if namespace and pack.status != "loaded" and namespace in (pack.namespace, pack.name):
                return (f" (the namespace {namespace!r} is pack {pack.name!r} from {pack.distribution}, which is "
                        f"{pack.status}: {pack.error}{also})")
        if namespace and not any(p.namespace == namespace and p.status == "loaded" for p in self.packs.values()):
            return (f" (no loaded pack has the namespace {namespace!r}; run `frame plugins list` to see the packs "
                    f"and their namespaces{also})")
        if elsewhere:
            return f" ({also[2:]})"
        failed = [p for p in self.packs.values() if p.status == "failed" and not p.ops]
        if failed:  # a pack that failed before registering anything may be the one that provides it
            names = ", ".join(f"{p.name!r} ({p.distribution})" for p in failed)
            return (f" (is the pack that provides it installed? These packs failed to load: {names}; "
                    "run `frame plugins list` to see why)")
        return ""

    def __contains__(self, name: object) -> bool:
        return name in self.schemas

    def __iter__(self) -> Iterator["OpSchema"]:
        return iter(self.schemas.values())

    def __len__(self) -> int:
        return len(self.schemas)

    def names(self, *, internal: bool = True) -> list[str]:
        if not isinstance(internal, bool):
            raise IRError(f"names(internal=) is True or False, got {type(internal).__name__}")
        return sorted(n for n, s in self.schemas.items() if internal or not s.internal)

    def user_ops(self) -> list["OpSchema"]:
        """User-facing ops (not ``_internal``) of every pack except the core's built-ins."""
        return [s for s in self.schemas.values() if not s.internal and s.pack != "core"]

    def op_census(self) -> str:
        """How many user-facing ops there are and where they come from, in the one wording that ``frame ops list``,
        ``frame audit gradients`` and the examples print (issue 17: they counted different things): the user-facing
        ops (not ``_internal``) of the loaded packs, the packs counted whether or not they add user-facing ops,
        then the core's built-in user-facing ops (``constant``), which ``frame ops list`` lists but the audit does
        not audit. "75 user-facing ops: 74 from 5 packs (activations, native, ...) and 1 built into the core"."""
        packs = sorted(r.name for r in self.packs.values() if r.status == "loaded" and r.name != "core")
        from_packs = len(self.user_ops())
        core = sum(1 for s in self.schemas.values() if not s.internal and s.pack == "core")
        return (f"{from_packs + core} user-facing op{'s' if from_packs + core != 1 else ''}: {from_packs} from "
                f"{len(packs)} pack{'s' if len(packs) != 1 else ''} ({', '.join(packs) or 'none installed'}) and "
                f"{core} built into the core")

    def ops_of(self, pack: str) -> list["OpSchema"]:
        if not isinstance(pack, str):
            raise IRError(f"ops_of takes a pack's name (a string such as 'ops_basic'), got {type(pack).__name__}")
        return [s for s in self.schemas.values() if s.pack == pack]

    def __repr__(self) -> str:
        loaded = sum(p.status == "loaded" for p in self.packs.values())
        return f"<Registry: {len(self.schemas)} ops from {loaded} packs>"


_lock = threading.Lock()
_loading = threading.local()  # .active: this thread is loading the process-wide registry (and holds _lock)
_global: Registry | None = None
# use_registry's stack, per thread and per asyncio task (a ContextVar), so concurrent code is not mixed up
_override: contextvars.ContextVar[tuple[Registry, ...]] = contextvars.ContextVar("frame_registry_override", default=())
# the namespace whose own ops short names mean first (set around a pack's callbacks; see op_scope)
_scope: contextvars.ContextVar[str | None] = contextvars.ContextVar("frame_op_scope", default=None)


def strict_from_env(environ: "Mapping[str, str] | None" = None) -> bool:
    """Whether ``FRAME_STRICT`` asks for strict plugin loading (1, true, yes or on; see ``env_flag``)."""
    from .._args import env_flag

    return env_flag("FRAME_STRICT", environ)


def registry() -> Registry:
    """The process-wide registry, loaded on first call (packs, then the closure audit)."""
    global _global
    stack = _override.get()
    if stack:
        return stack[-1]
    if _global is None:
        if getattr(_loading, "active", False):  # this thread holds _lock: waiting for it would hang for ever
            from ..errors import PluginError

            raise PluginError(
                "frame_core.registry() was called while the registry is loading: a pack traced ops (ops.*, "
                "frame_core.trace, apply) while it was imported or inside a hook, before any op is registered. Build "
                "graphs needed at import (an Example's graph attribute) by hand, with Graph.add_input/add_node and "
                "explicit output types, or trace them later (inside a kernel builder, GradientFn or DecomposeFn)")
        with _lock:
            if _global is None:
                from .loader import load_registry

                _loading.active = True
                try:
                    _global = load_registry(audit_cache=True)  # a clean audit of unchanged code is reused
                finally:
                    _loading.active = False
                _warn_collisions(_global)
    return _global


_warned_collisions: set[str] = set()


def _warn_collisions(reg: Registry) -> None:
    """Each op-name collision of the process-wide registry as a ``FrameWarning``, once per process: inside a
    Python program a short name that changed meaning (a pack's op now shadowed by a bundled one) must reach
    the user, not only ``frame plugins list``."""
    import warnings

    from ..errors import FrameWarning

    for line in reg.collision_warnings():
        if line not in _warned_collisions:
            _warned_collisions.add(line)
            warnings.warn(FrameWarning(line), stacklevel=4)


current_registry = registry


def reset_registry() -> None:
    """Forget the process-wide registry; the next ``registry()`` call loads packs again."""
    global _global
    with _lock:
        _global = None


@contextmanager
def use_registry(reg: Registry) -> Iterator[Registry]:
    """Make ``reg`` the current registry inside the ``with`` block."""
    if not isinstance(reg, Registry):
        from ..errors import ArgumentError

        raise ArgumentError(f"use_registry takes a Registry (frame_core.registry(), load_registry(...)), got "
                            f"{type(reg).__name__}")
    token = _override.set(_override.get() + (reg,))
    try:
        yield reg
    finally:
        _override.reset(token)


def op_scope(namespace: str | None) -> "_Scope":
    """Inside the block, a short op name means pack ``namespace``'s own op first (then the usual rules).

    frame sets it around a pack's callbacks (GradientFns, DecomposeFns, shape
    inference, kernel builders), so a pack whose op name collides with another
    pack's keeps using its own op internally. ``None`` clears the scope.
    """
    return _Scope(namespace)


class _Scope:
    """The context manager of :func:`op_scope`: a plain class, as every shape inference enters one (a
    generator-based ``contextmanager`` cost several times more)."""

    __slots__ = ("_namespace", "_token")

    def __init__(self, namespace: str | None) -> None:
        self._namespace = namespace

    def __enter__(self) -> None:
        self._token = _scope.set(self._namespace)

    def __exit__(self, *exc_info: object) -> None:
        _scope.reset(self._token)


def current_scope() -> str | None:
    """The namespace set by the innermost :func:`op_scope`, or ``None``."""
    return _scope.get()
