"""``frame ops show NAME``: everything about one op, the gradient micro-graph and the closure chain."""

from __future__ import annotations

import json

import pytest

from .conftest import ORDER_ONE_PACK


def test_show_text_has_every_section(invoke):
    result = invoke("ops", "show", "tanh")
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("tanh  (pack ops_basic, frame-ops-basic ")
    assert "tanh(x) -> (y)" in out
    for label in ("attributes:", "traits:", "kernels:", "gradient:", "closure:", "examples:"):
        assert label in out, label
    assert "closed (differentiable to any order)" in out
    assert "elementwise" in out and "cpu" in out
    # the micro-graph of the first example, printed by the IR printer
    assert "graph tanh_grad(%x: f32[3, 4], %y: f32[3, 4], %gy: f32[3, 4])" in out
    assert "= square(%y)" in out


def test_show_lists_attributes_with_defaults(invoke):
    out = invoke("ops", "show", "heaviside_surrogate").stdout
    assert "alpha: float (default 1.0)" in out


def test_show_json(invoke):
    result = invoke("ops", "show", "sum", "--format", "json")
    assert result.exit_code == 0
    d = json.loads(result.stdout)
    assert d["name"] == "sum" and d["pack"] == "ops_basic" and d["differentiable"] == "yes"
    assert {a["name"] for a in d["attributes"]} >= {"axes", "keepdims"}
    assert d["examples"] and d["gradient_graph"].startswith("graph sum_grad(")
    assert d["closure_order"] == "closed" and d["closure_breaks"] is None


def test_show_names_the_chain_that_breaks_closure(invoke, site):
    site.add("orderone", ORDER_ONE_PACK.format(prefix="sc"))
    d = json.loads(invoke("ops", "show", "sc_ramp", "-f", "json").stdout)
    assert d["closure_order"] == 1
    assert d["closure_chain"] == ["sc_ramp", "sc_step"]
    assert "sc_step is declared not differentiable: piecewise constant" in d["closure_breaks"]
    text = invoke("ops", "show", "sc_ramp").stdout
    assert "order 1" in text and "breaks at:" in text and "sc_ramp -> sc_step" in text

    step = json.loads(invoke("ops", "show", "sc_step", "-f", "json").stdout)
    assert step["differentiable"] == "no" and step["not_differentiable"] == "piecewise constant"
    assert step["gradient_graph"] is None and step["closure_order"] is None


def test_show_unknown_op_suggests_and_exits_2(invoke):
    result = invoke("ops", "show", "tanhh")
    assert result.exit_code == 2
    assert "unknown op 'tanhh'" in result.stderr and "did you mean 'tanh'" in result.stderr
    assert result.stdout == ""


def test_show_finds_internal_ops(invoke):
    result = invoke("ops", "show", "relu_grad_internal", "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["internal"] is True


@pytest.mark.parametrize("op, defaults", [
    ("conv1d", {"stride": 1, "padding": "valid", "dilation": 1, "groups": 1}),
    ("one_hot", {"depth": None, "dtype": "f32"}),
    ("slice", {"steps": None, "axes": None}),
    ("loop", {"n_scanned": 0, "reverse": False, "trip_count": False}),
])
def test_json_defaults_are_json_values_not_python_reprs(invoke, op, defaults):
    # a consumer of `ops show -f json` reads null/false/1/"valid", as in graph files, not "None"/"'valid'"
    result = invoke("ops", "show", op, "--format", "json")
    attrs = {a["name"]: a["default"] for a in json.loads(result.stdout)["attributes"]}
    assert {k: attrs[k] for k in defaults} == defaults
