"""Sphinx configuration of frame's documentation (Markdown through MyST).

Build: ``make docs`` (``python -m sphinx -W --keep-going -b html docs docs/_build/html``);
warnings are errors.
"""

from __future__ import annotations

project = "frame"
author = "the frame developers"
copyright = "the frame developers"  # noqa: A001 - Sphinx's name

try:
    from frame_core import __version__ as release
except ImportError:  # building the docs without the package installed
    release = "0.1"
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",  # the hook reference pulls each hook's docstring from frame_core.ops_registry.hookspecs
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # `[text](cli.md#exit-status)` links to headings

autodoc_typehints = "none"  # the hooks' signatures say it in their docstrings
autodoc_member_order = "bysource"

html_theme = "alabaster"  # ships with Sphinx: no theme to install
html_title = f"frame {release}"
html_static_path = ["_static"]
html_css_files = ["frame.css"]  # long code lines wrap rather than hide past the page's edge
# the default 940 px page cut long signatures and code lines; "body_max_width" lets the text use the width
html_theme_options = {"page_width": "1200px", "body_max_width": "none"}
