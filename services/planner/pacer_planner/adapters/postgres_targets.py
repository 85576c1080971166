"""Requery target sets on Postgres: the paging lease, one transaction per page, dispatch marks.

Every page is stored in one transaction, guarded by the lease owner and the page number (the
job's ``target_pages`` must be the page before this one). A page fetched by a planner whose
lease was taken over, or fetched again after a crash that happened after its commit, is refused
whole (``None``) and nothing is written twice.

Lock order, the reconciler's: the page's items, then its shards' projected counts and rows in
key order, then the job's row, where the guard is checked again. A job's pages take turns under
an advisory lock on the job, not its row (``page_lock.sql``).

A page that takes the job's paged items past the approval size holds the job for an admin's
approval in the same transaction (``page_approval.sql``), so none of its items can be claimed
before the job waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection

from pacer_common import tracing
from pacer_common.db.durable import synchronous_transaction
from pacer_common.db.errors import RefusedError, with_retry
from pacer_common.db.pool import Pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import Guid
from pacer_common.domain.requests import JobRequest
from pacer_planner.adapters.postgres import claim_guids, insert_shards, sql
from pacer_planner.domain.sharding import ShardKey
from pacer_planner.domain.targets import Page, PagePlan
from pacer_planner.ports import PageRejected, PageStored, PagingState


class PostgresTargetStore:
    def __init__(self, pool: Pool, approval_above: int | None = None) -> None:
        self.pool = pool
        # PACER_PLANNER_APPROVAL_ABOVE_ITEMS: a job whose pages bring more items than this waits
        # for an admin's approval (page_approval.sql); None: no size limit.
        self.approval_above = approval_above

    async def _rows(self, name: str, params: dict[str, Any]) -> list[Any]:
        async def work() -> list[Any]:
            async with self.pool.connection() as conn:
                cur = await conn.execute(sql(name), params)
                return await cur.fetchall() if cur.description else []

        return await with_retry(work)

    async def candidates(self, owner: str, limit: int) -> list[str]:
        return [r["job_id"] for r in await self._rows("paging_candidates", {"owner": owner, "limit": limit})]

    async def claim(self, job_id: str, owner: str, ttl_s: float) -> PagingState | None:
        rows = await self._rows("paging_claim", {"job_id": job_id, "owner": owner, "ttl_s": ttl_s})
        if not rows:
            return None
        r = rows[0]
        return PagingState(r["job_id"], JobRequest.model_validate(r["request"]), r["status"], r["target_cursor"],
                           r["target_pages"], r["complete"], r["created_at"], r["traceparent"])

    async def known_subs(self, job_id: str, guids: Sequence[Guid]) -> dict[Guid, int]:
        rows = await self._rows("page_shards", {"job_id": job_id, "guids": list(guids)})
        return {r["guid"]: r["subs"] for r in rows}

    async def queued(self, guids: Sequence[Guid]) -> dict[Guid, int]:
        rows = await self._rows("backlog", {"guids": list(guids)})
        return {r["guid"]: int(r["queued"]) for r in rows}

    async def store_page(self, state: PagingState, owner: str, page: Page, plan: PagePlan,
                         fetched_at: datetime, ttl_s: float) -> PageStored | None:
        async def work() -> PageStored | None:
            try:
                async with self.pool.connection() as conn, synchronous_transaction(conn, pipeline=False):
                    return await self._store_page(conn, state, owner, page, plan, fetched_at, ttl_s)
            except _Superseded:  # raised inside the transaction: nothing of the page is kept
                return None

        try:
            return await with_retry(work)
        except (psycopg.DataError, psycopg.IntegrityError, RefusedError) as exc:
            # What the page holds cannot be stored; fetching it again would not change that.
            raise PageRejected(f"{type(exc).__name__}: {exc}".strip()) from exc

    async def _store_page(self, conn: AsyncConnection[Any], state: PagingState, owner: str, page: Page,
                          plan: PagePlan, fetched_at: datetime, ttl_s: float) -> PageStored | None:
        job_id, page_no = state.job_id, state.pages + 1
        # The page's items land in the job's partition, however old: no prune may start while
        # they are uncommitted (pacer_partition_writer.sql).
        await conn.execute("SELECT pacer_partition_writer()")
        await conn.execute(sql("page_lock"), {"job_id": job_id})
        guard = await (await conn.execute(sql("page_guard"), {"job_id": job_id})).fetchone()
        if (guard is None or guard["target_owner"] != owner or guard["target_pages"] != state.pages
                or guard["complete"] or guard["status"] not in ("running", "paused")):
            return None
        req = state.request
        # The page's guids become the job's tenant's, or the page is refused (another tenant's
        # guid, past max_guids): the job is then held with the reason.
        await claim_guids(conn, req.tenant, list(plan.per_guid))
        shard_ids = await _page_shards(conn, job_id, plan)
        items = plan.items
        cur = await conn.execute(sql("page_items"), {
            "job_id": job_id, "priority": req.effective_priority, "kind": req.kind.value,
            "expire_at": req.expire_at, "not_before": req.not_before, "page_no": page_no,
            "item_ids": [it.item_id for it in items], "shard_ids": [shard_ids[it.shard] for it in items],
            "guids": [it.guid for it in items], "to_ids": [it.to_id for it in items],
            "contents": [it.content for it in items], "keys": [it.idem_key for it in items],
            "traceparent": tracing.current(),  # the page's span, in the job request's trace
        })
        rows = await cur.fetchall()
        added = frozenset(r["item_id"] for r in rows)
        per_shard = sorted(Counter(r["shard_id"] for r in rows).items())
        if per_shard:
            counts = {"shards": [s for s, _ in per_shard], "added": [n for _, n in per_shard]}
            await conn.execute(sql("page_counts"), counts)
            await conn.execute(sql("page_totals"), counts)
        recorded = await conn.execute(sql("page_record"), {
            "job_id": job_id, "owner": owner, "page_no": page_no, "cursor_in": page.cursor_in,
            "cursor_out": page.next_cursor, "fetched": page.fetched, "added": len(added),
            "duplicates": plan.duplicates + len(items) - len(added), "invalid": plan.invalid,
            "first_error": plan.first_error, "fetched_at": fetched_at, "last": page.last, "ttl_s": ttl_s,
        })
        if await recorded.fetchone() is None:
            raise _Superseded  # the guard failed under the job's row lock: roll the page back
        awaiting = None
        if self.approval_above is not None:
            # In this transaction, before target_done (which completes only a running job) and
            # before the page's commands go out: the items the page added are never claimable
            # by a running job whose paged items passed the size unapproved.
            held = await (await conn.execute(sql("page_approval"), {
                "job_id": job_id, "added": len(added), "above": self.approval_above})).fetchone()
            awaiting = held["reason"] if held and held["held"] else None
        if page.last:
            await conn.execute(sql("target_done"), {"job_id": job_id})
        return PageStored(added, shard_ids, awaiting)

    async def undispatched_pages(self, job_id: str) -> list[int]:
        return [r["page_no"] for r in await self._rows("undispatched_pages", {"job_id": job_id})]

    async def page_commands(self, job_id: str, pages: Sequence[int]) -> Sequence[ItemCommand]:
        rows = await self._rows("page_commands", {"job_id": job_id, "pages": list(pages)})
        return [ItemCommand.model_validate(r) for r in rows]

    async def mark_pages_dispatched(self, job_id: str, pages: Sequence[int]) -> None:
        await self._rows("mark_pages_dispatched", {"job_id": job_id, "pages": list(pages)})

    async def mark_dispatched(self, job_id: str) -> None:
        await self._rows("mark_dispatched", {"job_id": job_id})

    async def note_wait(self, job_id: str, owner: str, reason: str) -> None:
        await self._rows("paging_wait", {"job_id": job_id, "owner": owner, "reason": reason})

    async def hold(self, job_id: str, reason: str) -> bool:
        async def work() -> bool:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(sql("paging_note"), {"job_id": job_id, "reason": reason})
                row = await (await conn.execute(sql("paging_hold"), {"job_id": job_id, "reason": reason})).fetchone()
            return bool(row and row["held"])

        return await with_retry(work)

    async def close_set(self, job_id: str, owner: str, reason: str) -> None:
        async def work() -> None:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(sql("paging_close"), {"job_id": job_id, "owner": owner, "reason": reason})
                await conn.execute(sql("target_done"), {"job_id": job_id})

        await with_retry(work)

    async def release(self, job_id: str, owner: str) -> None:
        await self._rows("paging_release", {"job_id": job_id, "owner": owner})


class _Superseded(Exception):
    """The page's guard failed once its job's row was locked; its transaction rolls back."""


async def _page_shards(conn: AsyncConnection[Any], job_id: str, plan: PagePlan) -> dict[ShardKey, int]:
    """The shard of every (guid, sub) of the page, creating those not there yet (empty: their
    totals grow with the items actually added)."""
    shards = plan.shards
    rows = await (await conn.execute(sql("page_shards"), {
        "job_id": job_id, "guids": sorted({g for g, _ in shards})})).fetchall()
    ids: dict[ShardKey, int] = {(r["guid"], r["sub"]): r["shard_id"] for r in rows}
    missing = {k: 0 for k in shards if k not in ids}
    subs = {**{r["guid"]: r["subs"] for r in rows}, **plan.new_subs}
    return ids | await insert_shards(conn, job_id, missing, subs)
