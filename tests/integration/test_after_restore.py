"""After Postgres is restored from a backup, nothing the restored database cannot vouch for is
sent again without asking the gateway: ``pacer after-restore`` puts every item that may have
been sent since the backup in doubt, its key reserved, and the reconciler's verifier confirms
what the gateway has and puts back to pending only what it proves it has not."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import psycopg
import pytest
from confluent_kafka import TopicPartition

from pacer_common.cli import EXIT_REFUSED, EXIT_UNAVAILABLE, EXIT_USAGE, main
from pacer_common.db.pool import open_pool
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, Hushed
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.kafka import ensure_topics, make_consumer, make_producer
from pacer_dev.infra.process import wait_for
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.ports import Position
from pacer_reconciler.verifier import Verifier
from tests.integration.control_support import audit, move, rows
from tests.integration.helpers import commit_offsets, seed_job


def _statuses(url: str, items: list[str]) -> list[str]:
    found = {r["item_id"]: r["status"] for r in rows(
        url, "SELECT item_id::text, status::text FROM items WHERE item_id = ANY(%s::uuid[])", items)}
    return [found[i] for i in items]


def _ledger(url: str, items: list[str]) -> dict[str, str]:
    return {r["item_id"]: r["state"] for r in rows(
        url, "SELECT item_id::text, state FROM send_ledger WHERE item_id = ANY(%s::uuid[])", items)}


def _after_restore(*args: str) -> int:
    with pytest.raises(SystemExit) as ended:
        main(["after-restore", *args])
    return int(ended.value.code or 0)


RESTORE_POINT = "2026-12-04T03:00:00+00:00"


def _rewind(to: str = RESTORE_POINT) -> int:
    with pytest.raises(SystemExit) as ended:
        main(["rewind-groups", "--services-stopped", "--to", to])
    return int(ended.value.code or 0)


def _epoch(printed: str) -> int:
    return int(printed.split("restore epoch ", 1)[1].split(":", 1)[0])


async def _dedupe_keys(url: str) -> dict[tuple[str, int], str]:
    """Each event's outcome key, as the reconciler's tail reads the log and publishes it."""
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        read = await PostgresLog(pool, "test-restore-tail", timedelta(seconds=60)).read(Position("0", 0), 1000)
    finally:
        await pool.close()
    return {(ev.item_id, ev.version): ev.dedupe_key for _, ev in read if isinstance(ev, ItemEvent)}


class _Lookup:
    """The gateway's lookup as the verifier calls it (one gateway, no tenants)."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | Hushed | None:
        return await self.client.lookup(guid, idem_key)


async def _send(url: str, rows_: list[dict]) -> None:
    http = make_client(url, 5.0)
    try:
        for r in rows_:
            await GatewayClient(http, DEFAULT_CODE_TABLE).send_text(r["guid"], r["to_id"], "hi", r["idem_key"])
    finally:
        await http.aclose()


async def _verify(url: str, gateway_url: str) -> None:
    """One verification round, as the reconciler leader runs it, until its lookups are done."""
    pool = await open_pool(url, min_size=1, max_size=4)
    http = make_client(gateway_url, 5.0)
    try:
        store = PostgresLog(pool, "test-restore", timedelta(seconds=60), verify_after=timedelta(0))
        verifier = Verifier(store, _Lookup(GatewayClient(http, DEFAULT_CODE_TABLE)), concurrency=8)
        assert await verifier.start_round() == 6
        lookups = [t for t in asyncio.all_tasks() if t.get_name().startswith("verify:")]  # the verifier's own
        assert len(lookups) == 6
        await asyncio.wait_for(asyncio.gather(*lookups), 30)
        assert not verifier.in_flight and not verifier.errors, verifier.lookups
    finally:
        await http.aclose()
        await pool.close()


@pytest.fixture
def requests_topic(kafka_config: dict[str, str], topic_prefix: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The job requests topic the planners' check reads, on the real broker, and the env the
    command takes it from."""
    topic = f"{topic_prefix}.job-requests"
    ensure_topics(kafka_config, {topic: (2, {}), f"{topic_prefix}.callbacks": (1, {})})
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    return topic


def test_after_a_restore_every_send_the_database_cannot_vouch_for_is_verified_before_it_is_sent(
        database_url: str, server_url: str, requests_topic: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = database_url
    _, _, items = seed_job(url, {"restored-g": 8})
    pend_sent, pend_a, pend_b, claimed, submitted, retry, confirmed, later = items
    # The database as the backup left it.
    move(url, [claimed], "claimed")
    move(url, [submitted], "claimed")
    with psycopg.connect(url) as conn:
        conn.execute("SELECT pacer_transition(%s::uuid[], '{claimed}', 'submitted', 'ItemSubmitted')", ([submitted],))
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
                     " SELECT idem_key, item_id, guid, to_id, 'reserved' FROM items WHERE item_id = %s", (submitted,))
        conn.execute("UPDATE items SET not_before = now() + interval '1 hour' WHERE item_id = %s", (later,))
    move(url, [retry], "waiting_retry")
    move(url, [confirmed], "confirmed")
    # What was sent between the backup and the restore, which the database does not know of.
    sent = [pend_sent, claimed, submitted, retry]
    asyncio.run(_send(server_url, rows(
        url, "SELECT guid, to_id, idem_key FROM items WHERE item_id = ANY(%s::uuid[])", sent)))

    monkeypatch.setenv("PACER_DATABASE_URL", url)
    assert _after_restore("--reason", "restored from last night's backup") == EXIT_REFUSED
    assert "stop the planner, the senders" in capsys.readouterr().err
    assert _after_restore("--services-stopped", "--to", RESTORE_POINT, "--reason", "r", "--batch", "0") == EXIT_USAGE
    assert _after_restore("--services-stopped", "--reason", "restored") == EXIT_USAGE
    assert "--to is required" in capsys.readouterr().err
    assert _statuses(url, [pend_a, claimed]) == ["pending", "claimed"], "refused: nothing moved"

    assert _rewind() == 0
    assert _after_restore("--services-stopped", "--to", RESTORE_POINT, "--reason", "restored from last night's backup",
                          "--batch", "4") == 0
    out, err = capsys.readouterr()
    assert "put in doubt: 6 items (1 claimed, 3 pending, 1 submitted, 1 waiting_retry)" in out
    assert "… 4 items put in doubt so far" in err and "… 6 items put in doubt so far" in err, "progress per batch"
    epoch = _epoch(out)
    doubted = [pend_sent, pend_a, pend_b, claimed, submitted, retry]
    assert _statuses(url, doubted) == ["recovery_pending"] * 6
    assert _statuses(url, [confirmed, later]) == ["confirmed", "pending"], "a send made, one not due yet: left alone"
    assert _ledger(url, doubted) == dict.fromkeys(doubted, "reserved"), "every key held until the lookup says"
    events = rows(url, "SELECT type, payload FROM item_events WHERE item_id = ANY(%s::uuid[]) AND to_status = "
                       "'recovery_pending'", doubted)
    assert len(events) == 6 and all(e["type"] == "ItemInDoubt" and e["payload"]["restored"] is True
                                    and e["payload"]["actor"] == "cli" for e in events)
    assert epoch >= int(time.time()) - 60
    (record,) = [a for a in audit(url) if a["action"] == "after_restore"]
    assert record["after"] == {"in_doubt": {"claimed": 1, "pending": 3, "submitted": 1, "waiting_retry": 1},
                               "restore_epoch": epoch, "kafka_checked": True}
    assert record["reason"] == "restored from last night's backup"

    asyncio.run(_verify(url, server_url))
    assert _statuses(url, sent) == ["confirmed"] * 4, "what the gateway has is confirmed, never sent again"
    assert _statuses(url, [pend_a, pend_b]) == ["pending", "pending"], "what it proves it has not is sent as usual"
    assert _ledger(url, doubted) == dict.fromkeys(sent, "sent")

    # Outcomes: an event from before the restore keeps the key consumers saw; one written
    # after it (put in doubt, then verified) carries the epoch, as the reconciler's tail reads it.
    keys = asyncio.run(_dedupe_keys(url))
    assert keys[(claimed, 1)] == f"{claimed}:1", "the claim, written before the restore"
    assert keys[(claimed, 2)] == f"{claimed}:2:{epoch}", "put in doubt after the restore"
    assert keys[(claimed, 3)] == f"{claimed}:3:{epoch}", "confirmed by the lookup"
    assert keys[(pend_a, 2)] == f"{pend_a}:2:{epoch}", "proved not delivered"
    assert _after_restore("--services-stopped", "--to", RESTORE_POINT, "--reason", "restored again") == 0
    assert _epoch(capsys.readouterr().out) > epoch, "a new epoch each time"


def test_it_waits_for_the_groups_rewound_and_the_planners_to_plan_again_what_the_restore_lost(
        database_url: str, kafka_config: dict[str, str], requests_topic: str, topic_prefix: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Items planned after ``after-restore`` are not put in doubt: until ``rewind-groups`` to
    the same restore point is recorded, and while the planners' group has a member, requests
    it has not read, or a requery job is still paging, it refuses."""
    url, group = database_url, f"{topic_prefix}.planner"
    job_id, _, items = seed_job(url, {"restored-g": 2})
    monkeypatch.setenv("PACER_DATABASE_URL", url)
    producer = make_producer(kafka_config)
    for n in range(3):
        producer.produce(requests_topic, b"{}", partition=n % 2)
    assert producer.flush(30) == 0
    args = ("--services-stopped", "--to", RESTORE_POINT, "--reason", "restored")

    assert _after_restore(*args) == EXIT_REFUSED
    assert f"no `pacer rewind-groups --to {RESTORE_POINT}` is recorded" in capsys.readouterr().err
    assert _rewind("2026-12-04T02:00:00+00:00") == 0
    assert _after_restore(*args) == EXIT_REFUSED, "a rewind to another point is not this restore's"
    assert "no `pacer rewind-groups" in capsys.readouterr().err
    assert _rewind() == 0
    capsys.readouterr()
    commit_offsets(kafka_config, group, [TopicPartition(requests_topic, 0, 1)])  # one of partition 0's two read
    assert _after_restore(*args) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert f"group {group} has 2 request(s) of {requests_topic} still to read ([0] 1 of 2, [1] 0 of 1)" in err
    assert _statuses(url, items) == ["pending", "pending"], "refused: nothing moved"

    commit_offsets(kafka_config, group, [TopicPartition(requests_topic, 0, 2), TopicPartition(requests_topic, 1, 1)])
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE jobs SET target_mode = 'requery', status = 'running', dispatched_at = NULL"
                     " WHERE job_id = %s", (job_id,))
    assert _after_restore(*args) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert f"1 requery job(s) still paging in their targets: req-{job_id}" in err and "still to read" not in err

    with psycopg.connect(url) as conn:
        conn.execute("UPDATE jobs SET dispatched_at = now() WHERE job_id = %s", (job_id,))
    member = make_consumer(kafka_config, group)
    member.subscribe([requests_topic])
    try:
        assert wait_for(lambda: bool(member.poll(0.2) or member.assignment()), timeout=60), "the member joined"
        assert _after_restore(*args) == EXIT_REFUSED
        assert f"group {group} has 1 member(s)" in capsys.readouterr().err
    finally:
        member.close()

    assert _after_restore(*args) == 0
    assert _statuses(url, items) == ["recovery_pending"] * 2

    # The requests topic lost as well: nothing to rewind, and the check cannot read it.
    monkeypatch.setenv("PACER_TOPIC_PREFIX", f"{topic_prefix}.lost")  # no such topic
    assert _rewind() == EXIT_UNAVAILABLE
    with psycopg.connect(url) as conn:
        conn.execute("SELECT pacer_audit('cli', 'rewind_groups', 'consumer_groups', %s, 'to', NULL, %s::jsonb)",
                     (f"{topic_prefix}.lost", f'{{"to": "{RESTORE_POINT}"}}'))
    assert _after_restore(*args) == EXIT_UNAVAILABLE
    assert "--requests-lost" in capsys.readouterr().err
    assert _after_restore("--services-stopped", "--requests-lost", "--reason", "requests lost too") == 0
    assert "not checked (--requests-lost)" in capsys.readouterr().err
    assert [a["after"]["kafka_checked"] for a in audit(url) if a["action"] == "after_restore"] == [True, False]
