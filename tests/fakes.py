"""Test doubles shared by the test packages."""

from __future__ import annotations


class FakeEntryPoint:
    """Quacks like an entry point of group ``frame``; ``load()`` returns ``plugin`` (or raises ``error``).

    The distribution name defaults to ``<name>-dist``.
    """

    def __init__(self, name: str, plugin: object, dist_name: str | None = None, dist_version: str = "1.0",
                 error: Exception | None = None) -> None:
        self.name = name
        self.value = getattr(plugin, "__name__", name)
        self.group = "frame"
        self.dist_name = dist_name or f"{name.replace('_', '-')}-dist"
        self.dist_version = dist_version
        self._plugin = plugin
        self._error = error

    def load(self) -> object:
        if self._error is not None:
            raise self._error
        return self._plugin
