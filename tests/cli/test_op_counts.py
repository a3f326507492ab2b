"""``frame ops list``, ``frame audit gradients`` and examples/train_mlp.py count ops the same way (issue 17).

They disagreed: the listing said 75 ops (the core's ``constant`` included), the audit 74 in 5 packs (a pack
without user-facing ops counted), the example 4 packs (counted from the ops). All three now print the
registry's census, which says what is counted.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import frame_core

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _example_summary(reg: frame_core.Registry) -> str:
    spec = importlib.util.spec_from_file_location("train_mlp_for_counts", ROOT / "examples" / "train_mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.coverage_summary(reg)


def test_the_three_counts_are_one_census(invoke):
    reg = frame_core.load_registry()
    census = reg.op_census()
    listed = invoke("ops", "list")
    rows = json.loads(invoke("ops", "list", "--format", "json").stdout)
    audit = invoke("audit", "gradients")
    assert census in listed.stdout.splitlines()[-1]
    assert census in audit.stdout + audit.stderr
    assert census in _example_summary(reg)
    total, from_packs, packs, core = map(int, re.match(r"(\d+) user-facing ops?: (\d+) from (\d+) packs? \(.*\) "
                                                       r"and (\d+) built into the core", census).groups())
    # what each number counts, checked against the listing's rows and the loaded packs
    assert total == len(rows) == from_packs + core
    assert core == sum(r["pack"] == "core" for r in rows)
    assert packs == sum(r.status == "loaded" for r in reg.packs.values()) - 1  # the core is not a pack here
    report = json.loads(invoke("audit", "gradients", "--format", "json").stdout)
    assert report["total"]["ops"] == from_packs and report["census"] == census


def test_census_of_the_core_alone():
    reg = frame_core.load_registry(entry_points=[])
    assert reg.op_census() == (f"{len(reg.names(internal=False))} user-facing op: 0 from 0 packs (none installed) "
                               "and 1 built into the core")
