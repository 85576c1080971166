"""A send Pacer was too late to make is Pacer's deferral, not the item's attempt: on a real
Postgres, through the real gateway client and the fake gateway. The send deadline passing
before a byte is written (an overloaded sender, a tenant's connection pool queueing past it)
uses up neither the item's attempts nor its job's budget, however often it happens."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import httpx
import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, RetryPolicy
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus as S
from pacer_common.gateway import GatewayClient, make_client
from pacer_dev.fakegateway.process import running_fake_gateway
from pacer_sender import core
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.core import Executed, Executor
from tests.integration.helpers import one, seed_job, sql

TTL = timedelta(seconds=30)
SEND_DEADLINE_S = TTL.total_seconds() / 4  # what main() gives the Executor


def cmd(item_id: str, job_id: str, expire_at: datetime | None = None) -> ItemCommand:
    return ItemCommand(item_id=item_id, job_id=job_id, shard_id=1, guid="g1", to_id="room", content="hi",
                       idem_key=f"k-{item_id}", priority=3, kind="campaign", expire_at=expire_at)


class LateClient:
    """The gateway client, asked ``late`` times with the send's deadline already past when it
    asks for a connection (as a busy sender or a queueing pool leaves it), then on time."""

    def __init__(self, url: str, late: int) -> None:
        self.http = make_client(url, 2.0)
        self.client = GatewayClient(self.http, DEFAULT_CODE_TABLE)
        self.late = late

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt:
        if self.late > 0:
            self.late -= 1
            deadline = time.monotonic() - 0.001
        return await self.client.send_text(guid, to_id, content, idem_key, deadline=deadline)


def row(url: str, item: str) -> tuple[str, int, str | None, int, str]:
    return one(url, "SELECT i.status::text, i.attempts, i.last_error_class, j.budget_used, j.status::text"
                    " FROM items i JOIN jobs j USING (job_id) WHERE i.item_id = %s", item)


async def requeue(url: str, item: str) -> None:
    """The reconciler's retry sweep: waiting_retry → pending once due (here: now)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        moved = await apply(conn, Transition("ItemRequeued", S.PENDING, frozenset({S.WAITING_RETRY})), [item])
    assert moved, f"{item} was not waiting"


def test_missed_send_deadlines_use_up_neither_attempts_nor_budget(database_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """More misses than the item has attempts and the job has budget, alternately caught by
    the sender before the call and by the gateway client before writing: the item keeps
    waiting, nothing counted, the job running, nothing reaching the gateway; then it is sent
    once, one attempt and one budget unit. A second item whose deadline keeps passing ends at
    its expire_at."""
    job, _, (item, doomed) = seed_job(database_url, {"g1": 2})
    sql(database_url, "UPDATE jobs SET budget_max_sends = 2 WHERE job_id = %s", job)
    policy = RetryPolicy(max_attempts=2, base=timedelta(milliseconds=1), cap=timedelta(milliseconds=10))
    rounds = 6
    skew = [0.0]
    monkeypatch.setattr(core, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + skew[0]))

    async def stalled(quiet_s: float | None = None) -> bool:  # the pacing gap outlasts the send deadline
        skew[0] += SEND_DEADLINE_S + 1
        return True

    with running_fake_gateway() as url:
        late = LateClient(url, rounds // 2)

        async def scenario() -> list[Executed]:
            pool = await open_pool(database_url, min_size=1, max_size=2)
            await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
            executor = Executor(PostgresItemRepository(pool, TTL), late, "w1", policy, rng=random.Random(1),
                                send_deadline_s=SEND_DEADLINE_S)
            results = []
            try:
                for n in range(rounds):
                    results.append(await executor.execute(cmd(item, job), None if n % 2 else stalled))
                    assert row(database_url, item) == ("waiting_retry", 0, "not_sent", 0, "running")
                    assert one(database_url, "SELECT count(*) FROM send_ledger") == 0, "not sent: the key is free"
                    await requeue(database_url, item)
                results.append(await executor.execute(cmd(item, job)))
                for _ in range(policy.max_attempts + 1):
                    results.append(await executor.execute(cmd(doomed, job), stalled))
                    await requeue(database_url, doomed)
                results.append(await executor.execute(cmd(doomed, job, datetime.now(UTC) - timedelta(seconds=1))))
            finally:
                await late.http.aclose()
                await pool.close()
            return results

        results = asyncio.run(scenario())
        sends = httpx.get(f"{url}/_admin/stats").json()["sends"]
    assert [(r.outcome, r.called_gateway) for r in results] == [("deadline_missed", False)] * rounds + [
        ("confirmed", True)] + [("deadline_missed", False)] * (policy.max_attempts + 1) + [("expired", False)]
    assert row(database_url, item) == ("confirmed", 1, "not_sent", 1, "running")
    assert one(database_url, "SELECT status::text FROM items WHERE item_id = %s", doomed) == "expired"
    assert sends == 1, "only the send on time reached the gateway"
