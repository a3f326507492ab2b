"""Hook specifications of frame's plugin system (pluggy project ``"frame"``).

A pack is a module named by an entry point in group ``frame``; it defines
``FRAME_PLUGIN_API`` (the plugin API version it was written for, such as
``"1.0"``) and implements any of the hooks below as module-level functions
decorated with :data:`hookimpl`. Implementations may accept fewer arguments
than a specification names (pluggy's rule), so hooks can grow arguments
without breaking packs. The core's own ops come through these same hooks,
from the built-in plugin ``frame_core.ops_registry.builtin``.

Example::

    from frame_core.ops_registry.hookspecs import hookimpl

    FRAME_PLUGIN_API = "1.0"

    @hookimpl
    def frame_register_ops():
        return [SOFTPLUS]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from ..compiler.passspec import PassSpec
    from .schema import OpSchema

__all__ = ["PROJECT", "PLUGIN_API_VERSION", "hookspec", "hookimpl", "FrameHookSpecs"]

PROJECT = "frame"
#: The plugin API this core provides. A pack whose ``FRAME_PLUGIN_API`` has a
#: different major version is refused with a message saying which core it needs.
PLUGIN_API_VERSION = "1.0"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class FrameHookSpecs:
    """The hooks a pack may implement."""

    @hookspec
    def frame_register_ops(self) -> "list[OpSchema]":  # type: ignore[empty-body]
        """Return the pack's operator schemas.

        Called once per pack while the registry loads (on first use of
        ``frame_core.registry()``, never at import). Each item must be an
        :class:`~frame_core.ops_registry.schema.OpSchema`. Op names need only be
        unique within the pack: each op is also ``<entry-point name>::<name>``;
        when two packs register one name both load, the op bundled with frame
        keeps the short name, and the collision is a warning naming both
        distributions (SPEC §4; ``docs/plugins.md``). Raising here marks the pack
        as failed (its ops are unavailable, the rest of frame keeps working;
        ``FRAME_STRICT=1`` turns this into an error).

        :return: a list of ``OpSchema``.
        """

    @hookspec
    def frame_register_passes(self) -> "list[PassSpec]":  # type: ignore[empty-body]
        """Return compile passes to insert into the pipeline.

        Each :class:`~frame_core.compiler.passspec.PassSpec` names a pure
        function ``Graph -> Graph`` and the built-in stage it runs ``before``
        or ``after`` (by name, never by numeric priority). Passes from several
        packs anchored at the same stage run in pack-load order. A pass must
        preserve values and derivative semantics; ``FRAME_CHECKS=1`` verifies
        the graph after every pass and names the pass that broke it.

        :return: a list of ``PassSpec``.
        """
