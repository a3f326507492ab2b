"""How the IR reaches op schemas without importing the registry.

The IR is the ground floor: ``Graph``, ``verify`` and the other ``ir``
modules import nothing above them. Two of them still need to ask, for an op
name, what its schema says: ``Graph.add_node`` infers output types, and
``verify`` checks attributes, arity and types. They take a *schema source*
as an argument (``registry=``; a ``Registry`` is one) and, when none is
given, call the default source installed here by the package root
(``frame_core/__init__.py`` installs the current registry, loaded on first
use). A program that imports only ``frame_core.ir`` never loads the
registry, the packs or the compiler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..errors import IRError
from .types import TensorType

__all__ = ["SchemaLike", "SchemaSource", "set_default_source", "default_source"]


class SchemaLike(Protocol):
    """The part of an ``OpSchema`` the IR uses."""

    name: str

    def normalize_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]: ...

    def check_arity(self, n_inputs: int) -> None: ...

    def infer(self, input_types: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]: ...


class SchemaSource(Protocol):
    """Anything that finds a schema by op name; a ``Registry`` is one. Raises ``UnknownOpError`` otherwise.

    Op identity (SPEC §4): an op has a qualified name ``namespace::name`` and a
    canonical key (its short name when it owns it, else its qualified name),
    which is what ``Node.op`` holds.
    """

    def get(self, name: str) -> Any:
        """The schema a name written by a person means (short or qualified; pack scope applies)."""

    def resolve(self, name: str) -> tuple[str, Any]:
        """``(canonical key, schema)`` of a written name, as :meth:`get` finds it (``Graph.add_node``)."""

    def lookup(self, key: str) -> Any:
        """The schema of a stored key (``node.op``): exact, no pack scope (``verify``)."""

    def qualname_of(self, name: str) -> str:
        """The qualified name of the op ``name`` names, or ``name`` when unknown (writing JSON)."""

    def canonical(self, name: str) -> str:
        """The canonical key of the op ``name`` names, or ``name`` when unknown (reading JSON)."""


_default: Callable[[], SchemaSource] | None = None


def set_default_source(provider: Callable[[], SchemaSource] | None) -> None:
    """Install ``provider`` (called on each use) as where the IR finds schemas when no source is given."""
    global _default
    _default = provider


def default_source() -> SchemaSource:
    """The installed default schema source; ``IRError`` if there is none."""
    if _default is None:
        raise IRError("no op registry is installed for the IR to infer types with; pass registry=... "
                      "(or import frame_core, which installs the current registry)")
    return _default()
