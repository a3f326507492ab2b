"""Entry point of frame-native: registers ``native_fused_internal``, the row-kernel ops and their passes."""

from __future__ import annotations

from frame_core import PassSpec, hookimpl

FRAME_PLUGIN_API = "1.0"


@hookimpl
def frame_register_ops():
    from .colsums import COLUMN_SUM_SCHEMA
    from .conv import CONV_POOL_SCHEMA
    from .rows import ROW_SCHEMAS
    from .tiered import NATIVE

    return [NATIVE, *ROW_SCHEMAS, COLUMN_SUM_SCHEMA, CONV_POOL_SCHEMA]


@hookimpl
def frame_register_passes():
    from .colsums import compile_column_sums
    from .conv import compile_conv_pools
    from .passes import compile_fused_groups, switched_off
    from .remat import recompute_in_readers
    from .rows import compile_norm_rows

    return [PassSpec("compile_fused_groups", compile_fused_groups, after="fuse_elementwise", min_level=2,
                     doc="fused groups of exactly rounded ops tier up to compiled native code in the background",
                     cache_key=switched_off),
            PassSpec("recompute_in_readers", recompute_in_readers, after="fuse_elementwise", min_level=2,
                     doc="a compiled group recomputes a cheap value it is the only reader of, from values it "
                         "reads anyway, instead of reading it back (the same bits; one write and one read less)",
                     cache_key=switched_off),
            PassSpec("compile_norm_rows", compile_norm_rows, after="fuse_elementwise", min_level=2,
                     doc="layer_norm's training pair on float32/float64 tiers up to compiled row kernels in the "
                         "background (the same bits as frame-ops-nn's numpy kernels)",
                     cache_key=switched_off),
            PassSpec("compile_column_sums", compile_column_sums, after="fuse_elementwise", min_level=2,
                     doc="sums of x[N, C] over its rows (reduce_to_shape_internal) on float32/float64 tier up to "
                         "compiled column sums in the background (the same bits as numpy's add.reduce)",
                     cache_key=switched_off),
            PassSpec("compile_conv_pools", compile_conv_pools, before="fuse_elementwise", min_level=2,
                     doc="an inference layer relu(max_pool2d(conv2d(x, w), 2) + b) tiers up to compiled columns and "
                         "pool around frame-ops-nn's matrix product, one sample at a time (the same bits)",
                     cache_key=switched_off)]
