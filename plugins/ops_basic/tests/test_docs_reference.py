"""docs/ops-basic.md is the pack's reference: every user-facing op of the pack is named there."""

from __future__ import annotations

import re
from pathlib import Path

import frame_core

PAGE = Path(__file__).resolve().parents[3] / "docs" / "ops-basic.md"


def test_every_user_facing_op_of_the_pack_is_in_the_reference():
    text = PAGE.read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_0-9]+)[`(]", text))
    ops = {s.name for s in frame_core.registry().schemas.values() if s.pack == "ops_basic" and not s.internal}
    assert len(ops) > 40
    assert sorted(ops - named) == [], "document these ops in docs/ops-basic.md (name in backticks)"
