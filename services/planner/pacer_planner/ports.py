"""What the planner needs from the outside world."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import Guid
from pacer_common.domain.requests import JobRequest
from pacer_planner.domain.planning import Plan
from pacer_planner.domain.sharding import ShardKey
from pacer_planner.domain.targets import Page, PagePlan


@dataclass(frozen=True)
class Stored:
    """Result of storing a plan: whether the job is new, and whether its commands went out."""

    job_id: str
    created: bool
    dispatched: bool
    shard_ids: dict[ShardKey, int]  # (guid, sub) → shard id


@dataclass(frozen=True)
class Known:
    """The job already stored for a request id: a redelivered request of its tenant is this job
    again."""

    job_id: str
    dispatched: bool  # its commands went out (dispatched_at is set)
    paging: bool  # a requery job: its targets are paged in, not dispatched here
    tenant: str  # whose job it is: another tenant's request under its id is not it


class StoreRefused(Exception):
    """The database refused the job for what it holds (a value it cannot store), not for
    being unavailable; nothing of it was stored, and storing it again cannot help."""


class JobStore(Protocol):
    async def store(self, plan: Plan) -> Stored: ...
    async def pending_commands(self, job_id: str, after: str | None, limit: int) -> Sequence[ItemCommand]:
        """Up to ``limit`` commands of the job's pending items by item id, after item ``after``
        (None: from the first)."""
        ...
    async def mark_dispatched(self, job_id: str) -> None: ...
    async def queued(self, guids: Sequence[Guid]) -> dict[Guid, int]: ...
    async def known(self, request_id: str) -> Known | None: ...


class CommandBus(Protocol):
    def dispatch(self, commands: Sequence[ItemCommand]) -> int: ...
    def dead_letter(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None) -> None: ...


# -- requery target sets --------------------------------------------------------------------

class PageRejected(Exception):
    """The database refused a page for what is in it (not for being unavailable): retrying
    the same page cannot help, so the job is paused with this reason."""


@dataclass(frozen=True)
class PagingState:
    """A requery job as its pager claimed it: the stored request and where paging stands."""

    job_id: str
    request: JobRequest  # as stored, targets included
    status: str  # the job's status
    cursor: str | None  # next_cursor of the last stored page
    pages: int  # pages stored so far
    complete: bool  # the last page is stored
    created_at: datetime  # the job's: stamped on the ids of the items its pages add
    traceparent: str | None = None  # the job request's trace: each page is paged in it


@dataclass(frozen=True)
class PageStored:
    """What storing a page did: the ids of the items it added (targets the job already had
    are left out), the shard of every (guid, sub) the page touched, and, when the page took
    the job's paged items past the approval size, the reason it now awaits approval."""

    added: frozenset[str]
    shard_ids: dict[ShardKey, int]
    awaiting_approval: str | None = None


class TargetSource(Protocol):
    async def fetch(self, url: str, cursor: str | None, limit: int) -> Any:
        """The decoded JSON of one page; raises ``TargetFetchError`` if there is none."""
        ...


class TargetStore(Protocol):
    async def candidates(self, owner: str, limit: int) -> list[str]: ...
    async def claim(self, job_id: str, owner: str, ttl_s: float) -> PagingState | None: ...
    async def known_subs(self, job_id: str, guids: Sequence[Guid]) -> dict[Guid, int]: ...
    async def queued(self, guids: Sequence[Guid]) -> dict[Guid, int]: ...
    async def store_page(self, state: PagingState, owner: str, page: Page, plan: PagePlan,
                         fetched_at: datetime, ttl_s: float) -> PageStored | None: ...
    async def undispatched_pages(self, job_id: str) -> list[int]: ...
    async def page_commands(self, job_id: str, pages: Sequence[int]) -> Sequence[ItemCommand]: ...
    async def mark_pages_dispatched(self, job_id: str, pages: Sequence[int]) -> None: ...
    async def mark_dispatched(self, job_id: str) -> None: ...
    async def note_wait(self, job_id: str, owner: str, reason: str) -> None: ...
    async def hold(self, job_id: str, reason: str) -> bool: ...
    async def close_set(self, job_id: str, owner: str, reason: str) -> None: ...
    async def release(self, job_id: str, owner: str) -> None: ...


class PagingEvents(Protocol):
    """What the pager reports, for metrics."""

    def page_stored(self, fetched: int, added: int, duplicates: int, invalid: int) -> None: ...
    def fetch_failed(self) -> None: ...
    def job_paused(self) -> None: ...
    def page_lost(self) -> None: ...
