"""``DynamicExecutable``: one compiled graph that accepts any batch size (any dimension).

``compile(graph, dynamic_shapes=True)`` returns one. Inputs of the traced shapes run the traced
executable directly (one tuple comparison more per run); inputs whose dtypes and ranks match but whose
dimensions differ get the graph re-specialised for their shape signature (``compiler.specialize``),
compiled with the same options, and kept in a bounded LRU (docs/design-parameters-and-shapes.md).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.types import TensorType
from .executable import Executable

__all__ = ["DynamicExecutable", "SpecializationInfo"]


@dataclass(frozen=True)
class SpecializationInfo:
    """Runs served by a specialisation already compiled (``hits``), compiles for a new shape signature
    (``misses``), signatures held now (``entries``, at most ``maxsize``; the traced one is not counted)."""

    hits: int
    misses: int
    entries: int
    maxsize: int


class DynamicExecutable:
    """An executable for ``graph`` at any input dimensions (dtypes and ranks fixed).

    ``build(input_types)`` gives the graph for a new shape signature: ``compile`` passes
    ``specialize``; ``value_and_grad`` re-specialises its training graph, or specialises the forward
    graph and differentiates it again when the training graph holds traced sizes.

    ``run``, ``__call__`` and the dict-by-name form behave as ``Executable``'s; every other attribute
    (``graph``, ``input_types``, ``profile``, ...) is the traced executable's.
    """

    def __init__(self, base: Executable, build: Callable[[list[TensorType]], Graph], options: Mapping[str, Any],
                 maxsize: int = 16) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise InputError(f"maxsize (specialisations kept) is an int of 1 or more, got {maxsize!r}")
        self._base = base
        self._build = build  # input types -> the graph to compile for them
        self._options = dict(options)
        self._shapes = tuple(t.shape for t in base.input_types)
        self._cache: OrderedDict[tuple, Executable] = OrderedDict()
        self._maxsize = maxsize
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def traced(self) -> Executable:
        """The executable of the traced shapes."""
        return self._base

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._base, name)

    def specializations(self) -> SpecializationInfo:
        """Hit and miss counts of the shape-signature cache."""
        return SpecializationInfo(self._hits, self._misses, len(self._cache), self._maxsize)

    def for_shapes(self, shapes: Sequence[Sequence[int]]) -> Executable:
        """The executable for inputs of ``shapes`` (compiled now if new): run it directly in a hot loop."""
        key = tuple(tuple(int(d) for d in s) for s in shapes)
        if key == self._shapes:
            return self._base
        with self._lock:
            exe = self._cache.get(key)
            if exe is not None:
                self._hits += 1
                self._cache.move_to_end(key)
                return exe
        exe = self._compile(key)
        with self._lock:
            self._misses += 1
            self._cache[key] = exe
            while len(self._cache) > self._maxsize:
                self._cache.popitem(last=False)
        return exe

    def _compile(self, key: tuple) -> Executable:
        from ..compiler.api import compile as compile_graph

        types = [t.with_shape(shape) for t, shape in zip(self._base.input_types, key)]
        return compile_graph(self._build(types), **self._options)

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        """Run on ``inputs``, compiling a specialisation first for a new shape signature."""
        if isinstance(inputs, Mapping):
            inputs = self._base._by_name(inputs)
        try:
            shapes = tuple([a.shape for a in inputs])
        except (AttributeError, TypeError):  # Python scalars, a non-sequence: the traced executable names it
            return self._base.run(inputs)
        if shapes == self._shapes:
            return self._base.run(inputs)
        if len(shapes) != len(self._shapes):
            return self._base.run(inputs)  # its InputError says how many it takes
        for i, (s, a, ty) in enumerate(zip(shapes, inputs, self._base.input_types)):
            if len(s) != ty.rank or getattr(a, "dtype", None) != ty.dtype.np:
                if type(a) is np.ndarray:  # (the traced executable's check would name another input's new size)
                    raise InputError(f"{self._base._input_label(i)} is {a.dtype}{list(a.shape)}; it was traced as "
                                     f"{ty}: any dimension may change, not the dtype ({ty.dtype.name}) or the rank "
                                     f"({ty.rank}); convert it, or trace the graph again for this kind of input")
                return self._base.run(inputs)  # another kind of array or value: its InputError says which
        return self.for_shapes(shapes).run(inputs)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        return self.run(inputs)

    def __repr__(self) -> str:
        info = self.specializations()
        return f"<DynamicExecutable of {self._base!r}, {info.entries} other shape signature(s)>"
