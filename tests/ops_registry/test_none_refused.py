"""A caller's None means an attribute's default, except where None means something else in a library users know
(numpy flattens for axis=None, torch's batch_norm momentum=None is a cumulative average): there the op refuses
None by name instead of silently taking the default (AttrSpec(none_refused=...))."""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import AttrSpec, OpSchema, ops
from frame_core.errors import AttributeSpecError

CASES = {
    "softmax": (lambda x: ops.softmax(x, axis=None), "scipy.special.softmax"),
    "log_softmax": (lambda x: ops.log_softmax(x, axis=None), "scipy.special.softmax"),
    "concat": (lambda x: ops.concat(x, x, axis=None), r"concatenate\(axis=None\)"),
    "gather": (lambda x: ops.gather(x, np.array([0, 1]), axis=None), r"np.take\(axis=None\)"),
    "batch_norm": (lambda x: ops.batch_norm(x, np.ones(3, np.float32), np.zeros(3, np.float32),
                                            np.zeros(3, np.float32), np.ones(3, np.float32), momentum=None)[0],
                   "cumulative average"),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_none_where_it_means_something_else_is_refused_naming_the_other_meaning(op):
    fn, meaning = CASES[op]
    with pytest.raises(AttributeSpecError, match=rf"{op}: attribute '\w+' cannot be None: .*{meaning}"):
        fc.trace(fn, "f32[2, 3]")


def test_none_elsewhere_still_means_the_default():
    graph = fc.trace(lambda x: ops.sum(x, axes=None) + ops.softmax(x)[0, 0], "f64[2, 3]")
    x = np.arange(6.0).reshape(2, 3)
    got = fc.compile(graph).run([x])[0]
    e = np.exp(x[0] - x[0].max())
    assert np.isclose(got, x.sum() + e[0] / e.sum(), rtol=1e-15)


def test_an_attribute_spec_without_none_refused_keeps_the_default_rule():
    spec = AttrSpec("int", 3, "n")
    assert spec.none_refused is None
    refusing = AttrSpec("int", 3, "n", none_refused="say why")
    schema = OpSchema("none_refused_probe", inputs=("x",), attrs={"n": refusing},
                      shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": lambda ctx: lambda x: x})
    with pytest.raises(AttributeSpecError, match="cannot be None: say why"):
        schema._normalize_attrs({"n": None})
    assert schema._normalize_attrs({}) == {"n": 3}  # not given: the default
