from __future__ import annotations

import pytest

from .fakepacks import Site


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary directory on ``sys.path`` to write fake distributions into."""
    s = Site(tmp_path / "site", monkeypatch)
    yield s
    s.cleanup()
