"""A dead-letter record as Pacer reads it back: where it is, when, why, whose.

The planner (job requests) and the callback intake (callbacks) put what they refuse on a DLQ
topic as it came, with headers saying why (:data:`REASON_HEADER`), when, which service refused
it and, where it is known, the tenant. ``pacer dead-letters`` and the Control API read the
records back through this one shape.

Whose a refused job request is: the tenant it names where it parsed that far (the model's, or
its JSON object's ``tenant``, absent meaning the default tenant's), however large, and a record
cut to its first part too; else, for bytes that could not be parsed for it, the ``tenant`` their
head names (:func:`tenant_at_head`), and the record says so (:data:`TENANT_FROM_HEADER`); else
nobody's, and only an operator who sees every tenant sees it.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pacer_common.domain.requests import DEFAULT_TENANT, MAX_ID_CHARS, TENANT_NAME

REASON_HEADER, AT_HEADER, SOURCE_HEADER = "pacer-error-reason", "pacer-error-at", "pacer-error-source"
TENANT_HEADER = "pacer-tenant"
REPUBLISHED_HEADER = "pacer-republished-from"
# On a record that holds only the first part of what was refused (too large to keep whole):
# what it holds, e.g. ``first 65536 of 70000000 bytes``.
TRUNCATED_HEADER = "pacer-truncated"
# On a record whose tenant (:data:`TENANT_HEADER`) was read at the head of bytes that could not
# be read whole (:func:`tenant_at_head`): ``head``.
TENANT_FROM_HEADER, TENANT_FROM_HEAD = "pacer-tenant-from", "head"

Queue = Literal["requests", "callbacks"]
# A body read for its tenant when a record carries no tenant header (records written before
# the planner added it): a larger one is not parsed, and only an unscoped caller sees it.
MAX_TENANT_PARSE_BYTES = 1_048_576
# Records of each partition a search (by tenant or key) looks through.
SEARCH_DEPTH = 1_000


@dataclass(frozen=True)
class DeadLetter:
    """One record. ``value`` is all of it when read on its own; in a list it is kept only
    where it tells the tenant (empty otherwise: a list of large refused requests must not hold
    them all), and ``size`` is always the record's."""

    partition: int
    offset: int
    at: datetime
    key: bytes | None
    value: bytes
    headers: dict[str, str]
    size: int

    @property
    def where(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def reason(self) -> str:
        return self.headers.get(REASON_HEADER, "")

    @property
    def source(self) -> str:
        return self.headers.get(SOURCE_HEADER, "")

    @property
    def tenant(self) -> str | None:
        """The tenant the record belongs to: its header, else the tenant its body names (a job
        request without one is the default tenant's), else None (not a JSON object, or too
        large to read for it)."""
        named = self.headers.get(TENANT_HEADER)
        return named if named else tenant_named(self.value)

    @property
    def truncated(self) -> str | None:
        """What the record holds of the refused bytes when it is not all of them (its
        :data:`TRUNCATED_HEADER`), else None."""
        return self.headers.get(TRUNCATED_HEADER) or None

    def not_republishable(self) -> str | None:
        """Why the record must not be sent again as a job request, or None: one that holds
        only the first part of the request is not the request."""
        if self.truncated is None:
            return None
        return (f"the record holds only part of the refused request ({self.truncated}), not the request: "
                "publish the whole request again from where it came from")

    @property
    def key_text(self) -> str | None:
        return None if self.key is None else self.key.decode(errors="replace")

    def summary(self) -> dict[str, object]:
        return {"at": self.at.isoformat(timespec="seconds"), "where": self.where, "source": self.source,
                "tenant": self.tenant, "key": self.key_text, "bytes": self.size, "reason": self.reason}


class NotRepublishable(ValueError):
    """A record that is not a whole request (:meth:`DeadLetter.not_republishable` says why)."""


def truncation(kept: int, size: int) -> str:
    """:data:`TRUNCATED_HEADER`'s value: ``kept`` of ``size`` bytes are in the record."""
    return f"first {kept} of {size} bytes"


def _body(value: bytes, max_bytes: int = MAX_TENANT_PARSE_BYTES) -> dict[str, object] | None:
    """A request's bytes as a JSON object, best effort: None unless they are one of at most
    ``max_bytes``."""
    if len(value) > max_bytes:
        return None
    try:
        body = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def tenant_named(value: bytes, max_bytes: int = MAX_TENANT_PARSE_BYTES) -> str | None:
    """The tenant a job request's bytes name, best effort: None unless they are a JSON object
    of at most ``max_bytes`` (:data:`MAX_TENANT_PARSE_BYTES`) whose ``tenant`` is absent or a
    tenant's name (anything else in it is no tenant, and never a header)."""
    return tenant_in(_body(value, max_bytes))


def tenant_in(body: object) -> str | None:
    """The tenant a job request parsed as JSON names: a JSON object's ``tenant``, the default
    tenant if it has none; None if it is no object, or its ``tenant`` is no tenant's name."""
    if not isinstance(body, dict):
        return None
    tenant = body.get("tenant", DEFAULT_TENANT)
    return tenant if isinstance(tenant, str) and re.fullmatch(TENANT_NAME, tenant) else None


def tenant_at_head(value: bytes, head_bytes: int) -> str | None:
    """The tenant named by the ``tenant`` member among the top-level members of the JSON object
    ``value`` starts with that lie wholly within its first ``head_bytes``: for bytes that cannot
    be read whole (not JSON, or too large to parse), read at a bounded cost. None unless one
    such member is there, once, and is a tenant's name: a ``tenant`` not in the head may be
    further on, so its absence there is no tenant, not the default one."""
    head = value[:head_bytes].decode("utf-8", "replace")
    named = [member for key, member in _members_at_head(head) if key == "tenant"]
    tenant = named[0] if len(named) == 1 else None
    return tenant if isinstance(tenant, str) and re.fullmatch(TENANT_NAME, tenant) else None


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _members_at_head(head: str) -> list[tuple[str, object]]:
    """The members of the object ``head`` starts with, up to the first one not wholly in it
    (each must be followed by a ``,`` or the object's ``}``: a number at the end of the head may
    go on past it)."""
    members: list[tuple[str, object]] = []
    i = _skip(head, 0)
    if head[i:i + 1] != "{":
        return members
    i = _skip(head, i + 1)
    try:
        while head[i:i + 1] == '"':
            key, i = _DECODER.raw_decode(head, i)  # a string: it starts with a quote
            i = _skip(head, i)
            if head[i:i + 1] != ":":
                break
            member, i = _DECODER.raw_decode(head, _skip(head, i + 1))
            i = _skip(head, i)
            if head[i:i + 1] not in (",", "}"):
                break
            members.append((key, member))
            if head[i] == "}":
                break
            i = _skip(head, i + 1)
    except (ValueError, RecursionError):  # a member cut at the head's end, or not JSON
        pass
    return members


def _skip(text: str, i: int) -> int:
    """``i`` past any JSON whitespace."""
    m = _WS.match(text, i)
    return i if m is None else m.end()


def request_id_named(value: bytes) -> str | None:
    """The request id a job request's bytes name, best effort (as :func:`tenant_named`): a
    request refused on being judged again may be one whose job is already stored."""
    if (body := _body(value)) is None:
        return None
    rid = body.get("request_id")
    return rid if isinstance(rid, str) and 0 < len(rid) <= MAX_ID_CHARS else None


def matches(d: DeadLetter, tenant: str | None = None, key: str | None = None) -> bool:
    """Whether ``d`` is ``tenant``'s (if given) with ``key`` (if given: a job request's id as
    its publisher keyed it)."""
    return (tenant is None or d.tenant == tenant) and (key is None or d.key_text == key)


def matching(letters: Iterable[DeadLetter], tenant: str | None = None, key: str | None = None) -> list[DeadLetter]:
    """The records :func:`matches` keeps, in the order given."""
    return [d for d in letters if matches(d, tenant, key)]


def read_depth(last: int, tenant: str | None = None, key: str | None = None) -> int:
    """How many records of each partition to read for the newest ``last`` of a list: ``last``
    itself, or :data:`SEARCH_DEPTH` (at least) when it is filtered by ``tenant`` or ``key``."""
    return max(last, SEARCH_DEPTH) if tenant is not None or key is not None else last


# Where a page of older records ends, per partition: the offset it reads up to (not
# included). A partition not named has nothing older to read.
Cursor = Mapping[int, int]
CURSOR_PATTERN = r"^[0-9]{1,10}:[0-9]{1,19}(,[0-9]{1,10}:[0-9]{1,19})*$"


@dataclass(frozen=True)
class Window:
    """What one read took from a DLQ topic: ``letters`` (oldest first), read from each
    partition's offsets ``[starts[p], end)``, and each partition's oldest offset still held
    (``lows``): below it there is nothing older to page to."""

    letters: list[DeadLetter]
    starts: dict[int, int] = field(default_factory=dict)
    lows: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Page:
    """The newest ``last`` records of a :class:`Window` that a caller keeps, newest first,
    and where the next page of older ones ends (None: nothing older is left)."""

    letters: list[DeadLetter]
    older: dict[int, int] | None


def page_of(window: Window, last: int, keep: Callable[[DeadLetter], bool]) -> Page:
    """The newest ``last`` records ``keep`` keeps, newest first, and the cursor of what is
    older. Each partition is taken in its own order, newest offset first, the partitions merged
    by time: so a page never skips a record nor shows one again, whatever the producers'
    clocks. A page stops early where a partition's read runs out with more below it (reading
    on would show records older than some not read yet)."""
    rest: dict[int, list[DeadLetter]] = {p: [] for p in window.starts}
    for d in window.letters:
        rest.setdefault(d.partition, []).append(d)
    heads: list[tuple[float, int, int]] = []
    for records in rest.values():
        records.sort(key=lambda d: d.offset)
        if records:
            heads.append(_rank(records[-1]))
    heapq.heapify(heads)
    shown: list[DeadLetter] = []
    while heads and len(shown) < last:
        p = -heapq.heappop(heads)[1]
        d = rest[p].pop()
        if keep(d):
            shown.append(d)
        if rest[p]:
            heapq.heappush(heads, _rank(rest[p][-1]))
        elif window.starts.get(p, 0) > window.lows.get(p, 0):
            break
    older = {p: records[-1].offset + 1 if records else window.starts.get(p, 0) for p, records in sorted(rest.items())}
    older = {p: end for p, end in older.items() if end > window.lows.get(p, 0)}
    return Page(shown, older or None)


def _rank(d: DeadLetter) -> tuple[float, int, int]:
    """Newest first on a min-heap: by time, then partition, then offset."""
    return (-d.at.timestamp(), -d.partition, -d.offset)


def cursor_text(cursor: Cursor) -> str:
    """``cursor`` as an API or a link carries it: ``partition:offset`` pairs, comma-separated."""
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


def parse_cursor(text: str) -> dict[int, int]:
    """:func:`cursor_text`'s text read back; ValueError if it is not one."""
    if not re.fullmatch(CURSOR_PATTERN, text):
        raise ValueError(f"a cursor is partition:offset pairs, comma-separated, as a page's `older` gives it, "
                         f"not {text[:80]!r}")
    pairs = [pair.split(":") for pair in text.split(",")]
    cursor = {int(p): int(o) for p, o in pairs}
    if len(cursor) != len(pairs):
        raise ValueError("a cursor names each partition once")
    return cursor
