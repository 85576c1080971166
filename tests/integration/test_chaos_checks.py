"""The chaos runs' check that every job's status agrees with its items (``JOBS_ASTRAY``), on a
real database: a job completed over an open item, or running with every item final, counts;
a job rightly completed, running, paused, or still paging does not."""

from __future__ import annotations

import psycopg

from pacer_dev.chaos.harness import JOBS_ASTRAY, TERMINAL_VALUES
from tests.integration.helpers import seed_job


def test_a_job_whose_status_disagrees_with_its_items_is_counted_and_no_other(database_url: str) -> None:
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
