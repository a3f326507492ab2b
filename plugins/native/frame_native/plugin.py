"""Entry point of frame-native: registers ``native_fused_internal`` and the ``compile_fused_groups`` pass."""

from __future__ import annotations

from frame_core import PassSpec, hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from .tiered import NATIVE

    return [NATIVE]


@hookimpl
def frame_register_passes():
    from .passes import compile_fused_groups, switched_off

    return [PassSpec("compile_fused_groups", compile_fused_groups, after="fuse_elementwise", min_level=2,
                     doc="fused groups of exactly rounded ops tier up to compiled native code in the background",
                     cache_key=switched_off)]
