"""Audiences: target sets served page by page, for Pacer's requery mode.

``GET /_audience/{name}?cursor=&limit=`` answers ``{"items": [...], "next_cursor": ...}``.
The cursor is an opaque string holding an offset into the current target list, so an
audience changed between two pages behaves like a live query: targets added before the
cursor shift others into the next page (seen twice), targets added at the end are found.

Knobs, for tests: ``page_size_cap`` (serve fewer than asked), ``changes`` (replace the
targets automatically after the n-th page served), faults: fail the next ``k`` page
requests with an HTTP status, a body that is not JSON, or JSON that is not a page; and holds:
leave the next ``k`` page requests unanswered until released (the web layer waits; this
module counts them), to freeze a planner with a page on its way.

Pure logic, no web imports; driven from one event loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FAULT_MODES = ("status", "bad_json", "bad_page")
_CURSOR_PREFIX = "off:"


class AudienceError(ValueError):
    """A definition or a request that makes no sense; the message says why."""


@dataclass(frozen=True)
class Change:
    after_pages: int  # replace the targets once this many pages have been served
    targets: list[Any]


@dataclass
class Audience:
    targets: list[Any]
    page_size_cap: int | None = None
    changes: list[Change] = field(default_factory=list)
    fail_next: int = 0
    fail_mode: str = "status"
    fail_status: int = 500
    served: int = 0  # pages answered with 200 and a page
    hold_next: int = 0  # page requests to leave unanswered until released
    hold_after: int = 0  # ... once this many pages have been served
    held: int = 0  # page requests unanswered now
    requests: list[dict[str, Any]] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {
            "size": len(self.targets), "page_size_cap": self.page_size_cap, "served": self.served,
            "pending_changes": [c.after_pages for c in self.changes], "fail_next": self.fail_next,
            "fail_mode": self.fail_mode, "fail_status": self.fail_status, "requests": list(self.requests),
            "hold_next": self.hold_next, "hold_after": self.hold_after, "held": self.held,
        }


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class Audiences:
    def __init__(self) -> None:
        self.by_name: dict[str, Audience] = {}

    def put(self, name: str, doc: Any) -> Audience:
        """Define or redefine an audience. Redefining keeps its request log, faults and holds."""
        doc = _object(doc)
        unknown = set(doc) - {"targets", "page_size_cap", "changes"}
        if unknown:
            raise AudienceError(f"unknown fields: {', '.join(sorted(unknown))}")
        targets = _targets(doc.get("targets"), "targets")
        cap = doc.get("page_size_cap")
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise AudienceError("page_size_cap must be a positive integer or null")
        changes = []
        for i, c in enumerate(doc.get("changes") or []):
            if not isinstance(c, Mapping) or not isinstance(c.get("after_pages"), int) or c["after_pages"] < 0:
                raise AudienceError(f"changes[{i}] must be {{'after_pages': n >= 0, 'targets': [...]}}")
            changes.append(Change(c["after_pages"], _targets(c.get("targets"), f"changes[{i}].targets")))
        old = self.by_name.get(name)
        aud = Audience(targets, cap, sorted(changes, key=lambda c: c.after_pages))
        if old is not None:
            aud.served, aud.requests = old.served, old.requests
            aud.fail_next, aud.fail_mode, aud.fail_status = old.fail_next, old.fail_mode, old.fail_status
            aud.hold_next, aud.hold_after, aud.held = old.hold_next, old.hold_after, old.held
        self.by_name[name] = aud
        return aud

    def fault(self, name: str, doc: Any) -> Audience:
        """Fail the next ``fail_next`` page requests (``mode``: status, bad_json, bad_page)."""
        aud, doc = self.get(name), _object(doc)
        n, mode, status = _count(doc, "fail_next", 1), doc.get("mode", "status"), doc.get("status", 500)
        if mode not in FAULT_MODES:
            raise AudienceError(f"mode must be one of {', '.join(FAULT_MODES)}")
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise AudienceError("status must be an HTTP error status (400..599)")
        aud.fail_next, aud.fail_mode, aud.fail_status = n, mode, status
        return aud

    def hold(self, name: str, doc: Any) -> Audience:
        """Leave the next ``hold_next`` page requests unanswered until a release, once
        ``after_pages`` pages (counted from the audience's first) have been served."""
        aud, doc = self.get(name), _object(doc)
        aud.hold_next, aud.hold_after = _count(doc, "hold_next", 1), _count(doc, "after_pages", 0)
        return aud

    def take_hold(self, name: str) -> bool:
        """A page request arrives: is it one to hold? (Counted as held until ``unhold``.)"""
        aud = self.by_name.get(name)
        if aud is None or aud.hold_next <= 0 or aud.served < aud.hold_after:
            return False
        aud.hold_next -= 1
        aud.held += 1
        return True

    def unhold(self, name: str) -> None:
        """A held page request is released (or its client went away)."""
        aud = self.by_name.get(name)
        if aud is not None and aud.held > 0:
            aud.held -= 1

    def get(self, name: str) -> Audience:
        try:
            return self.by_name[name]
        except KeyError:
            raise AudienceError(f"no audience {name!r}") from None

    def delete(self, name: str) -> bool:
        return self.by_name.pop(name, None) is not None

    def page(self, name: str, cursor: str | None, limit: int | None, traceparent: str | None = None) -> Answer:
        """Serve one page (or the fault that is due). Unknown audience: 404; bad cursor: 400.
        Each request is recorded with its ``traceparent`` header, if it had one."""
        aud = self.by_name.get(name)
        if aud is None:
            return _json(404, {"error": f"no audience {name!r}"})
        entry: dict[str, Any] = {"cursor": cursor, "limit": limit, "traceparent": traceparent}
        aud.requests.append(entry)
        if aud.fail_next > 0:
            aud.fail_next -= 1
            entry["status"] = aud.fail_status if aud.fail_mode == "status" else 200
            entry["fault"] = aud.fail_mode
            if aud.fail_mode == "bad_json":
                return Answer(200, b'{"items": [')
            if aud.fail_mode == "bad_page":
                return _json(200, {"targets": []})
            return _json(aud.fail_status, {"error": "injected fault"})
        try:
            offset = _offset(cursor)
        except AudienceError as exc:
            entry["status"] = 400
            return _json(400, {"error": str(exc)})
        n = max(1, limit or 100)
        if aud.page_size_cap is not None:
            n = min(n, aud.page_size_cap)
        items = aud.targets[offset: offset + n]
        end = offset + len(items)
        nxt = f"{_CURSOR_PREFIX}{end}" if end < len(aud.targets) else None
        aud.served += 1
        entry.update(status=200, items=len(items), next_cursor=nxt)
        while aud.changes and aud.changes[0].after_pages <= aud.served:
            aud.targets = aud.changes.pop(0).targets
        return _json(200, {"items": items, "next_cursor": nxt})


def _object(doc: Any) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise AudienceError("body must be a JSON object")
    return doc


def _count(doc: Mapping[str, Any], key: str, default: int) -> int:
    n = doc.get(key, default)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise AudienceError(f"{key} must be an integer >= 0")
    return n


def _targets(value: Any, what: str) -> list[Any]:
    # Served as given: a test may want an invalid target in a page.
    if not isinstance(value, list):
        raise AudienceError(f"{what} must be a list")
    return list(value)


def _offset(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.startswith(_CURSOR_PREFIX) or not cursor[len(_CURSOR_PREFIX):].isdigit():
        raise AudienceError(f"unknown cursor {cursor!r}")
    return int(cursor[len(_CURSOR_PREFIX):])


def _json(status: int, doc: Any) -> Answer:
    return Answer(status, json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode())
