"""The chaos runs' checks of the record against the items, on a real database: every job's
status (``JOBS_ASTRAY``) and the reconciler's projected counts (``PROJECTION_MISMATCH``)."""

from __future__ import annotations

import psycopg

from pacer_dev.chaos.harness import JOBS_ASTRAY, PROJECTION_MISMATCH, TERMINAL_VALUES
from tests.integration.helpers import seed_job


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
