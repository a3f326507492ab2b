"""Entry point of frame-ops-nn: registers the pack's ops.

Modules: ``conv`` (conv2d, conv_transpose1d/2d), ``pool`` (max/avg/adaptive
2-D pooling), ``norm`` (layer_norm, batch_norm, group_norm) and
``embedding``; the passes ``norm_passes.reuse_norm_statistics`` and ``pool_passes.pool_before_monotone``.
"""

from __future__ import annotations

from frame_core import hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from . import conv, embedding, norm, pool

    return [*conv.SCHEMAS, *pool.SCHEMAS, *norm.SCHEMAS, *embedding.SCHEMAS]


@hookimpl
def frame_register_passes():
    from . import norm_passes, pool_passes

    return [*norm_passes.PASSES, *pool_passes.PASSES]
