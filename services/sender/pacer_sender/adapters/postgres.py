"""Item writes for the sender, one statement (one transaction, one round trip) per step.

The steps are database functions (``migrations/0002_item_functions.sql``) built on the
guarded ``pacer_transition``: begin (claim + reserve key + submitted), confirm, settle.
Every write after the claim carries the lease epoch, so a worker whose lease was taken
over cannot record anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from pacer_common.db.errors import with_retry
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.domain.decisions import Decision
from pacer_sender.ports import Begun, GuidLease


@cache
def _sql(name: str) -> str:
    return resources.files("pacer_sender.adapters.sql").joinpath(f"{name}.sql").read_text()


class PostgresItemRepository:
    def __init__(self, pool: AsyncConnectionPool, lease_ttl: timedelta) -> None:
        self.pool = pool
        self.lease_ttl = lease_ttl

    async def _row(self, name: str, params: dict[str, Any]) -> Any:
        async def work() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(_sql(name), params)).fetchone()  # type: ignore[arg-type]

        return await with_retry(work)

    async def expire(self, cmd: ItemCommand) -> bool:
        t = Transition("ItemExpired", S.EXPIRED, frozenset({S.PENDING}),
                       error_class="expired", error=f"expire_at {cmd.expire_at} passed before sending")

        async def work() -> bool:
            async with self.pool.connection() as conn:
                return bool(await apply(conn, t, [cmd.item_id]))

        return await with_retry(work)

    async def begin_send(self, cmd: ItemCommand, owner: str) -> Begun:
        """Claim, reserve the idempotency key and write ``submitted``, durably, before sending."""
        row = await self._row("begin_send", {
            "item_id": cmd.item_id, "owner": owner, "ttl": self.lease_ttl, "idem_key": cmd.idem_key,
            "guid": cmd.guid, "to_id": cmd.to_id,
        })
        return Begun(row["outcome"], row["epoch"], row["attempts"], row["holder"])

    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt) -> bool:
        row = await self._row("confirm", {"item_id": cmd.item_id, "epoch": epoch, "idem_key": cmd.idem_key,
                                          "receipt": Jsonb(receipt.as_payload())})
        return bool(row["moved"])

    async def settle(self, cmd: ItemCommand, epoch: int, d: Decision) -> bool:
        row = await self._row("settle", {
            "item_id": cmd.item_id, "epoch": epoch, "idem_key": cmd.idem_key, "to": d.to.value, "type": d.event,
            "error_class": d.error_class, "error": d.error, "next_attempt_at": d.next_attempt_at,
            "release": d.release_ledger,
        })
        return bool(row["moved"])


class PostgresGuidLeases:
    """Guid leases (``migrations/0003_guid_leases.sql``): take, keep and release."""

    def __init__(self, pool: AsyncConnectionPool, ttl: timedelta) -> None:
        self.pool = pool
        self.ttl = ttl

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        async def work() -> list[GuidLease]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(_sql("acquire_guids"), {  # type: ignore[arg-type]
                    "guids": list(guids), "owner": owner, "ttl": self.ttl})).fetchall()
            return [GuidLease(r["guid"], r["epoch"], r["last_send_at"], r["took_over"], r["db_now"]) for r in rows]

        return await with_retry(work)

    async def release(self, guids: Sequence[str], owner: str) -> int:
        async def work() -> int:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_sql("release_guids"), {  # type: ignore[arg-type]
                    "guids": list(guids), "owner": owner})).fetchone()
            return int(row["released"])

        return await with_retry(work)


class PostgresLimitsSource:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def changed_since(self, since: datetime | None) -> list[tuple[str, dict[str, Any], datetime]]:
        async def work() -> list[tuple[str, dict[str, Any], datetime]]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(_sql("changed_limits"), {  # type: ignore[arg-type]
                    "since": since or datetime(1970, 1, 1, tzinfo=UTC)})).fetchall()
            return [(r["guid"], r["limits"], r["updated_at"]) for r in rows]

        return await with_retry(work)
