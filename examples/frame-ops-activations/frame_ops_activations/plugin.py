"""Entry point of frame-ops-activations: declares the plugin API and registers the pack's ops."""

from __future__ import annotations

from frame_core import OpSchema, hookimpl

#: The frame plugin API this pack is written for.
FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops() -> list[OpSchema]:
    from . import piecewise, smooth

    return [*smooth.SCHEMAS, *piecewise.SCHEMAS]
