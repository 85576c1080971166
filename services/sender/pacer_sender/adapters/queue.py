"""Postgres as the record of every guid's queue: a guid's next ready items, and the sweep
for guids with work whatever happened to their Kafka commands."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, LiteralString

from pacer_common.db.durable import synchronous_transaction
from pacer_common.db.errors import with_retry
from pacer_common.db.plans import GENERIC_PLAN, fetch_prepared
from pacer_common.db.pool import Pool
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.requests import ONLINE_MAX_PRIORITY
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.adapters.postgres import _sql, move, storable
from pacer_sender.domain.pacing import Drain
from pacer_sender.domain.partitions import GUID_BUCKETS, buckets_of
from pacer_sender.ports import Ready, Waiting

log = logging.getLogger(__name__)

# How next_ready.sql is run. Its cost is bounded only if every range is read in the order of
# items_guid_ready and stops at ``limit`` entries; any other index (items_guid_queued,
# items_job_status) or a bitmap scan reads the guid's or the job's whole range and sorts it —
# 100,000 rows for a broadcast. The planner picks by row estimates, and those are wrong exactly
# when it matters: a guid or job loaded since the last ANALYZE looks empty. So, for this
# statement, sorts and bitmap scans are ruled out where an ordered index scan can serve: the
# ordered items_guid_ready scans are then the only plan, for any guid, so the prepared
# statement's generic plan is that plan too, and is used (planning it for each guid cost 1 ms
# over items' partitions, four times the run; docs/performance.md, "Time partitions"). The
# settings are local to the refill's transaction; the statement is prepared from its first
# run on a connection (pacer_common.db.plans), not planned afresh for its first five.
NEXT_READY_SETTINGS: tuple[LiteralString, ...] = (
    "SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)", *GENERIC_PLAN)


def shed_params(drain: Drain) -> dict[str, float | int]:
    """``shed.sql``'s parameters for a guid's pace."""
    return {"interval_s": drain.interval_s, "base_s": drain.base_s, "penalty": drain.penalty, "decay": drain.decay,
            "sends": drain.sends}


class PostgresGuidQueue:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._unbucketed: set[frozenset[int]] = set()  # partition counts already warned of

    def _warn_unbucketed(self, counts: set[int]) -> None:
        """Once per set of counts: the sweep walks every queued guid (waiting_guids.sql)."""
        if (key := frozenset(counts)) not in self._unbucketed:
            self._unbucketed.add(key)
            log.warning("item-command partition counts %s do not all divide %d: each sweep for lost doorbells walks"
                        " every queued guid, not only this sender's (PACER_ITEM_COMMAND_PARTITIONS)",
                        sorted(counts), GUID_BUCKETS)

    async def next_ready(self, guid: str, exclude: Sequence[str], limit: int) -> Ready:
        async def work() -> Ready:
            async with self.pool.connection() as conn:
                rows = await fetch_prepared(conn, NEXT_READY_SETTINGS, _sql("next_ready"), {
                    "guid": guid, "exclude": list(exclude), "limit": limit})
            cmds = [ItemCommand.model_validate(r) for r in rows if r["item_id"] is not None]
            since = {r["item_id"]: r["ready_at"].timestamp() for r in rows if r["item_id"] is not None}
            return Ready(cmds, rows[0]["due_in_s"] if rows else None, since)

        return await with_retry(work)

    async def waiting_guids(self, horizon_s: float, grace_s: float,
                            owned: Sequence[tuple[int, int]] | None = None) -> list[Waiting]:
        counts, parts = (None, None) if owned is None else ([n for n, _ in owned], [p for _, p in owned])
        buckets = None if owned is None else buckets_of(owned)
        if owned and buckets is None:
            self._warn_unbucketed({n for n, _ in owned})

        async def work() -> list[Waiting]:
            async with self.pool.connection() as conn:
                rows: list[Any] = await (await conn.execute(_sql("waiting_guids"), {
                    "horizon": timedelta(seconds=horizon_s), "grace": timedelta(seconds=grace_s),
                    "counts": counts, "parts": parts, "buckets": buckets})).fetchall()
            return [Waiting(r["guid"], bool(r["overdue"]), r["item_id"]) for r in rows]

        return await with_retry(work)

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        """pending → failed with ``reason``; an item claimed or submitted meanwhile is not moved."""
        text = storable(reason)
        t = Transition("ItemFailed", S.FAILED, frozenset({S.PENDING}), error_class=error_class, error=text,
                       payload={"error_class": error_class, "error": text})
        return await move(self.pool, t, cmd)

    async def shed(self, guid: str, drain: Drain) -> int:
        """Expire early, with reason ``shed``, the guid's ready batch items that cannot go out
        before their expire_at at the guid's pace (``drain``, ``shed.sql``); how many."""
        async def work() -> int:
            async with self.pool.connection() as conn, synchronous_transaction(conn):
                rows: list[Any] = await (await conn.execute(_sql("shed"), {
                    "guid": guid, **shed_params(drain), "min_priority": ONLINE_MAX_PRIORITY + 1})).fetchall()
                if not rows:
                    return 0
                why = f"shed: at {drain} it could not go out before its expire_at"
                t = Transition("ItemExpired", S.EXPIRED, frozenset({S.PENDING}), error_class="shed", error=why,
                               payload={"error_class": "shed", "error": why, "interval_s": drain.interval_s,
                                        "penalty": drain.penalty})
                return len(await apply(conn, t, [r["item_id"] for r in rows]))

        return await with_retry(work)
