"""Every writer of many guid leases locks them in guid order, so that two of them over the same
leases (a sender's renewal and its release of idle guids) wait for each other instead of
deadlocking."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import wait_for

GUIDS = [f"g{n:04d}" for n in range(400)]


def _waiting(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                           " AND datname = current_database()").fetchone()
    return bool(row and row[0])


def test_releasing_many_leases_locks_them_in_guid_order_whatever_the_scan(database_url: str) -> None:
    """The leases are stored in reverse guid order, the release is planned as a sequential
    scan, and the first guid is locked elsewhere: the release waits for it before it locks any
    other lease, so the last guid (the first in the heap) can still be locked meanwhile."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO guid_leases (guid, owner, lease_until, epoch)"
                     " SELECT g, 'me', now() + interval '1 minute', 1 FROM unnest(%s::text[]) g",
                     (list(reversed(GUIDS)),))
    result: list[Any] = []

    def release() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SET enable_indexscan = off")
            conn.execute("SET enable_bitmapscan = off")
            row = conn.execute("SELECT pacer_release_guids(%s::text[], 'me')", (GUIDS,)).fetchone()
            result.append(row[0] if row else None)

    with psycopg.connect(database_url) as first:
        first.execute("SELECT 1 FROM guid_leases WHERE guid = %s FOR UPDATE", (GUIDS[0],))
        releaser = threading.Thread(target=release)
        releaser.start()
        try:
            wait_for(lambda: _waiting(database_url), 30, "the release waiting for the first guid's lease")
            with psycopg.connect(database_url) as last:
                try:
                    last.execute("SELECT 1 FROM guid_leases WHERE guid = %s FOR UPDATE NOWAIT", (GUIDS[-1],))
                except psycopg.errors.LockNotAvailable:
                    pytest.fail("the release locked the last guid's lease before the first's")
                last.rollback()
        finally:
            first.rollback()
            releaser.join(30)
    assert result == [len(GUIDS)]
