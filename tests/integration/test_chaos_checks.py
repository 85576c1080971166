"""The chaos runs' checks of the record against the items, on a real database: every job's
status (``JOBS_ASTRAY``), the reconciler's projected counts (``PROJECTION_MISMATCH``) and the
deadlocks Postgres broke (``DEADLOCKS``)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import psycopg

from pacer_dev.chaos.harness import DEADLOCKS, JOBS_ASTRAY, PROJECTION_MISMATCH, TERMINAL_VALUES
from tests.integration.helpers import seed_job, wait_for, waiting_for_locks


def test_a_job_whose_status_disagrees_with_its_items_is_counted_and_no_other(database_url: str) -> None:
    """A job completed over an open item, or running with every item final, counts; a job
    rightly completed, running, paused, cancelled, or still paging does not."""
    url = database_url
    cases = {  # (job status, its items' status, requery still paging) → counted
        ("completed", "confirmed", False): False,
        ("completed", "pending", False): True,
        ("running", "confirmed", False): True,
        ("running", "claimed", False): False,
        ("running", "failed", True): False,
        ("paused", "confirmed", False): False,
        ("cancelled", "pending", False): False,
    }
    rids: dict[tuple[str, str, bool], str] = {}
    with psycopg.connect(url) as conn:
        for job_status, item_status, paging in cases:
            job_id, _, _ = seed_job(url, {"g1": 2}, status=item_status)
            conn.execute("UPDATE jobs SET status = %s, target_mode = CASE WHEN %s THEN 'requery' ELSE target_mode END"
                         " WHERE job_id = %s", (job_status, paging, job_id))
            rids[(job_status, item_status, paging)] = f"req-{job_id}"
        conn.commit()

        def astray(case: tuple[str, str, bool]) -> int:
            row = conn.execute(JOBS_ASTRAY, {"rids": [rids[case]], "final": TERMINAL_VALUES}).fetchone()
            assert row is not None
            return int(row[0])

        assert {case: bool(astray(case)) for case in cases} == cases
        everything = conn.execute(JOBS_ASTRAY, {"rids": list(rids.values()), "final": TERMINAL_VALUES}).fetchone()
        assert everything == (sum(cases.values()),)


def test_a_projected_count_that_disagrees_with_the_items_is_counted(database_url: str) -> None:
    """A job as seeded (its counts agree) counts nothing; an item moved without the projection
    seeing it leaves two (shard, status) pairs wrong: one pending too many, one claimed missing."""
    url = database_url
    job_id, _, (first, _) = seed_job(url, {"g1": 2})
    other, _, _ = seed_job(url, {"g2": 1})
    rids = {"rids": [f"req-{job_id}", f"req-{other}"]}
    with psycopg.connect(url) as conn:
        assert conn.execute(PROJECTION_MISMATCH, rids).fetchone() == (0,)
        conn.execute("SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'claimed', 'ItemClaimed',"
                     " p_lease_owner => 'w1', p_lease_ttl => interval '1 minute')", (first,))
        assert conn.execute(PROJECTION_MISMATCH, rids).fetchone() == (2,)
        assert conn.execute(PROJECTION_MISMATCH, {"rids": [f"req-{other}"]}).fetchone() == (0,)


def test_a_deadlock_in_the_scenarios_database_is_counted(database_url: str) -> None:
    """Two transactions take two rows in opposite orders; Postgres fails one of them, and the
    database's count of deadlocks, read as a scenario's figures are, grows by one."""
    url = database_url

    def deadlocks() -> int:
        with psycopg.connect(url, autocommit=True) as conn:  # a new session: no stats snapshot kept
            row = conn.execute(DEADLOCKS).fetchone()
        assert row is not None
        return int(row[0])

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS chaos_rows (id int PRIMARY KEY, n int NOT NULL)")
        conn.execute("TRUNCATE chaos_rows")
        conn.execute("INSERT INTO chaos_rows VALUES (1, 0), (2, 0)")
    before = deadlocks()
    errors: list[BaseException] = []
    first_locked = threading.Event()

    def take(order: tuple[int, int], timeout: str, signal: threading.Event | None, after: threading.Event | None,
             ) -> None:
        try:
            with psycopg.connect(url) as conn:
                conn.execute(f"SET deadlock_timeout = '{timeout}'")
                conn.execute("UPDATE chaos_rows SET n = n + 1 WHERE id = %s", (order[0],))
                if signal is not None:
                    signal.set()
                if after is not None:
                    after.wait(10)
                    wait_for(lambda: asyncio.run(waiting_for_locks(url)), 10, "the other transaction waiting for a row")
                conn.execute("UPDATE chaos_rows SET n = n + 1 WHERE id = %s", (order[1],))
        except psycopg.errors.DeadlockDetected as exc:
            errors.append(exc)

    # The first waits first, with the shorter deadlock_timeout: it is the one Postgres fails.
    a = threading.Thread(target=take, args=((1, 2), "50ms", first_locked, None))
    b_locked = threading.Event()
    b = threading.Thread(target=take, args=((2, 1), "10s", b_locked, first_locked))
    b.start()
    b_locked.wait(10)
    a.start()
    a.join(30)
    b.join(30)
    assert len(errors) == 1
    assert wait_for(lambda: deadlocks() == before + 1, 30, "the deadlock in pg_stat_database")



def test_a_429_counts_as_recorded_only_when_the_outcome_after_its_call_s_submit_is_the_rate_limit(
        database_url: str) -> None:
    """``quiet-kills`` excuses a call inside a quiet only when Pacer has no record of the 429
    that asked it. The item's first call was answered 429 and recorded (a rate-limited retry);
    its second call's answer died with its sender (the item was put in doubt); it made no third."""
    from types import SimpleNamespace

    from pacer_dev.chaos.scenarios import _answer_recorded

    url = database_url
    job, _, (item,) = seed_job(url, {"g1": 1})
    steps = [("pending", "claimed", "ItemClaimed", {}), ("claimed", "submitted", "ItemSubmitted", {}),
             ("submitted", "waiting_retry", "ItemRetryScheduled", {"error_class": "rate_limited", "error": "HTTP 429"}),
             ("waiting_retry", "pending", "ItemRequeued", {}),
             ("pending", "claimed", "ItemClaimed", {}), ("claimed", "submitted", "ItemSubmitted", {}),
             ("submitted", "recovery_pending", "ItemInDoubt", {"error_class": "in_doubt"})]
    with psycopg.connect(url) as conn:
        for before, after, event, payload in steps:
            conn.execute("SELECT pacer_transition(%s::uuid[], %s::item_status[], %s::item_status, %s, %s::jsonb)",
                         ([item], [before], after, event, json.dumps(payload)))
        (key,) = conn.execute("SELECT idem_key FROM items WHERE item_id = %s", (item,)).fetchone() or ("",)
    sc: Any = SimpleNamespace(db=url, request_ids=[f"req-{job}"])
    assert _answer_recorded(sc, key, 1), "the first call's 429 is on record"
    assert not _answer_recorded(sc, key, 2), "the second call's answer was never recorded"
    assert not _answer_recorded(sc, key, 3), "no third call on record"
    other: Any = SimpleNamespace(db=url, request_ids=["other"])
    assert not _answer_recorded(other, key, 1), "another scenario's jobs"
    assert _answer_recorded(sc, None, 1), "a call without a key is judged, never excused"
