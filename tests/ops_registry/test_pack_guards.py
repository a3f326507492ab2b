"""Whatever a pack provides is checked inside that pack's guard: it fails alone, frame and the other packs go on.

Each case is a pack that once ended every ``frame`` command with ``internal error`` (or the process), written
as a fake distribution on ``sys.path`` next to a sound pack.
"""

from __future__ import annotations

import pytest

from frame_core import PluginError
from frame_core.errors import RegistrationError
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.schema import Example, OpSchema

from .fakepacks import pack_source

# (case id, pack body, frame_register_ops body or None for the default, fragments of the pack's error)
BROKEN_PACKS = [
    ("traits-as-a-bare-string", "", "return [op('fk_a', traits='elementwise')]",
     ["traits must be a list", "write ['elementwise']"]),
    ("inputs-as-a-bare-string", "", "return [op('fk_a', inputs='xy')]", ["inputs must be a list"]),
    ("nondiff-input-unknown-name", "", "return [op('fk_a', nondiff_inputs=['idx'])]",
     ["nondiff_inputs names 'idx', which is not an input (inputs: x)"]),
    ("nondiff-input-a-float", "", "return [op('fk_a', nondiff_inputs=[0.5])]", ["nondiff_inputs holds 0.5"]),
    ("attr-not-an-attrspec", "", "return [op('fk_a', attrs={'k': 3})]",
     ["attribute 'k' must be described by an AttrSpec"]),
    ("example-not-an-example", "", "return [op('fk_a', examples=['f32[3]'])]",
     ["example 0 is a str, expected an Example"]),
    ("example-of-the-wrong-arity", "", "return [op('fk_a', examples=[Example(['f32[3]', 'f32[3]'])])]",
     ["example 0 gives 2 inputs, the op takes 1"]),
    ("name-changed-to-an-int", "", "s = op('fk_a')\ns.name = 7\nreturn [s]", ["checking the schema raised"]),
    ("gradient-not-callable", "", "return [op('fk_a', gradient='gy')]", ["gradient must be callable"]),
    ("example-attrs-crash-normalisation", "", "return [op('fk_a', examples=[Example(['f32[3]'], {'k': object()})])]",
     ["example", "rejected by its own op"]),
    ("exit-in-register-ops", "import sys", "sys.exit(4)", ["frame_register_ops raised SystemExit: 4"]),
    ("exit-in-gradient", "import sys",
     "return [op('fk_a', gradient=lambda ctx: sys.exit(5))]", ["GradientFn raised SystemExit"]),
    ("exit-in-shape-inference", "import sys",
     "return [op('fk_a', shape_infer=lambda ctx: sys.exit(6))]", ["SystemExit", "shape inference"]),
    ("syntax-error", "def broken(:\n    pass", None, ["SyntaxError", ".py:"]),
]


@pytest.mark.parametrize("case, body, register, fragments", BROKEN_PACKS, ids=[c[0] for c in BROKEN_PACKS])
def test_a_broken_pack_fails_alone(site, case, body, register, fragments):
    site.pack("broken-pack", pack_source(["fk_a"], body=body, register=register))
    site.pack("good-pack", pack_source(["fk_good"]))
    reg = load_registry(environ={})  # never raises, never exits
    (record,) = [p for p in reg.packs.values() if p.distribution == "broken-pack"]
    assert record.status == "failed", record
    for fragment in fragments:
        assert fragment in record.error
    assert "fk_good" in reg and "fk_a" not in reg
    with pytest.raises(PluginError, match="broken-pack"):
        load_registry(environ={"FRAME_STRICT": "1"})


PASS_BODY = '''
import sys
from frame_core.compiler.passspec import PassSpec

@hookimpl
def frame_register_passes():
    {passes}
'''

BROKEN_PASSES = [
    ("unhashable-name", "return [PassSpec(['a', 'b'], lambda g, ctx: g, before='fold_constants')]",
     ["must be a non-empty string"]),
    ("exit", "sys.exit(2)", ["frame_register_passes raised SystemExit: 2"]),
    ("anchor-not-a-string", "return [PassSpec('p', lambda g, ctx: g, before=['verify'])]",
     ["before= must name a stage"]),
    ("bad-min-level", "return [PassSpec('p', lambda g, ctx: g, before='verify', min_level='2')]",
     ["min_level must be 0, 1 or 2"]),
    ("two-of-one-name", "return [PassSpec('p', lambda g, ctx: g, before='verify')] * 2",
     ["two passes named 'p'"]),
]


@pytest.mark.parametrize("case, passes, fragments", BROKEN_PASSES, ids=[c[0] for c in BROKEN_PASSES])
def test_a_pack_with_broken_passes_fails_alone(site, case, passes, fragments):
    site.pack("pass-pack", pack_source(["fk_p"], body=PASS_BODY.format(passes=passes)))
    site.pack("good-pack", pack_source(["fk_good"]))
    reg = load_registry(environ={})
    (record,) = [p for p in reg.packs.values() if p.distribution == "pass-pack"]
    assert record.status == "failed"
    for fragment in fragments:
        assert fragment in record.error
    assert "fk_good" in reg and not [p for p in reg.passes if p.pack == record.name]


def test_nondiff_inputs_may_name_the_inputs():
    schema = OpSchema("fk_take", inputs=("x", "indices"), shape_infer=lambda ctx: [ctx.input_types[0]],
                      kernels={"cpu": lambda ctx: lambda x, i: x.copy()}, gradient=lambda ctx: None,
                      nondiff_inputs=["indices"], examples=[Example(["f32[3]", "i64[3]"])])
    assert schema.nondiff_inputs == frozenset({1}) and schema.check_definition() == []


@pytest.mark.parametrize("field, value", [("inputs", "x"), ("outputs", "y"), ("traits", "elementwise"),
                                          ("nondiff_inputs", 0), ("examples", Example(["f32[3]"]))])
def test_schema_fields_that_take_lists_refuse_a_bare_item(field, value):
    spec = dict(inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: abs},
                not_differentiable="test", examples=[Example(["f32[3]"])])
    spec[field] = value
    with pytest.raises(RegistrationError, match=f"{field} must be a list"):
        OpSchema("fk_x", **spec)
