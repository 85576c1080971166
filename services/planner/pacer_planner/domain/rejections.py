"""Readable reasons for requests that fail validation (they go to the dead-letter topic)."""

from __future__ import annotations

from pydantic import ValidationError


def describe(exc: ValidationError, limit: int = 5) -> str:
    """``field.path: message`` for the first few errors, e.g. ``targets.items.3.guid: Field required``."""
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"]) or "(request)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"… and {more} more")
    return "invalid job request: " + "; ".join(parts)
