"""The kit's own tests run against ``load_kit_registry()``: core, frame-ops-basic and the fixture pack."""

from __future__ import annotations

import pytest

from frame_core.ops_registry.registry import Registry, use_registry

from .fixture_pack import load_kit_registry


@pytest.fixture(scope="session")
def kit_registry() -> Registry:
    return load_kit_registry()


@pytest.fixture
def kit(kit_registry: Registry):
    """The fixture registry, made current for the test."""
    with use_registry(kit_registry):
        yield kit_registry
