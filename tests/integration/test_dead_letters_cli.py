"""``pacer dead-letters`` reads back, from the real broker, what the planner and the callback
intake refused: listed with their reasons, one printed byte for byte as it came, a refused job
request sent again once it would be taken (and not while it would be refused again), and no
consumer group left behind by the reading. ``pacer status`` of a refused request says why."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from pacer_common import dead_letters
from pacer_common.cli import EXIT_DENIED, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_UNAVAILABLE, EXIT_USAGE, main
from pacer_common.domain.dead_letters import DeadLetter
from pacer_common.kafka import ensure_topics, make_producer
from pacer_common.settings import KafkaSettings
from pacer_control.adapters.kafka import KafkaDeadLetters
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_planner.adapters.kafka import KafkaCommandBus
from tests.integration.control_support import control_server, rows
from tests.integration.helpers import read_topic

NOT_JSON = b'{"request_id": "r-bad", "kind": "campaign", '
BUG_REASON = "internal error: RuntimeError: the planner could not take this one"


def _request() -> bytes:
    """A request the planner takes: refused once only by a bug, as far as this test goes."""
    return json.dumps({
        "request_id": "r-internal", "kind": "campaign", "created_by": "ops:test",
        "message": {"type": "text", "content": "你好 {name}"},
        "targets": {"mode": "snapshot", "items": [{"guid": "g-1", "to_id": "room-1", "vars": {"name": "A"}}]},
        "expire_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
    }, ensure_ascii=False).encode()


def _pacer(*args: str) -> int:
    with pytest.raises(SystemExit) as ended:
        main(["dead-letters", *args])
    return int(ended.value.code or 0)


def _status(request_id: str) -> int:
    with pytest.raises(SystemExit) as ended:
        main(["status", request_id])
    return int(ended.value.code or 0)


def _groups(kafka_config: dict[str, str]) -> set[str]:
    admin = AdminClient(dict(kafka_config))
    return {g.group_id for g in admin.list_consumer_groups().result(30).valid}


def test_refused_requests_and_callbacks_are_listed_shown_and_sent_again(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    callbacks, callbacks_dlq = f"{topic_prefix}.callbacks", f"{topic_prefix}.callbacks.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {}), callbacks: (1, {}), callbacks_dlq: (1, {})})
    request = _request()
    # Dead-lettered the planner's way and the intake's way, headers and all.
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    bus.dead_letter(b"r-bad", NOT_JSON, "invalid job request: not JSON: Expecting property name")
    bus.dead_letter(b"r-internal", request, BUG_REASON)
    intake = KafkaCallbackLog(callback_producer(kafka_config, 15.0), callbacks, callbacks_dlq, 15.0)
    asyncio.run(intake.dead_letter("acme", b'{"cmd": "message.received"}', "callback: guid missing"))
    intake.close()
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    groups_before = _groups(kafka_config)

    # `pacer status` of a request that is no job says why: the planner's refusal, or none.
    assert _status("r-internal") == 1
    said = capsysbinary.readouterr().err.decode()
    assert "the planner refused it" in said and f"{dlq} 0:1" in said and BUG_REASON in said
    assert _status("r-never-published") == 1
    assert "not planned yet" in capsysbinary.readouterr().err.decode()
    # Without the Kafka settings (a database host with no broker named): said, not a traceback.
    monkeypatch.delenv("PACER_KAFKA_BOOTSTRAP_SERVERS")
    assert _status("r-internal") == 1
    said = capsysbinary.readouterr().err.decode()
    assert "could not be read to tell whether the planner refused it: KafkaSettings" in said, said
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    # A prefix whose DLQ topic was never made has refused nothing.
    monkeypatch.setenv("PACER_TOPIC_PREFIX", f"{topic_prefix}-none")
    assert _pacer("list") == 0
    assert capsysbinary.readouterr().out.decode().startswith(f"{topic_prefix}-none.job-requests.dlq: 0 record(s)")
    assert _pacer("show", "0:0") == 1
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)

    assert _pacer("list") == 0
    lines = capsysbinary.readouterr().out.decode().splitlines()
    assert lines[0] == f"{dlq}: 2 record(s), oldest first"
    assert "0:0" in lines[1] and "planner" in lines[1] and "r-bad" in lines[1] and "Expecting property name" in lines[1]
    assert "0:1" in lines[2] and "r-internal" in lines[2] and BUG_REASON in lines[2]
    assert _pacer("list", "--last", "1", "--json") == 0
    (only,) = [json.loads(line) for line in capsysbinary.readouterr().out.decode().splitlines()]
    assert (only["where"], only["key"], only["bytes"], only["reason"]) == ("0:1", "r-internal", len(request), BUG_REASON)
    assert _pacer("list", "--key", "r-bad", "--json") == 0
    assert [json.loads(line)["where"] for line in capsysbinary.readouterr().out.decode().splitlines()] == ["0:0"]
    assert _pacer("list", "--tenant", "default", "--json") == 0  # the tenant the request names (none: default)
    assert [json.loads(line)["key"] for line in capsysbinary.readouterr().out.decode().splitlines()] == ["r-internal"]
    assert _pacer("list", "--callbacks", "--json") == 0
    (refused,) = [json.loads(line) for line in capsysbinary.readouterr().out.decode().splitlines()]
    assert (refused["source"], refused["tenant"], refused["reason"]) == ("intake", "acme", "callback: guid missing")

    assert _pacer("show", "0:0") == 0
    shown = capsysbinary.readouterr()
    assert shown.out == NOT_JSON, "the original bytes, untouched"
    assert b"Expecting property name" in shown.err
    assert _pacer("show", "0:2") == EXIT_NOT_FOUND
    capsysbinary.readouterr()

    # Sent again through the Control API: its role check, the planner's validation, its audit.
    monkeypatch.delenv("PACER_CONTROL_URL", raising=False)
    monkeypatch.delenv("PACER_TOKEN", raising=False)
    assert _pacer("republish", "0:1") == EXIT_USAGE
    assert b"PACER_CONTROL_URL" in capsysbinary.readouterr().err
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))
    with control_server(database_url, dead_letters=queue) as (api, tokens):
        monkeypatch.setenv("PACER_CONTROL_URL", api)
        monkeypatch.setenv("PACER_TOKEN", tokens["operator"])
        assert _pacer("republish", "0:1") == EXIT_DENIED, "an operator may not send a request again"
        capsysbinary.readouterr()
        monkeypatch.setenv("PACER_TOKEN", tokens["tech_admin"])
        assert _pacer("republish", "0:0") == EXIT_REFUSED, "a request the planner would refuse again is not sent"
        assert b"not republished" in capsysbinary.readouterr().err
        assert _pacer("republish", "0:1", "--reason", "planner fixed") == 0
        assert b"republished" in capsysbinary.readouterr().out
    # --raw: unchecked, straight to Kafka, and audited by the command line itself.
    assert _pacer("republish", "0:0", "--raw", "--reason", "the validation is wrong") == 0
    assert b"unchecked" in capsysbinary.readouterr().out

    got = read_topic(kafka_config, requests, 2)
    assert [(r["key"], r["raw"]) for r in got] == [(b"r-internal", request), (b"r-bad", NOT_JSON)], \
        "each sent once, as it came"
    assert [r["headers"]["pacer-republished-from"] for r in got] == [f"{dlq}:0:1".encode(), f"{dlq}:0:0".encode()]
    assert rows(database_url, "SELECT actor, target_id, reason, after ->> 'raw' AS raw FROM audit_log"
                              " WHERE action = 'republish' ORDER BY id") == [
        {"actor": "token:cli-tech_admin", "target_id": f"{dlq}:0:1", "reason": "planner fixed", "raw": None},
        {"actor": "cli", "target_id": f"{dlq}:0:0", "reason": "the validation is wrong", "raw": "true"}]
    assert rows(database_url, "SELECT action FROM audit_log WHERE actor = 'cli' ORDER BY id") == [
        {"action": "republish_attempt"}, {"action": "republish"}], "recorded before the send, and once it was sent"
    assert not {g for g in _groups(kafka_config) - groups_before if "dead-letters" in g}, "reading commits nothing"


def test_a_raw_republish_the_broker_refuses_is_recorded_as_attempted_and_failed_never_as_sent(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """The job requests topic takes records of 200 bytes at most: the broker refuses the
    request sent again. The command line says so (exit 5), and its audit records say the send
    was attempted and failed, with the broker's error."""
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {requests: (1, {"max.message.bytes": "200"}), dlq: (1, {})})
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    bus.dead_letter(b"r-big", _request(), BUG_REASON)
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)

    assert _pacer("republish", "0:0", "--raw", "--reason", "try again") == EXIT_UNAVAILABLE
    assert b"cannot be done now" in capsysbinary.readouterr().err
    audit = rows(database_url, "SELECT actor, action, target_id, reason, after FROM audit_log ORDER BY id")
    assert [(a["actor"], a["action"], a["target_id"], a["reason"]) for a in audit] == [
        ("cli", "republish_attempt", f"{dlq}:0:0", "try again"), ("cli", "republish_failed", f"{dlq}:0:0", "try again")]
    assert "not delivered" in audit[1]["after"]["error"] and audit[1]["after"]["key"] == "r-big", audit[1]
    assert read_topic(kafka_config, requests, 0) == []


def test_a_raw_republish_sent_while_the_database_went_away_says_so_and_keeps_its_attempt(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """The database drops the command line's connection while the broker takes the request:
    the request is sent (exit 0), the command line says its audit record says only that it was
    attempted, and that record stays; nothing claims it failed."""
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {})})
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    request = _request()
    bus.dead_letter(b"r-internal", request, BUG_REASON)
    for name, value in (("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"]),
                        ("PACER_TOPIC_PREFIX", topic_prefix), ("PACER_DATABASE_URL", database_url)):
        monkeypatch.setenv(name, value)
    send = dead_letters.republish

    def send_then_drop_the_connection(k: KafkaSettings, topic: str, letter: DeadLetter) -> None:
        send(k, topic, letter)  # the real send, to the real broker
        with psycopg.connect(database_url, autocommit=True) as admin:
            dropped = admin.execute("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                                    " AND backend_type = 'client backend') t").fetchone()
        assert dropped is not None and dropped[0] >= 1, "the command line's connection was open"

    monkeypatch.setattr(dead_letters, "republish", send_then_drop_the_connection)
    assert _pacer("republish", "0:0", "--raw", "--reason", "try again") == 0
    out = capsysbinary.readouterr()
    assert b"republished" in out.out and b"says only that it was attempted" in out.err, out
    assert [(a["actor"], a["action"]) for a in rows(database_url, "SELECT actor, action FROM audit_log ORDER BY id")] \
        == [("cli", "republish_attempt")]
    assert [r["value"] for r in read_topic(kafka_config, requests, 1)] == [json.loads(request)]


def test_the_last_records_of_every_partition_oldest_first(
        kafka_config: dict[str, str], topic_prefix: str, monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    dlq = f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {dlq: (2, {})})  # an operator's topic may have more than Pacer's one partition
    producer = make_producer(kafka_config)
    base_ms = int(datetime.now(UTC).timestamp() * 1000) - 60_000
    for partition, tick in ((0, 1), (1, 2), (0, 3), (1, 4), (0, 5)):
        producer.produce(dlq, f"request {tick}".encode(), key=f"r-{tick}".encode(), partition=partition,
                         timestamp=base_ms + tick * 1000, headers=[("pacer-error-reason", f"reason {tick}".encode())])
    assert producer.flush(30) == 0
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)

    assert _pacer("list", "--last", "3", "--json") == 0
    listed = [json.loads(line) for line in capsysbinary.readouterr().out.decode().splitlines()]
    assert [(d["where"], d["reason"]) for d in listed] == [("0:1", "reason 3"), ("1:1", "reason 4"), ("0:2", "reason 5")]
    # What was refused before a time (an incident's): the last before it, oldest first.
    before = datetime.fromtimestamp((base_ms + 3_500) / 1000, UTC).isoformat()
    assert _pacer("list", "--last", "2", "--before", before, "--json") == 0
    listed = [json.loads(line) for line in capsysbinary.readouterr().out.decode().splitlines()]
    assert [(d["where"], d["reason"]) for d in listed] == [("1:0", "reason 2"), ("0:1", "reason 3")]
    assert _pacer("list", "--before", "yesterday") == 2  # argparse's usage error
    assert b"an ISO 8601 time" in capsysbinary.readouterr().err
