"""Hostile job requests through real Kafka and Postgres.

- What the validator accepts, the store takes: generated valid requests full of legal but
  awkward text (any Unicode but NUL and lone surrogates, the longest ids, the largest numbers)
  all become jobs.
- The property of issue 9: hostile requests published on one partition, interleaved with
  valid ones, to a planner's intake loop consuming it with a real consumer group. Every
  valid one becomes a job with all its items, every hostile one is in the dead-letter topic
  with its original bytes and a reason, and the loop never stops.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Self

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacer_common.db.pool import open_pool
from pacer_common.domain.ids import ToId
from pacer_common.domain.requests import INT4_MAX, MAX_ID_CHARS
from pacer_common.domain.validation import InvalidRequest, validate_request
from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer
from pacer_dev.hostile import BUILDERS, base, hostile
from pacer_planner.adapters.faults import ENVIRONMENT
from pacer_planner.adapters.kafka import KafkaCommandBus, KafkaRequestSource
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.core import Handled, Planner
from pacer_planner.core.consume import IntakeLoop, IntakePolicy
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.timeout(240)

# Text a publisher may legally send: anything but NUL and surrogates (which JSON can only
# carry as escapes, and which the validator refuses).
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # lone surrogates: no str JSON can carry them
LEGAL = st.characters(exclude_characters="\x00", exclude_categories=SURROGATES)
legal_text = st.text(LEGAL, min_size=1, max_size=MAX_ID_CHARS)
ascii_id = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=MAX_ID_CHARS)


@pytest.fixture
def topics(kafka_config: dict[str, str], topic_prefix: str) -> dict[str, str]:
    t = {lane: f"{topic_prefix}.item-commands.{lane}" for lane in ("online", "batch")} | {
        "requests": f"{topic_prefix}.job-requests", "dlq": f"{topic_prefix}.job-requests.dlq"}
    ensure_topics(kafka_config, {name: (1, {}) for name in t.values()})
    return t


@st.composite
def valid_requests(draw: st.DrawFn) -> bytes:
    rid = f"ok-{uuid.uuid4().hex[:8]}-" + draw(st.text(LEGAL, max_size=20))
    n = draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["campaign", "auto_reply", "ticket_notify", "takeover_prompt"]))
    doc = base(rid, kind=kind, n=n, guid=draw(ascii_id))
    for i, target in enumerate(doc["targets"]["items"]):
        target["to_id"] = f"{i}:" + draw(st.text(LEGAL, max_size=60))
        target["vars"]["name"] = draw(legal_text)
    doc["created_by"] = draw(legal_text)
    doc["content_version"] = draw(st.integers(0, INT4_MAX))
    if kind == "ticket_notify":
        doc["status_version"] = draw(st.integers(0, INT4_MAX))
        doc["business_id"] = f"T-{rid}"
    doc["budget"] = {"max_sends": draw(st.integers(1, INT4_MAX))}
    return json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()


def test_the_store_takes_whatever_the_validator_accepts(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    results: list[tuple[bytes, Handled]] = []

    async def go(bodies: list[bytes]) -> None:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
        planner = Planner(PostgresJobStore(pool), bus, coalesce_window=timedelta(0))
        try:
            for b in bodies:
                results.append((b, await planner.handle(None, b)))
        finally:
            await pool.close()

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(bodies=st.lists(valid_requests(), min_size=1, max_size=3))
    def run(bodies: list[bytes]) -> None:
        asyncio.run(go(bodies))

    run()
    refused = [(json.loads(b)["request_id"], h.reason) for b, h in results if h.outcome not in ("planned",)]
    assert refused == []
    with psycopg.connect(database_url) as conn:
        jobs = conn.execute("SELECT count(*), sum(total) FROM jobs").fetchone()
        items = conn.execute("SELECT count(*) FROM items").fetchone()
    assert jobs is not None and items is not None
    assert jobs[0] == len(results) and items[0] == jobs[1] == sum(
        len(json.loads(b)["targets"]["items"]) for b, _ in results)


# -- the property: interleaved on one partition, through a consumer group --------------------

@dataclass
class Counting:
    outcomes: list[Handled] = field(default_factory=list)
    internal: int = 0

    def handled(self, result: Handled) -> None:
        self.outcomes.append(result)

    def environment_fault(self) -> None: ...

    def internal_error(self) -> None:
        self.internal += 1


class RunningPlanner:
    """A planner's intake loop on its own thread and event loop, consuming ``requests``."""

    def __init__(self, url: str, config: dict[str, str], topics: dict[str, str]) -> None:
        self.url, self.config, self.topics = url, config, topics
        self.events = Counting()
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self.loop.run_until_complete(self._run())
        except BaseException as exc:
            self.error = exc

    async def _run(self) -> None:
        self.stop = asyncio.Event()
        pool = await open_pool(self.url, min_size=1, max_size=2)
        consumer = AsyncConsumer(make_consumer(self.config, f"test-planner-{uuid.uuid4().hex[:8]}"))
        await consumer.call(consumer.consumer.subscribe, [self.topics["requests"]])
        bus = KafkaCommandBus(make_producer(self.config), lambda lane: self.topics[lane], self.topics["dlq"])
        planner = Planner(PostgresJobStore(pool), bus, coalesce_window=timedelta(0))
        intake = IntakeLoop(planner, KafkaRequestSource(consumer), IntakePolicy(ENVIRONMENT), self.events, self.stop)
        self.ready.set()
        try:
            await intake.run()
        finally:
            await consumer.close()
            await pool.close()

    def __enter__(self) -> Self:
        self.thread.start()
        assert self.ready.wait(30)
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.error is None


class DeadLetters:
    """Everything in the dead-letter topic so far: original bytes → reason."""

    def __init__(self, config: dict[str, str], topic: str) -> None:
        self.consumer = Consumer({**config, "group.id": f"test-dlq-{uuid.uuid4().hex}", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.records: dict[bytes, str] = {}

    def until(self, values: set[bytes], timeout_s: float = 30.0) -> dict[bytes, str]:
        def arrived() -> bool:
            if not values <= self.records.keys():
                msg = self.consumer.poll(0.2)
                if msg is not None and not msg.error():
                    headers = dict(msg.headers() or [])
                    self.records[msg.value() or b""] = headers.get("pacer-error-reason", b"").decode()
            return values <= self.records.keys()

        wait_for(arrived, timeout_s, f"{len(values)} requests in the dead-letter topic",
                 lambda: [v[:80] for v in values - self.records.keys()])
        return self.records

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def planner_on_one_partition(database_url: str, kafka_config: dict[str, str],
                             topics: dict[str, str]) -> Iterator[RunningPlanner]:
    with RunningPlanner(database_url, kafka_config, topics) as running:
        yield running


hostile_requests = st.builds(
    lambda kind, salt: (kind, hostile(kind, f"bad-{kind}-{uuid.uuid4().hex[:8]}", salt)),
    st.sampled_from(sorted(BUILDERS)), st.text(max_size=12))


@st.composite
def simple_valid(draw: st.DrawFn) -> bytes:
    rid = f"ok-{uuid.uuid4().hex[:12]}"
    doc = base(rid, draw(st.text(LEGAL, max_size=8)),
               kind=draw(st.sampled_from(["campaign", "auto_reply", "ticket_notify"])), n=draw(st.integers(1, 3)))
    return json.dumps(doc).encode()


def test_hostile_requests_on_one_partition_are_dead_lettered_and_valid_ones_all_planned(
        planner_on_one_partition: RunningPlanner, database_url: str, kafka_config: dict[str, str],
        topics: dict[str, str]) -> None:
    planner = planner_on_one_partition
    producer = Producer({**kafka_config, "enable.idempotence": True, "message.max.bytes": 10_000_000})
    dlq = DeadLetters(kafka_config, topics["dlq"])
    published = 0

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(batch=st.lists(st.one_of(hostile_requests, simple_valid().map(lambda b: ("valid", b))),
                          min_size=2, max_size=6).filter(lambda b: any(k == "valid" for k, _ in b)))
    def run(batch: list[tuple[str, bytes]]) -> None:
        nonlocal published
        for _, value in batch:
            producer.produce(topics["requests"], value=value, key=b"one-key")  # one partition, in this order
        assert producer.flush(30) == 0
        published += len(batch)
        wait_for(lambda: len(planner.events.outcomes) >= published or not planner.alive, 60,
                 f"the intake loop to handle {published} requests", lambda: len(planner.events.outcomes))
        assert planner.alive, f"the intake loop stopped: {planner.error!r}"
        assert len(planner.events.outcomes) == published

        bad = {value: kind for kind, value in batch if kind != "valid"}
        records = dlq.until(set(bad))
        for value, kind in bad.items():
            assert value in records, f"{kind} was not dead-lettered"
            assert records[value].startswith(("invalid job request: ", "cannot plan job request: ")), records[value]
        good = [json.loads(value) for kind, value in batch if kind == "valid"]
        with psycopg.connect(database_url) as conn:
            for doc in good:
                row = conn.execute("SELECT j.total, count(i.item_id), j.dispatched_at IS NOT NULL FROM jobs j "
                                   "LEFT JOIN items i USING (job_id) WHERE j.request_id = %s GROUP BY j.job_id",
                                   (doc["request_id"],)).fetchone()
                n = len(doc["targets"]["items"])
                assert row == (n, n, True), f"{doc['request_id']}: {row}"
        assert not {_request_id(v) for v in records} & {d["request_id"] for d in good}

    try:
        run()
    finally:
        dlq.close()
    assert planner.events.internal == 0


def _request_id(value: bytes) -> str | None:
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):  # what a hostile request may be
        return None
    return doc.get("request_id") if isinstance(doc, dict) else None



# -- the dry run says what the planner would --------------------------------------------------

def test_the_dry_run_refuses_each_hostile_request_with_the_planners_reason(database_url: str) -> None:
    from tests.integration.control_support import control_api

    async def go() -> None:
        async with control_api(database_url) as api:
            h = {**api.auth("operator"), "Content-Type": "application/json"}
            for kind in sorted(BUILDERS):
                body = hostile(kind, f"dry-{kind}", "é")
                r = await api.client.post("/dry-run", headers=h, content=body)
                assert r.status_code == 422, (kind, r.text)
                with pytest.raises(InvalidRequest) as planner:
                    validate_request(body, datetime.now(UTC))
                if kind != "expired":  # its reason names the (same) instant, seen a moment apart
                    assert r.json()["detail"] == str(planner.value), kind
                else:
                    assert r.json()["detail"].startswith("cannot plan job request: request already expired at ")
            ok = await api.client.post("/dry-run", headers=h, content=json.dumps(base("dry-ok", n=3)).encode())
            assert ok.status_code == 200 and ok.json()["items"] == 3

    asyncio.run(go())


def test_a_job_the_database_refuses_mid_copy_leaves_nothing_stored(database_url: str) -> None:
    # Past the validator (which would refuse it): a NUL reaches the COPY of the items.
    from dataclasses import replace

    from pacer_planner.domain.planning import plan
    from pacer_planner.ports import StoreRefused

    valid = validate_request(json.dumps(base("refused-mid-copy", n=3)).encode(), datetime.now(UTC))
    p = plan(valid, datetime.now(UTC))
    p = replace(p, items=[*p.items[:2], replace(p.items[2], to_id=ToId("r\x00x"))])

    async def go() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=1)
        try:
            with pytest.raises(StoreRefused, match="NUL"):
                await PostgresJobStore(pool).store(p)
        finally:
            await pool.close()

    asyncio.run(go())
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM shards),"
                            " (SELECT count(*) FROM items)").fetchone() == (0, 0, 0)


def test_a_value_the_server_cannot_index_is_refused_in_one_line_of_the_server_s_words(database_url: str) -> None:
    """Past the validator, a request id too large for a btree index row: the server refuses it
    with a message, a DETAIL and a HINT meant for whoever wrote the schema. The dead letter's
    reason is the message alone, one line, which names the limit."""
    import random
    from dataclasses import replace

    from pacer_planner.domain.planning import plan
    from pacer_planner.ports import StoreRefused

    valid = validate_request(json.dumps(base("refused-index-row", n=2)).encode(), datetime.now(UTC))
    p = plan(valid, datetime.now(UTC))
    huge = random.Random(7).randbytes(4000).hex()  # incompressible: the index row stays as large
    p = replace(p, request=p.request.model_copy(update={"request_id": huge}))

    async def go() -> str:
        pool = await open_pool(database_url, min_size=1, max_size=1)
        try:
            with pytest.raises(StoreRefused) as refused:
                await PostgresJobStore(pool).store(p)
            return str(refused.value)
        finally:
            await pool.close()

    said = asyncio.run(go())
    assert said.startswith("index row") and "exceeds" in said, said
    assert "\n" not in said and "HINT" not in said and "DETAIL" not in said, said
