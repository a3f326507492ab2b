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

import builtins
from typing import Any

from .errors import AttributeSpecError, ShapeError, UnknownOpError

__all__ = ["op"]

_apply: Any = None  # frontend.trace.apply_resolved and the registry accessor, bound on the first op call (_bind): an
_registry: Any = None  # import statement inside __call__ cost more than the rest of a call while tracing


def _bind() -> None:
    global _apply, _registry
    from .frontend.trace import apply_resolved
    from .ops_registry.registry import registry

    _apply, _registry = apply_resolved, registry


_cache: dict[str, "OpFunction"] = {}
_BUILTINS = frozenset(vars(builtins))


class OpFunction:
    """Calls one op by name in the graph being traced."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *inputs: Any, **attrs: Any) -> Any:
        if _apply is None:
            _bind()
        reg = _registry()
        try:
            key, schema = reg.resolve(self.name)
            frontend = schema.frontend
            if frontend is not None:
                _check_call(self.name, frontend, inputs, attrs)
                return frontend(*inputs, **attrs)
            return _apply(self.name, key, schema, inputs, attrs)  # (resolved once, not again to build the node)
        except (AttributeSpecError, ShapeError) as exc:  # the short name may mean another op than the caller's
            note = reg.collision_note(self.name) if type(exc) in (AttributeSpecError, ShapeError) else None
            if note is None:
                raise
            raise type(exc)(f"{exc}\n{note}") from None

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        from .ops_registry.registry import registry

        schema = registry().get(self.name)
        return f"{schema.signature(self.name)}\n\n{schema.doc}"

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def frontend_call(name: str, frontend: Any) -> str:
    """How the front end of op ``name`` is called: ``ops.if_else(cond, then_fn, else_fn, *xs)``."""
    import inspect

    try:
        return f"ops.{name}{_plain(inspect.signature(frontend))}"
    except (TypeError, ValueError):  # a builtin or a callable object without a signature
        return f"ops.{name}(...)"


def _plain(signature: Any) -> Any:
    """``signature`` without annotations: ``(cond, then_fn, else_fn, *xs)`` reads better in a message."""
    return signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                             return_annotation=signature.empty)


def _check_call(name: str, frontend: Any, inputs: tuple[Any, ...], attrs: dict[str, Any]) -> None:
    """Refuse arguments ``frontend`` cannot take (an unknown keyword, one too few) as an ``ArgumentError``, which
    is a ``TypeError`` too, naming the call's signature; Python's own TypeError names only the keyword."""
    import inspect

    try:
        signature = inspect.signature(frontend)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*inputs, **attrs)
    except TypeError as exc:
        from .errors import ArgumentError

        unknown = [k for k in attrs if k not in signature.parameters]
        known = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY or
                 (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)]
        from .errors import suggest

        close = suggest(unknown[0], known, 1) if unknown else []
        what = (f"takes no keyword {unknown[0]!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                + (f" (its keywords: {', '.join(known)})" if known else "")
                if unknown else str(exc).replace(f"{getattr(frontend, '__name__', name)}() ", "", 1))
        raise ArgumentError(f"ops.{name} {what}; call it as ops.{name}{_plain(signature)}") from None


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
        if name not in _BUILTINS and not name.startswith("_"):  # (a global `sum` would shadow the builtin here)
            globals()[name] = fn  # later `ops.name` finds it without this hook (the function resolves at each call)
    return fn


def __dir__() -> list[str]:
    from .ops_registry.registry import registry

    return registry().names()
