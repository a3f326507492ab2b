"""Conv1d, max_pool1d and avg_pool1d."""

from __future__ import annotations

SCHEMAS: list = []  # filled as the ops land
