"""Public API arguments of the wrong type are named errors that say what was expected (issue 8 §4).

A bare string where a list of names is expected used to be split into characters
(``disable="fold_constants"`` reported fifteen unknown one-letter stages); other mistakes ended in an
AttributeError or TypeError from deep inside. Each row: a call, the error class, words of the message.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ArgumentError, CompileError, IRError, ops
from frame_core.ops_registry.loader import load_registry
from frame_core.testing import check_op, conformance_cases


@pytest.fixture(scope="module")
def graph():
    return fc.trace(lambda x: ops.sum(ops.relu(x)), "f32[3]")


CASES = [
    ("compile-registry-str", lambda g: fc.compile(g, registry="x"), CompileError, "registry= takes a frame_core Registry"),
    ("compile-disable-str", lambda g: fc.compile(g, disable="fold_constants"), CompileError,
     "got the string 'fold_constants'; for one name write ['fold_constants']"),
    ("compile-disable-int", lambda g: fc.compile(g, disable=5), CompileError, "takes a list of names"),
    ("compile-decompose-int", lambda g: fc.compile(g, decompose=5), CompileError, "takes a list of names"),
    ("compile-decompose-str", lambda g: fc.compile(g, decompose="relu"), CompileError, "for one name write ['relu']"),
    ("compile-decompose-unknown", lambda g: fc.compile(g, decompose=["rellu"]), CompileError, "unknown op 'rellu'"),
    ("compile-backend-int", lambda g: fc.compile(g, backend=5), CompileError, "backend is a name such as 'cpu'"),
    ("compile-opt-level-bool", lambda g: fc.compile(g, opt_level=True), CompileError, "opt_level must be 0, 1 or 2"),
    ("compile-checks-str", lambda g: fc.compile(g, checks="yes"), CompileError, "checks= is True or False"),
    ("verify-str", lambda g: fc.verify("graph"), IRError, "takes a Graph, got str"),
    ("check-graph-registry-str", lambda g: fc.check_graph(g, "x"), IRError, "registry= takes a frame_core Registry"),
    ("trace-not-callable", lambda g: fc.trace(5, "f32[3]"), IRError, "takes a function first, got int"),
    ("trace-name-int", lambda g: fc.trace(lambda x: x, "f32[3]", name=5), IRError, "name=) takes a string"),
    ("extend-graph-str", lambda g: fc.extend_graph("g", lambda *v: v[0]), IRError, "takes a Graph first"),
    ("extend-fn-int", lambda g: fc.extend_graph(g, 5), IRError, "takes a function second"),
    ("add-node-one-value", lambda g: (lambda h: h.add_node("relu", h.add_input("f32[3]")))(fc.Graph()), IRError,
     "for one input write [value]"),
    ("add-node-attrs-int", lambda g: fc.Graph().add_node("relu", [], 5), IRError, "takes a dict of attributes"),
    ("add-node-types-str", lambda g: (lambda h: h.add_node("relu", [h.add_input("f32[3]")], {}, "f32[3]"))(fc.Graph()),
     IRError, "for one output write ['f32[3]']"),
    ("graph-name-int", lambda g: fc.Graph(5), IRError, "a graph's name is a string"),
    ("input-name-int", lambda g: fc.Graph().add_input("f32[3]", 7), IRError, "an input's name is a string"),
    ("dumps-str", lambda g: fc.dumps("x"), IRError, "only a Graph can be saved"),
    ("use-registry-str", lambda g: fc.use_registry("x").__enter__(), ArgumentError, "use_registry takes a Registry"),
    ("load-registry-str", lambda g: load_registry("ops_basic", environ={}), ArgumentError, "takes a list of entry points"),
    ("load-registry-environ", lambda g: load_registry([], environ="x"), ArgumentError, "takes a mapping"),
    ("check-op-name", lambda g: check_op("relu"), ArgumentError, "takes an OpSchema"),
    ("check-op-order", lambda g: check_op(fc.registry().get("relu"), order="2"), ArgumentError, "int of 1 or more"),
    ("check-op-dtypes-str", lambda g: check_op(fc.registry().get("relu"), low_precision="float16"), ArgumentError,
     "for one name write ['float16']"),
    ("conformance-pack-int", lambda g: conformance_cases(5), ArgumentError, "takes a pack's name"),
    ("backward-loss-str", lambda g: fc.build_backward_graph(g, "0", [0]), fc.GradientError,
     "an output position (an int), got str"),
]


@pytest.mark.parametrize("case, call, error, words", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_argument_is_a_named_error_saying_what_was_expected(graph, case, call, error, words):
    with pytest.raises(error) as info:
        call(graph)
    assert words in str(info.value)
    assert isinstance(info.value, fc.FrameError)


def test_argument_error_is_also_a_type_and_a_value_error():
    with pytest.raises(TypeError):
        fc.use_registry("x").__enter__()
    with pytest.raises(ValueError):
        check_op(fc.registry().get("relu"), order=0)


def test_decomposing_an_op_without_a_decompose_fn_says_so_not_that_it_lacks_a_kernel(graph):
    with pytest.raises(CompileError) as info:
        fc.compile(graph, decompose={"relu"}, cache=False)
    assert "'relu', which has no DecomposeFn" in str(info.value) and "no kernel" not in str(info.value)


def test_a_tensor_captured_from_an_earlier_trace_is_named_as_such():
    captured = []
    fc.trace(lambda x: captured.append(x) or x, "f32[3]")
    with pytest.raises(IRError) as info:
        fc.trace(lambda x: x + captured[0], "f32[3]")
    message = str(info.value)
    assert "another graph that is also named 'graph'" in message and "captured from an earlier trace" in message
    assert "pass the value in as an input" in message
