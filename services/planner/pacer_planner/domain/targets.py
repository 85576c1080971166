"""Requery target sets, pure: reading a fetched page and planning its items.

A page is ``{"items": [{"guid", "to_id", "vars"}, ...], "next_cursor": "..." | null}``.
A page that is not of that shape is a :class:`TargetFetchError` (retried, then the job is
paused). One bad target inside a good page is not: it is skipped, counted as invalid, and
the first error of the page is kept with the page's record, as text the store can hold (a
key that is not plain text is quoted, as a job request's reasons quote it). Fields of a
target other than ``guid``, ``to_id`` and ``vars`` are ignored (audience services often send
more).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError

from pacer_common.domain.ids import Guid
from pacer_common.domain.requests import JobRequest, RequeryTargets, Target
from pacer_common.domain.validation import (
    CannotPlan,
    Rendered,
    error_text,
    loc_part,
    render_target,
    storable,
)
from pacer_planner.domain.planning import PlannedItem, count_guids, count_shards, planned_items
from pacer_planner.domain.sharding import ShardKey, sub_count

MAX_CURSOR_LENGTH = 4096
MAX_PAGE_BYTES = 16 * 1024 * 1024  # one page's body, by default: room for 5,000 targets of 3 KiB each
_TARGET_FIELDS = ("guid", "to_id", "vars")


class TargetFetchError(Exception):
    """A page could not be fetched or read (HTTP error, no whole answer in time, too large, not
    JSON, not a page). Retryable."""


@dataclass(frozen=True)
class Page:
    """One fetched page: its valid targets (with their position), and what was wrong."""

    cursor_in: str | None
    next_cursor: str | None
    targets: list[tuple[int, Target]]
    fetched: int
    invalid: int = 0
    first_error: str | None = None

    @property
    def last(self) -> bool:
        return self.next_cursor is None


def parse_page(doc: Any, cursor_in: str | None) -> Page:
    """Read a decoded JSON page; raise :class:`TargetFetchError` if it is not a page at all."""
    if not isinstance(doc, dict):
        raise TargetFetchError(f"page is not a JSON object (got {type(doc).__name__})")
    items = doc.get("items")
    if not isinstance(items, list):
        raise TargetFetchError("page has no 'items' list")
    if "next_cursor" not in doc:
        raise TargetFetchError("page has no 'next_cursor' (null marks the last page)")
    nxt = doc["next_cursor"]
    if nxt is not None:
        if not isinstance(nxt, str) or not nxt or len(nxt) > MAX_CURSOR_LENGTH or not storable(nxt):
            raise TargetFetchError(f"'next_cursor' must be null or a non-empty string of at most "
                                   f"{MAX_CURSOR_LENGTH} characters, got {_short(nxt)}")
        if nxt == cursor_in:
            raise TargetFetchError(f"'next_cursor' did not advance (still {_short(nxt)})")
    targets: list[tuple[int, Target]] = []
    invalid, first_error = 0, None
    for pos, raw in enumerate(items):
        try:
            targets.append((pos, _target(raw, pos)))
        except ValueError as exc:
            invalid += 1
            first_error = first_error or _kept(str(exc))
    return Page(cursor_in, nxt, targets, len(items), invalid, first_error)


def _target(raw: Any, pos: int) -> Target:
    if not isinstance(raw, dict):
        raise ValueError(f"items[{pos}]: not an object")
    try:
        target = Target.model_validate({k: raw[k] for k in _TARGET_FIELDS if k in raw})
    except ValidationError as exc:  # the bounds of a request's own targets: what the store can hold
        err = exc.errors()[0]
        where = "".join(f".{loc_part(p)}" for p in err["loc"])
        raise ValueError(f"items[{pos}]{where}: {error_text(err)}") from None
    return target


def _kept(error: str) -> str:
    # The page's record keeps the first error (a text column). Each part of a message is
    # escaped where it is made (a key in the path by loc_part); should one ever carry a target's
    # text as it came, the message is escaped whole rather than the page refused by the store.
    return error if storable(error) else ascii(error)


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class PagePlan:
    """The items a page adds (before removing targets the job already has)."""

    items: list[PlannedItem]
    new_subs: dict[Guid, int]  # guids first seen on this page → their sub count, fixed from now on
    duplicates: int  # targets repeated within the page
    invalid: int  # the page's invalid targets plus those that could not be rendered
    first_error: str | None

    @property
    def shards(self) -> dict[ShardKey, int]:
        return count_shards(self.items)

    @property
    def per_guid(self) -> dict[Guid, int]:
        return count_guids(self.shards)


def plan_page(req: JobRequest, page: Page, known_subs: Mapping[Guid, int], max_shard_items: int, *,
              job_created_at: datetime) -> PagePlan:
    """Render the page's targets. A guid already in the job keeps its sub count; a new guid
    gets ``ceil(its targets on this page / max_shard_items)`` sub-shards, fixed from then on
    (the size of a requery set is not known up front)."""
    assert isinstance(req.targets, RequeryTargets)
    static_vars = req.targets.vars
    seen: set[tuple[str, str]] = set()
    rendered: list[Rendered] = []
    duplicates, invalid, first_error = 0, page.invalid, page.first_error
    for pos, target in page.targets:
        pair = (target.guid, target.to_id)
        if pair in seen:
            duplicates += 1
            continue
        seen.add(pair)
        try:
            content, key = render_target(req, target, {**static_vars, **target.vars}, f"items[{pos}]")
        except CannotPlan as exc:  # a missing variable, a message or key past its limit
            invalid += 1
            first_error = first_error or _kept(str(exc))
            continue
        rendered.append((target, content, key))
    new_counts: dict[Guid, int] = {}
    for added, _, _ in rendered:
        if added.guid not in known_subs:
            new_counts[Guid(added.guid)] = new_counts.get(Guid(added.guid), 0) + 1
    new_subs = {guid: sub_count(n, max_shard_items) for guid, n in new_counts.items()}
    subs = {**known_subs, **new_subs}
    return PagePlan(planned_items(rendered, subs, job_created_at), new_subs, duplicates, invalid, first_error)


def redact_url(url: str) -> str:
    """The URL without its query, fragment and credentials: for messages and logs, where a
    token in the query string must not end up."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
