"""The one registry of op schemas, and how code reaches it.

``frame_core.registry()`` returns the process-wide registry, loading the
installed packs on first use (never at import). ``use_registry(reg)``
temporarily makes another registry current (tests, tools that load a chosen
set of packs).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UnknownOpError

if TYPE_CHECKING:  # pragma: no cover
    from ..compiler.passspec import PassSpec
    from .closure import ClosureInfo
    from .schema import OpSchema

__all__ = ["PackRecord", "Registry", "registry", "current_registry", "use_registry", "reset_registry", "strict_from_env"]


@dataclass
class PackRecord:
    """What the loader knows about one pack: where it came from and how loading went.

    ``status`` is ``"loaded"``, ``"failed"`` or ``"disabled"``; ``error`` is the
    reason when it is not loaded.
    """

    name: str
    distribution: str
    version: str
    status: str
    error: str | None = None
    ops: list[str] = field(default_factory=list)
    module: str | None = None
    api_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "ops": len(self.ops),
            "op_names": list(self.ops),
            "module": self.module,
            "api_version": self.api_version,
        }


class Registry:
    """Op schemas by name, the packs they came from, and the closure audit's results.

    ``closure[op]`` is a :class:`~frame_core.ops_registry.closure.ClosureInfo`
    (ARCH-068); ``passes`` are the compile passes packs contributed.
    """

    def __init__(self) -> None:
        self.schemas: dict[str, OpSchema] = {}
        self.packs: dict[str, PackRecord] = {}
        self.closure: dict[str, ClosureInfo] = {}
        self.passes: list[PassSpec] = []
        self.notes: list[str] = []  # problems not tied to one failed pack (misspelt hooks, pass errors)

    @property
    def problems(self) -> list[str]:
        """Every plugin problem: one line per failed pack (with its reason), then the other notes."""
        failed = [f"{p.name} ({p.distribution} {p.version}): {p.error}" for p in self.packs.values() if p.status == "failed"]
        return failed + self.notes

    def drop_pack(self, name: str, reason: str) -> None:
        """Mark pack ``name`` failed with ``reason`` and remove everything it contributed (a pack loads
        whole or not at all)."""
        record = self.packs[name]
        record.status = "failed"
        record.error = reason
        for op in [n for n, s in self.schemas.items() if s.pack == name]:
            del self.schemas[op]
        self.passes = [p for p in self.passes if getattr(p, "pack", None) != name]

    def get(self, name: str) -> "OpSchema":
        """The schema called ``name``; ``UnknownOpError`` with close matches otherwise."""
        try:
            return self.schemas[name]
        except KeyError:
            raise UnknownOpError(name, self.schemas, self._missing_hint(name)) from None

    def _missing_hint(self, name: str) -> str:
        for pack in self.packs.values():
            if name in pack.ops and pack.status != "loaded":
                return f" (pack {pack.name!r} from {pack.distribution} provides it but is {pack.status}: {pack.error})"
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
        return sorted(n for n, s in self.schemas.items() if internal or not s.internal)

    def user_ops(self) -> list["OpSchema"]:
        """User-facing ops (not ``_internal``) of every pack except the core's built-ins."""
        return [s for s in self.schemas.values() if not s.internal and s.pack != "core"]

    def ops_of(self, pack: str) -> list["OpSchema"]:
        return [s for s in self.schemas.values() if s.pack == pack]

    def __repr__(self) -> str:
        loaded = sum(p.status == "loaded" for p in self.packs.values())
        return f"<Registry: {len(self.schemas)} ops from {loaded} packs>"


_lock = threading.Lock()
_global: Registry | None = None
# use_registry's stack, per thread and per asyncio task (a ContextVar), so concurrent code is not mixed up
_override: contextvars.ContextVar[tuple[Registry, ...]] = contextvars.ContextVar("frame_registry_override", default=())


def strict_from_env(environ: "Mapping[str, str] | None" = None) -> bool:
    """Whether ``FRAME_STRICT`` asks for strict plugin loading: set to anything but empty, 0, false or no."""
    import os

    env = os.environ if environ is None else environ
    return env.get("FRAME_STRICT", "").strip().lower() not in ("", "0", "false", "no")


def registry() -> Registry:
    """The process-wide registry, loaded on first call (packs, then the closure audit)."""
    global _global
    stack = _override.get()
    if stack:
        return stack[-1]
    if _global is None:
        with _lock:
            if _global is None:
                from .loader import load_registry

                _global = load_registry()
    return _global


current_registry = registry


def reset_registry() -> None:
    """Forget the process-wide registry; the next ``registry()`` call loads packs again."""
    global _global
    with _lock:
        _global = None


@contextmanager
def use_registry(reg: Registry) -> Iterator[Registry]:
    """Make ``reg`` the current registry inside the ``with`` block."""
    token = _override.set(_override.get() + (reg,))
    try:
        yield reg
    finally:
        _override.reset(token)
