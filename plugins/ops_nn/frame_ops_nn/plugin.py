"""Entry point of frame-ops-nn: registers the pack's ops.

Modules: ``conv`` (conv2d, conv_transpose1d/2d), ``pool`` (max/avg/adaptive
2-D pooling), ``norm`` (layer_norm, batch_norm, group_norm) and
``embedding``; the pass ``norm_passes.reuse_norm_statistics``.
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
    from . import norm_passes

    return list(norm_passes.PASSES)
