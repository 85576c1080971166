"""Helpers for tests and benchmarks of the reconciler's segments: seed finished items'
events straight into the log, and see whether every segment's cursor has reached its end."""

from __future__ import annotations

import psycopg

# pending → claimed → submitted → confirmed: three events per item, as a sender writes them.
_CONFIRM = (
    "SELECT count(*) FROM pacer_transition(ARRAY(SELECT item_id FROM items WHERE job_id = %(job)s), '{pending}',"
    " 'claimed', 'ItemClaimed', p_lease_owner => 'seed', p_lease_ttl => interval '1 hour')",
    "SELECT count(*) FROM pacer_transition(ARRAY(SELECT item_id FROM items WHERE job_id = %(job)s), '{claimed}',"
    " 'submitted', 'ItemSubmitted')",
    "SELECT count(*) FROM pacer_transition(ARRAY(SELECT item_id FROM items WHERE job_id = %(job)s), '{submitted}',"
    " 'confirmed', 'ItemConfirmed', p_clear_lease => true)",
)
# Segments whose cursor is short of their last event (or missing).
_BEHIND = """
WITH last AS (
    SELECT DISTINCT ON (s) (hashtext(guid) & 2147483647) %% %(n)s AS s, xid, seq
    FROM item_events ORDER BY s, xid DESC, seq DESC
)
SELECT count(*) FROM last l
LEFT JOIN log_cursors c ON c.name = 'reconciler/' || l.s || 'of' || %(n)s
WHERE c.name IS NULL OR (c.last_xid, c.last_seq) < (l.xid, l.seq)
"""


def confirm_job(url: str, job_id: str) -> int:
    """Move every pending item of the job to confirmed; returns the events written."""
    with psycopg.connect(url) as conn:
        return sum(int(conn.execute(sql, {"job": job_id}).fetchone()[0]) for sql in _CONFIRM)  # type: ignore[index]


def segments_behind(url: str, n: int) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute(_BEHIND, {"n": n}).fetchone()[0])  # type: ignore[index]


def segment_events(url: str, n: int, segments: list[int]) -> int:
    """Events of the given segments in the log."""
    with psycopg.connect(url) as conn:
        return int(conn.execute(  # type: ignore[index]
            "SELECT count(*) FROM item_events WHERE (hashtext(guid) & 2147483647) %% %(n)s = ANY(%(s)s)",
            {"n": n, "s": segments}).fetchone()[0])
