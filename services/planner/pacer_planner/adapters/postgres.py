"""The job store on Postgres: a job, its shards and items in one transaction (items by COPY)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from pacer_common import tracing
from pacer_common.db.durable import synchronous_transaction
from pacer_common.db.errors import RefusedError, with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import loader
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import Guid
from pacer_planner.domain.admission import tenant_refusal
from pacer_planner.domain.planning import Plan
from pacer_planner.domain.sharding import ShardKey
from pacer_planner.ports import Known, Stored, StoreRefused

_COPY_ITEMS = (
    "COPY items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,"
    " expire_at, not_before, traceparent) FROM STDIN"
)


sql = loader("pacer_planner.adapters.sql")
"""The text of ``adapters/sql/<name>.sql``."""


async def insert_shards(conn: AsyncConnection[Any], job_id: str, shards: Mapping[ShardKey, int],
                        subs: Mapping[Guid, int]) -> dict[ShardKey, int]:
    """Create shards (guid, sub) with their totals; ``subs`` is each guid's sub count."""
    if not shards:
        return {}
    keys = list(shards)
    cur = await conn.execute(sql("insert_shards"), {
        "job_id": job_id, "guids": [g for g, _ in keys], "subs": [s for _, s in keys],
        "counts": [subs.get(g, 1) for g, _ in keys], "totals": [shards[k] for k in keys],
    })
    return {(r["guid"], r["sub"]): r["shard_id"] for r in await cur.fetchall()}


async def claim_guids(conn: AsyncConnection[Any], tenant: str, guids: list[str]) -> None:
    """Record ``guids`` as ``tenant``'s, or raise :class:`RefusedError` with the reason (the
    caller's transaction rolls back: nothing of the job is stored)."""
    params = {"tenant": tenant, "guids": guids}
    # The check is a statement of its own: its snapshot must be taken after the claim, and after
    # the turn taken by a claim that added guids (tenant_guids.sql, tenant_guids_lock.sql).
    claimed = await conn.execute(sql("tenant_guids_claim"), params)
    if claimed.rowcount > 0:
        await conn.execute(sql("tenant_guids_lock"), params)
    cur = await conn.execute(sql("tenant_guids"), params)
    row = await cur.fetchone()
    assert row is not None
    reason = tenant_refusal(tenant, row["known"], list(row["foreign"]), int(row["held"]), row["max_guids"])
    if reason is not None:
        raise RefusedError(reason)


class _IdTaken(Exception):
    """The job's request id has a job already: its transaction is rolled back."""


@dataclass(frozen=True)
class ApprovalPolicy:
    """Which new jobs wait for an admin's approval (``pacer_approval_reason`` applies it)."""

    above_items: int | None = None  # more items than this; None: no size limit
    new_content: bool = False  # a message no admin has approved before


class PostgresJobStore:
    def __init__(self, pool: Pool, approval: ApprovalPolicy | None = None) -> None:
        self.pool = pool
        self.approval = approval or ApprovalPolicy()

    async def store(self, plan: Plan) -> Stored:
        try:
            return await with_retry(lambda: self._store(plan))
        except (psycopg.DataError, RefusedError) as exc:
            # What the job holds cannot be stored (the transaction rolled back: nothing of it is).
            raise StoreRefused(said(exc)) from exc

    async def _store(self, plan: Plan) -> Stored:
        async with self.pool.connection() as conn:
            try:
                return await self._insert(conn, plan)
            except _IdTaken:
                # Rolled back: its guids are not claimed for a request whose id was not its
                # to store (another tenant's job may have it). The job that has it, as stored.
                row = await (await conn.execute(sql("job_known"), {"request_id": plan.request.request_id})).fetchone()
        return Stored(plan.job_id, created=False, dispatched=row is not None and row["dispatched"], shard_ids={})

    async def _insert(self, conn: AsyncConnection[Any], plan: Plan) -> Stored:
        """The job, its shards and items in one transaction; :class:`_IdTaken` (the transaction
        rolled back) if its request id already has a job."""
        req = plan.request
        snapshot = req.targets.mode == "snapshot"
        traceparent = tracing.current()  # the job request's trace, kept on the job and each item
        async with synchronous_transaction(conn, pipeline=False):
            await claim_guids(conn, req.tenant, list(plan.per_guid))
            cur = await conn.execute(sql("insert_job"), {
                "job_id": plan.job_id, "request_id": req.request_id, "kind": req.kind.value,
                "priority": plan.priority, "created_by": req.created_by,
                "message": Jsonb(req.message.model_dump()), "content_version": req.content_version,
                "target_mode": req.targets.mode, "total": len(plan.items), "target_complete": snapshot,
                "expire_at": req.expire_at, "not_before": req.not_before,
                "budget_max_sends": req.budget.max_sends if req.budget else None,
                # A snapshot's targets are its items; a requery's are what the pager needs to
                # fetch them, after a restart too.
                "request": Jsonb(req.model_dump(mode="json", exclude={"targets"} if snapshot else None)),
                # The business id alone: a chain is (tenant, coalesce_key), and every query
                # of one matches both (pacer_coalesce).
                "coalesce_key": plan.coalesce[0] if plan.coalesce else None,
                "coalesce_version": plan.coalesce[1] if plan.coalesce else None,
                "approval_above": self.approval.above_items, "approve_new": self.approval.new_content,
                "tenant": req.tenant, "created_at": plan.created_at, "traceparent": traceparent,
                "item_content": plan.item_content,
            })
            if await cur.fetchone() is None:
                # The id has a job (one stored meanwhile, by a planner of another partition):
                # nothing of this transaction may stay, the guids it claimed least of all.
                raise _IdTaken
            shard_ids = await insert_shards(conn, plan.job_id, plan.shards, plan.subs)
            if plan.items:
                async with conn.cursor() as c, c.copy(_COPY_ITEMS) as copy:
                    for it in plan.items:
                        await copy.write_row((
                            it.item_id, plan.job_id, shard_ids[it.shard], it.guid, it.to_id, plan.stored_content(it),
                            it.idem_key, plan.priority, req.kind.value, req.expire_at, plan.not_before, traceparent,
                        ))
            if plan.coalesce is not None:
                await conn.execute(sql("coalesce"), {"job_id": plan.job_id})
        return Stored(plan.job_id, created=True, dispatched=False, shard_ids=shard_ids)

    async def pending_commands(self, job_id: str, after: str | None, limit: int) -> Sequence[ItemCommand]:
        async def work() -> list[ItemCommand]:
            async with self.pool.connection() as conn:
                rows: list[Any] = await (await conn.execute(sql("pending_commands"), {
                    "job_id": job_id, "after": after, "limit": limit})).fetchall()
            return [ItemCommand.model_validate(r) for r in rows]

        return await with_retry(work)

    async def queued(self, guids: Sequence[Guid]) -> dict[Guid, int]:
        """Items waiting to be sent (pending or waiting to retry), per guid."""

        async def work() -> dict[Guid, int]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(sql("backlog"), {"guids": list(guids)})).fetchall()
            return {r["guid"]: int(r["queued"]) for r in rows}

        return await with_retry(work)

    async def known(self, request_id: str) -> Known | None:
        async def work() -> Known | None:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(sql("job_known"), {"request_id": request_id})).fetchone()
            return None if row is None else Known(row["job_id"], row["dispatched"], row["paging"], row["tenant"])

        return await with_retry(work)

    async def mark_dispatched(self, job_id: str) -> None:
        async def work() -> None:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(sql("mark_dispatched"), {"job_id": job_id})

        await with_retry(work)


class PostgresPositions:
    """Where the planners' group has handled its requests to, kept with the jobs
    (``consumer_positions``): written before each offset commit, so a database restored from
    a backup says where to read again from (``pacer rewind-groups``)."""

    def __init__(self, pool: Pool, group_id: str) -> None:
        self.pool = pool
        self.group_id = group_id

    async def save(self, topic: str, partition: int, next_offset: int) -> None:
        async def work() -> None:
            async with self.pool.connection() as conn:
                await conn.execute(sql("save_position"), {"group_id": self.group_id, "topic": topic,
                                                          "partition": partition, "next_offset": next_offset})

        await with_retry(work)


def said(exc: BaseException) -> str:
    """What the server said of a value it refused, in one line: its primary message (which
    names the value), not the detail, hint and context lines libpq adds (internals, and
    advice meant for whoever wrote the schema), nor the exception's class."""
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    primary = cause.diag.message_primary if isinstance(cause, psycopg.Error) else None
    return primary or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
