"""Readable reasons for requests that fail validation (they go to the dead-letter topic)."""

from __future__ import annotations

from pydantic import ValidationError

TARGET_MODES = ("snapshot", "requery")


def describe(exc: ValidationError, limit: int = 5) -> str:
    """``field.path: message`` for the first few errors, e.g. ``targets.items.3.guid: Field required``."""
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in _without_union_tag(err["loc"])) or "(request)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"… and {more} more")
    return "invalid job request: " + "; ".join(parts)


def _without_union_tag(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    # pydantic puts the union member's tag in the path (targets.snapshot.items.3); the
    # request has no such field, so the reader is told ``targets.items.3``.
    if len(loc) > 1 and loc[0] == "targets" and loc[1] in TARGET_MODES:
        return (loc[0], *loc[2:])
    return loc
