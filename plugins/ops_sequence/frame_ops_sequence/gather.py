"""Gather(table, indices) and the scatter-add that is its gradient."""

from __future__ import annotations

SCHEMAS: list = []  # filled as the ops land
