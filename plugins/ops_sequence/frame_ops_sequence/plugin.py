"""Entry point of frame-ops-sequence: registers the pack's ops.

Modules: ``gather`` (embedding lookup and its scatter-add gradient),
``recurrence`` (cumsum, linear_scan, selective_scan), ``conv`` (conv1d and
pooling) and ``control`` (if_else, loop, scan over sub-graphs).
"""

from __future__ import annotations

from frame_core import hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from . import control, conv, gather, recurrence

    return [*gather.SCHEMAS, *recurrence.SCHEMAS, *conv.SCHEMAS, *control.SCHEMAS]


@hookimpl
def frame_register_passes():
    from . import control_passes, conv_passes, recurrence_passes

    return [*control_passes.PASSES, *recurrence_passes.PASSES, *conv_passes.PASSES]
