"""Entry point of frame-ops-fft: registers the transforms, the packed complex ops and a compile pass."""

from __future__ import annotations

from frame_core import hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from . import complex_ops, transforms

    return [*transforms.SCHEMAS, *complex_ops.SCHEMAS]


@hookimpl
def frame_register_passes():
    from . import narrow, pairs, simplify

    # pairs first: the multiply it leaves folds into its neighbours; narrow last: it moves the folded multiply
    return [*pairs.PASSES, *simplify.PASSES, *narrow.PASSES]
