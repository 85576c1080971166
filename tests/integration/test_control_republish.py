"""Republishing a dead-lettered job request through the Control API, on the real broker and
database, while Kafka is slow to acknowledge: no database transaction of the API stays open
meanwhile, republishes wait on slots of their own (reads of the dead letters go on; one
beyond the slots is refused, nothing written), and the audit log says what happened: an
attempt before the request goes out, then that it was sent, or that it failed."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.kafka import ProduceError, ensure_topics, make_producer
from pacer_common.settings import KafkaSettings
from pacer_control.adapters import kafka as control_kafka
from pacer_control.adapters.kafka import KafkaDeadLetters
from pacer_planner.adapters.kafka import KafkaCommandBus
from tests.integration.control_support import audit, control_api
from tests.integration.helpers import eventually, read_topic

APP = "test-control"  # the application_name of control_api's pool


def _request(request_id: str) -> bytes:
    return json.dumps({
        "request_id": request_id, "kind": "campaign", "created_by": "ops:test", "tenant": "acme",
        "message": {"type": "text", "content": "hi"},
        "targets": {"mode": "snapshot", "items": [{"guid": "g-1", "to_id": "room-1"}]},
        "expire_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
    }).encode()


class PausedProduce:
    """``dead_letters.republish`` held in its thread until let go: then it fails (a broker that
    never acknowledged) or sends for real."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.entered: dict[str, threading.Event] = {}
        self.go: dict[str, threading.Event] = {}
        self.fail: set[str] = set()
        self.lock = threading.Lock()

    def _events(self, key: str) -> tuple[threading.Event, threading.Event]:
        with self.lock:
            return self.entered.setdefault(key, threading.Event()), self.go.setdefault(key, threading.Event())

    def __call__(self, k: KafkaSettings, topic: str, letter: Any, timeout_s: float = 10.0) -> None:
        key = letter.key_text
        entered, go = self._events(key)
        entered.set()
        assert go.wait(60), f"the test never let {key} go"
        if key in self.fail:
            raise ProduceError("1 message(s) still queued after 10.0s")
        self.real(k, topic, letter, timeout_s)


def open_transactions(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url) as conn:
        cur = conn.execute("SELECT state, xact_start, query FROM pg_stat_activity"
                           " WHERE application_name = %s AND xact_start IS NOT NULL", (APP,))
        return [dict(zip(("state", "xact_start", "query"), r, strict=True)) for r in cur.fetchall()]


def test_a_republish_waiting_on_kafka_holds_no_transaction_and_is_audited_as_it_ended(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = database_url
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {})})
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    for key in ("r-fails", "r-sent", "r-third"):  # offsets 0, 1, 2
        bus.dead_letter(key.encode(), _request(key), "tenant 'acme' is over its quota", "acme")
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
    paused = PausedProduce(control_kafka.dlq.republish)
    monkeypatch.setattr(control_kafka.dlq, "republish", paused)
    monkeypatch.setattr(control_kafka, "PUBLISH_WAIT_S", 0.5)
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))

    async def go() -> dict[str, Any]:
        async with control_api(url, dead_letters=queue) as api:
            async def republish(offset: int) -> Any:
                return await api.post(f"/dead-letters/requests/0/{offset}/republish", role="tech_admin",
                                      json={"reason": "quota raised"})

            fails, sent = asyncio.create_task(republish(0)), asyncio.create_task(republish(1))
            try:
                for key in ("r-fails", "r-sent"):  # both slots taken, each send waiting on the broker
                    entered, _ = paused._events(key)

                    async def sending(e: threading.Event = entered) -> bool:
                        return e.is_set()

                    await eventually(sending, 30, f"{key}'s send")
                # Meanwhile: no transaction of the Control API is open, each attempt is on
                # record already, and the dead letters can still be read.
                assert open_transactions(url) == []
                assert sorted((a["action"], a["target_id"]) for a in audit(url) if a["target_type"] == "dead_letter") == [
                    ("republish_attempt", f"{dlq}:0:0"), ("republish_attempt", f"{dlq}:0:1")]
                listed = await asyncio.wait_for(api.get("/dead-letters", role="operator"), 15)
                assert listed.status_code == 200 and len(listed.json()["letters"]) == 3, listed.text
                # A third republish finds no slot: refused, nothing written, nothing sent.
                third = await republish(2)
                assert third.status_code == 503 and "nothing was sent" in third.json()["detail"], third.text
                assert "r-third" not in paused.entered
                assert open_transactions(url) == []
                paused.fail.add("r-fails")
            finally:
                for key in ("r-fails", "r-sent"):
                    paused._events(key)[1].set()
            return {"fails": await fails, "sent": await sent}

    answers = asyncio.run(go())
    assert answers["fails"].status_code == 503, answers["fails"].text
    assert "may or may not have reached" in answers["fails"].json()["detail"]
    assert answers["sent"].status_code == 200, answers["sent"].text
    by_target: dict[str, list[dict[str, Any]]] = {}
    for a in audit(url):
        by_target.setdefault(a["target_id"], []).append(a)
    failed = by_target[f"{dlq}:0:0"]
    assert [a["action"] for a in failed] == ["republish_attempt", "republish_failed"], "never claimed as sent"
    assert "still queued after" in failed[1]["after"]["error"]
    assert failed[1]["after"]["key"] == "r-fails" and failed[1]["reason"] == "quota raised"
    done = by_target[f"{dlq}:0:1"]
    assert [a["action"] for a in done] == ["republish_attempt", "republish"]
    assert (done[1]["actor"], done[1]["after"], done[1]["before"]["reason"]) == (
        "token:tech_admin", {"key": "r-sent", "tenant": "acme"}, "tenant 'acme' is over its quota")
    assert f"{dlq}:0:2" not in by_target
    got = read_topic(kafka_config, requests, 1)
    assert [r["key"] for r in got] == [b"r-sent"], "the failed one was never sent, the refused one never tried"


def test_a_dead_letter_over_what_the_control_service_checks_is_not_republished_and_says_how(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str) -> None:
    """Checking a request holds up to about 25 times it in the control process: one over
    PACER_CONTROL_DRY_RUN_MAX_BYTES is not checked there (nor sent), and the answer names the
    unchecked republish, which leaves the check to the planner."""
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {})})
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    small, large = _request("r-s"), _request("r-large")
    bus.dead_letter(b"r-large", large, "tenant 'acme' is over its quota", "acme")  # offset 0
    bus.dead_letter(b"r-s", small, "tenant 'acme' is over its quota", "acme")  # offset 1
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))
    cap = len(large) - 1  # the large one is one byte over; the small one (same shape, shorter id) within

    async def go() -> tuple[Any, Any]:
        async with control_api(database_url, dead_letters=queue, dry_run_max_bytes=cap) as api:
            over = await api.post("/dead-letters/requests/0/0/republish", role="tech_admin")
            return over, await api.post("/dead-letters/requests/0/1/republish", role="tech_admin")

    over, within = asyncio.run(go())
    assert len(small) <= cap < len(large)
    assert over.status_code == 422, over.text
    assert f"over the {cap:,} this control service checks" in over.json()["detail"]
    assert "pacer dead-letters republish --raw" in over.json()["detail"]
    assert within.status_code == 200, within.text
    assert [r["key"] for r in read_topic(kafka_config, requests, 1)] == [b"r-s"], "the large one was sent"
    assert {a["target_id"] for a in audit(database_url) if a["target_type"] == "dead_letter"} == {f"{dlq}:0:1"}


def test_a_request_of_a_tenant_not_yet_created_is_not_republished_until_it_is(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str) -> None:
    """Refused for an unknown tenant: republishing it before the tenant exists would only be
    refused again, so it is not sent and nothing is audited; once the tenant is created, it is."""
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {})})
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    bus.dead_letter(b"r-t", _request("r-t"), "unknown tenant 'acme'", "acme")
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))

    async def go() -> tuple[Any, Any]:
        async with control_api(database_url, dead_letters=queue) as api:
            early = await api.post("/dead-letters/requests/0/0/republish", role="tech_admin")
            with psycopg.connect(database_url) as conn:
                assert [a for a in audit(database_url) if a["target_type"] == "dead_letter"] == [], "none attempted"
                conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
            return early, await api.post("/dead-letters/requests/0/0/republish", role="tech_admin")

    early, later = asyncio.run(go())
    assert early.status_code == 422, early.text
    assert "unknown tenant 'acme'" in early.json()["detail"] and "POST /api/v1/tenants" in early.json()["detail"]
    assert later.status_code == 200, later.text
    assert [r["key"] for r in read_topic(kafka_config, requests, 1)] == [b"r-t"]
