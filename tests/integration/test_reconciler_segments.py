"""Reconcilers share the event log by segment: two real reconciler processes split the
segments, each tails only its own, and when one is killed its segments move to the other
within the lease bound without an event being applied twice."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pacer_common.db.migrate import migrate
from pacer_common.db.pool import open_pool
from pacer_common.domain.events import ItemEvent
from pacer_dev.infra import Infra
from pacer_dev.segments import confirm_job, segment_ends, segment_events, segments_behind
from pacer_dev.stack import Proc, Stack
from pacer_reconciler.adapters.layout import LayoutBlocked, adopt_layout
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.ports import CursorGone, CursorMoved, Position
from tests.conftest import stack_on
from tests.integration.helpers import eventually, read_topic, seed_job, wait_for, waiting_for_locks

N, TTL = 16, 2.0  # 16: the count migrations make the event index for
# A take's transaction starts (taken_at) a moment before its statement compares the old
# expiry with the clock; the lower bound allows that moment, not a takeover before expiry.
CHECK_LAG = timedelta(milliseconds=5)


@pytest.fixture
def stack(infra_env: Infra, tmp_path: Path) -> Iterator[Stack]:
    with stack_on(infra_env, tmp_path, f"s{uuid.uuid4().hex[:10]}", {
        "PACER_RECONCILER_SEGMENTS": str(N), "PACER_RECONCILER_LEADER_TTL_S": str(TTL),
        "PACER_RECONCILER_SWEEP_INTERVAL_S": "0.5",
    }) as st:
        yield st


def _metric(proc: Proc, name: str) -> float:
    with urllib.request.urlopen(f"{proc.url}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _held(url: str, proc: Proc) -> list[int]:
    """Segments whose live lease names this process as holder."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name FROM leader_leases WHERE holder LIKE %s AND expires_at > clock_timestamp()"
                            " AND name LIKE 'pacer-reconciler/%%of%%'", (f"%:{proc.pid}:%",)).fetchall()
    return sorted(int(r[0].rsplit("/", 1)[1].split("of")[0]) for r in rows)


def _lease_rows(url: str, proc: Proc | None = None) -> dict[str, tuple[str, int, datetime, datetime]]:
    """The reconciler's lease rows (its segments' and its replicas' memberships), live or not,
    or only those naming ``proc`` as holder: name → (holder, epoch, taken_at, expires_at), the
    times on the database's clock."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name, holder, epoch, taken_at, expires_at FROM leader_leases"
                            " WHERE name LIKE 'pacer-reconciler/%%' AND holder LIKE %s",
                            ("%" if proc is None else f"%:{proc.pid}:%",)).fetchall()
    return {r[0]: (r[1], int(r[2]), r[3], r[4]) for r in rows}


def _projection_matches(url: str) -> bool:
    with psycopg.connect(url) as conn:
        real: dict[str, int] = dict(conn.execute("SELECT status::text, count(*) FROM items GROUP BY 1").fetchall())
        projected: dict[str, int] = dict(conn.execute("SELECT status::text, sum(n) FROM shard_status_counts GROUP BY 1"
                                      " HAVING sum(n) <> 0").fetchall())
    return real == projected


def _guid_per_segment(url: str, n: int) -> dict[int, str]:
    """One guid in each of ``n`` segments."""
    guids: dict[int, str] = {}
    with psycopg.connect(url) as conn:
        for k in range(64 * n):
            seg = conn.execute("SELECT (hashtext(%s) & 2147483647) %% %s", (f"g{k}", n)).fetchone()
            assert seg is not None
            guids.setdefault(seg[0], f"g{k}")
    assert len(guids) == n
    return guids


def _job(url: str, guids: int, per_guid: int) -> tuple[str, int]:
    job_id, _, _ = seed_job(url, {f"g{uuid.uuid4().hex[:6]}-{i}": per_guid for i in range(guids)})
    return job_id, confirm_job(url, job_id)


def test_two_reconcilers_split_the_segments_and_a_killed_ones_move_to_the_other(stack: Stack) -> None:
    url = stack.infra.database_url
    a, b = stack.start_services(("reconciler", "rec-a"), ("reconciler", "rec-b"))
    wait_for(lambda: len(_held(url, a)) == len(_held(url, b)) == N // 2, 6 * TTL, "an even split")
    mine = {p.name: _held(url, p) for p in (a, b)}
    assert sorted(mine["rec-a"] + mine["rec-b"]) == list(range(N))

    job1, events1 = _job(url, guids=40, per_guid=3)
    ends = segment_ends(url, N)
    wait_for(lambda: segments_behind(url, ends) == 0, 30, "every segment's cursor at its last event")
    wait_for(lambda: _metric(a, "pacer_reconciler_events_total") + _metric(b, "pacer_reconciler_events_total")
             >= events1, 10, "the events counted")
    for p in (a, b):  # each read exactly its own segments' events, nothing of the other's
        assert _metric(p, "pacer_reconciler_events_total") == segment_events(url, N, mine[p.name]) > 0
    assert _projection_matches(url)
    assert {_metric(a, "pacer_reconciler_leader"), _metric(b, "pacer_reconciler_leader")} == {0.0, 1.0}

    before = _metric(b, "pacer_reconciler_events_total")
    stack.kill("rec-a")
    frozen = _lease_rows(url, a)  # rec-a's segments and membership, as it left them
    assert sorted(int(n.rsplit("/", 1)[1].split("of")[0]) for n in frozen if "/member/" not in n) == mine["rec-a"]
    wait_for(lambda: _held(url, b) == list(range(N)), 4 * TTL, "the survivor holding every segment")
    # rec-b takes each of rec-a's segments over once its lease expired, and at its first lease
    # round after rec-a's rows (its membership too: until then rec-b counts two replicas and
    # claims nothing) expired. The round before saw rec-a live and ended there, with nothing to
    # claim; rounds are TTL/3 apart and each runs within a budget of TTL/3. Both bounds are
    # between times on the database's clock.
    freed_at = max(expires for _, _, _, expires in frozen.values())
    latest = freed_at + timedelta(seconds=TTL / 3 + TTL / 3)
    taken = _lease_rows(url)
    for name, (_, epoch, _, expires) in frozen.items():
        if "/member/" in name:
            continue
        holder, new_epoch, taken_at, _ = taken[name]
        assert f":{b.pid}:" in holder and new_epoch == epoch + 1, (name, taken[name])
        assert taken_at >= expires - CHECK_LAG, f"{name} taken over {expires - taken_at} before its lease expired"
        assert taken_at <= latest, f"{name} taken over {taken_at - freed_at} after rec-a's leases expired"
    assert _metric(b, "pacer_reconciler_leader") == 1.0

    job2, events2 = _job(url, guids=40, per_guid=2)
    ends = segment_ends(url, N)
    wait_for(lambda: segments_behind(url, ends) == 0, 30, "every cursor at the end after the failover")
    wait_for(lambda: _metric(b, "pacer_reconciler_events_total") - before >= events2, 10, "the events counted")
    assert _metric(b, "pacer_reconciler_events_total") - before == events2, "no event read twice"
    assert _projection_matches(url), "no batch applied twice or skipped"
    outcomes = read_topic({"bootstrap.servers": stack.infra.kafka_bootstrap}, f"{stack.topic_prefix}.item-outcomes",
                          expect=events1 + events2)
    seen = [(m["value"]["item_id"], m["value"]["version"]) for m in outcomes]
    assert len(set(seen)) == events1 + events2 == len(seen), "one outcome per state change"
    with psycopg.connect(url) as conn:
        done = conn.execute("SELECT count(*) FROM jobs WHERE job_id = ANY(%s) AND status = 'completed'",
                            ([job1, job2],)).fetchone()
    assert done == (2,)


def _cursors(url: str) -> dict[str, tuple[int, int]]:
    with psycopg.connect(url) as conn:
        return {r[0]: (int(r[1]), r[2]) for r in conn.execute(
            "SELECT name, last_xid::text, last_seq FROM log_cursors").fetchall()}


def _set_cursors(url: str, at: dict[str, tuple[int, int]]) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM log_cursors")
        for name, (xid, seq) in at.items():
            conn.execute("INSERT INTO log_cursors (name, last_xid, last_seq) VALUES (%s, %s::text::xid8, %s)",
                         (name, xid, seq))


def test_a_replica_of_the_old_count_applies_nothing_once_another_count_took_over(database_url: str) -> None:
    """Two segments tail to the end; a layout of four takes over (the old cursors removed).
    A replica of two still running neither remakes its cursor from the start of the log (it
    would apply every event again) nor commits the batch it read meanwhile."""
    url = database_url
    guid = _guid_per_segment(url, 2)[0]
    job_id, _, _ = seed_job(url, {guid: 3})
    confirm_job(url, job_id)

    async def scenario() -> str:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            await adopt_layout(pool, "reconciler", 2)
            old = PostgresLog(pool, "reconciler/0of2", timedelta(seconds=60), segments=2, segment=0, own_cursor=False)
            start = await old.position()
            batch = await old.read(start, 100)
            assert len(batch) == 3 * 3, "claimed, submitted and confirmed, for each item"
            await old.commit_batch([ev for _, ev in batch if isinstance(ev, ItemEvent)], start, batch[-1][0])
            start = batch[-1][0]
            await adopt_layout(pool, "reconciler", 4)  # every old cursor caught up: it takes over
            later, _, _ = seed_job(url, {guid: 1})
            confirm_job(url, later)
            with pytest.raises(CursorGone, match="another segment count took over"):
                await old.position()
            stale = await old.read(start, 100)
            assert stale, "the old replica still sees events to apply"
            with pytest.raises(CursorMoved):
                await old.commit_batch([ev for _, ev in stale if isinstance(ev, ItemEvent)], start, stale[-1][0])
            return later
        finally:
            await pool.close()

    later = asyncio.run(scenario())
    assert sorted(_cursors(url)) == [f"reconciler/{s}of4" for s in range(4)]

    def applied(job: str) -> list[tuple[str, int]]:
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT c.status::text, sum(c.n)::int FROM shard_status_counts c JOIN shards s"
                                " USING (shard_id) WHERE s.job_id = %s AND c.n <> 0 GROUP BY 1", (job,)).fetchall()

    assert applied(job_id) == [("confirmed", 3)], "the first job's events applied once, by the old layout"
    assert applied(later) == [("pending", 1)], "the later job's events left to the new layout"


def test_a_new_segment_count_starts_where_every_old_cursor_stands_or_not_at_all(database_url: str) -> None:
    url = database_url
    _job(url, guids=12, per_guid=2)
    two = segment_ends(url, 2)  # where each segment of a 2-segment layout ends
    end = max(two.values())

    async def adopt(n: int) -> None:
        pool = await open_pool(url, min_size=1, max_size=1)
        try:
            await adopt_layout(pool, "reconciler", n)
        finally:
            await pool.close()

    # The single leader's cursor (before segments): every new cursor starts there.
    _set_cursors(url, {"reconciler": end})
    asyncio.run(adopt(4))
    assert _cursors(url) == {f"reconciler/{s}of4": end for s in range(4)}
    # Two segments each at its own last event: caught up, though at different positions.
    _set_cursors(url, two)
    asyncio.run(adopt(3))
    assert _cursors(url) == {f"reconciler/{s}of3": end for s in range(3)}
    # One old segment still has events to apply: the new layout must not start.
    behind = {**two, "reconciler/0of2": (0, 0)}
    _set_cursors(url, behind)
    with pytest.raises(LayoutBlocked):
        asyncio.run(adopt(3))
    assert _cursors(url) == behind, "nothing changed"


def test_sweeps_and_verification_take_only_the_segments_held(database_url: str) -> None:
    url = database_url
    seed_job(url, {f"g{i}": 1 for i in range(24)}, status="claimed")
    seed_job(url, {f"h{i}": 1 for i in range(24)}, status="recovery_pending")
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET lease_until = now() - interval '1 minute', updated_at = now() - interval '1 hour'")
        segment_of: dict[str, int] = dict(conn.execute(
            "SELECT item_id::text, (hashtext(guid) & 2147483647) % 4 FROM items").fetchall())

    async def sweep() -> tuple[list[str], int]:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            log = PostgresLog(pool, "reconciler", timedelta(seconds=60), timedelta(0), segments=4, owned=lambda: [1, 2])
            return [i.item_id for i in await log.in_doubt(100)], await log.sweep("claim_expired", 100)
        finally:
            await pool.close()

    in_doubt, moved = asyncio.run(sweep())
    with psycopg.connect(url) as conn:
        requeued = [r[0] for r in conn.execute("SELECT item_id::text FROM items WHERE status = 'pending'").fetchall()]
    assert requeued and moved == len(requeued)
    assert {segment_of[i] for i in requeued} <= {1, 2}
    assert sum(1 for s in segment_of.values() if s in (1, 2)) == len(requeued) + len(in_doubt)
    assert in_doubt and {segment_of[i] for i in in_doubt} <= {1, 2}


def test_two_segments_completing_a_jobs_last_shards_at_once_complete_the_job(database_url: str) -> None:
    """Each segment's commit sees only its own shard completed while the other's is in flight;
    the job row is locked before refresh_jobs, so the second to commit reads the first's shard
    and completes the job. A transaction holding the job row lines both commits up."""
    url = database_url
    guids = _guid_per_segment(url, 2)
    job_id, _, _ = seed_job(url, {guids[0]: 1, guids[1]: 1})
    confirm_job(url, job_id)

    async def scenario() -> None:
        pool = await open_pool(url, min_size=2, max_size=4)
        logs = [PostgresLog(pool, f"reconciler/{s}of2", timedelta(seconds=60), segments=2, segment=s) for s in (0, 1)]
        batches = [await log.read(Position("0", 0), 100) for log in logs]
        holder = await psycopg.AsyncConnection.connect(url)
        try:
            await holder.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (job_id,))
            commits = [asyncio.create_task(log.commit_batch([ev for _, ev in b], Position("0", 0), b[-1][0]))
                       for log, b in zip(logs, batches, strict=True)]
            await eventually(lambda: waiting_for_locks(url, 2), 10, "the commits lined up behind the job row")
            await holder.rollback()
            await asyncio.gather(*commits)
        finally:
            await holder.close()
            await pool.close()

    asyncio.run(scenario())
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT status FROM jobs WHERE job_id = %s", (job_id,)).fetchone() == ("completed",)


def _commit_around_a_held_job_row(url: str, shards: dict[str, int], statuses: list[str], held: tuple[int, int]) -> None:
    """Seed a job over ``shards`` (guid → items) and confirm its items; read its events (their
    statuses must be ``statuses``) and commit them as three batches: up to ``held[0]``, then up
    to ``held[1]`` while another transaction holds the job row (a deadline of 10 s: the batch
    must not wait for the row), then the rest. The first batch starts the job; the job and
    every shard end completed."""
    job_id, _, _ = seed_job(url, shards)
    confirm_job(url, job_id)

    async def scenario() -> None:
        pool = await open_pool(url, min_size=2, max_size=3)
        log = PostgresLog(pool, "reconciler/0of1", timedelta(seconds=60), segments=1, segment=0)
        rows = await log.read(Position("0", 0), 100)
        events = [ev for _, ev in rows if isinstance(ev, ItemEvent)]
        assert [ev.to_status.value for ev in events] == statuses
        cuts = [0, *held, len(events)]
        at = [Position("0", 0), *(rows[k - 1][0] for k in cuts[1:])]
        holder = await psycopg.AsyncConnection.connect(url)
        try:
            await log.commit_batch(events[:held[0]], at[0], at[1])  # the job's first shard starts: so does the job
            started = await holder.execute("SELECT status, started_at IS NOT NULL FROM jobs WHERE job_id = %s", (job_id,))
            assert await started.fetchone() == ("running", True)
            await holder.rollback()
            await holder.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (job_id,))
            await asyncio.wait_for(log.commit_batch(events[held[0]:held[1]], at[1], at[2]), timeout=10)
            await holder.rollback()
            await log.commit_batch(events[held[1]:], at[2], at[3])
        finally:
            await holder.close()
            await pool.close()

    asyncio.run(scenario())
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT status, started_at IS NOT NULL, finished_at IS NOT NULL FROM jobs"
                            " WHERE job_id = %s", (job_id,)).fetchone() == ("completed", True, True)
        assert conn.execute("SELECT array_agg(DISTINCT status) FROM shards WHERE job_id = %s",
                            (job_id,)).fetchone() == (["completed"],)


def test_only_a_batch_that_moves_a_shard_takes_the_job_row(database_url: str) -> None:
    """Every segment shares a job's row, so a batch locks it only when one of its shards changes
    status: a batch that keeps its shard running commits while another transaction holds the
    job row; the batches that start and complete the shard still refresh the job."""
    _commit_around_a_held_job_row(database_url, {"g-row": 3},
                                  ["claimed"] * 3 + ["submitted"] * 3 + ["confirmed"] * 3, held=(3, 6))


def test_a_shard_starting_in_a_started_job_leaves_the_job_row_alone(database_url: str) -> None:
    """A job with a pending shard cannot be completed, so a shard starting in a job that has
    started and is running changes nothing on the job row: that batch (the second shard's
    claim) commits while another transaction holds the row. The first shard to start still
    marks the job started, and the shards completing still complete it."""
    _commit_around_a_held_job_row(database_url, {"g-first": 1, "g-second": 1},
                                  ["claimed"] * 2 + ["submitted"] * 2 + ["confirmed"] * 2, held=(1, 2))


def test_a_completed_job_whose_shard_reopens_runs_again(database_url: str) -> None:
    """An operator's retry of a failed item after its job completed reopens the item's shard
    and the job (a compensation item, pending); the batch that applies the compensation's
    event leaves them running, unfinished, until the compensation is done."""
    url = database_url
    job_id, _, _ = seed_job(url, {"g-again": 2})
    with psycopg.connect(url) as conn:
        (failed,) = conn.execute("SELECT item_id FROM items WHERE job_id = %s ORDER BY item_id LIMIT 1",
                                 (job_id,)).fetchone() or (None,)
        conn.execute("SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'failed', 'ItemFailed')",
                     (failed,))
    confirm_job(url, job_id)  # the other item: claimed, submitted, confirmed

    def job() -> tuple[str, bool, str]:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT j.status, j.finished_at IS NOT NULL, s.status FROM jobs j"
                               " JOIN shards s USING (job_id) WHERE j.job_id = %s", (job_id,)).fetchone()
        assert row is not None
        return row[0], row[1], row[2]

    async def apply_all(log: PostgresLog, at: Position) -> Position:
        rows = await log.read(at, 100)
        await log.commit_batch([ev for _, ev in rows if isinstance(ev, ItemEvent)], at, rows[-1][0])
        return rows[-1][0]

    async def scenario() -> tuple[tuple[str, bool, str], tuple[str, bool, str]]:
        pool = await open_pool(url, min_size=2, max_size=3)
        try:
            log = PostgresLog(pool, "reconciler/0of1", timedelta(seconds=60), segments=1, segment=0)
            at = await apply_all(log, Position("0", 0))
            done = job()
            with psycopg.connect(url) as conn:
                (outcome,) = conn.execute("SELECT outcome FROM pacer_retry_item(%s, 'operator')",
                                          (failed,)).fetchone() or (None,)
            assert outcome == "created"
            await apply_all(log, at)
            return done, job()
        finally:
            await pool.close()

    done, again = asyncio.run(scenario())
    assert done == ("completed", True, "completed")
    assert again == ("running", False, "running"), "the job stayed completed with a retry open in it"


def test_a_shard_reopening_while_another_segment_completes_its_job_keeps_the_job_running(
        database_url: str) -> None:
    """A job runs for its shard X alone (its shard Y finished: its item failed) when an open
    item appears in Y. Segment 1 applies it (Y reopens) while segment 0 applies X's last
    confirmation (X completes, and with it, as segment 0 reads the shards, the job). Segment
    1's commit is held after its shards are refreshed, so segment 0 refreshes the job while Y's
    reopening is in flight: the job must still end running, with the item open in it, not
    completed over it (the item would then stay held for good).

    The open item is an operator's retry with its own reopening of Y undone: a retry reopens
    its shard itself (test_operator_actions), but the projection must reopen a shard right
    whatever added the open item to it."""
    url = database_url
    guids = _guid_per_segment(url, 2)
    job_id, shards, _ = seed_job(url, {guids[0]: 1, guids[1]: 1})
    with psycopg.connect(url, autocommit=True) as conn:
        item = {g: str(conn.execute("SELECT item_id FROM items WHERE job_id = %s AND guid = %s",
                                    (job_id, g)).fetchone()[0]) for g in guids.values()}
        x, y = item[guids[0]], item[guids[1]]
        conn.execute("SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'failed', 'ItemFailed')",
                     (y,))
        conn.execute("SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'claimed', 'ItemClaimed',"
                     " p_lease_owner => 'seed', p_lease_ttl => interval '1 hour')", (x,))
        conn.execute("SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], '{claimed}', 'submitted',"
                     " 'ItemSubmitted')", (x,))

    def state() -> tuple[str, str, str]:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT j.status, sx.status, sy.status FROM jobs j, shards sx, shards sy"
                               " WHERE j.job_id = %s AND sx.shard_id = %s AND sy.shard_id = %s",
                               (job_id, shards[guids[0]], shards[guids[1]])).fetchone()
        assert row is not None
        return row[0], row[1], row[2]

    async def scenario() -> tuple[str, str, str]:
        pool = await open_pool(url, min_size=3, max_size=4)
        logs = [PostgresLog(pool, f"reconciler/{s}of2", timedelta(seconds=60), segments=2, segment=s) for s in (0, 1)]
        holder = await psycopg.AsyncConnection.connect(url)
        try:
            at = []
            for log in logs:
                rows = await log.read(Position("0", 0), 100)
                await log.commit_batch([ev for _, ev in rows if isinstance(ev, ItemEvent)], Position("0", 0),
                                       rows[-1][0])
                at.append(rows[-1][0])
            assert state() == ("running", "running", "completed")
            with psycopg.connect(url, autocommit=True) as conn:
                (outcome,) = conn.execute("SELECT outcome FROM pacer_retry_item(%s, 'operator')",
                                          (y,)).fetchone() or (None,)
                assert outcome == "created"
                conn.execute("UPDATE shards SET status = 'completed' WHERE shard_id = %s", (shards[guids[1]],))
                conn.execute("SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], '{submitted}', 'confirmed',"
                             " 'ItemConfirmed', p_clear_lease => true)", (x,))
            batches = [await log.read(a, 100) for log, a in zip(logs, at, strict=True)]
            assert all(batches)

            def commit(s: int) -> asyncio.Task[None]:
                rows = batches[s]
                return asyncio.create_task(logs[s].commit_batch(
                    [ev for _, ev in rows if isinstance(ev, ItemEvent)], at[s], rows[-1][0]))

            # segment 1 stops at its cursor, after its shards (and the job row, if it takes it)
            await holder.execute("SELECT 1 FROM log_cursors WHERE name = 'reconciler/1of2' FOR UPDATE")
            reopening = commit(1)
            await eventually(lambda: waiting_for_locks(url, 1), 10, "segment 1's commit held at its cursor")
            completing = commit(0)

            async def completed_or_waiting() -> bool:
                return completing.done() or await waiting_for_locks(url, 2)

            await eventually(completed_or_waiting, 10, "segment 0's commit done or waiting for the job row")
            await holder.rollback()
            await asyncio.gather(reopening, completing)
            return state()
        finally:
            await holder.close()
            await pool.close()

    assert asyncio.run(scenario()) == ("running", "completed", "running"), \
        "the job was completed over a shard reopened at the same moment"


_INDEX_READS = """
SELECT p.relname AS parent, sum(s.idx_tup_read)::bigint AS n
FROM pg_stat_user_indexes s
JOIN pg_inherits i ON i.inhrelid = s.indexrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname IN ('item_events_position', %(segment_index)s)
GROUP BY p.relname"""


@pytest.mark.parametrize("n", [N, 4], ids=["the migrations' 16", "4, built by migrate --event-segments"])
def test_a_segment_reads_the_tail_by_its_own_index_range_not_the_whole_log(database_url: str, n: int) -> None:
    """At the tail of the log, which is newer than the statistics, the planner would take one
    row for the rest and read it by the log's position index, n entries for each event of the
    segment. Each read of a segment takes its range of the segment index instead: every
    entry read belongs to the segment, and the position index is not read at all. With
    another count than the migrations' 16, migrate builds that count's index online."""
    url, count = database_url, n
    index = f"item_events_segment_{count}"
    if count != N:
        migrate(url, event_segments=count)
    _job(url, guids=200, per_guid=3)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE item_events")  # the statistics end here: the next job's events are the tail
        (xid, seq) = conn.execute("SELECT xid::text, seq FROM item_events ORDER BY xid DESC, seq DESC LIMIT 1"
                                  ).fetchone() or ("0", 0)
    _job(url, guids=200, per_guid=3)
    segment = 5 % count
    with psycopg.connect(url) as conn:
        expected = conn.execute("SELECT count(*) FROM item_events WHERE (hashtext(guid) & 2147483647) %% %s = %s"
                                " AND (xid, seq) > (%s::xid8, %s::bigint)", (count, segment, xid, seq)).fetchone()

    async def read_segment() -> tuple[int, dict[str, int]]:
        pool = await open_pool(url, min_size=1, max_size=1)  # one backend: its index reads are the log's reads

        async def index_reads() -> dict[str, int]:
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, as of now
                return {r["parent"]: r["n"] for r in await (await conn.execute(
                    _INDEX_READS, {"segment_index": index})).fetchall()}

        async def alone() -> bool:
            # A backend flushes its index reads as it exits, after its client has gone: the
            # seeding's, on a slow machine, would land between the two counts below.
            async with pool.connection() as conn:
                row = await (await conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")).fetchone()
            return row is not None and row["n"] == 0

        try:
            await eventually(alone, 30, "the seeding's backends gone")
            log = PostgresLog(pool, f"reconciler/{segment}of{count}", timedelta(seconds=60), segments=count,
                              segment=segment)
            before, at, n = await index_reads(), Position(xid, seq), 0
            while batch := await log.read(at, 10):
                at, n = batch[-1][0], n + len(batch)
            after = await index_reads()
            return n, {k: after.get(k, 0) - before.get(k, 0) for k in after}
        finally:
            await pool.close()

    n, reads = asyncio.run(read_segment())
    assert expected is not None and n == expected[0] > 10
    assert reads.get("item_events_position", 0) == 0, reads
    # Each read of 10 looks one entry past its rows in each partition it merges (two at most,
    # at a partition's boundary); the segment's older events, before the cursor, are not read.
    assert n <= reads[index] <= n + 2 * (n // 10 + 2), reads


def test_a_layout_without_its_valid_event_index_says_how_to_build_it(database_url: str, caplog) -> None:
    """Four segments and no index for four, then one being built (made ON ONLY the log,
    nothing attached): each start logs that the tail scans the log and names the command;
    once migrate has built it, nothing is logged."""
    url = database_url

    def adopt(prefix: str) -> list[str]:
        caplog.clear()

        async def run() -> None:
            pool = await open_pool(url, min_size=1, max_size=1)
            try:
                await adopt_layout(pool, prefix, 4)
            finally:
                await pool.close()

        asyncio.run(run())
        return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]

    (missing,) = adopt("a")
    assert "item_events_segment_4 is missing or not yet valid" in missing
    assert "`pacer migrate --event-segments 4`" in missing
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE INDEX item_events_segment_4 ON ONLY item_events"
                     " (((hashtext(guid) & 2147483647) % 4), xid, seq)")
    assert len(adopt("b")) == 1, "an index not yet valid does not serve the tail"
    migrate(url, event_segments=4)
    assert adopt("c") == []
