"""The connection pool every service uses: a connection whose use was interrupted never
answers the next caller with another statement's result."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest

from pacer_common.db.durable import fetch_durable_call, fetch_durably
from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool, open_pool
from pacer_common.metrics import service_registry
from tests.integration.helpers import eventually, wait_for, waiting_for_locks

# psycopg waits on the socket this many times in one synchronous transaction (pipeline:
# enter, statements, sync); a cancellation at each of them is tried.
WAITS = 10


async def _cancelled_at(pool: Pool, k: int) -> None:
    """Run a synchronous transaction whose task is cancelled as psycopg starts its ``k``-th
    wait on the socket."""
    began = 0

    async def victim() -> None:
        async with pool.connection() as conn:
            real = conn.wait

            async def wait(gen: Any, *args: Any, **kwargs: Any) -> Any:
                nonlocal began
                began += 1
                if began == k:
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel()
                    # Delivered here, inside the use: psycopg's wait does not yield to the loop
                    # when the socket needs no waiting (its answer is already there, as on a busy
                    # machine), and the cancellation would land at a later await, maybe past it.
                    await asyncio.sleep(0)
                return await real(gen, *args, **kwargs)

            conn.wait = wait  # type: ignore[method-assign]
            try:
                await fetch_durably(conn, "SELECT 'victim' AS who")
            finally:
                del conn.wait

    task = asyncio.create_task(victim())
    with pytest.raises(asyncio.CancelledError):  # else the transaction had fewer waits than k
        await task


@pytest.mark.parametrize("k", range(1, WAITS + 1))
def test_a_transaction_cancelled_at_any_wait_leaves_no_connection_answering_out_of_turn(
        database_url: str, k: int) -> None:
    """psycopg returns a connection cancelled inside a pipeline to the pool IDLE but still in
    pipeline mode, and every statement on it then reads the previous one's result (a batch
    of item steps got another batch's rows). The pool must not serve it again."""

    async def scenario() -> list[list[Any]]:
        pool = await open_pool(database_url, min_size=1, max_size=1)
        try:
            await _cancelled_at(pool, k)
            answers = []
            for n in range(3):
                async with pool.connection() as conn:
                    answers.append(await fetch_durable_call(conn, "SELECT %s::int AS n", (n,)))
            return answers
        finally:
            await pool.close()

    answers = asyncio.run(scenario())
    assert answers == [[{"n": 0}], [{"n": 1}], [{"n": 2}]]


def test_the_pool_metrics_count_requests_connections_in_use_and_discards(database_url: str) -> None:
    """``pacer_db_pool_*``: what an operator reads to tell a pool at its maximum, callers
    waiting, and connections replaced after interrupted uses."""
    from prometheus_client import CollectorRegistry

    from pacer_common.metrics import PoolStats

    registry = CollectorRegistry()

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"pool": "test-pool", **labels})

    async def scenario() -> dict[str, float | None]:
        pool = await open_pool(database_url, min_size=1, max_size=2, name="test-pool")
        PoolStats(pool, registry)
        try:
            seen: dict[str, float | None] = {}
            async with pool.connection(), pool.connection():
                seen["in_use"] = value("pacer_db_pool_connections", state="in_use")
                waiter = asyncio.create_task(_use(pool))
                await asyncio.to_thread(wait_for, lambda: value("pacer_db_pool_requests_waiting") == 1, 10,
                                        "a third caller waiting for the pool's two connections")
                seen["waiting"] = value("pacer_db_pool_requests_waiting")
            await waiter
            await _cancelled_at(pool, 1)
            seen["max"] = value("pacer_db_pool_max_connections")
            seen["requests"] = value("pacer_db_pool_requests_total")
            seen["discarded"] = value("pacer_db_pool_connections_discarded_total")
            seen["waited"] = value("pacer_db_pool_wait_seconds_total")
            return seen
        finally:
            await pool.close()

    seen = asyncio.run(scenario())
    assert seen["in_use"] == 2 and seen["waiting"] == 1 and seen["max"] == 2
    assert seen["requests"] == 4  # two held, the one that waited, the cancelled transaction's
    assert seen["discarded"] == 1
    assert seen["waited"] is not None and seen["waited"] > 0


async def _use(pool: Pool) -> None:
    async with pool.connection() as conn:
        await conn.execute("SELECT 1")



def test_a_deadlock_is_run_again_counted_and_logged(database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Two transactions take two rows in opposite orders. The unit of work closes the cycle, so
    Postgres fails it (its check runs ``deadlock_timeout`` after its own wait starts, long before
    the other's, whose wait began first and whose timeout is far longer, however slow the
    machine); ``with_retry`` runs it again, it succeeds once the other has committed, and the
    deadlock shows in ``pacer_db_transient_errors_total{error="deadlock"}`` and in a warning."""
    registry = service_registry("test")

    def deadlocks() -> float | None:
        return registry.get_sample_value("pacer_db_transient_errors_total", {"error": "deadlock"})

    async def scenario() -> tuple[float | None, int, float | None]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as setup:
            await setup.execute("CREATE TABLE IF NOT EXISTS deadlock_rows (id int PRIMARY KEY, n int NOT NULL)")
            await setup.execute("TRUNCATE deadlock_rows")
            await setup.execute("INSERT INTO deadlock_rows VALUES (1, 0), (2, 0)")
        before = deadlocks()
        pool = await open_pool(database_url, min_size=1, max_size=2, name="deadlock-pool")
        other = await psycopg.AsyncConnection.connect(database_url)
        attempts = 0
        holding, close_the_cycle = asyncio.Event(), asyncio.Event()

        async def work() -> int:
            nonlocal attempts
            attempts += 1
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SET LOCAL deadlock_timeout = '50ms'")
                await conn.execute("UPDATE deadlock_rows SET n = n + 1 WHERE id = 2")
                holding.set()
                await close_the_cycle.wait()
                await conn.execute("UPDATE deadlock_rows SET n = n + 1 WHERE id = 1")
            return attempts

        try:
            await other.execute("SET deadlock_timeout = '60s'")
            await other.execute("UPDATE deadlock_rows SET n = n + 10 WHERE id = 1")
            unit = asyncio.create_task(with_retry(work, deadline_s=30))
            await holding.wait()
            waits = asyncio.create_task(other.execute("UPDATE deadlock_rows SET n = n + 10 WHERE id = 2"))
            await eventually(lambda: waiting_for_locks(database_url), 10, "the other transaction waiting for row 2")
            close_the_cycle.set()
            await waits  # the unit of work failed and rolled back: row 2 is the other's
            await other.commit()
            ran = await unit
        finally:
            await other.close()
            await pool.close()
        return before, ran, deadlocks()

    with caplog.at_level(logging.WARNING, logger="pacer_common.db.errors"):
        before, attempts, after = asyncio.run(scenario())
    assert attempts == 2, "the unit of work ran again after the deadlock"
    assert before is not None and after == before + 1
    assert any("deadlock" in r.getMessage() for r in caplog.records if r.name == "pacer_common.db.errors")
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT n FROM deadlock_rows ORDER BY id").fetchall() == [(11,), (11,)]

