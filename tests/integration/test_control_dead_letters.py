"""Dead letters in the Control API, on the real broker and database: the planner's and the
intake's refusals listed newest first with their reasons, one shown with its body and its
exact bytes, a refused job request sent again once it would be taken (audited, and not while
the planner would refuse it again), each by the roles and tenants allowed."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.cli import EXIT_REFUSED, main
from pacer_common.db.pool import open_pool
from pacer_common.kafka import dead_letter_headers, ensure_topics, make_producer
from pacer_common.settings import KafkaSettings
from pacer_control.adapters.kafka import KafkaDeadLetters
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_planner.adapters.kafka import KEPT_BYTES, KafkaCommandBus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.core import Planner
from tests.integration.control_support import audit, control_api
from tests.integration.helpers import read_topic

NOT_JSON = b'{"request_id": "r-bad", "kind": "campaign", '


def _request(request_id: str, tenant: str) -> bytes:
    return json.dumps({
        "request_id": request_id, "kind": "campaign", "created_by": "ops:test", "tenant": tenant,
        "message": {"type": "text", "content": "你好"},
        "targets": {"mode": "snapshot", "items": [{"guid": "g-1", "to_id": "room-1"}]},
        "expire_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
    }, ensure_ascii=False).encode()


def test_dead_letters_are_listed_shown_and_republished_by_role_and_tenant(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str) -> None:
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    callbacks_dlq = f"{topic_prefix}.callbacks.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {}), f"{topic_prefix}.callbacks": (1, {}),
                                 callbacks_dlq: (1, {})})
    acme, globex = _request("r-acme", "acme"), _request("r-globex", "globex")
    # Refused the planner's way (tenant header from the parsed request, or none it can tell)
    # and the intake's way.
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    bus.dead_letter(b"r-bad", NOT_JSON, "invalid job request: not JSON: Expecting property name")
    bus.dead_letter(b"r-acme", acme, "tenant 'acme' is over its quota", "acme")
    bus.dead_letter(b"r-globex", globex, "no tenant named 'globex'", "globex")
    intake = KafkaCallbackLog(callback_producer(kafka_config, 15.0), f"{topic_prefix}.callbacks", callbacks_dlq, 15.0)
    asyncio.run(intake.dead_letter("acme", b'{"cmd": "message.received"}', "callback: guid missing"))
    intake.close()
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex')")
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))

    async def go() -> None:
        async with control_api(database_url, dead_letters=queue) as api:
            listed = await api.get("/dead-letters", role="operator")
            assert listed.status_code == 200, listed.text
            page = listed.json()
            assert page["topic"] == dlq
            assert [(d["offset"], d["key"], d["tenant"], d["source"]) for d in page["letters"]] == [
                (2, "r-globex", "globex", "planner"), (1, "r-acme", "acme", "planner"), (0, "r-bad", None, "planner")]
            assert page["letters"][2]["reason"].startswith("invalid job request: not JSON")
            assert [d["offset"] for d in (await api.get("/dead-letters?last=1", role="operator")).json()["letters"]] == [2]
            # "Why was my request refused?": by its key; or one tenant's refusals.
            by_key = (await api.get("/dead-letters?key=r-acme&last=1", role="operator")).json()["letters"]
            assert [(d["offset"], d["reason"]) for d in by_key] == [(1, "tenant 'acme' is over its quota")]
            by_tenant = (await api.get("/dead-letters?tenant=globex", role="operator")).json()["letters"]
            assert [d["key"] for d in by_tenant] == ["r-globex"]
            cbs = (await api.get("/dead-letters?queue=callbacks", role="operator")).json()
            assert (cbs["topic"], [(d["tenant"], d["source"], d["reason"]) for d in cbs["letters"]]) == (
                callbacks_dlq, [("acme", "intake", "callback: guid missing")])
            bad_queue = await api.get("/dead-letters?queue=nope", role="operator")
            assert bad_queue.status_code == 422 and "queue" in bad_queue.json()["detail"]

            shown = await api.get("/dead-letters/requests/0/0", role="operator")
            assert shown.status_code == 200 and shown.json()["body"] == NOT_JSON.decode()
            assert shown.json()["headers"]["pacer-error-source"] == "planner" and not shown.json()["body_truncated"]
            raw = await api.get("/dead-letters/requests/0/1/body", role="operator")
            assert raw.content == acme, "the original bytes, untouched"
            missing = await api.get("/dead-letters/requests/0/9", role="operator")
            assert missing.status_code == 404 and f"no dead letter 0:9 on {dlq}" in missing.json()["detail"]

            # Republishing: tech_admin and up; never a request the planner would refuse again.
            assert (await api.post("/dead-letters/requests/0/1/republish", role="operator")).status_code == 403
            again = await api.post("/dead-letters/requests/0/0/republish", role="tech_admin", json={"reason": "retry"})
            assert again.status_code == 422 and "not republished" in again.json()["detail"]
            done = await api.post("/dead-letters/requests/0/1/republish", role="tech_admin",
                                  json={"reason": "quota raised"})
            assert done.status_code == 200 and done.json()["changed"], done.text

            # A token scoped to acme sees and republishes acme's records only.
            made = await api.post("/tokens", json={"name": "acme-ops", "role": "tech_admin", "tenants": ["acme"]})
            api.tokens["acme"] = made.json()["token"]
            mine = (await api.get("/dead-letters", role="acme")).json()["letters"]
            assert [d["key"] for d in mine] == ["r-acme"]
            assert (await api.get("/dead-letters?tenant=globex", role="acme")).json()["letters"] == []
            for path in ("/dead-letters/requests/0/2", "/dead-letters/requests/0/0"):
                assert (await api.get(path, role="acme")).status_code == 404, path
            theirs = await api.post("/dead-letters/requests/0/2/republish", role="acme", json={"reason": "x"})
            assert theirs.status_code == 404

    asyncio.run(go())

    got = read_topic(kafka_config, requests, 1)
    assert [(r["key"], r["raw"]) for r in got] == [(b"r-acme", acme)], "only the one taken, once, as it came"
    assert got[0]["headers"]["pacer-republished-from"] == f"{dlq}:0:1".encode()
    (entry,) = [a for a in audit(database_url) if a["action"] == "republish"]
    assert (entry["actor"], entry["target_type"], entry["target_id"], entry["reason"]) == (
        "token:tech_admin", "dead_letter", f"{dlq}:0:1", "quota raised")
    assert entry["before"]["reason"] == "tenant 'acme' is over its quota"


def test_without_kafka_the_dead_letter_routes_say_so(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.get("/dead-letters", role="operator")
            assert r.status_code == 503 and "started without Kafka settings" in r.json()["detail"]

    asyncio.run(go())


@pytest.mark.parametrize("path", ["/dead-letters", "/dead-letters/requests/0/0"])
def test_a_broker_that_cannot_be_reached_is_a_503_not_an_error(database_url: str, path: str) -> None:
    unreachable = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers="127.0.0.1:9", topic_prefix="nowhere"))

    async def go() -> None:
        async with control_api(database_url, dead_letters=unreachable) as api:
            r = await api.get(path, role="operator")
            assert r.status_code == 503 and "Kafka cannot be reached" in r.json()["detail"], r.text

    asyncio.run(go())


def test_a_large_refused_request_is_listed_by_its_size_and_shown_whole(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str) -> None:
    dlq = f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {dlq: (1, {"max.message.bytes": str(8 * 1_048_576)})})
    large = json.dumps({"request_id": "r-large", "pad": "x" * (3 * 1_048_576), "tenant": "acme"}).encode()
    bus = KafkaCommandBus(make_producer(kafka_config, **{"message.max.bytes": 8 * 1_048_576}),
                          lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
    bus.dead_letter(b"r-large", large, "invalid job request: kind: Field required", "acme")
    # No tenant given, and none at its head (it is past the pad): no tenant header.
    bus.dead_letter(b"r-large-untold", large, "invalid job request: kind: Field required")
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))
    # The list holds no large body; its size is the record's.
    listed = asyncio.run(queue.window("requests", 10)).letters
    assert [(d.size, len(d.value), d.tenant) for d in listed] == [(len(large), 0, "acme"), (len(large), 0, None)]

    async def go() -> None:
        async with control_api(database_url, dead_letters=queue) as api:
            page = (await api.get("/dead-letters", role="operator")).json()["letters"]
            assert [(d["key"], d["bytes"], d["tenant"]) for d in page] == [
                ("r-large-untold", len(large), None), ("r-large", len(large), "acme")]
            shown = (await api.get("/dead-letters/requests/0/0", role="operator")).json()
            assert shown["body_truncated"] and len(shown["body"]) == 65_536 and shown["bytes"] == len(large)
            assert (await api.get("/dead-letters/requests/0/0/body", role="operator")).content == large

    asyncio.run(go())


def _with_tail_tenant(request_id: str, tenant: str | None, **more: object) -> bytes:
    """A request of 50,000 targets (over 1 MiB, the most of a refused request's bytes read again
    for its tenant), its ``tenant`` named after them, past any head."""
    body: dict[str, Any] = {**json.loads(_request(request_id, "x")), **more}
    del body["tenant"]
    body["targets"]["items"] += [{"guid": f"g-{i % 9}", "to_id": f"room-{i:08d}"} for i in range(50_000)]
    return json.dumps(body if tenant is None else {**body, "tenant": tenant}).encode()


def test_a_cut_dead_letter_is_listed_for_its_tenants_operators_and_no_others(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str) -> None:
    """The planner on real Postgres and Kafka refuses four requests too large for its
    dead-letter producer (1 MiB): each is kept cut. acme's could not be planned (past its
    expire_at), globex's the model refused (a to_id too long), both naming their tenant after
    their targets; bytes that are no JSON name acme at their head, others no tenant there. A
    token scoped to acme lists and reads acme's two, one scoped to globex globex's, and only an
    unscoped token the one whose tenant cannot be told."""
    dlq = f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {dlq: (1, {})})
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex')")
    now = datetime.now(UTC)
    refused = [(b"r-late", _with_tail_tenant("r-late", "acme", expire_at=now.isoformat())),
               (b"r-long", _with_tail_tenant("r-long", "globex", targets={"items": [{"guid": "g", "to_id": "x" * 300}]})),
               (b"r-head", b'{"request_id": "r-head", "tenant": "acme", "pad": "' + os.urandom(2 * 1_048_576)),
               (b"r-nobody", b'{"request_id": "r-nobody", "pad": "' + os.urandom(2 * 1_048_576))]

    async def refuse() -> list[str]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        bus = KafkaCommandBus(make_producer(kafka_config, **{"message.max.bytes": 1_048_576}),
                              lambda lane: f"{topic_prefix}.item-commands.{lane}", dlq)
        try:
            planner = Planner(PostgresJobStore(pool), bus)
            return [(await planner.handle(key, value, now + timedelta(seconds=1))).outcome for key, value in refused]
        finally:
            await pool.close()

    assert asyncio.run(refuse()) == ["dead_lettered"] * 4
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))

    async def go() -> None:
        async with control_api(database_url, dead_letters=queue) as api:
            for tenant in ("acme", "globex"):
                made = await api.post("/tokens", json={"name": f"{tenant}-ops", "role": "operator",
                                                       "tenants": [tenant]})
                assert made.status_code == 201, made.text
                api.tokens[tenant] = made.json()["token"]
            everything = (await api.get("/dead-letters", role="operator")).json()["letters"]
            assert [(d["key"], d["tenant"], d["bytes"]) for d in everything] == [
                ("r-nobody", None, KEPT_BYTES), ("r-head", "acme", KEPT_BYTES), ("r-long", "globex", KEPT_BYTES),
                ("r-late", "acme", KEPT_BYTES)]
            assert all(f"the record holds only its first {KEPT_BYTES} of" in d["reason"] for d in everything)
            acme = (await api.get("/dead-letters", role="acme")).json()["letters"]
            assert [(d["key"], d["tenant"]) for d in acme] == [("r-head", "acme"), ("r-late", "acme")]
            globex = (await api.get("/dead-letters", role="globex")).json()["letters"]
            assert [(d["key"], d["tenant"]) for d in globex] == [("r-long", "globex")]
            assert (await api.get("/dead-letters?tenant=acme", role="globex")).json()["letters"] == []
            # One read at its head says so; acme's records are not globex's to read.
            late, head = [(await api.get(f"/dead-letters/requests/0/{offset}", role="acme")) for offset in (0, 2)]
            assert (late.status_code, head.status_code) == (200, 200), (late.text, head.text)
            assert late.json()["headers"]["pacer-truncated"] == f"first {KEPT_BYTES} of {len(refused[0][1])} bytes"
            assert "pacer-tenant-from" not in late.json()["headers"]
            assert (head.json()["headers"]["pacer-tenant"], head.json()["headers"]["pacer-tenant-from"]) == (
                "acme", "head")
            for offset, role in ((0, "globex"), (2, "globex"), (1, "acme"), (3, "acme"), (3, "globex")):
                seen = await api.get(f"/dead-letters/requests/0/{offset}", role=role)
                assert seen.status_code == 404, (offset, role, seen.text)

    asyncio.run(go())


def test_a_refused_request_kafka_will_not_take_whole_is_kept_cut_and_never_republished(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused by the producer (its message.max.bytes smaller than the record) and by the
    broker (the topic's max.message.bytes smaller): each record holds the request's first
    part, says so, and is refused at republish, by the Control API and by ``--raw``."""
    requests, dlq = f"{topic_prefix}.job-requests", f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {requests: (1, {}), dlq: (1, {"max.message.bytes": str(2 * 1_048_576)})})
    big = b'{"request_id": "r-big", ' + os.urandom(3 * 1_048_576)  # not compressible under lz4
    commands = lambda lane: f"{topic_prefix}.item-commands.{lane}"  # noqa: E731
    small_producer = KafkaCommandBus(make_producer(kafka_config, **{"message.max.bytes": 1_048_576}), commands, dlq)
    small_producer.dead_letter(b"r-big", big, "invalid job request: not JSON", "acme")
    small_topic = KafkaCommandBus(make_producer(kafka_config, **{"message.max.bytes": 8 * 1_048_576}), commands, dlq)
    small_topic.dead_letter(b"r-big", big, "invalid job request: not JSON", "acme")
    small_topic.dead_letter(b"r-small", b"{}", "invalid job request: kind: Field required", "acme")  # goes on
    got = read_topic(kafka_config, dlq, 3)
    held = f"first {KEPT_BYTES} of {len(big)} bytes"
    assert [(r["key"], r["raw"]) for r in got] == [(b"r-big", big[:KEPT_BYTES])] * 2 + [(b"r-small", b"{}")]
    for record in got[:2]:
        assert record["headers"]["pacer-truncated"] == held.encode()
        reason = record["headers"]["pacer-error-reason"].decode()
        assert reason.startswith(f"invalid job request: not JSON; the record holds only its {held} (Kafka refused it"
                                 " whole: "), reason
        assert "too large" in reason.lower(), reason
    assert "pacer-truncated" not in got[2]["headers"]
    settings = KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"], topic_prefix=topic_prefix)

    async def go() -> None:
        async with control_api(database_url, dead_letters=KafkaDeadLetters(settings)) as api:
            shown = (await api.get("/dead-letters/requests/0/0", role="operator")).json()
            assert shown["headers"]["pacer-truncated"] == held and held in shown["reason"]
            again = await api.post("/dead-letters/requests/0/1/republish", role="tech_admin", json={"reason": "x"})
            assert again.status_code == 422 and "holds only part of the refused request" in again.json()["detail"]
            # The console offers no Republish the check would refuse: the cut record says why; the whole one has it.
            cut = await api.client.get("http://control/console/part/dead-letters/requests/0/0", headers=api.auth("tech_admin"))
            assert 'id="not-resendable"' in cut.text and "holds only part of the refused request" in cut.text
            assert "/republish" not in cut.text
            whole = await api.client.get("http://control/console/part/dead-letters/requests/0/2",
                                         headers=api.auth("tech_admin"))
            assert "/console/part/dead-letters/requests/0/2/republish" in whole.text and "not-resendable" not in whole.text

    asyncio.run(go())
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    with pytest.raises(SystemExit) as ended:
        main(["dead-letters", "republish", "0:0", "--raw", "--reason", "x"])
    assert ended.value.code == EXIT_REFUSED
    assert read_topic(kafka_config, requests, 0, timeout_s=3) == [], "nothing was sent again"
    assert [a for a in audit(database_url) if a["action"] == "republish"] == []


def test_older_dead_letters_are_reached_page_by_page_or_from_a_time(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str) -> None:
    """Beyond the newest: every record of a three-partition DLQ topic on some page, once,
    newest first; one tenant's, page by page; and what was refused before a time."""
    dlq = f"{topic_prefix}.job-requests.dlq"
    ensure_topics(kafka_config, {dlq: (3, {})})
    # An hour ago: a timestamp older than the broker's retention would let it delete the records
    # under the test.
    t0 = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)
    producer = make_producer(kafka_config)
    for i in range(14):  # one a minute, round the partitions; even ones acme's, odd ones globex's
        tenant = "acme" if i % 2 == 0 else "globex"
        headers: list[tuple[str, str | bytes | None]] = [*dead_letter_headers(f"refusal {i}", "planner", 500, tenant)]
        producer.produce(dlq, _request(f"r-{i:02d}", tenant), f"r-{i:02d}".encode(), partition=i % 3,
                         timestamp=int((t0 + timedelta(minutes=i)).timestamp() * 1000), headers=headers)
    assert producer.flush(15) == 0
    queue = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                           topic_prefix=topic_prefix))

    async def pages(api: Any, query: str) -> list[list[str]]:
        found: list[list[str]] = []
        url = f"/dead-letters?{query}"
        while True:
            r = await api.get(url, role="operator")
            assert r.status_code == 200, r.text
            body = r.json()
            found.append([d["key"] for d in body["letters"]])
            if body["older"] is None:
                return found
            assert len(found) < 20, "paging does not end"
            url = f"/dead-letters?{query}&older={body['older']}"

    async def go() -> None:
        async with control_api(database_url, dead_letters=queue) as api:
            everything = await pages(api, "last=4")
            assert [k for page in everything for k in page] == [f"r-{i:02d}" for i in reversed(range(14))]
            assert all(len(page) <= 4 for page in everything) and len(everything) >= 4
            acme = await pages(api, "last=2&tenant=acme")
            assert [k for page in acme for k in page] == [f"r-{i:02d}" for i in reversed(range(0, 14, 2))]
            before = (t0 + timedelta(minutes=5, seconds=30)).isoformat()
            r = await api.get("/dead-letters", role="operator", params={"before": before, "last": 3})
            assert [d["key"] for d in r.json()["letters"]] == ["r-05", "r-04", "r-03"], r.text
            assert r.json()["older"] is not None
            naive = await api.get("/dead-letters", role="operator", params={"before": before.removesuffix("+00:00")})
            assert naive.status_code == 422 and "timezone" in naive.text, naive.text
            both = await api.get("/dead-letters", role="operator", params={"before": before, "older": "0:1"})
            assert both.status_code == 422 and "not both" in both.json()["detail"]
            twice = await api.get("/dead-letters?older=0:3,0:2", role="operator")
            assert twice.status_code == 422 and "each partition once" in twice.json()["detail"]
            garbled = await api.get("/dead-letters?older=zero", role="operator")
            assert garbled.status_code == 422 and "older" in garbled.text

    asyncio.run(go())
