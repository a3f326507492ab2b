"""Entry point of frame-ops-basic: registers the pack's ops and its compile pass."""

from __future__ import annotations

from frame_core import hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from . import elementwise, linalg, losses, reductions, regions, shape, special

    return [*elementwise.SCHEMAS, *linalg.SCHEMAS, *reductions.SCHEMAS, *shape.SCHEMAS, *losses.SCHEMAS,
            *special.SCHEMAS, *regions.SCHEMAS]


@hookimpl
def frame_register_passes():
    from .simplify import PASSES

    return PASSES
