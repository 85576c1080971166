"""A media item on hold calls the gateway for nothing: on a real Postgres, through the gateway
client and the fake gateway. Holds are enforced where an item is claimed (pacer_begin_send),
and a media item's upload or status poll comes before its claim, so the sender asks first
(``hold_item.sql``): an item of a paused job, of a job awaiting approval or terminated, of a
paused shard, or of a guid paused or not online makes no upload and no poll on the account
and keeps its reason, marked held as the claim would mark it; an item of a cancelled job is
abandoned. Once the hold is lifted, its upload takes the guid's turn and its send the next."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import httpx
import psycopg
import pytest
from pydantic import SecretStr

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, RetryPolicy
from pacer_common.domain.tenants import Tenant
from pacer_common.tenant_gateways import TenantGateways
from pacer_dev.fakegateway.process import running_fake_gateway
from pacer_sender.adapters.actions import PostgresActions
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.core import Executed, Executor
from tests.integration.helpers import one, seed_job, sql

T = TypeVar("T")
TTL = timedelta(seconds=30)
IMAGE = {"type": "image", "url": "https://cdn.example/holds.png"}

# Each hold as an operator, an admin's approval step or a callback leaves it: (put it on, lift it).
HOLDS: dict[str, tuple[str, str]] = {
    "job paused": ("UPDATE jobs SET status = 'paused', paused_reason = 'by ops' WHERE job_id = %(job)s",
                   "UPDATE jobs SET status = 'running', paused_reason = NULL WHERE job_id = %(job)s"),
    "job awaiting approval": ("UPDATE jobs SET status = 'awaiting_approval' WHERE job_id = %(job)s",
                              "UPDATE jobs SET status = 'running' WHERE job_id = %(job)s"),
    "job terminated": ("UPDATE jobs SET status = 'terminated' WHERE job_id = %(job)s",
                       "UPDATE jobs SET status = 'running' WHERE job_id = %(job)s"),
    "shard paused": ("UPDATE shards SET status = 'paused', paused_reason = 'by ops' WHERE shard_id = %(shard)s",
                     "UPDATE shards SET status = 'running', paused_reason = NULL WHERE shard_id = %(shard)s"),
    "guid paused": ("UPDATE guid_leases SET paused_reason = 'by ops' WHERE guid = 'g1'",
                    "UPDATE guid_leases SET paused_reason = NULL WHERE guid = 'g1'"),
    "guid kicked": ("INSERT INTO guid_states (guid, state, source, reason, event_ts)"
                    " VALUES ('g1', 'kicked', 'callback', 'logged out', now())",
                    "UPDATE guid_states SET state = 'online' WHERE guid = 'g1'"),
}


def cmd(item_id: str, job_id: str, shard_id: int) -> ItemCommand:
    return ItemCommand(item_id=item_id, job_id=job_id, shard_id=shard_id, guid="g1", to_id="room-0",
                       content="[image]", idem_key=f"k-{item_id}", priority=3, kind="campaign")


def sql_named(url: str, statement: str, **args: object) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement, args)


def gateway_counts(url: str) -> tuple[int, int]:
    """Uploads and media sends the fake gateway has taken so far."""
    actions = httpx.get(f"{url}/_admin/actions").json()
    return actions["uploads"], len(httpx.get(f"{url}/_admin/sends?guid=g1").json()["sends"])


def run(database_url: str, gateway_url: str, steps: Callable[[Executor], Awaitable[T]]) -> T:
    """``steps`` with an executor of sender w1, which holds guid g1, on the fake gateway."""

    async def go() -> T:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        tenant = Tenant("default", gateway_url, SecretStr("cred"))
        gateway = TenantGateways(lambda name: tenant, 2.0, DEFAULT_CODE_TABLE)
        executor = Executor(PostgresItemRepository(pool, TTL), gateway, "w1",
                            RetryPolicy(max_attempts=3, base=timedelta(milliseconds=1)), rng=random.Random(0),
                            send_deadline_s=TTL.total_seconds() / 4, actions=PostgresActions(pool),
                            action_gateway=gateway)
        try:
            return await steps(executor)
        finally:
            await gateway.aclose()
            await pool.close()

    return asyncio.run(go())


@pytest.mark.parametrize("hold", list(HOLDS))
def test_a_media_item_on_hold_uploads_nothing_and_goes_once_the_hold_is_lifted(database_url: str,
                                                                                hold: str) -> None:
    job, shards, (item,) = seed_job(database_url, {"g1": 1})
    sql(database_url, "UPDATE jobs SET message = %s WHERE job_id = %s", json.dumps(IMAGE), job)
    sql(database_url, "UPDATE items SET last_error = 'what it said before' WHERE item_id = %s", item)
    put, lift = HOLDS[hold]
    c = cmd(item, job, shards["g1"])

    with running_fake_gateway() as url:
        httpx.put(f"{url}/_admin/actions", json={"media_ready_after_ms": 0}).raise_for_status()

        async def held(ex: Executor) -> Executed:
            sql_named(database_url, put, job=job, shard=shards["g1"])
            return await ex.execute(c)

        assert run(database_url, url, held) == Executed("held", False)
        assert gateway_counts(url) == (0, 0), "no upload (nor anything else) for an item on hold"
        assert one(database_url, "SELECT status::text, held, last_error, not_before IS NULL FROM items"
                                 " WHERE item_id = %s", item) == ("pending", True, "what it said before", True)

        async def lifted(ex: Executor) -> list[Executed]:
            sql_named(database_url, lift, job=job, shard=shards["g1"])
            sql(database_url, "UPDATE items SET held = false WHERE item_id = %s", item)  # the release sweep's part
            return [await ex.execute(c), await ex.execute(c)]

        turns = run(database_url, url, lifted)
        assert [t.outcome for t in turns] == ["media_ready", "confirmed"]
        assert gateway_counts(url) == (1, 1)


def test_a_media_item_of_a_cancelled_job_is_abandoned_before_any_upload(database_url: str) -> None:
    """Back to pending after its job's cancel (a send then in flight came back): abandoned as
    the cancel abandons it, never held (a cancelled job never runs again) and never uploaded."""
    job, shards, (item,) = seed_job(database_url, {"g1": 1})
    sql(database_url, "UPDATE jobs SET message = %s, status = 'cancelled', paused_by = 'ops:ann' WHERE job_id = %s",
        json.dumps(IMAGE), job)
    with running_fake_gateway() as url:
        async def steps(ex: Executor) -> Executed:
            return await ex.execute(cmd(item, job, shards["g1"]))

        assert run(database_url, url, steps) == Executed("not_pending", False)
        assert gateway_counts(url) == (0, 0)
    assert one(database_url, "SELECT status::text, held, last_error_class FROM items WHERE item_id = %s", item) == \
        ("abandoned", False, "cancelled")
