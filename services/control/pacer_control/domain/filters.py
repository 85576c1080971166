"""What a listing asks for: filters, page sizes and keyset cursors, checked before any query.

Pages are keyset pages (``WHERE key > cursor ORDER BY key LIMIT n``), never OFFSET: a page
costs the same at the millionth item as at the first, and rows added meanwhile never shift
what the next page shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pacer_common.domain.ids import Guid, ItemId, JobId
from pacer_common.domain.requests import JobKind
from pacer_common.domain.status import ItemStatus as S
from pacer_control.domain.errors import Invalid

JobStatus = Literal["running", "awaiting_approval", "paused", "completed", "cancelled", "terminated"]
MAX_PAGE = 500
DEFAULT_PAGE = 100

# Items that ended without delivery: what /failed lists.
FAILED: tuple[S, ...] = (S.FAILED, S.UNVERIFIED, S.EXPIRED, S.ABANDONED)
# What a retry by filter may pick: those of them known not delivered. An unverified send may
# have been delivered, its key stays reserved, and pacer_compensate refuses it: it is resolved
# instead (the console's In doubt page, POST /items/{id}/resolve).
RETRYABLE: tuple[S, ...] = (S.FAILED, S.EXPIRED, S.ABANDONED)
# Where an unverified send is decided, said wherever a retry of one is refused.
RESOLVE_INSTEAD = ("resolve each instead, once it is known whether it was delivered (a tech_admin or admin token "
                   "not scoped to tenants: the console's In doubt page, or POST /api/v1/items/{id}/resolve); "
                   "resolved as not delivered, it goes back to pending under its own key: no retry is needed")
# Statuses whose last_error_class is counted as a failure category in a job's detail.
FAILURE_CATEGORY: tuple[S, ...] = (S.FAILED, S.ABANDONED, S.EXPIRED, S.WAITING_RETRY)
# Items a bulk cancel may pick: not taken by a sender yet.
CANCELLABLE: tuple[S, ...] = (S.PENDING, S.WAITING_RETRY)
# At most this many items in one bulk retry or cancel (one transaction, one audit record).
MAX_RETRY = 10_000


@dataclass(frozen=True)
class Part:
    """A bulk action taken in parts: at most ``at_most`` items a call, those after the item id
    ``after`` (the previous part's ``next_after``; None: from the first). Parts go by item id,
    so items a part could not act on (a refused retry still matches its filter) are passed,
    not read again by every later part."""

    at_most: int
    after: str | None = None


def in_parts(matched: list[str], part: Part | None, what: str, narrow: str) -> tuple[list[str], str | None]:
    """The items of a bulk action's ``matched`` ones (read in id order with a limit one above
    the part's size) it acts on, and the next part's ``after`` (None: no more match). Without
    a part a selection over ``MAX_RETRY`` is refused, saying how to narrow it or take it in
    parts."""
    if part is None:
        if len(matched) > MAX_RETRY:
            raise Invalid(f"{what} more than {MAX_RETRY} items; {narrow}, or take it in parts: give at_most (up to "
                          f"{MAX_RETRY}), then repeat the call with after set to each answer's next_after until it "
                          f"is null")
        return matched, None
    taken = matched[:part.at_most]
    return taken, taken[-1] if len(matched) > part.at_most else None


def parts(part: Part | None) -> dict[str, int | str | None]:
    """What the audit record of a bulk action says of the part it took: nothing for a whole
    selection."""
    return {} if part is None else {"at_most": part.at_most, "after": part.after}


@dataclass(frozen=True)
class JobFilter:
    status: JobStatus | None = None
    kind: JobKind | None = None
    created_by: str | None = None
    limit: int = DEFAULT_PAGE
    before: JobId | None = None  # a job id: list jobs created before it (newest first)
    since: datetime | None = None  # only jobs created at or after this time
    tenants: frozenset[str] | None = None  # only these tenants' jobs (a scoped token's); None: all
    ids: tuple[str, ...] | None = None  # only these jobs
    request_id: str | None = None  # only the job planned from this request (request ids are unique)


@dataclass(frozen=True)
class ShardPage:
    """Which of a job's shards a read of the job lists: ``limit`` of them (None: every one; 0:
    none, the job's totals alone), by guid after shard ``after`` (a shard id; None: from the
    first); or, ``attention``, the ``limit`` an operator looks at first (paused shards, then
    those not completed that have been quiet longest: adapters/sql/job_shards.sql)."""
    limit: int | None = None
    after: int | None = None
    attention: bool = False


EVERY_SHARD = ShardPage()


@dataclass(frozen=True)
class ItemFilter:
    statuses: tuple[S, ...] | None = None
    guid: Guid | None = None
    error_class: str | None = None
    only_with_error: bool = False
    limit: int = DEFAULT_PAGE
    after: ItemId | None = None  # an item id: the page starts after it (items by id)

    def failed(self) -> ItemFilter:
        """This filter narrowed to items that ended without delivery and carry an error."""
        statuses = tuple(s for s in (self.statuses or FAILED) if s in FAILED)
        return ItemFilter(statuses or FAILED, self.guid, self.error_class, True, self.limit, self.after)


@dataclass(frozen=True, order=True)
class AuditPosition:
    """Where a tail of the audit log stands: the writing transaction's id (``xid``) and the
    entry's. Ids are taken at insert, not at commit; transactions' ids order the log so that
    nothing committed later sorts before a position already read. ``xid`` None: the position
    of the entry ``id`` (a plain id given as ``after``)."""

    xid: int | None
    id: int

    @classmethod
    def parse(cls, text: str) -> AuditPosition:
        """``<xid>.<id>`` (a ``position`` or ``next_after``) or a plain entry id."""
        head, dot, tail = text.partition(".")
        if not (head.isascii() and head.isdigit()) or (dot and not (tail.isascii() and tail.isdigit())):
            raise ValueError(f"{text!r} is neither an audit position (<xid>.<id>) nor an entry id")
        xid, entry = (int(head), int(tail)) if dot else (None, int(head))
        if entry >= 2**63 or (xid is not None and xid >= 2**64):
            raise ValueError(f"{text!r} is out of range")
        return cls(xid, entry)

    def __str__(self) -> str:
        return str(self.id) if self.xid is None else f"{self.xid}.{self.id}"


@dataclass(frozen=True)
class AuditFilter:
    target_type: str | None = None
    target_id: str | None = None
    actor: str | None = None
    limit: int = DEFAULT_PAGE
    after: AuditPosition | None = None  # entries after this position, in commit-safe order (tail the log)
    before: int | None = None  # entries before this id, newest first (page back)


@dataclass(frozen=True)
class RetryFilter:
    """Which items of a job to retry, by what they are rather than by id."""

    status: S = S.FAILED
    error_class: str | None = None
    guid: Guid | None = None


def check_retry_status(status: S) -> str | None:
    """Why items of ``status`` cannot be picked for a retry, or None."""
    if status in RETRYABLE:
        return None
    if status is S.UNVERIFIED:
        return (f"a retry filter does not pick unverified items: they may have been delivered and their key stays "
                f"reserved, so a retry could never be sent; {RESOLVE_INSTEAD}")
    allowed = ", ".join(s.value for s in RETRYABLE)
    return f"a retry filter picks items known not to be delivered ({allowed}), not {status.value!r} ones"
