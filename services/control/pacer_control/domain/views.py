"""Shaping what the database returns into what an operator reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def sum_counts(per_shard: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Items per status of a job: its shards' counts added up (zeros left out)."""
    total: dict[str, int] = {}
    for counts in per_shard:
        for status, n in counts.items():
            total[status] = total.get(status, 0) + int(n)
    return {s: n for s, n in sorted(total.items()) if n}


def failure_categories(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``(error_class, status, n)`` rows → one entry per error class, biggest first:
    ``{"error_class": "needs_human", "total": 12, "by_status": {"failed": 12}}``."""
    by_class: dict[str, dict[str, int]] = {}
    for r in rows:
        by_class.setdefault(r["error_class"], {})[r["status"]] = int(r["n"])
    out = [{"error_class": c, "total": sum(s.values()), "by_status": dict(sorted(s.items()))}
           for c, s in by_class.items()]
    return sorted(out, key=lambda e: (-e["total"], e["error_class"]))
