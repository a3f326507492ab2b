"""The hooks through which a pack teaches frame-onnx its ops (pluggy project ``frame_onnx``).

A pack declares an entry point in group ``frame_onnx`` naming a module that implements either hook with
``frame_onnx.hookimpl``. Each entry point is loaded on its own: one that fails is reported (a warning
naming it and why) and the others still load. ``register(module)`` adds hooks from a module at run time
(tests, notebooks).

Example::

    import frame_onnx
    from frame_onnx import hookimpl

    @hookimpl
    def frame_onnx_export_rules():
        # my_pack::softsign(x) -> x / (1 + |x|)
        def softsign(ex, node):
            x = ex.input(node, 0)
            denom = ex.emit("Add", [ex.emit("Abs", [x]), ex.const(1.0, node.inputs[0].dtype)])
            return [ex.emit("Div", [x, denom])]
        return {"softsign": softsign}
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec", "OnnxHookSpecs", "register", "plugin_import_rules",
           "plugin_export_rules"]

PROJECT = "frame_onnx"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class OnnxHookSpecs:
    """The hooks of frame-onnx."""

    @hookspec
    def frame_onnx_export_rules(self) -> "dict[str, Callable[..., Any]]":  # type: ignore[empty-body]
        """Return ONNX export rules for a pack's ops: ``{op name: rule}``.

        The key is the op's name as the frame graph records it (the short name, or ``pack::name``). A rule is
        called as ``rule(exporter, node)`` and returns the ONNX names of the node's outputs, in order; it builds
        ONNX nodes with ``exporter.emit(op_type, inputs, **attributes)``, reads the node's inputs with
        ``exporter.input(node, i)`` and makes constants with ``exporter.const(array, dtype)``
        (``frame_onnx.export.Exporter``). A rule here replaces the built-in one of the same op.

        :return: a dict of op name to rule.
        """

    @hookspec
    def frame_onnx_import_rules(self) -> "dict[tuple[str, str] | str, Callable[..., Any]]":  # type: ignore[empty-body]
        """Return ONNX import rules: ``{(domain, op_type) or op_type: rule}`` (a bare op type is the default
        domain).

        A rule is called as ``rule(cx)`` with a ``frame_onnx.NodeContext`` (the node, its inputs as frame
        tensors or known numpy arrays, ``cx.attr(name, kind)``, ``cx.opset``) while the model is traced, and
        returns the node's outputs (tensors or arrays; one, or a list). Raising ``frame_onnx.Unsupported`` lists
        the node as unsupported and the import goes on collecting others. A rule here replaces the built-in one.

        :return: a dict of op type to rule.
        """


_manager: pluggy.PluginManager | None = None


def _pm() -> pluggy.PluginManager:
    global _manager
    if _manager is None:
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(OnnxHookSpecs)
        from importlib.metadata import entry_points

        for ep in entry_points(group=PROJECT):
            try:
                pm.register(ep.load(), name=ep.name)
            except Exception as exc:  # one broken pack must not stop the others (the core loader's rule)
                warnings.warn(f"frame-onnx: entry point {ep.name!r} ({ep.value}) failed to load and is skipped: "
                              f"{type(exc).__name__}: {exc}", stacklevel=2)
        _manager = pm
    return _manager


def register(plugin: Any, name: str | None = None) -> None:
    """Add the hook implementations of ``plugin`` (a module or object) now; ``unregister`` undoes it."""
    _pm().register(plugin, name=name)


def unregister(plugin: Any) -> None:
    _pm().unregister(plugin)


def plugin_import_rules() -> dict[tuple[str, str], Callable[..., Any]]:
    rules: dict[tuple[str, str], Callable[..., Any]] = {}
    for result in reversed(_pm().hook.frame_onnx_import_rules()):  # the first registered wins last
        for key, fn in (result or {}).items():
            rules[("", key) if isinstance(key, str) else (("" if key[0] in ("", "ai.onnx") else key[0]), key[1])] = fn
    return rules


def plugin_export_rules() -> dict[str, Callable[..., Any]]:
    rules: dict[str, Callable[..., Any]] = {}
    for result in reversed(_pm().hook.frame_onnx_export_rules()):
        rules.update(result or {})
    return rules
