"""An op asked for under the wrong namespace (``ops_basic::loop``) names where it is registered: the close
spellings inside the wrong namespace ('ops_basic::log', 'ops_basic::clip') do not help."""

from __future__ import annotations


def test_an_op_under_the_wrong_namespace_names_the_right_one(invoke):
    result = invoke("ops", "show", "ops_basic::loop")
    assert result.exit_code == 2
    assert "'ops_sequence::loop' is registered" in result.stderr


def test_a_misspelt_op_in_its_own_namespace_gets_no_such_hint(invoke):
    result = invoke("ops", "show", "ops_basic::nope")
    assert result.exit_code == 2 and "is registered)" not in result.stderr
