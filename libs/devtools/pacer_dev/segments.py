"""Helpers for tests and benchmarks of the reconciler's segments: seed finished items'
events straight into the log, and see whether every segment's cursor has reached its end."""

from __future__ import annotations

from typing import LiteralString

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
# The last event of each segment, by cursor name.
_ENDS = """
SELECT DISTINCT ON (s) 'reconciler/' || s || 'of' || %(n)s AS name, xid::text AS xid, seq
FROM (SELECT (hashtext(guid) & 2147483647) %% %(n)s AS s, xid, seq FROM item_events) e
ORDER BY s, e.xid DESC, e.seq DESC
"""


def confirm_job(url: str, job_id: str) -> int:
    """Move every pending item of the job to confirmed; returns the events written."""
    with psycopg.connect(url) as conn:
        return sum(_one(conn, sql, {"job": job_id}) for sql in _CONFIRM)


def segment_ends(url: str, n: int) -> dict[str, tuple[int, int]]:
    """Where each segment's cursor must stand once every event now in the log is applied."""
    with psycopg.connect(url) as conn:
        return {name: (int(xid), seq) for name, xid, seq in conn.execute(_ENDS, {"n": n}).fetchall()}


def segments_behind(url: str, ends: dict[str, tuple[int, int]]) -> int:
    """Segments whose cursor is short of ``ends`` (or missing)."""
    with psycopg.connect(url) as conn:
        at = {name: (int(xid), seq) for name, xid, seq in conn.execute(
            "SELECT name, last_xid::text, last_seq FROM log_cursors WHERE name = ANY(%s)", (list(ends),)).fetchall()}
    return sum(1 for name, end in ends.items() if at.get(name, (0, 0)) < end)


def segments_shared(url: str, n: int, replicas: int) -> bool:
    """Whether ``replicas`` holders hold live leases on all ``n`` segments, ``n / replicas``
    (rounded up) at most each: the balance the replicas reach once each has run a lease round."""
    with psycopg.connect(url) as conn:
        held = [k for _, k in conn.execute(
            "SELECT holder, count(*) FROM leader_leases WHERE name ~ %s AND expires_at > now() GROUP BY holder",
            (rf"^pacer-reconciler/[0-9]+of{n}$",)).fetchall()]
    return len(held) == replicas and sum(held) == n and max(held) <= -(-n // replicas)


def segment_events(url: str, n: int, segments: list[int]) -> int:
    """Events of the given segments in the log."""
    with psycopg.connect(url) as conn:
        return _one(conn, "SELECT count(*) FROM item_events WHERE (hashtext(guid) & 2147483647) %% %(n)s = ANY(%(s)s)",
                    {"n": n, "s": segments})


def _one(conn: psycopg.Connection[tuple[int]], sql: LiteralString, params: dict[str, object]) -> int:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])
