"""Small helpers for integration tests: seeding rows, reading topics, waiting with deadlines."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import new_item_ids
from pacer_common.kafka import make_consumer
from pacer_common.ops import serve

T = TypeVar("T")


def wait_for(check: Callable[[], T | Literal[False] | None], timeout_s: float = 30.0, what: str = "condition",
             describe: Callable[[], object] | None = None) -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` at the deadline
    (and what ``describe`` then says of the state, when the check's last value says little)."""
    deadline = time.monotonic() + timeout_s
    last: T | Literal[False] | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    state = "" if describe is None else f"; {describe()!r}"
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}{state}")


def away_from_midnight(*zones: str, margin_s: float = 60.0) -> None:
    """Return once no midnight of ``zones`` (UTC's if none) is due within ``margin_s``, waiting
    past one that is (at most ``margin_s`` each). Only for a test whose code under test reads
    the day from the clock more than once, with no way to pin it (the database's ``now()``, on
    this machine's clock): begun then, the test ends on the day it began."""
    tzs = [ZoneInfo(zone) for zone in zones or ("UTC",)]

    def clear() -> bool:
        now = datetime.now(UTC)
        return all(datetime.combine(now.astimezone(tz).date() + timedelta(days=1), dtime(0), tz) - now
                   > timedelta(seconds=margin_s) for tz in tzs)

    wait_for(clear, margin_s * len(tzs) + 10, f"{margin_s:g} s to the next midnight in {', '.join(map(str, tzs))}")


async def eventually(check: Callable[[], Awaitable[T | Literal[False] | None]], timeout_s: float = 30.0,
                     what: str = "condition") -> T:
    """``wait_for`` for a check that is a coroutine (a query on the test's own pool, say): polls
    it on the event loop until it returns something truthy; fails with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: T | Literal[False] | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}")


async def serving(app: Any, port: int, what: str = "the server") -> tuple[Any, asyncio.Task[None]]:
    """``app`` served on loopback ``port`` (``pacer_common.ops.serve``), once it has started."""
    server, task = await serve(app, "127.0.0.1", port)

    async def started() -> bool:
        return bool(server.started)

    await eventually(started, 30, f"{what} started")
    return server, task


def on_stub(app: Any, scenario: Callable[[str], Awaitable[Any]]) -> Any:
    """``scenario(url)`` run against ``app`` served on a loopback port of its own."""
    from pacer_dev.fakegateway.process import free_port

    async def go() -> Any:
        port = free_port()
        server, task = await serving(app, port, "the stub gateway")
        try:
            return await scenario(f"http://127.0.0.1:{port}")
        finally:
            server.should_exit = True
            await task

    return asyncio.run(go())


async def waiting_for_locks(url: str, n: int = 1) -> bool:
    """Whether at least ``n`` sessions of the database at ``url`` wait for a lock now (a
    check for :func:`eventually`)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                        " AND datname = current_database()")).fetchone()
    return row is not None and row[0] >= n


def seed_job(url: str, guids: dict[str, int], status: str = "pending", created_at: datetime | None = None,
             key_prefix: str = "k-") -> tuple[str, dict[str, int], list[str]]:
    """A job with one shard per guid and ``n`` items each, created at ``created_at`` (now) — its
    items' ids stamped with it, as the planner's are; returns (job_id, shard ids, item ids).
    Item keys are ``key_prefix`` + item id, or ``key_prefix`` + guid + index where the prefix
    ends with ":" (a key another job can share)."""
    job_id = str(uuid.uuid4())
    created = created_at or datetime.now(UTC)
    ids = iter(new_item_ids(sum(guids.values()), created))
    items: list[str] = []
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
            " target_mode, total, request, created_at)"
            " VALUES (%s, %s, 'campaign', 3, 't', '{}', 1, 'snapshot', %s, '{}', %s)",
            (job_id, f"req-{job_id}", sum(guids.values()), created),
        )
        shard_ids = {}
        for guid, n in guids.items():
            (sid,) = conn.execute(
                "INSERT INTO shards (job_id, guid, total) VALUES (%s, %s, %s) RETURNING shard_id", (job_id, guid, n)
            ).fetchone()
            shard_ids[guid] = sid
            conn.execute("INSERT INTO shard_status_counts VALUES (%s, 'pending', %s)", (sid, n))
            for k in range(n):
                item_id = next(ids)
                items.append(item_id)
                key = f"{key_prefix}{guid}:{k}" if key_prefix.endswith(":") else f"{key_prefix}{item_id}"
                conn.execute(
                    "INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status)"
                    " VALUES (%s, %s, %s, %s, %s, 'hi', %s, 3, 'campaign', %s)",
                    (item_id, job_id, sid, guid, f"room-{k}", key, status),
                )
    return job_id, shard_ids, items


def _record(msg: Any) -> dict[str, Any]:
    """A consumed message: key, value as JSON (None when it is not JSON), raw bytes, headers."""
    try:
        value = json.loads(v) if (v := msg.value()) else None
    except ValueError:
        value = None
    return {"key": msg.key(), "value": value, "raw": msg.value(), "headers": dict(msg.headers() or [])}


def read_topic(config: dict[str, str], topic: str, expect: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Read ``topic`` from the beginning until ``expect`` messages arrived, and then on to the
    end each partition had at that moment, so that extra messages written by then are read too
    (every message written before the call is); or until the deadline."""
    # A fetch that finds nothing new waits 20 ms at the broker, not 500: the watermark queries
    # wait behind it on the same connection.
    consumer = Consumer({**config, "group.id": f"test-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 20})
    deadline = time.monotonic() + timeout_s

    def partitions() -> list[int] | None:
        meta = consumer.list_topics(topic, timeout=max(deadline - time.monotonic(), 0.1)).topics.get(topic)
        return sorted(meta.partitions) if meta is not None and meta.error is None and meta.partitions else None

    out: list[dict[str, Any]] = []
    try:
        parts = wait_for(partitions, timeout_s=timeout_s, what=f"topic {topic} to exist")
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        read_to: dict[int, int] = {}  # the offset after the last message read, by partition
        marks: dict[int, tuple[int, int]] | None = None
        while time.monotonic() < deadline:
            if marks is None and len(out) >= expect:
                marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                           timeout=max(deadline - time.monotonic(), 0.1))
                         for p in parts}
            if marks is not None and all(read_to.get(p, low) >= high for p, (low, high) in marks.items()):
                break
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            out.append(_record(msg))
            read_to[msg.partition() or 0] = (msg.offset() or 0) + 1
    finally:
        consumer.close()
    return out


def commit_offsets(kafka_config: dict[str, str], group: str, offsets: list[TopicPartition]) -> None:
    """Commit ``offsets`` for consumer group ``group``, as a member that read that far would."""
    consumer = make_consumer(kafka_config, group)
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()


def cmd(item_id: str, key: str, guid: str = "g1") -> ItemCommand:
    return ItemCommand(item_id=item_id, job_id="00000000-0000-0000-0000-000000000000", shard_id=1, guid=guid,
                       to_id="room", content="hi", idem_key=key, priority=3, kind="campaign")


def status_and_events(url: str, item_id: str) -> tuple[str, list[str]]:
    with psycopg.connect(url) as conn:
        (status,) = conn.execute("SELECT status::text FROM items WHERE item_id = %s", (item_id,)).fetchone()
        types = [r[0] for r in conn.execute(
            "SELECT type FROM item_events WHERE item_id = %s ORDER BY version", (item_id,))]
    return status, types


def run(url: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    """``fn(pool)`` on a pool of its own, opened and closed around it."""
    async def go() -> T:
        pool = await open_pool(url, min_size=1, max_size=8)
        try:
            return await fn(pool)
        finally:
            await pool.close()

    return asyncio.run(go())


def sql(url: str, statement: str, *args: object) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(statement, args)


def tuples(url: str, statement: str, *args: object) -> list[tuple[Any, ...]]:
    """The rows ``statement`` reads, as tuples."""
    with psycopg.connect(url) as conn:
        return conn.execute(statement, args).fetchall()


def one(url: str, statement: str, *args: object) -> Any:
    """The one row ``statement`` reads: its value if it has one column, else the row."""
    (row,) = tuples(url, statement, *args)
    return row[0] if len(row) == 1 else row


def add_job(url: str, guid: str, n: int, *, priority: int = 3, age_s: float = 0.0, spacing_s: float = 0.001,
            not_before_in_s: float | None = None, expire_in_s: float | None = None,
            weight: float | None = None) -> str:
    """A job with ``n`` pending items on ``guid``, ``spacing_s`` apart, the newest created ``age_s`` ago."""
    job_id = str(uuid.uuid4())
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
                     " target_mode, total, request, status) VALUES (%s, %s, 'campaign', %s, 't', '{}', 1, 'snapshot',"
                     " %s, '{}', 'running')", (job_id, f"req-{job_id}", priority, n))
        (sid,) = conn.execute("INSERT INTO shards (job_id, guid, total) VALUES (%s, %s, %s) RETURNING shard_id",
                              (job_id, guid, n)).fetchone()
        conn.execute(
            "INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,"
            " created_at, not_before, expire_at)"
            " SELECT gen_random_uuid(), %(job)s::uuid, %(sid)s, %(guid)s, 'r' || k, 'hi', %(job)s::text || ':' || k, %(prio)s,"
            "        'campaign', now() - make_interval(secs => %(age)s + (%(n)s - k) * %(sp)s),"
            "        now() + make_interval(secs => %(nb)s), now() + make_interval(secs => %(ex)s)"
            " FROM generate_series(1, %(n)s) k",
            {"job": job_id, "sid": sid, "guid": guid, "prio": priority, "age": age_s, "sp": spacing_s,
             "nb": not_before_in_s, "ex": expire_in_s, "n": n})
        if weight is not None:
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 't')",
                         (f"job:{job_id}", psycopg.types.json.Jsonb({"weight": weight})))
    return job_id


def contract(request: pytest.FixtureRequest, memory: Callable[..., AbstractAsyncContextManager[Any]],
             postgres: Callable[..., AbstractAsyncContextManager[Any]]) -> Callable[..., None]:
    """The ``run`` of a contract suite (a fixture with params ``memory`` and ``postgres``):
    ``run(*args, scenario)`` opens the implementation the param names — ``memory(*args)``, or
    ``postgres(database_url, *args)`` on the test's own database — and runs the scenario on it."""

    def go(*args: Any) -> None:
        *params, scenario = args

        async def main() -> None:
            subject = (memory(*params) if request.param == "memory"
                       else postgres(request.getfixturevalue("database_url"), *params))
            async with subject as s:
                await scenario(s)

        asyncio.run(main())

    return go


def prune_partitions(conn: psycopg.Connection[Any], now: datetime, retain: dict[str, int],
                     lock_timeout_s: float = 2.0) -> dict[str, tuple[str, str | None]]:
    """A prune run as the reconciler's (``conn`` in autocommit): the partitions past retention
    listed, then each one's drop, a transaction each. ``{partition: (action, detail)}``."""
    days = json.dumps(retain)
    changes: dict[str, tuple[str, str | None]] = {}
    for name, action, detail in conn.execute("SELECT * FROM pacer_partitions_due(%s, %s::jsonb)",
                                             (now, days)).fetchall():
        if action != "due":
            changes[name] = (action, detail)
            continue
        for row in conn.execute("SELECT * FROM pacer_prune_partition(%s, %s, %s::jsonb, make_interval(secs => %s))",
                                (name, now, days, lock_timeout_s)).fetchall():
            changes[row[0]] = (row[1], row[2])
    return changes
