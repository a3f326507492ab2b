"""docs/reference.md is generated from the code and in sync with it (issue 17: OpSchema's arguments were spread
over four pages, DType's attributes and multi-output ops were documented nowhere)."""

from __future__ import annotations

import importlib.util
import inspect
import pathlib
import re

import frame_core

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("make_reference", ROOT / "docs" / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_page_is_in_sync_with_the_code():
    page = (ROOT / "docs" / "reference.md").read_text()
    assert page == _generator().render(), "docs/reference.md is out of date: run python docs/make_reference.py"


def test_every_public_name_has_an_entry():
    generator = _generator()
    placed = [name for _, _, names in generator.SECTIONS for name in names]
    assert sorted(placed) == sorted(set(placed)), "a name is placed in two sections"
    assert set(placed) <= set(frame_core.__all__), "a section names what frame_core does not export"
    page = generator.render()
    for name in set(frame_core.__all__) - {"__version__"}:  # placed or under "More", each enters the index
        assert re.search(rf"^````{{py:\w+}} {re.escape(name)}\b", page, re.M), name


def test_every_opschema_argument_and_dtype_attribute_is_documented():
    doc = inspect.getdoc(frame_core.OpSchema)
    missing = [p for p in inspect.signature(frame_core.OpSchema.__init__).parameters if p != "self"
               and f"- ``{p}``:" not in doc]
    assert not missing, f"OpSchema's docstring does not describe {missing}"
    attributes = [a for a in frame_core.DType.__slots__ if not a.startswith("_")] + ["np"]
    doc = inspect.getdoc(frame_core.DType)
    assert not [a for a in attributes if f"- ``{a}``:" not in doc]
    page = (ROOT / "docs" / "reference.md").read_text()
    assert "- ``is_int``: a signed integer type" in page and "one ``gy`` slot per output" in page
