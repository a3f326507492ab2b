"""The conformance kit's opt-in pytest plugin.

Enable it with ``-p frame_core.testing.pytest_plugin`` (on the command line
or in ``addopts``), or with ``pytest_plugins = ["frame_core.testing.pytest_plugin"]``
in the conftest.py at your rootdir (pytest refuses ``pytest_plugins`` in other
conftest files). It is never loaded automatically. It adds:

``--frame-seed N``
    Seed of the random inputs and loss weights of the kit's checks (default:
    each test's own, 0). Also honoured by tests made with ``conformance_tests``.
marker ``frame_conformance(pack, order=2, seed=0)`` with the fixture argument ``frame_case``
    Parametrises the test over ``conformance_cases(pack)``::

        @pytest.mark.frame_conformance("my_pack")
        def test_my_pack(frame_case):
            frame_case.assert_ok()

fixture ``frame_registry``
    The registry the cases run against (the process-wide one).

Without the plugin, ``test_conformance = conformance_tests("my_pack")`` in a
test module does the same (see ``docs/testing.md``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ..ops_registry.registry import Registry, registry as current_registry
from .conformance import conformance_cases

__all__ = ["pytest_addoption", "pytest_configure", "pytest_generate_tests", "frame_registry"]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("frame", "frame conformance kit")
    group.addoption("--frame-seed", dest="frame_seed", type=int, default=None,
                    help="seed of the random data of frame_core.testing's checks (default 0)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "frame_conformance(pack, order=2, seed=0): parametrise the test's `frame_case` argument over the "
        "conformance cases of an op pack (frame_core.testing)",
    )


def pytest_generate_tests(metafunc: Any) -> None:
    if "frame_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("frame_conformance")
    if marker is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} takes `frame_case` but has no @pytest.mark.frame_conformance(pack) marker"
        )
    kwargs = dict(marker.kwargs)
    option = metafunc.config.getoption("frame_seed", default=None)
    if option is not None:
        kwargs["seed"] = option
    cases = conformance_cases(*marker.args, **kwargs)
    metafunc.parametrize("frame_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def frame_registry() -> Registry:
    """The registry the conformance cases run against."""
    return current_registry()

