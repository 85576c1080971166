"""A sender's tenant send counts are added once per flush (``tenant_usage.sql`` gated by
``tenant_usage_flushes``): a statement that committed but whose answer was lost, run again by
``with_retry`` or resent by the next round, adds nothing twice; one that never ran adds once.
A tenant's count is exact either way, never above the truth (it would stop early) nor below
(it would pass its quota)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal, cast

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from pacer_common.db.pool import Pool, open_pool
from pacer_common.db.sql import query
from pacer_common.db.tenants import add_usage
from pacer_common.domain.quota import DailyUsage
from tests.integration.helpers import eventually, tuples, waiting_for_locks

Fault = tuple[Literal["before", "after"], type[Exception]]


class FaultyConnection:
    def __init__(self, conn: psycopg.AsyncConnection[DictRow], faults: list[Fault]) -> None:
        self.conn, self.faults = conn, faults

    async def execute(self, statement: Any, params: Mapping[str, Any] | None = None) -> Any:
        when, error = self.faults.pop(0) if self.faults else ("", Exception)
        if when == "before":
            raise error("the connection broke before the statement was sent")
        cur = await self.conn.execute(statement, params)  # autocommit: committed here
        if when == "after":
            raise error("the connection broke after the statement committed: its answer is lost")
        return cur


class FaultyPool:
    """The real pool, whose next statements fail as ``faults`` say, in order: "after" ones once
    the statement has committed (as if the connection broke before its answer came back),
    "before" ones without running it. A psycopg ``OperationalError`` is retried by
    ``with_retry``; an ``InterfaceError`` is not, so ``add_usage`` fails."""

    def __init__(self, pool: Pool, faults: list[Fault]) -> None:
        self.pool, self.faults = pool, faults

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[FaultyConnection]:
        async with self.pool.connection(timeout) as conn:
            yield FaultyConnection(conn, self.faults)


def counted(usage: DailyUsage, sends: dict[str, int]) -> None:
    for tenant, n in sends.items():
        for _ in range(n):
            usage.count(tenant)


def stored(url: str) -> dict[str, int]:
    return dict(tuples(url, "SELECT tenant, sum(sends)::int FROM tenant_usage GROUP BY tenant"))


def last_seqs(url: str) -> dict[str, int]:
    return dict(tuples(url, "SELECT sender, seq FROM tenant_usage_flushes"))


@pytest.fixture
def url(database_url: str) -> str:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, sends_per_day) VALUES ('acme', 100), ('globex', NULL)")
    return database_url


def flushes_through(url: str, rounds: list[tuple[dict[str, int], list[Fault]]],
                    usage: DailyUsage) -> list[str]:
    """Each round: sends counted, then ``add_usage`` through a pool with those faults; what
    each round raised ("" if nothing)."""
    async def go() -> list[str]:
        pool = await open_pool(url, min_size=1, max_size=2)
        raised = []
        try:
            for sends, faults in rounds:
                counted(usage, sends)
                try:
                    await add_usage(cast(Pool, FaultyPool(pool, faults)), usage)
                    raised.append("")
                except psycopg.Error as exc:
                    raised.append(type(exc).__name__)
                assert not faults, "every fault was met"
        finally:
            await pool.close()
        return raised

    return asyncio.run(go())


def test_a_flush_whose_answer_was_lost_is_not_added_again_by_its_retry(url: str) -> None:
    usage = DailyUsage(sender="sender-1:0123456789ab")
    raised = flushes_through(url, [({"acme": 2, "globex": 1}, [("after", psycopg.OperationalError)]),
                                   ({"acme": 1}, [("after", psycopg.OperationalError)])], usage)
    assert raised == ["", ""]  # with_retry ran each statement again and it answered
    assert stored(url) == {"acme": 3, "globex": 1}
    assert {t: n for t, (_, n) in usage.totals.items()} == {"default": 0, "acme": 3, "globex": 1}
    assert last_seqs(url) == {"sender-1:0123456789ab": 2} and not usage.resending


def test_a_flush_that_failed_after_committing_is_resent_verbatim_and_adds_nothing_twice(url: str) -> None:
    usage = DailyUsage()
    raised = flushes_through(url, [({"acme": 2}, [("after", psycopg.InterfaceError)]),
                                   ({"acme": 1, "globex": 4}, [("after", psycopg.InterfaceError)]),
                                   ({"acme": 5}, [])], usage)
    assert raised == ["InterfaceError", "InterfaceError", ""]
    # seq 1 committed and failed twice; the last round resent it (adding nothing), then the
    # sends counted since went in seq 2
    assert stored(url) == {"acme": 8, "globex": 4}
    assert usage.totals["acme"][1] == 8 and usage.totals["globex"][1] == 4
    assert last_seqs(url) == {usage.sender: 2} and not usage.resending and not usage.unflushed


def test_a_flush_that_never_ran_is_added_once_when_resent(url: str) -> None:
    usage = DailyUsage()
    raised = flushes_through(url, [({"acme": 2}, [("before", psycopg.OperationalError),
                                                  ("before", psycopg.InterfaceError)]),
                                   ({"acme": 1}, [("before", psycopg.InterfaceError)]),
                                   ({"globex": 1}, [])], usage)
    assert raised == ["InterfaceError", "InterfaceError", ""]
    assert stored(url) == {"acme": 3, "globex": 1}
    assert last_seqs(url) == {usage.sender: 2} and not usage.resending
    assert usage.totals["acme"][1] == 3 and usage.totals["globex"][1] == 1


def test_a_seq_is_applied_once_per_sender_and_never_after_a_later_one(url: str) -> None:
    def flush(sender: str, seq: int, sends: dict[str, int]) -> dict[str, int]:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            rows = conn.execute(query("tenant_usage"), {"sender": sender, "seq": seq, "tenants": list(sends),
                                                        "sends": list(sends.values())}).fetchall()
        return {r["tenant"]: r["sends"] for r in rows}

    assert flush("a", 1, {"acme": 2})["acme"] == 2
    assert flush("a", 1, {"acme": 2})["acme"] == 2  # the same flush again: read, not added
    assert flush("b", 1, {"acme": 1})["acme"] == 3  # another sender's seqs are its own
    assert flush("a", 3, {"acme": 1})["acme"] == 4
    assert flush("a", 2, {"acme": 9})["acme"] == 4  # older than the last applied: never added
    assert flush("c", 1, {})["acme"] == 4  # nothing to add: reads only, and writes no seq
    assert last_seqs(url) == {"a": 3, "b": 1} and stored(url) == {"acme": 4}


@pytest.mark.parametrize("first_attempt", ["commit", "rollback"])
@pytest.mark.parametrize("earlier_flushes", [0, 1])
def test_a_retry_that_overtakes_its_first_attempt_waits_for_it_and_adds_once(
        url: str, first_attempt: str, earlier_flushes: int) -> None:
    """The first attempt still running on a connection the client gave up on: the retry waits
    on the sender's row (or its insertion), then adds nothing if the first committed and once
    if it did not."""
    seq = earlier_flushes + 1
    params = {"sender": "s", "seq": seq, "tenants": ["acme"], "sends": [2]}

    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(url) as first, \
                await psycopg.AsyncConnection.connect(url, autocommit=True) as retry:
            if earlier_flushes:
                await retry.execute(query("tenant_usage"), {**params, "seq": 1, "sends": [10]})
            await first.execute(query("tenant_usage"), params)  # in a transaction, not committed yet
            again = asyncio.create_task(retry.execute(query("tenant_usage"), params))
            await eventually(lambda: waiting_for_locks(url), 10, "the retry waiting for its first attempt")
            await (first.commit() if first_attempt == "commit" else first.rollback())
            await again

    asyncio.run(go())
    assert stored(url) == {"acme": 10 * earlier_flushes + 2} and last_seqs(url) == {"s": seq}


def test_the_flushes_of_senders_gone_past_the_usage_retention_are_deleted(url: str) -> None:
    from pacer_reconciler.adapters.partitions import PostgresPartitions

    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenant_usage_flushes (sender, seq, at) SELECT 's' || d, 1, now() - make_interval(days => d)"
                     " FROM unnest(ARRAY[0, 29, 31, 400]) AS d")

    async def prune(days: int) -> int:
        pool = await open_pool(url, min_size=1, max_size=1)
        try:
            return await PostgresPartitions(pool).prune_usage(days)
        finally:
            await pool.close()

    assert asyncio.run(prune(30)) == 0  # days of tenant_usage: none here; the count is theirs alone
    assert sorted(last_seqs(url)) == ["s0", "s29"]
