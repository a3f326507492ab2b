"""A small op pack for the IR tests, loaded through the real loader from a fake entry point.

The IR tests use these ops instead of a bundled pack so they keep working
whatever the packs do: ``add2`` (two inputs of one type), ``neg1``,
``scale`` (a float attribute), ``attrs_all`` (one attribute of every kind),
``split2`` (two outputs), ``call`` (a graph attribute, like a control-flow op).
"""

from __future__ import annotations

import types

import numpy as np

from frame_core.frontend.trace import apply
from frame_core.ir.graph import Graph
from frame_core.ir.types import TensorType
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.registry import Registry
from frame_core.ops_registry.schema import AttrSpec, Example, OpSchema
from ..fakes import FakeEntryPoint

FIXTURE_API = "1.0"


def _same(ctx):
    a, b = ctx.input_types
    if a != b:
        raise ctx.error(f"expects two inputs of one type, got {a} and {b}")
    return [a]


def _first(ctx):
    return [ctx.input_types[0]]


def _cast(ctx):
    return [TensorType(ctx.attrs["dtype"], ctx.input_types[0].shape)]


def _split(ctx):
    (t,) = ctx.input_types
    if t.rank != 1 or t.shape[0] % 2:
        raise ctx.error(f"expects a rank-1 input of even length, got {t}")
    half = t.with_shape((t.shape[0] // 2,))
    return [half, half]


def _call_shape(ctx):
    body = ctx.attrs["body"]
    if list(ctx.input_types) != body.input_types:
        raise ctx.error(f"inputs {list(map(str, ctx.input_types))} do not match the body's {list(map(str, body.input_types))}")
    return body.output_types


def _call_kernel(ctx):
    import frame_core as fc

    exe = fc.compile(ctx.attrs["body"], opt_level=0)
    return lambda *xs: tuple(exe.run(list(xs)))


def example_body() -> Graph:
    """``body(x: f32[3]) = neg1(x)``, built without a registry (types given)."""
    g = Graph("body")
    x = g.add_input("f32[3]", "x")
    (y,) = g.add_node("neg1", [x], {}, ["f32[3]"]).outputs
    g.mark_output(y)
    return g


ALL_ATTRS = {
    "i": AttrSpec("int"),
    "f": AttrSpec("float"),
    "b": AttrSpec("bool"),
    "s": AttrSpec("str"),
    "ints": AttrSpec("ints"),
    "floats": AttrSpec("floats"),
    "strs": AttrSpec("strs"),
    "dt": AttrSpec("dtype"),
    "shp": AttrSpec("shape"),
    "t": AttrSpec("tensor", None),
    "opt": AttrSpec("int", 7),
}


def make_schemas() -> list[OpSchema]:
    """Fresh schemas (the loader writes ``pack`` into them, so never share them between registries)."""
    nd = "a fixture op"
    return [
        OpSchema("add2", inputs=("a", "b"), shape_infer=_same, kernels={"cpu": lambda ctx: np.add},
                 gradient=lambda ctx: ctx.grad_graph(lambda a, b, y, gy: [gy, gy]),
                 examples=[Example(["f32[3]", "f32[3]"])], doc="a + b for two inputs of one type"),
        OpSchema("neg1", inputs=("x",), shape_infer=_first, kernels={"cpu": lambda ctx: np.negative},
                 gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: apply("neg1", gy)),
                 examples=[Example(["f32[3]"])], doc="-x"),
        OpSchema("scale", inputs=("x",), attrs={"factor": AttrSpec("float", 1.0)}, shape_infer=_first,
                 kernels={"cpu": lambda ctx: (lambda x: x * x.dtype.type(ctx.attrs["factor"]))},
                 gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: apply("scale", gy, factor=ctx.attrs["factor"])),
                 examples=[Example(["f32[3]"], {"factor": 2.0})], doc="x * factor"),
        OpSchema("cast", inputs=("x",), attrs={"dtype": AttrSpec("dtype")}, shape_infer=_cast,
                 kernels={"cpu": lambda ctx: (lambda x: x.astype(ctx.attrs["dtype"].np))}, not_differentiable=nd,
                 examples=[Example(["f32[3]"], {"dtype": "f64"})], doc="x converted to dtype"),
        OpSchema("attrs_all", inputs=("x",), attrs=ALL_ATTRS, shape_infer=_first,
                 kernels={"cpu": lambda ctx: (lambda x: x.copy())}, not_differentiable=nd,
                 examples=[Example(["f32[3]"], {"i": 1, "f": 0.5, "b": True, "s": "s", "ints": [1], "floats": [1.0],
                                                "strs": ["a"], "dt": "f32", "shp": [2]})],
                 doc="identity with one attribute of every kind"),
        OpSchema("split2", inputs=("x",), outputs=("lo", "hi"), shape_infer=_split,
                 kernels={"cpu": lambda ctx: (lambda x: (x[: x.shape[0] // 2].copy(), x[x.shape[0] // 2:].copy()))},
                 not_differentiable=nd, examples=[Example(["f32[4]"])], doc="the two halves of x"),
        OpSchema("call", inputs=("xs",), outputs=("ys",), variadic=True, attrs={"body": AttrSpec("graph")},
                 shape_infer=_call_shape, kernels={"cpu": _call_kernel}, not_differentiable=nd,
                 examples=[Example(["f32[3]"], {"body": example_body()})], doc="runs its body graph"),
    ]


def make_plugin() -> types.ModuleType:
    module = types.ModuleType("ir_fixture_plugin")
    module.FRAME_PLUGIN_API = FIXTURE_API

    @hookimpl
    def frame_register_ops():
        return make_schemas()

    module.frame_register_ops = frame_register_ops
    return module


def load_fixture_registry() -> Registry:
    """The core's built-in ops plus the fixture ops; strict, so a broken fixture fails loudly."""
    return load_registry(entry_points=[FakeEntryPoint("ir_fixture", make_plugin())], environ={}, strict=True)
