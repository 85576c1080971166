"""Item writes for the sender: claim, submit-before-send, outcome — each guarded and fenced."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from importlib import resources
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from pacer_common.db.errors import with_retry
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.status import ItemStatus as S
from pacer_common.domain.receipts import Receipt
from pacer_sender.domain.decisions import Decision
from pacer_sender.ports import BeginResult, Claim


class _Fenced(Exception):
    """Our lease epoch is stale: another worker owns the item now."""


@cache
def _sql(name: str) -> str:
    return resources.files("pacer_sender.adapters.sql").joinpath(f"{name}.sql").read_text()


def _ledger(cmd: ItemCommand) -> dict[str, Any]:
    return {"idem_key": cmd.idem_key, "item_id": cmd.item_id, "guid": cmd.guid, "to_id": cmd.to_id}


class PostgresItemRepository:
    def __init__(self, pool: AsyncConnectionPool, lease_ttl: timedelta) -> None:
        self.pool = pool
        self.lease_ttl = lease_ttl

    async def _one(self, t: Transition, cmd: ItemCommand, extra_sql: str | None = None,
                   extra_params: dict[str, Any] | None = None) -> Any:
        async def work() -> Any:
            async with self.pool.connection() as conn, conn.transaction():
                moved = await apply(conn, t, [cmd.item_id])
                if moved and extra_sql:
                    await conn.execute(extra_sql, extra_params)  # type: ignore[arg-type]
                return moved[0] if moved else None

        return await with_retry(work)

    async def expire(self, cmd: ItemCommand) -> bool:
        t = Transition("ItemExpired", S.EXPIRED, frozenset({S.PENDING}),
                       error_class="expired", error=f"expire_at {cmd.expire_at} passed before sending")
        return await self._one(t, cmd) is not None

    async def claim(self, cmd: ItemCommand, owner: str) -> Claim | None:
        t = Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}), lease_owner=owner,
                       lease_ttl=self.lease_ttl, payload={"owner": owner})
        moved = await self._one(t, cmd)
        return Claim(moved.lease_epoch, moved.attempts) if moved else None

    async def begin_send(self, cmd: ItemCommand, claim: Claim) -> BeginResult:
        """Reserve the idempotency key and write ``submitted`` durably, before any gateway call."""

        async def work() -> BeginResult:
            try:
                return await attempt()
            except _Fenced:
                return "fenced"

        async def attempt() -> BeginResult:
            async with self.pool.connection() as conn, conn.transaction():
                row = await (await conn.execute(_sql("ledger_reserve"), _ledger(cmd))).fetchone()  # type: ignore[arg-type]
                assert row is not None
                if row["holder"] != cmd.item_id:
                    t = Transition("ItemDuplicateIntercepted", S.ABANDONED, frozenset({S.CLAIMED}),
                                   epoch=claim.epoch, clear_lease=True, error_class="duplicate",
                                   error=f"idempotency key already {row['state']} by item {row['holder']}",
                                   payload={"idem_key": cmd.idem_key, "holder": row["holder"]})
                    return "duplicate" if await apply(conn, t, [cmd.item_id]) else "fenced"
                t = Transition("ItemSubmitted", S.SUBMITTED, frozenset({S.CLAIMED}), epoch=claim.epoch,
                               attempt_bump=1, payload={"attempt": claim.attempts + 1})
                if not await apply(conn, t, [cmd.item_id]):
                    raise _Fenced  # lease taken over: the reservation rolls back with us
                return "submitted"

        return await with_retry(work)

    async def confirm(self, cmd: ItemCommand, claim: Claim, receipt: Receipt) -> bool:
        t = Transition("ItemConfirmed", S.CONFIRMED, frozenset({S.SUBMITTED}), epoch=claim.epoch,
                       clear_lease=True, payload={"receipt": receipt.as_payload()})
        params = {**_ledger(cmd), "receipt": Jsonb(receipt.as_payload())}
        return await self._one(t, cmd, _sql("ledger_sent"), params) is not None

    async def settle(self, cmd: ItemCommand, claim: Claim, d: Decision) -> bool:
        t = Transition(d.event, d.to, frozenset({S.SUBMITTED}), epoch=claim.epoch,
                       clear_lease=True, next_attempt_at=d.next_attempt_at,
                       error_class=d.error_class, error=d.error,
                       payload={"error_class": d.error_class, "error": d.error})
        extra = _sql("ledger_release") if d.release_ledger else None
        return await self._one(t, cmd, extra, _ledger(cmd)) is not None
