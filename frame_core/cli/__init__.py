"""The ``frame`` command line (console script ``frame = frame_core.cli.entry:main``; reference: docs/cli.md).

Only the CLI imports typer (and, through it, rich for help and usage errors); ``frame audit gradients`` and
``frame ops list`` in their plain forms run without it (``entry.route``). ``import frame_core`` never imports
this package.
"""
