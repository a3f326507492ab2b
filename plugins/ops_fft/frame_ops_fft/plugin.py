"""Entry point of frame-ops-fft: registers the transforms and the packed complex ops."""

from __future__ import annotations

from frame_core import hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from . import complex_ops, transforms

    return [*transforms.SCHEMAS, *complex_ops.SCHEMAS]
