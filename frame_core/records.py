"""Record classes for packs: compared by value like dataclasses, without the decorator's cost at import.

``@dataclass`` compiles its generated methods (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ...) from source text each time the decorated class is created, that is each time a pack
module loads; a pack's geometry and plan classes did that at every ``frame_core.registry()``. Subclasses of
``Record`` (immutable, hashable) and ``MutableRecord`` get the same behaviour from methods compiled once, here.
The packs' tests compare each subclass against the equivalent dataclass (repr, ``==``, hash, frozen errors,
replace, pickle, copy).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Self


class Record:
    """An immutable record compared by value, as ``@dataclass(frozen=True)`` makes one: ``repr``, ``==``, ``hash``,
    ``dataclasses.FrozenInstanceError`` on assignment or deletion, and ``replace(**changes)`` for
    ``dataclasses.replace``. Written out because the decorator compiles six methods per class while the pack
    loads, which every ``frame_core.registry()`` pays. A subclass lists its fields in
    ``__match_args__`` and stores them in ``__init__`` with ``self._store(name=value, ...)``."""

    __match_args__: tuple[str, ...] = ()

    def _store(self, **values: object) -> None:
        vars(self).update(values)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def replace(self, **changes: object) -> Self:
        return type(self)(**{**{name: getattr(self, name) for name in self.__match_args__}, **changes})

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


class MutableRecord:
    """A mutable record compared by value, as a plain ``@dataclass`` makes one: ``repr`` (without the fields named
    in ``_unshown``, as ``field(repr=False)``), ``==`` over every field, and no hash. A subclass lists its fields
    in ``__match_args__`` and sets them in ``__init__``."""

    __match_args__: tuple[str, ...] = ()
    _unshown: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__
                           if name not in self._unshown)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return (tuple(getattr(self, name) for name in self.__match_args__)
                    == tuple(getattr(other, name) for name in self.__match_args__))
        return NotImplemented
