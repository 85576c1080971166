"""``pacer after-restore`` believes ``--services-stopped`` only while no sender holds a guid
lease: a sender that runs on the restored database (KEDA puts a sender scaled to 0 back within
its polling interval) would send again what was sent after the restore point, before its items
are put in doubt. Leases restored with the backup look the same until they run out."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from pacer_common.cli import EXIT_REFUSED, main
from pacer_common.db.pool import open_pool
from pacer_sender.adapters.postgres import PostgresGuidLeases
from tests.integration.control_support import audit
from tests.integration.helpers import seed_job, tuples, wait_for

SENDER = "pacer-sender-7d9f8c6b5-q2x5z:1:0123456789ab"  # <pod>:<pid>:<start>, as a sender names itself
ARGS = ("--services-stopped", "--requests-lost", "--reason", "restored from last night's backup")


def _after_restore() -> int:
    with pytest.raises(SystemExit) as ended:
        main(["after-restore", *ARGS])
    return int(ended.value.code or 0)


def _statuses(url: str, items: list[str]) -> list[str]:
    found = dict(tuples(url, "SELECT item_id::text, status::text FROM items WHERE item_id = ANY(%s::uuid[])", items))
    return [found[i] for i in items]


def _sender(url: str, guids: list[str], *, release: bool = False) -> None:
    """A running sender taking the leases of ``guids``, as it does before it sends (or, with
    ``release``, giving them back, as it does when it stops)."""
    async def act() -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            leases = PostgresGuidLeases(pool, timedelta(seconds=60))
            await (leases.release(guids, SENDER) if release else leases.acquire(guids, SENDER))
        finally:
            await pool.close()

    asyncio.run(act())


def test_a_sender_holding_guid_leases_keeps_the_items_from_being_put_in_doubt(
        database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url = database_url
    _, _, items = seed_job(url, {"restored-a": 2, "restored-b": 1})
    monkeypatch.setenv("PACER_DATABASE_URL", url)
    _sender(url, ["restored-a", "restored-b"])

    assert _after_restore() == EXIT_REFUSED, "--services-stopped, yet a sender runs"
    err = capsys.readouterr().err
    assert f"refused: 1 sender(s) hold guid leases that have not run out: {SENDER} (2 guids)" in err
    assert 'autoscaling.keda.sh/paused-replicas="0"' in err, "names what starts the senders again"
    assert "PACER_SENDER_LEASE_TTL_S" in err, "says how long a lease left by a stopped sender lasts"
    assert _statuses(url, items) == ["pending"] * 3, "refused: nothing moved"
    assert [a for a in audit(url) if a["action"] == "after_restore"] == []

    _sender(url, ["restored-a", "restored-b"], release=True)  # stopped: its leases given back
    assert _after_restore() == 0
    assert _statuses(url, items) == ["recovery_pending"] * 3


def test_leases_restored_with_the_backup_hold_it_back_only_until_they_run_out(
        database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A backup keeps the leases of the senders that ran when it was taken: run out long
    before ``after-restore`` where the backup is older than their TTL, a few seconds ahead
    where it is a point just before the restore."""
    url = database_url
    _, _, items = seed_job(url, {"restored-a": 1})
    monkeypatch.setenv("PACER_DATABASE_URL", url)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO guid_leases (guid, owner, lease_until) VALUES"
                     " ('restored-a', 'pacer-sender-old:1:aaaaaaaaaaaa', now() - interval '5 minutes'),"
                     " ('restored-b', %s, now() + interval '60 seconds'), ('restored-c', NULL, NULL)", (SENDER,))

    assert _after_restore() == EXIT_REFUSED
    err = capsys.readouterr().err
    assert f"1 sender(s) hold guid leases that have not run out: {SENDER} (1 guids)" in err
    assert "pacer-sender-old" not in err, "a lease run out is nobody's"
    assert "leases restored with the backup" in err and any(f"the last runs out in {s} s" in err for s in range(1, 61))
    assert _statuses(url, items) == ["pending"]

    with psycopg.connect(url) as conn:  # its last second, rather than a minute's wait
        conn.execute("UPDATE guid_leases SET lease_until = now() + interval '1 second' WHERE guid = 'restored-b'")
    wait_for(lambda: not tuples(url, "SELECT guid FROM guid_leases WHERE lease_until > now()"), 15,
             "the restored lease to run out")
    assert _after_restore() == 0
    assert _statuses(url, items) == ["recovery_pending"]
