"""The fast entry point reader agrees with importlib.metadata."""

from __future__ import annotations

import importlib.metadata

import pytest

from frame_core.ops_registry.entrypoints import EntryPoint, _from_importlib, _scan, entry_points, normalize
from frame_core.ops_registry.loader import discover_entry_points

from .fakepacks import pack_source


def _facts(eps) -> list[tuple[str, str, str, str]]:
    return sorted((ep.name, ep.value, normalize(ep.dist_name), ep.dist_version) for ep in eps)


@pytest.mark.parametrize("group", ["frame", "console_scripts", "no_such_group"])
def test_fast_reader_agrees_with_importlib_metadata_on_the_real_environment(group):
    fast = _scan(group)
    assert fast is not None, "sys.path holds something the fast reader cannot scan"
    assert _facts(fast) == _facts(_from_importlib(group))


def test_the_installed_bundled_pack_is_found():
    found = {(ep.name, normalize(ep.dist_name)) for ep in entry_points("frame")}
    assert ("ops_basic", "frame-ops-basic") in found


def test_fast_reader_agrees_on_fake_distributions_including_a_duplicate(site, tmp_path):
    module = site.pack("fake-pack", pack_source(["fk_x"]), ep_name="fk", version="0.3")
    second = site.add_dir(tmp_path / "second")
    site.pack("fake-pack", pack_source(["fk_x"]), ep_name="fk", version="9.9", where=second, module=module)
    fast = _scan("frame")
    assert _facts(fast) == _facts(_from_importlib("frame"))
    ours = [ep for ep in fast if ep.dist_name == "fake-pack"]
    assert [(ep.name, ep.value, ep.dist_version) for ep in ours] == [("fk", module, "9.9")]  # first on sys.path wins


def test_egg_info_distributions_are_read_too(site):
    (site.root / "egg_mod.py").write_text(pack_source(["fk_egg"]))
    info = site.root / "egg_pack-0.1-py3.11.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: egg-pack\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[frame]\negg = egg_mod\n")
    fast = [ep for ep in _scan("frame") if ep.dist_name == "egg-pack"]
    slow = [ep for ep in _from_importlib("frame") if ep.dist_name == "egg-pack"]
    assert _facts(fast) == _facts(slow) == [("egg", "egg_mod", "egg-pack", "0.1")]


def test_entry_point_loads_modules_and_attributes():
    ep = EntryPoint("x", "importlib.metadata:entry_points", "frame", "d", "1")
    assert ep.load() is importlib.metadata.entry_points
    assert EntryPoint("x", "importlib.metadata", "frame", "d", "1").load() is importlib.metadata


def test_discovery_is_sorted_by_distribution_then_name(site):
    site.pack("zeta-pack", pack_source(["fk_z"]))
    site.pack("alpha-pack", pack_source(["fk_a"]))
    found = [(ep.dist_name, ep.name) for ep in discover_entry_points()]
    assert found == sorted(found)


@pytest.mark.parametrize("broken", ["entry_points.txt", "METADATA"])
def test_a_distribution_with_non_utf8_metadata_does_not_break_discovery(site, broken):
    info = site.root / "latin_dist-1.0.dist-info"  # not a frame pack: a console script, Latin-1 text
    info.mkdir()
    (info / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: latin-dist\nVersion: 1.0\n\nCaf\xe9 cr\xe8me\n")
    (info / "entry_points.txt").write_bytes(b"[console_scripts]\ncaf\xe9 = latin_mod:main\n")
    if broken == "METADATA":
        (info / "entry_points.txt").write_text("[console_scripts]\ncafe = latin_mod:main\n")
    module = site.pack("good-pack", pack_source(["fk_good"]))
    assert [ep.value for ep in _scan("frame") if ep.dist_name == "good-pack"] == [module]
    assert [ep.value for ep in _from_importlib("frame") if ep.dist_name == "good-pack"] == [module]
    from frame_core.ops_registry.loader import load_registry

    assert "fk_good" in load_registry(environ={})


def test_a_frame_pack_with_a_latin1_description_still_loads(site):
    module = site.pack("accent-pack", pack_source(["fk_accent"]))
    (meta,) = site.root.glob("accent_pack-*.dist-info/METADATA")
    meta.write_bytes(meta.read_bytes() + b"Caf\xe9\n")
    assert [(ep.value, ep.dist_version) for ep in _scan("frame") if ep.dist_name == "accent-pack"] == [(module, "1.0")]
