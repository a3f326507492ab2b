"""Entry point of frame-ops-basic: registers the pack's ops and its compile pass."""

from __future__ import annotations

from frame_core import hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from . import (compare, convert, creation, elementwise, extrema, inverse_trig, like, linalg, losses, matrix,
                   nonlinear, pointwise, random, reductions, regions, shape, softmax, special)

    return [*elementwise.SCHEMAS, *linalg.SCHEMAS, *reductions.SCHEMAS, *shape.SCHEMAS, *losses.SCHEMAS,
            *special.SCHEMAS, *regions.SCHEMAS, *compare.SCHEMAS, *pointwise.SCHEMAS, *convert.SCHEMAS,
            *extrema.SCHEMAS, *softmax.SCHEMAS, *nonlinear.SCHEMAS, *creation.SCHEMAS, *random.SCHEMAS,
            *like.SCHEMAS, *inverse_trig.SCHEMAS, *matrix.SCHEMAS]


@hookimpl
def frame_register_passes():
    from . import like, outer, simplify

    # bind_shapes after infer_types; outer products and simplify_algebra both after fold_constants, in this order
    return [*like.PASSES, *outer.PASSES, *simplify.PASSES]
