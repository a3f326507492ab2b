"""More public API arguments of the wrong type, found by calling every public function with None, strings,
bytes, floats, huge ints, numpy arrays, dtypes and graphs in every position (issue 8 §4, QA).

Each was an AttributeError, a TypeError or a ValueError ("the truth value of an array ... is ambiguous") from
inside the function or from numpy; each row is now a named error with words saying what was expected.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import CompileError, GradientError, InputError, IRError, RegistrationError, ops
from frame_core.autodiff.vjp import split_vjp_graph
from frame_core.ops_registry.loader import load_registry


@pytest.fixture(scope="module")
def graph():
    return fc.trace(lambda x, w: ops.sum(ops.relu(x * w)), "f32[3]", "f32[3]")


ARRAY = np.arange(3)

CASES = [
    ("vjp-wrt-float", lambda g: fc.build_vjp_graph(g, 1.5), GradientError, "list of input positions"),
    ("vjp-wrt-str", lambda g: fc.build_vjp_graph(g, "01"), GradientError, "list of input positions"),
    ("vjp-wrt-int", lambda g: fc.build_vjp_graph(g, 0), GradientError, "for one input write [0]"),
    ("vjp-wrt-floats", lambda g: fc.build_vjp_graph(g, [0.5]), GradientError, "holds input positions (ints) or names"),
    ("vjp-label-array", lambda g: fc.build_vjp_graph(g, [0], label=ARRAY), GradientError, "label= is a string"),
    ("vjp-registry-str", lambda g: fc.build_vjp_graph(g, registry="x"), GradientError, "registry= takes"),
    ("split-invariant-int", lambda g: split_vjp_graph(g, [0], invariant=1), GradientError, "invariant= is a list"),
    ("contraction-name-array", lambda g: fc.add_scalar_contraction(g, 0, name=ARRAY), GradientError,
     "name= names the new output"),
    ("contraction-name-empty", lambda g: fc.add_scalar_contraction(g, 0, name=""), GradientError, "non-empty string"),
    ("sgd-lr-huge-int", lambda g: fc.build_sgd_update_graph(["f32[3]"], 10**400), GradientError,
     "positive finite number"),
    ("clone-none", lambda g: fc.clone_graph(None), IRError, "clone_graph takes a Graph"),
    ("clone-dtype", lambda g: fc.clone_graph(fc.float32), IRError, "clone_graph takes a Graph"),
    ("clone-map-str", lambda g: fc.clone_graph(g, "x"), IRError, "value_map=) takes a dict"),
    ("format-none", lambda g: fc.format_graph(None), IRError, "format_graph takes a Graph"),
    ("format-indent-int", lambda g: fc.format_graph(g, 4), IRError, "indent=) is a string"),
    ("dot-none", lambda g: fc.to_dot(None), IRError, "to_dot takes a Graph"),
    ("output-index-array", lambda g: g.output_index(ARRAY), IRError, "output_index takes an output's name"),
    ("check-graph-types-array", lambda g: fc.check_graph(g, types=ARRAY), IRError, "types=) is True or False"),
    ("compile-subgraph-backend-array", lambda g: fc.compile_subgraph(g, backend=ARRAY), CompileError,
     "backend is a name"),
    ("load-registry-audit-array", lambda g: load_registry(environ={}, audit=ARRAY), fc.ArgumentError,
     "audit=) is True or False"),
    ("load-registry-strict-str", lambda g: load_registry(environ={}, strict="yes"), fc.ArgumentError,
     "strict=) is True or False"),
    ("profile-repeat-huge", lambda g: fc.compile(g).profile([np.ones(3, np.float32)] * 2, 10**30), InputError,
     "at most 1,000,000"),
    ("unchecked-array", lambda g: fc.compile(g).unchecked(ARRAY), InputError, "copy_outputs=) is True or False"),
    ("add-node-types-float", lambda g: (lambda h: h.add_node("relu", [h.add_input("f32[3]")], {}, 1.5))(fc.Graph()),
     IRError, "output_types) takes a list of types"),
    ("tensor-type-array", lambda g: fc.TensorType(ARRAY), IRError, "unsupported dtype"),
    ("registry-names-array", lambda g: fc.registry().names(internal=ARRAY), IRError, "internal=) is True or False"),
    ("registry-ops-of-array", lambda g: fc.registry().ops_of(ARRAY), IRError, "ops_of takes a pack's name"),
    ("python-int-past-int64-as-output", lambda g: fc.trace(lambda x: 10**30, "f32[3]"), IRError,
     "does not fit in int64"),
    ("python-int-past-int64-as-index", lambda g: fc.trace(lambda x: ops.gather(x, 10**30), "f32[3, 2]"), IRError,
     "does not fit in int64"),
    ("loop-max-trip-past-int64", lambda g: fc.trace(lambda x: ops.loop(lambda i, s: (True, s), 10**30, True, x),
                                                    "f32[3]"), IRError, "fit 64 bits"),
    ("example-attrs-str", lambda g: fc.Example(["f32[3]"], "x"), RegistrationError, "Example attrs map"),
    ("example-values-float", lambda g: fc.Example(["f32[3]"], values=1.5), RegistrationError,
     "values= is a list of numpy arrays"),
    ("example-values-array", lambda g: fc.Example(["f32[3]"], values=np.ones(3)), RegistrationError,
     "for one input write [array]"),
    ("example-values-strings", lambda g: fc.Example(["f32[3]"], values=["a"]), RegistrationError, "holds numbers"),
    ("example-low-none", lambda g: fc.Example(["f32[3]"], low=None), RegistrationError, "low= is a finite number"),
    ("example-high-nan", lambda g: fc.Example(["f32[3]"], high=float("nan")), RegistrationError,
     "high= is a finite number"),
]


@pytest.mark.parametrize("case, call, error, words", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_argument_is_a_named_error_saying_what_was_expected(graph, case, call, error, words):
    with pytest.raises(error) as info:
        call(graph)
    assert words in str(info.value)


def test_example_values_may_still_be_nested_lists_of_numbers():
    example = fc.Example(["f32[3]"], values=[[1.0, 2.0, 3.0]])
    assert isinstance(example.values[0], np.ndarray) and example.values[0].shape == (3,)


def test_vjp_positions_may_still_be_a_numpy_vector(graph):
    assert len(fc.build_vjp_graph(graph, np.array([0, 1])).outputs) == 2
