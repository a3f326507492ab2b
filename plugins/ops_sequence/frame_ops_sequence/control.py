"""Control flow over sub-graphs: if_else, loop and scan."""

from __future__ import annotations

SCHEMAS: list = []  # filled as the ops land
