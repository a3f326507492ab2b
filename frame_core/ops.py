"""The ``ops`` namespace: one function per registered op, generated from the registry.

``ops.relu(x)``, ``ops.sum(x, axes=(0,), keepdims=True)``: positional
arguments are the op's inputs (tensors, Python numbers or numpy arrays),
keyword arguments its attributes. Use inside ``frame_core.trace``. An
unknown name raises ``UnknownOpError`` suggesting close matches (an
``AttributeError`` too, so ``hasattr(ops, name)`` and ``getattr(ops, name,
default)`` answer as for any module); a short name
that two third-party packs register raises ``AmbiguousOpError``. An op whose
schema has a front-end builder (``OpSchema(frontend=...)``, e.g. control
flow taking Python callables) is called through it instead.

``ops.op("activations::relu")(x)`` calls an op by its qualified name
(``namespace::name``, SPEC §4), for an op whose short name belongs to
another pack; ``frame_core.apply("activations::relu", x)`` does
the same.
"""

from __future__ import annotations

from typing import Any

from .errors import UnknownOpError

__all__ = ["op"]

_cache: dict[str, "OpFunction"] = {}


class OpFunction:
    """Calls one op by name in the graph being traced."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *inputs: Any, **attrs: Any) -> Any:
        from .frontend.trace import apply
        from .ops_registry.registry import registry

        frontend = registry().get(self.name).frontend
        if frontend is not None:
            return frontend(*inputs, **attrs)
        return apply(self.name, *inputs, **attrs)

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        from .ops_registry.registry import registry

        schema = registry().get(self.name)
        return f"{schema.signature()}\n\n{schema.doc}"

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def op(name: str) -> OpFunction:
    """The function of the op ``name``: a short name (``"relu"``) or a qualified one (``"activations::relu"``).

    Raises ``UnknownOpError`` (``AmbiguousOpError`` for an ambiguous short name) at once, not at the call.
    """
    from .ops_registry.registry import registry

    registry().get(name)
    return OpFunction(name)


class UnknownOpAttributeError(UnknownOpError, AttributeError):  # type: ignore[misc]  # both say "name": the op's
    """``ops.<name>`` of an unknown op: an ``UnknownOpError`` (with suggestions) that is also an ``AttributeError``.

    Python's attribute protocol expects ``AttributeError`` from a module's ``__getattr__``: without it
    ``hasattr(ops, "foo")`` and ``getattr(ops, "foo", None)`` raised instead of answering False / None.
    """


def __getattr__(name: str) -> OpFunction:
    if name.startswith("__"):
        raise AttributeError(name)
    fn = _cache.get(name)
    if fn is None:
        from .ops_registry.registry import registry

        try:
            registry().get(name)
        except UnknownOpError as exc:
            if type(exc) is not UnknownOpError:  # AmbiguousOpError: the op exists, the name does not say which
                raise
            raise UnknownOpAttributeError(exc.name, exc._known, exc._hint) from None
        fn = _cache[name] = OpFunction(name)
    return fn


def __dir__() -> list[str]:
    from .ops_registry.registry import registry

    return registry().names()
