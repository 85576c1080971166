"""A guid's send windows in Postgres (trigger ``guid_send_windows``): every change of its last
send time counts one send in its minute, hour and day; a new window starts again at one; an
update that leaves the send time alone counts nothing. The counts are what a sender taking
the guid over enforces its window caps from, so they must match the senders' own windowing
(``pacer_common.domain.limits.WINDOWS``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pacer_common.domain.limits import WINDOWS

MIDNIGHT = datetime(2026, 12, 6, tzinfo=UTC)


def index(at: datetime, size: int) -> int:
    return int(at.timestamp() // size)


def counts(sends: list[datetime]) -> dict[str, list[int]]:
    """The windows after ``sends``, by the senders' own rule: the latest send's window of each
    size, and how many of the sends fell in it."""
    last = sends[-1]
    return {name: [index(last, size), sum(index(s, size) == index(last, size) for s in sends)]
            for name, size in WINDOWS}


@pytest.mark.parametrize("offsets_s", [
    [-2, -1],  # two in one minute, hour and day
    [-2, -1, 1],  # then past midnight: every window starts again at one
    [-2, -1, 1, 30, 61],  # a new minute, the same hour and day
    [-3700, -70, -1, 1, 3601],  # across hours as well
], ids=["one window", "past midnight", "a new minute", "new hours"])
def test_each_send_counts_once_in_its_minute_hour_and_day(database_url: str, offsets_s: list[int]) -> None:
    sends = [MIDNIGHT + timedelta(seconds=s) for s in offsets_s]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO guid_leases (guid) VALUES ('g1')")
        for at in sends:
            conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = 'g1'", (at,))
            # a lease renewal, and the same send time written again, count nothing
            conn.execute("UPDATE guid_leases SET lease_until = %s WHERE guid = 'g1'", (at + timedelta(seconds=10),))
            conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = 'g1'", (at,))
        (windows,) = conn.execute("SELECT windows FROM guid_leases WHERE guid = 'g1'").fetchone()
    assert windows == counts(sends)

