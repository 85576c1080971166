"""The job store on Postgres: a job, its shards and items in one transaction (items by COPY)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from pacer_common.db.errors import with_retry
from pacer_common.domain.commands import ItemCommand
from pacer_planner.domain.planning import Plan
from pacer_planner.ports import Stored

_COPY_ITEMS = (
    "COPY items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,"
    " expire_at, not_before) FROM STDIN"
)


@cache
def _sql(name: str) -> str:
    return resources.files("pacer_planner.adapters.sql").joinpath(f"{name}.sql").read_text()


class PostgresJobStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def store(self, plan: Plan) -> Stored:
        return await with_retry(lambda: self._store(plan))

    async def _store(self, plan: Plan) -> Stored:
        req = plan.request
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(_sql("insert_job"), {  # type: ignore[arg-type]
                "job_id": plan.job_id, "request_id": req.request_id, "kind": req.kind.value,
                "priority": plan.priority, "created_by": req.created_by,
                "message": Jsonb(req.message.model_dump()), "content_version": req.content_version,
                "target_mode": req.targets.mode, "total": len(plan.items),
                "expire_at": req.expire_at, "not_before": req.not_before,
                "budget_max_sends": req.budget.max_sends if req.budget else None,
                "request": Jsonb(req.model_dump(mode="json", exclude={"targets"})),
                "coalesce_key": plan.coalesce[0] if plan.coalesce else None,
                "coalesce_version": plan.coalesce[1] if plan.coalesce else None,
            })
            if await cur.fetchone() is None:
                row = await (await conn.execute(_sql("job_dispatched"), {"request_id": req.request_id})).fetchone()  # type: ignore[arg-type]
                assert row is not None
                return Stored(plan.job_id, created=False, dispatched=row["dispatched_at"] is not None, shard_ids={})
            guids = list(plan.shards)
            cur = await conn.execute(_sql("insert_shards"), {  # type: ignore[arg-type]
                "job_id": plan.job_id, "guids": guids, "totals": [plan.shards[g] for g in guids],
            })
            shard_ids = {r["guid"]: r["shard_id"] for r in await cur.fetchall()}
            async with conn.cursor() as c, c.copy(_COPY_ITEMS) as copy:  # type: ignore[arg-type]
                for it in plan.items:
                    await copy.write_row((
                        it.item_id, plan.job_id, shard_ids[it.guid], it.guid, it.to_id, it.content,
                        it.idem_key, plan.priority, req.kind.value, req.expire_at, plan.not_before,
                    ))
            if plan.coalesce is not None:
                await conn.execute(_sql("coalesce"), {"job_id": plan.job_id})  # type: ignore[arg-type]
        return Stored(plan.job_id, created=True, dispatched=False, shard_ids=shard_ids)

    async def pending_commands(self, job_id: str) -> Sequence[ItemCommand]:
        async def work() -> list[ItemCommand]:
            async with self.pool.connection() as conn:
                rows: list[Any] = await (await conn.execute(_sql("pending_commands"), {"job_id": job_id})).fetchall()  # type: ignore[arg-type]
            return [ItemCommand.model_validate(r) for r in rows]

        return await with_retry(work)

    async def queued(self, guids: Sequence[str]) -> dict[str, int]:
        """Items waiting to be sent (pending or waiting to retry), per guid."""

        async def work() -> dict[str, int]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(_sql("backlog"), {"guids": list(guids)})).fetchall()  # type: ignore[arg-type]
            return {r["guid"]: int(r["queued"]) for r in rows}

        return await with_retry(work)

    async def exists(self, request_id: str) -> bool:
        async def work() -> bool:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_sql("job_exists"), {"request_id": request_id})).fetchone()  # type: ignore[arg-type]
            return row is not None

        return await with_retry(work)

    async def mark_dispatched(self, job_id: str) -> None:
        async def work() -> None:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(_sql("mark_dispatched"), {"job_id": job_id})  # type: ignore[arg-type]

        await with_retry(work)
