"""Every IR test runs against the fixture registry (core built-ins + ``fixture_ops``), not the installed packs."""

from __future__ import annotations

import pytest

from frame_core.ops_registry.registry import Registry, use_registry

from .fixture_ops import load_fixture_registry


@pytest.fixture(scope="session")
def ir_registry() -> Registry:
    return load_fixture_registry()


@pytest.fixture(autouse=True)
def _current_registry(ir_registry: Registry):
    with use_registry(ir_registry):
        yield ir_registry
