"""How long a Control API request may wait on the database: for a pooled connection, no longer
than PACER_CONTROL_DB_DEADLINE_S (psycopg's own default is 30 s); for a statement, no longer
than PACER_CONTROL_STATEMENT_TIMEOUT_S, except an operator's action, which runs to its end.
On the real database, with the pool main() builds (``control_pool``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import psycopg

from pacer_common.db.pool import Pool
from pacer_control.app import build_app, control_pool
from pacer_control.settings import ControlSettings
from tests.integration.control_support import make_tokens
from tests.integration.helpers import eventually, seed_job

DEADLINE_S = 1.0
STATEMENT_TIMEOUT_S = 1.0
# A generous bound on what "about the deadline" means here: the first wait, one retry's, and
# a slow machine's slack, still far below the 30 s the bug waited.
BOUND_S = 4 * DEADLINE_S + 3


@asynccontextmanager
async def api_on(url: str, pool_max: int) -> AsyncIterator[tuple[httpx.AsyncClient, Pool]]:
    """The app over the pool main() would build with these settings, and an admin's client."""
    cfg = ControlSettings(db_pool_max=pool_max, db_deadline_s=DEADLINE_S, statement_timeout_s=STATEMENT_TIMEOUT_S)
    pool = control_pool(url, cfg)
    await pool.open(wait=True, timeout=30)
    try:
        app = build_app(pool, db_deadline_s=cfg.db_deadline_s)
        headers = {"Authorization": f"Bearer {(await make_tokens(url))['admin']}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control/api/v1",
                                     headers=headers) as client:
            yield client, pool
    finally:
        await pool.close()


def test_a_request_finding_every_connection_in_use_is_a_503_after_the_deadline_not_30_s(database_url: str) -> None:
    async def go() -> None:
        async with api_on(database_url, pool_max=1) as (client, pool):
            async with pool.connection():  # the pool's only connection, held
                started = time.monotonic()
                r = await asyncio.wait_for(client.get("/jobs"), 30)
                waited = time.monotonic() - started
            assert r.status_code == 503, r.text
            assert "every database connection of this control instance stayed in use" in r.json()["detail"], r.text
            assert "PACER_CONTROL_DB_POOL_MAX" in r.json()["detail"]
            assert DEADLINE_S * 0.9 <= waited < BOUND_S, f"answered after {waited:.1f} s ({DEADLINE_S} s deadline)"
            # The connection given back, the same request is served.
            assert (await client.get("/jobs")).status_code == 200

    asyncio.run(go())


def test_a_read_running_past_the_statement_timeout_is_stopped_and_a_503_that_says_so(database_url: str) -> None:
    async def go() -> None:
        async with api_on(database_url, pool_max=2) as (client, _):
            async with await psycopg.AsyncConnection.connect(database_url) as blocker:
                # Every read of jobs waits behind this lock for as long as the test holds it.
                await blocker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
                started = time.monotonic()
                r = await asyncio.wait_for(client.get("/jobs"), 30)
                took = time.monotonic() - started
                await blocker.rollback()
            assert r.status_code == 503, r.text
            detail = r.json()["detail"]
            assert "the database stopped this request's statement" in detail and "statement timeout" in detail, detail
            assert "PACER_CONTROL_STATEMENT_TIMEOUT_S" in detail, detail
            assert took < STATEMENT_TIMEOUT_S + BOUND_S, f"answered after {took:.1f} s"

    asyncio.run(go())


def test_an_operators_action_runs_past_the_statement_timeout_to_its_end(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 2})

    async def longer_than_the_timeout() -> bool:  # the pause waits on the job's row, past the timeout
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            row = await (await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pacer-control'"
                " AND wait_event_type = 'Lock' AND now() - query_start > make_interval(secs => %s)",
                (STATEMENT_TIMEOUT_S * 2,))).fetchone()
        return row is not None and row[0] == 1

    async def go() -> None:
        async with api_on(database_url, pool_max=2) as (client, _):
            async with await psycopg.AsyncConnection.connect(database_url) as blocker:
                await blocker.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (job,))
                pause = asyncio.create_task(client.post(f"/jobs/{job}/pause", json={"reason": "customer asked"}))
                await eventually(longer_than_the_timeout, 30, "the pause waiting past the statement timeout")
                await blocker.rollback()
            r = await asyncio.wait_for(pause, 30)
            assert r.status_code == 200 and r.json()["outcome"] == "done", r.text

    asyncio.run(go())
