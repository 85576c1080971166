"""A guid's send windows in Postgres (trigger ``guid_send_windows``): every change of its last
send time counts one send in its minute, hour and day; a new window starts again at one; an
update that leaves the send time alone counts nothing. The minute and the hour are the clock's;
the day is the guid's calendar day in its time zone (its own override, else every guid's ``*``,
else the sender's session default, else Asia/Shanghai). The counts are what a sender taking
the guid over enforces its window caps from, so they must match the senders' own windowing
(``Pacing.window``), computed here independently, from the calendar."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pacer_common.db.pool import open_pool
from pacer_common.domain.limits import WINDOWS, Pacing
from pacer_sender.adapters.postgres import check_time_zone

MIDNIGHT = datetime(2026, 12, 6, tzinfo=UTC)
SHANGHAI_MIDNIGHT = datetime(2026, 12, 6, 16, tzinfo=UTC)  # 2026-12-07 00:00 in Asia/Shanghai


def window(at: datetime, name: str, size: int, zone: str) -> tuple[int, float]:
    """(index, end) of the window holding ``at``, from the calendar: a clock minute or hour,
    or the local day of ``zone`` (days since 1970-01-01 there, ending at its next midnight)."""
    if name != "day":
        index = int(at.timestamp() // size)
        return index, (index + 1) * size
    tz = ZoneInfo(zone)
    day = at.astimezone(tz).date()
    return (day - date(1970, 1, 1)).days, datetime.combine(day + timedelta(days=1), dtime(0), tz).timestamp()


def counts(sends: list[datetime], zone: str = "Asia/Shanghai") -> dict[str, list[float]]:
    """The windows after ``sends``: the latest send's window of each size, how many of the
    sends fell in it, and its end."""
    out = {}
    for name, size in WINDOWS:
        last = window(sends[-1], name, size, zone)
        out[name] = [last[0], sum(window(s, name, size, zone) == last for s in sends), last[1]]
    return out


def send_all(conn: psycopg.Connection, sends: list[datetime], guid: str = "g1") -> dict[str, list[float]]:
    conn.execute("INSERT INTO guid_leases (guid) VALUES (%s)", (guid,))
    for at in sends:
        conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = %s", (at, guid))
        # a lease renewal, and the same send time written again, count nothing
        conn.execute("UPDATE guid_leases SET lease_until = %s WHERE guid = %s", (at + timedelta(seconds=10), guid))
        conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = %s", (at, guid))
    (windows,) = conn.execute("SELECT windows FROM guid_leases WHERE guid = %s", (guid,)).fetchone()
    return windows


@pytest.mark.parametrize("offsets_s", [
    [-2, -1],  # two in one minute, hour and day
    [-2, -1, 1],  # then past UTC midnight: the minute and the hour start again, the day goes on
    [-2, -1, 1, 30, 61],  # a new minute, the same hour and day
    [-3700, -70, -1, 1, 3601],  # across hours as well
], ids=["one window", "past UTC midnight", "a new minute", "new hours"])
def test_each_send_counts_once_in_its_minute_hour_and_day(database_url: str, offsets_s: list[int]) -> None:
    sends = [MIDNIGHT + timedelta(seconds=s) for s in offsets_s]
    with psycopg.connect(database_url, autocommit=True) as conn:
        windows = send_all(conn, sends)
    assert windows == counts(sends)
    if len(offsets_s) == 3:
        assert windows["day"][1] == 3, "00:00 UTC is 08:00 in Asia/Shanghai: the guid's day goes on"


def test_the_day_starts_again_at_the_guids_midnight(database_url: str) -> None:
    sends = [SHANGHAI_MIDNIGHT + timedelta(seconds=s) for s in (-7200, -2, -1, 1, 2)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        windows = send_all(conn, sends)
    assert windows == counts(sends)
    assert windows["day"][1:] == [2, (SHANGHAI_MIDNIGHT + timedelta(days=1)).timestamp()]


@pytest.mark.parametrize("where", ["its own", "every guid's", "the session's", "its own over the others"])
def test_the_guids_time_zone_is_its_own_else_every_guids_else_the_senders(database_url: str, where: str) -> None:
    """Berlin's clocks go back on 2026-10-25: that day lasts 25 hours, and sends at 00:30 and
    23:30 local time are in it, as a send at 00:30 Shanghai time on the 26th is not."""
    berlin = ZoneInfo("Europe/Berlin")
    sends = [datetime(2026, 10, 25, 0, 30, tzinfo=berlin), datetime(2026, 10, 25, 23, 30, tzinfo=berlin)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        if where in ("its own", "its own over the others"):
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g1', %s, 'test')",
                         (Jsonb({"timezone": "Europe/Berlin"}),))
        if where in ("every guid's", "its own over the others"):
            zone = "Europe/Berlin" if where == "every guid's" else "America/New_York"
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('*', %s, 'test')",
                         (Jsonb({"timezone": zone}),))
        conn.execute("SELECT set_config('pacer.timezone', %s, false)",
                     ("Europe/Berlin" if where == "the session's" else "Pacific/Auckland",))
        try:
            windows = send_all(conn, sends)
        finally:
            conn.execute("DELETE FROM guid_limits")
    assert windows == counts(sends, "Europe/Berlin")
    assert windows["day"][1] == 2
    assert windows["day"][2] == datetime(2026, 10, 26, tzinfo=berlin).timestamp()
    assert windows["day"][2] - datetime(2026, 10, 25, tzinfo=berlin).timestamp() == 25 * 3600


@pytest.mark.parametrize(("zone", "carried"), [
    ("Europe/Berlin", 3),  # west: Berlin's 6th began before Shanghai's 6th ended: its two sends count
    ("Pacific/Auckland", 3),  # east: so did Auckland's 7th, at 11:00 UTC
    ("Asia/Singapore", 1),  # Singapore's 7th begins as Shanghai's 6th ends: a new day
])
def test_a_new_time_zone_counts_from_the_guids_next_day(database_url: str, zone: str, carried: int) -> None:
    """The time zone is read at the guid's first send past its day's end: the day under way goes
    on, and the new zone's day counts the old day's sends when it began before the old one
    ended (they may fall in it)."""
    first = SHANGHAI_MIDNIGHT - timedelta(hours=10)  # 14:00 in Asia/Shanghai, 06:00 UTC
    late = SHANGHAI_MIDNIGHT - timedelta(seconds=1)
    after = SHANGHAI_MIDNIGHT + timedelta(seconds=1)
    with psycopg.connect(database_url, autocommit=True) as conn:
        send_all(conn, [first])
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g1', %s, 'test')",
                     (Jsonb({"timezone": zone}),))
        try:
            conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = 'g1'", (late,))
            (windows,) = conn.execute("SELECT windows FROM guid_leases WHERE guid = 'g1'").fetchone()
            assert windows["day"] == counts([first, late])["day"], "Shanghai's day goes on to its end"
            conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = 'g1'", (after,))
            (windows,) = conn.execute("SELECT windows FROM guid_leases WHERE guid = 'g1'").fetchone()
        finally:
            conn.execute("DELETE FROM guid_limits")
    index, _, end = counts([after], zone)["day"]
    assert windows["day"] == [index, carried, end]


@pytest.mark.parametrize(("kept_day", "send", "sends"), [
    (MIDNIGHT, MIDNIGHT + timedelta(hours=10), 6),  # the UTC day ends after the guid's began: carried
    (MIDNIGHT - timedelta(days=1), SHANGHAI_MIDNIGHT + timedelta(hours=1), 1),  # ended before it: not
], ids=["overlapping", "ended before"])
def test_a_day_kept_before_days_were_the_guids_counts_where_it_overlaps(
        database_url: str, kept_day: datetime, send: datetime, sends: int) -> None:
    """A row written before the day became the guid's holds [index, sends] of a UTC day."""
    old = {"minute": [0, 1], "hour": [0, 1], "day": [int(kept_day.timestamp() // 86400), 5]}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO guid_leases (guid, windows) VALUES ('g1', %s)", (Jsonb(old),))
        conn.execute("UPDATE guid_leases SET last_send_at = %s WHERE guid = 'g1'", (send,))
        (windows,) = conn.execute("SELECT windows FROM guid_leases WHERE guid = 'g1'").fetchone()
    index, _, end = counts([send])["day"]
    assert windows["day"] == [index, sends, end]


@pytest.mark.parametrize(("zone", "instants"), [
    ("Asia/Shanghai", [SHANGHAI_MIDNIGHT + timedelta(hours=h) for h in (-30, -17, -1, 0, 7, 20)]),
    # midnight comes twice: the day runs from the first to the next
    ("America/Havana", [datetime(2026, 11, 1, 3, 59, tzinfo=UTC), datetime(2026, 11, 1, 4, 30, tzinfo=UTC),
                        datetime(2026, 11, 1, 5, 30, tzinfo=UTC)]),
    ("Atlantic/Azores", [datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 25, 1, 30, tzinfo=UTC)]),
    ("America/Santiago", [datetime(2026, 9, 6, 3, 59, tzinfo=UTC), datetime(2026, 9, 6, 4, 1, tzinfo=UTC)]),
    ("Asia/Kolkata", [datetime(2026, 12, 6, 18, 29, tzinfo=UTC), datetime(2026, 12, 6, 18, 31, tzinfo=UTC)]),
])
def test_the_senders_and_the_databases_days_agree(database_url: str, zone: str, instants: list[datetime]) -> None:
    """``Pacing.window`` starts and ends the day where the trigger does: a sender taking a guid
    over counts the row's sends until that end."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('*', %s, 'test')",
                     (Jsonb({"timezone": zone}),))
        for n, at in enumerate(instants):
            windows = send_all(conn, [at], guid=f"g{n}")
            assert windows["day"] == counts([at], zone)["day"], at
            assert windows["day"][2] == Pacing(timezone=zone).window("day", 86400, at.timestamp())[1], at


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "JST", "UTC+8", "asia/shanghai", 8])
def test_a_time_zone_the_database_does_not_know_is_refused_before_it_stops_a_guid(database_url: str,
                                                                                  zone: object) -> None:
    """A name the database does not know would stop the guid's sends at the trigger; an
    abbreviation, a POSIX string (UTC+8 is UTC-8 there) or the wrong case is not the zone the
    senders read."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g1', %s, 'test')",
                     (Jsonb({"per_day": 10}),))
        for write in ("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g2', %s, 'test')",
                      "UPDATE guid_limits SET limits = limits || %s WHERE guid = 'g1'"):
            with pytest.raises(psycopg.DataError, match="is not one this database knows"):
                conn.execute(write, (Jsonb({"timezone": zone}),))
        conn.execute("UPDATE guid_limits SET limits = limits || %s WHERE guid = 'g1'",
                     (Jsonb({"timezone": "Asia/Kolkata"}),))
        assert conn.execute("SELECT limits ->> 'timezone' FROM guid_limits WHERE guid = 'g1'").fetchone() == (
            "Asia/Kolkata",)


@pytest.mark.parametrize(("zone", "options", "refusal"), [
    ("Europe/Berlin", "-c pacer.timezone=Europe/Berlin", None),
    ("Mars/Olympus_Mons", "-c pacer.timezone=Mars/Olympus_Mons", "does not know this time zone"),
    ("UTC+8", "-c pacer.timezone=UTC+8", "does not know this time zone"),
    ("Europe/Berlin", None, "did not keep it"),  # a pooler that drops startup options
])
def test_a_sender_refuses_to_start_with_a_default_zone_the_database_would_not_count_in(
        database_url: str, zone: str, options: str | None, refusal: str | None) -> None:
    async def start() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=1, options=options)
        try:
            await check_time_zone(pool, zone)
        finally:
            await pool.close()

    if refusal is None:
        asyncio.run(start())
    else:
        with pytest.raises(ValueError, match=refusal):
            asyncio.run(start())


def test_migrating_stops_on_a_time_zone_written_before_names_were_checked(database_url: str) -> None:
    """Rows written when only the senders' zoneinfo checked names are checked by migration 0039,
    which names them and how to change them."""
    from pacer_common.db.sql import migrations

    (sql,) = [sql for number, _, sql in migrations() if number == 39]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE guid_limits DISABLE TRIGGER guid_limits_timezone")  # as before the check
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g1', %s, 'test'),"
                     " ('g2', %s, 'test')", (Jsonb({"timezone": "Mars/Olympus_Mons"}), Jsonb({"timezone": "UTC"})))
        with pytest.raises(psycopg.errors.RaiseException, match=r"g1 \(Mars/Olympus_Mons\)") as stopped:
            conn.execute(sql)
        assert "pacer limits GUID --set timezone=" in (stopped.value.diag.message_hint or "")
        conn.execute("UPDATE guid_limits SET limits = %s WHERE guid = 'g1'", (Jsonb({"timezone": "Asia/Shanghai"}),))
        conn.execute(sql)
