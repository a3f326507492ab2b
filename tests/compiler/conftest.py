"""Pipeline tests run against core + ops_basic (``basic_registry``), made current for every test.

Tests that need the fixture ops (fake backend ``toy``, a side-effect op, a
DecomposeFn) take ``fixture_registry`` and make it current themselves. The
compile cache is bypassed (``cache=False``) except by the cache tests, which
install a fresh cache.
"""

from __future__ import annotations

import pytest

from frame_core.ops_registry.registry import Registry, use_registry

from .fixture_pack import RECORDED, load_basic_registry, load_fixture_registry


@pytest.fixture(scope="session")
def basic_registry() -> Registry:
    return load_basic_registry()


@pytest.fixture(scope="session")
def _fixture_registry() -> Registry:
    return load_fixture_registry()


@pytest.fixture
def fixture_registry(_fixture_registry: Registry):
    RECORDED.clear()
    with use_registry(_fixture_registry):
        yield _fixture_registry


@pytest.fixture(autouse=True)
def _current_registry(basic_registry: Registry):
    with use_registry(basic_registry):
        yield basic_registry
