"""The ``frame`` command line (console script ``frame = frame_core.cli.main:main``; reference: docs/cli.md).

Only the CLI imports typer (and, through it, rich for help and usage errors):
``import frame_core`` never imports this package.
"""
