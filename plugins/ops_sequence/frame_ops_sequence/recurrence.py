"""Cumsum, linear_scan and selective_scan."""

from __future__ import annotations

SCHEMAS: list = []  # filled as the ops land
