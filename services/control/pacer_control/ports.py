"""What the Control API needs from the outside world: the database, and the dead-letter
topics (read, and a refused job request sent again).

Every write happens inside :meth:`ControlStore.atomically`: the change and its audit record
commit together or not at all, and the whole unit is retried on a transient database error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from pacer_common.domain.dead_letters import Cursor, DeadLetter, Queue, Window
from pacer_common.domain.tokens import Role
from pacer_control.domain.filters import EVERY_SHARD, AuditFilter, ItemFilter, JobFilter, RetryFilter, ShardPage
from pacer_control.domain.outcomes import ActionResult, ItemRetry
from pacer_control.domain.permissions import Principal
from pacer_control.domain.reuse import Totals

T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True)
class AuditEntry:
    actor: str
    action: str
    target_type: str
    target_id: str
    reason: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


@dataclass(frozen=True)
class ExpectedHolder:
    """The lease holder an admin saw and confirmed before a forced release (either or both):
    a lease held by anyone else by then is not released."""

    owner: str | None = None
    epoch: int | None = None


@dataclass(frozen=True)
class ItemSpan:
    """The range of item ids that holds every item of a job, now and later (its first and last
    item id, widened to the millisecond of its creation: adapters/sql/item_span.sql). Every
    read of a job's items by item id stays within it: the item list, the report, the items a
    retry or cancel by filter picks."""

    first: str
    last: str


@dataclass(frozen=True)
class NewToken:
    name: str
    role: Role
    token: str  # the secret, shown once
    created_at: Any
    tenants: list[str] | None = None


class ControlTx(Protocol):
    """One database transaction. The job, shard, guid, budget and forced-release functions
    audit themselves."""

    async def job_action(self, job_id: str, action: str, actor: str, reason: str | None) -> ActionResult: ...
    async def shard_action(self, job_id: str, shard_id: int, action: str, actor: str,
                           reason: str | None) -> ActionResult: ...
    async def confirm_budget(self, job_id: str, max_sends: int, actor: str) -> ActionResult: ...
    async def lock_job(self, job_id: str) -> bool:
        """Take the job's bulk-operation lock until the transaction ends (not its row); False
        if there is no such job."""
    async def items_of_job(self, job_id: str, item_ids: Sequence[str]) -> set[str]: ...
    async def select_for_retry(self, job_id: str, span: ItemSpan, f: RetryFilter, limit: int,
                               after: str | None = None) -> list[str]: ...
    async def retry_items(self, item_ids: Sequence[str], actor: str,
                          priority: int | None = None) -> list[ItemRetry]: ...
    async def item_state(self, item_id: str) -> Row | None: ...
    async def cancel_item(self, item_id: str, actor: str) -> tuple[str, str]: ...
    async def cancel_items(self, item_ids: Sequence[str], actor: str) -> list[tuple[str, str, str]]:
        """Each item cancelled as :meth:`cancel_item` cancels one, in one statement (no
        savepoint per item): (item id, outcome, message) in the order given."""
        ...
    async def decide_approval(self, job_id: str, approve: bool, actor: str, reason: str | None) -> ActionResult: ...
    async def select_for_cancel(self, job_id: str, span: ItemSpan, guid: str | None, limit: int,
                                after: str | None = None) -> list[str]: ...
    async def test_send_made(self, job_id: str) -> Row | None:
        """The item of test send ``job_id``, if it is made already."""
        ...
    async def test_send(self, job_id: str, guid: str, to_id: str, content: str, actor: str) -> Row:
        """Test send ``job_id``: its item's id is stamped with the job's creation time."""
        ...
    async def resolve_unverified(self, item_id: str, delivered: bool, actor: str, reason: str) -> ActionResult: ...
    async def hold_guid(self, guid: str, reason: str, actor: str) -> bool: ...
    async def guid_health(self, guid: str) -> Row | None: ...
    async def resume_guid(self, guid: str, actor: str, reason: str | None) -> ActionResult: ...
    async def force_release_guid(self, guid: str, actor: str, reason: str | None,
                                 expected: ExpectedHolder | None = None) -> Row: ...
    async def force_release_item(self, item_id: str, actor: str, reason: str | None,
                                 expected: ExpectedHolder | None = None) -> Row: ...
    async def guid_limits(self, guid: str) -> dict[str, Any] | None: ...
    async def lock_guid_limits(self, guid: str, actor: str) -> dict[str, Any] | None:
        """The guid's overrides (None: it had none), its row locked until the transaction ends."""
        ...
    async def set_guid_limits(self, guid: str, limits: dict[str, Any], actor: str) -> dict[str, Any]: ...
    async def create_token(self, name: str, role: Role, actor: str, tenants: list[str] | None,
                           secret: str) -> NewToken | None:
        """The token ``secret`` under ``name`` (already so if an earlier run of this unit made it
        and its commit's answer was lost); None if another token has the name; :class:`Invalid`
        if a tenant named is none."""
        ...
    async def create_tenant(self, name: str, fields: dict[str, Any]) -> bool: ...
    async def update_tenant(self, name: str, fields: dict[str, Any]) -> bool: ...
    async def delete_tenant(self, name: str) -> Row | None: ...
    async def tenant(self, name: str) -> Row | None: ...
    async def lock_tenant(self, name: str) -> bool:
        """Lock the tenant's row until the transaction ends; False if there is no such tenant."""
        ...
    async def revoke_token(self, name: str) -> Row | None: ...
    async def audit(self, entry: AuditEntry) -> None: ...


class ControlStore(Protocol):
    async def atomically(self, work: Callable[[ControlTx], Awaitable[T]]) -> T: ...
    async def principal(self, token_hash: str) -> Principal | None: ...
    async def tenant_of(self, kind: str, target_id: str) -> str | None:
        """The tenant of job or item ``target_id`` (``kind`` ``job`` or ``item``); None if there is none."""
        ...
    async def jobs(self, f: JobFilter) -> list[Row]: ...
    async def awaiting_approval(self, limit: int) -> tuple[list[str], int]:
        """The oldest ``limit`` jobs awaiting approval (ids, oldest first) and how many wait in all."""
        ...
    async def job(self, job_id: str, shards: ShardPage = EVERY_SHARD, failures: bool = True,
                  totals: Totals | None = None) -> Row | None:
        """A job with its items per status and shards per status (``counts``, ``shard_statuses``,
        ``shards_total``), the shards ``shards`` names and, if ``failures``, its failure
        categories (``failures``, ``shed``; none otherwise). None if there is no such job;
        Invalid if ``shards.after`` is not one of its shards. The counts are ``totals`` if
        given; read, they come with what their read took (``totals_took_s``)."""
        ...
    async def job_head(self, job_id: str) -> Row | None: ...
    async def items(self, job_id: str, span: ItemSpan, f: ItemFilter) -> list[Row]: ...
    async def item_span(self, job_id: str) -> ItemSpan | None:
        """The range of ids that holds the job's items; None if there is no such job."""
        ...
    async def report_page(self, job_id: str, span: ItemSpan, after: str | None,
                          limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` report rows (``report.COLUMNS``) of the job's items in ``span`` after
        item ``after`` (None: from the first), by item id. One short read: no connection is
        held once it returns."""
        ...
    async def guids(self, paused_only: bool, limit: int, after: str | None, state: str | None = None,
                    start: str | None = None) -> list[Row]: ...
    async def guid_history(self, guid: str, limit: int, before: int | None) -> list[Row]: ...
    async def guid(self, guid: str) -> Row | None: ...
    async def guid_limits(self, guid: str) -> dict[str, Any] | None: ...
    async def backlogs(self, sort: str, limit: int) -> list[Row]: ...
    async def locks(self, limit: int, find: str | None = None) -> Row: ...
    async def audit_log(self, f: AuditFilter) -> list[Row]: ...
    async def in_doubt(self, limit: int) -> list[Row]: ...
    async def approval_preview(self, job_id: str, samples: int) -> Row: ...
    async def tokens(self) -> list[Row]: ...
    async def tenants(self) -> list[Row]: ...
    async def tenant_exists(self, name: str) -> bool: ...


class DeadLetterQueue(Protocol):
    """The planner's and the callback intake's dead letters. Each call raises
    :class:`~pacer_control.domain.errors.Unavailable` when the broker cannot be read."""

    def topic(self, queue: Queue) -> str: ...
    async def window(self, queue: Queue, depth: int, before: datetime | None = None,
                     older: Cursor | None = None) -> Window:
        """Up to ``depth`` records of each partition, oldest first: the last, the last written
        before ``before``, or the last before a page's ``older`` cursor; none if the topic
        does not exist yet."""
        ...
    async def one(self, queue: Queue, partition: int, offset: int) -> DeadLetter | None: ...
    def publishing(self) -> AbstractAsyncContextManager[None]:
        """One of the few republishes that may run at once (slots of their own: a republish
        never waits behind reads, nor reads behind it), held while the block runs; raises
        :class:`~pacer_control.domain.errors.Unavailable` if none frees within a few seconds."""
        ...
    async def republish(self, letter: DeadLetter) -> None:
        """A refused job request to the job requests topic again, as it came; raises unless
        the broker acknowledged it (:class:`Unavailable`: it may still have taken it, if the
        answer was what did not come in time). Called within :meth:`publishing`."""
        ...
