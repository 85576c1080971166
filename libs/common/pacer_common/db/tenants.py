"""Tenants read from Postgres, cached: each service keeps a copy refreshed every few seconds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from pydantic import SecretStr

from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import query
from pacer_common.domain.quota import DailyUsage, Flush
from pacer_common.domain.tenants import Tenant
from pacer_common.lifecycle import attempt, every


def _secret(value: str | None) -> SecretStr | None:
    return SecretStr(value) if value else None


async def load_tenants(pool: Pool) -> dict[str, Tenant]:
    async def work() -> dict[str, Tenant]:
        async with pool.connection() as conn:
            rows: list[Any] = await (await conn.execute(query("tenants"))).fetchall()
        return {r["name"]: Tenant(r["name"], r["base_url"], _secret(r["credential"]), _secret(r["callback_secret"]),
                                  r["sends_per_day"], r["max_guids"]) for r in rows}

    return await with_retry(work)


class TenantCache:
    """The tenants as of the last reload; ``keep_fresh`` reloads them every ``refresh_s`` in
    the background, so a lookup never waits on the database (a tenant created or changed is
    seen within ``refresh_s``). A failed reload keeps the copy in hand and is retried.
    ``fill`` completes each tenant (the ``default`` tenant's settings)."""

    def __init__(self, pool: Pool, refresh_s: float = 5.0, fill: Callable[[Tenant], Tenant] = lambda t: t) -> None:
        self.pool, self.refresh_s, self.fill = pool, refresh_s, fill
        self.tenants: dict[str, Tenant] = {}
        self.on_change: Callable[[], None] = lambda: None

    def get(self, name: str) -> Tenant | None:
        return self.tenants.get(name)

    async def reload(self) -> None:
        fresh = {n: self.fill(t) for n, t in (await load_tenants(self.pool)).items()}
        changed, self.tenants = fresh != self.tenants, fresh
        if changed:
            self.on_change()

    async def keep_fresh(self, stop: asyncio.Event, on_error: Callable[[], None] | None = None) -> None:
        """:meth:`reload` every ``refresh_s`` until ``stop``; a round that fails is logged and
        counted (``on_error``), the copy in hand stays and the next round tries again."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.refresh_s)
            if stop.is_set():
                return
            await attempt(self.reload, f"reloading tenants (the {len(self.tenants)} known are kept)", on_error)


async def add_usage(pool: Pool, usage: DailyUsage) -> None:
    """Add this sender's sends to each tenant's today and read the totals back into ``usage``,
    with the end of each tenant's day, as the database counts its days (``tenant_usage.sql``).

    Each flush is added once (``DailyUsage.flush``): a flush that failed, perhaps after its
    statement committed (``with_retry`` runs a statement again when its answer is lost), stays
    pending and goes first, verbatim; then the sends counted since, in a flush of their own."""
    for _ in range(2 if usage.resending else 1):
        flush = usage.flush()
        usage.flushed(flush, await _apply(pool, flush))  # a failure leaves the flush pending


async def _apply(pool: Pool, flush: Flush) -> dict[str, tuple[float, int]]:
    async def work() -> list[Any]:
        async with pool.connection() as conn:
            return await (await conn.execute(query("tenant_usage"), {
                "sender": flush.sender, "seq": flush.seq,
                "tenants": list(flush.sends), "sends": list(flush.sends.values())})).fetchall()

    rows = await with_retry(work, deadline_s=5.0)
    return {r["tenant"]: (float(r["ends_at"]), int(r["sends"])) for r in rows}


async def keep_usage(pool: Pool, usage: DailyUsage, stop: asyncio.Event, every_s: float = 1.0,
                     on_error: Callable[[], None] | None = None) -> None:
    """``add_usage`` every ``every_s`` until ``stop``, and once more after it (a failed round
    counted by ``on_error``)."""
    await every(lambda: add_usage(pool, usage), stop, every_s, "adding tenant usage", on_error)
