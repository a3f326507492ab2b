"""Every key the ``--format json`` outputs carry is described in ``docs/cli.md``: a consumer writing
``jq`` filters learns the format from that page (a control-flow op's ``closure_bodies`` was missing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..json_keys import json_keys

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


@pytest.mark.parametrize("args", [
    ("ops", "list", "--internal"),
    ("ops", "show", "loop"),
    ("audit", "gradients", "--pack", "ops_sequence"),
    ("plugins", "list"),
])
def test_every_json_key_is_documented(invoke, args):
    result = invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    keys = json_keys(json.loads(result.stdout))
    assert keys, args
    missing = sorted(k for k in keys if f"`{k}`" not in DOC)
    assert not missing, f"{' '.join(args)}: keys not in docs/cli.md: {missing}"


def test_ops_list_marks_control_flow_orders_as_the_audit_does(invoke):
    # `audit gradients` printed "closed*" and a footnote for loop; `ops list` printed a bare "closed"
    listing = invoke("ops", "list", "--pack", "ops_sequence").stdout
    audit = invoke("audit", "gradients", "--pack", "ops_sequence").stdout
    for text in (listing, audit):
        rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
        assert "closed*" in rows["loop"] and "closed*" not in rows["gather"]
        assert "* control flow: a node of it is differentiable to that order when the ops in its bodies are" in text
