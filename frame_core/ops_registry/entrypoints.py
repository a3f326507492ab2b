"""Reading the ``frame`` entry points of installed distributions.

The standard ``importlib.metadata`` costs about 20 ms to import (it pulls in
``email``, ``zipfile``, ``csv`` and ``pathlib``), a quarter of numpy's whole
import time, while frame only needs one section of one small file per
distribution. So the loader reads ``*.dist-info/entry_points.txt`` (and
``*.egg-info``) on ``sys.path`` directly, in ``sys.path`` order, the first
distribution of a name winning, exactly as ``importlib.metadata`` orders
them. Where ``sys.path`` holds something other than directories (zip
archives, eggs) it falls back to ``importlib.metadata``. A test checks that
both readers agree on the real environment.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

__all__ = ["EntryPoint", "entry_points"]


def normalize(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class EntryPoint:
    """One entry point: ``name = value`` in ``group``, from distribution ``dist_name`` ``dist_version``."""

    __slots__ = ("name", "value", "group", "dist_name", "dist_version")

    def __init__(self, name: str, value: str, group: str, dist_name: str, dist_version: str) -> None:
        self.name = name
        self.value = value
        self.group = group
        self.dist_name = dist_name
        self.dist_version = dist_version

    def load(self) -> Any:
        """Import the module and return the named object (``module`` or ``module:attr.attr``)."""
        module, _, attrs = self.value.partition(":")
        obj = importlib.import_module(module.strip())
        for part in filter(None, attrs.strip().split(".")):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                from ..errors import PluginError

                raise PluginError(f"the entry point {self.name} = {self.value!r} names {part!r}, which "
                                  f"{getattr(obj, '__name__', type(obj).__name__)!r} does not have; fix the entry "
                                  f"point in {self.dist_name}'s metadata") from None
        return obj

    def __repr__(self) -> str:
        return f"EntryPoint({self.name!r}, {self.value!r}, group={self.group!r}, dist={self.dist_name} {self.dist_version})"


def _section(text: str, group: str) -> list[tuple[str, str]]:
    found, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            inside = line[1:-1].strip() == group
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            value = value.split("[", 1)[0].strip()  # drop an extras marker
            found.append((name.strip(), value))
    return found


def _name_version(meta_dir: str) -> tuple[str, str]:
    for filename in ("METADATA", "PKG-INFO"):
        path = os.path.join(meta_dir, filename)
        try:  # a description in another encoding must not matter: only the Name and Version lines are read
            with open(path, encoding="utf-8", errors="replace") as f:
                name = version = None
                for line in f:
                    if not line.strip():
                        break
                    if line.startswith("Name:"):
                        name = line[5:].strip()
                    elif line.startswith("Version:"):
                        version = line[8:].strip()
                if name:
                    return name, version or "?"
        except OSError:
            continue
    stem = os.path.basename(meta_dir).rsplit(".", 1)[0]
    name, _, version = stem.partition("-")
    return name, version.split("-")[0] or "?"


_METADATA = (".dist-info", ".egg-info")


def _scan(group: str) -> list[EntryPoint] | None:
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        directory = entry or os.getcwd()
        if not os.path.isdir(directory):
            if os.path.exists(directory):
                return None  # a zip archive or an egg: let importlib.metadata handle the whole path
            continue
        try:  # only the metadata folders, sorted: a folder on sys.path (the stdlib's, a checkout) has thousands
            names = sorted([item for item in os.listdir(directory) if item.endswith(_METADATA)])
        except OSError:
            continue
        for item in names:
            meta_dir = os.path.join(directory, item)
            key = normalize(item.rsplit(".", 1)[0].split("-", 1)[0])
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(os.path.join(meta_dir, "entry_points.txt"), "rb") as fb:
                    raw = fb.read()
            except OSError:
                continue
            if f"[{group}]".encode() not in raw.replace(b" ", b""):
                continue  # not a frame pack: its bytes, in whatever encoding, are none of our business
            text = raw.decode("utf-8", errors="replace")
            dist_name, dist_version = _name_version(meta_dir)
            found.extend(EntryPoint(n, v, group, dist_name, dist_version) for n, v in _section(text, group))
    return found


def _from_importlib(group: str) -> list[EntryPoint]:
    from importlib.metadata import distributions

    out: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in distributions():  # in sys.path order; the first distribution of a name wins, as in importlib
        try:  # one distribution with unreadable metadata must not hide the others
            name = dist.metadata["Name"] or "<unknown distribution>"
            if normalize(name) in seen:
                continue
            seen.add(normalize(name))
            eps = [ep for ep in dist.entry_points if ep.group == group]
            version = dist.version or "?"
        except (ValueError, OSError):  # UnicodeDecodeError is a ValueError
            continue
        out.extend(EntryPoint(ep.name, ep.value, group, name, version) for ep in eps)
    return out


def entry_points(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` from the installed distributions."""
    found = _scan(group)
    return _from_importlib(group) if found is None else found
