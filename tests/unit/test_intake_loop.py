"""The intake loop tells a message's fault from the environment's and from its own bugs."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pacer_common import dead_letters as dlq
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.dead_letters import (
    MAX_TENANT_PARSE_BYTES,
    REASON_HEADER,
    TENANT_FROM_HEADER,
    TENANT_HEADER,
    TRUNCATED_HEADER,
    DeadLetter,
    NotRepublishable,
)
from pacer_common.domain.ids import Guid, RequestId, job_id_for
from pacer_common.domain.requests import MAX_REQUEST_BYTES
from pacer_common.settings import KafkaSettings
from pacer_planner.adapters.faults import ENVIRONMENT
from pacer_planner.adapters.kafka import KEPT_BYTES, KEPT_KEY_BYTES, MAX_REASON_CHARS, KafkaCommandBus
from pacer_planner.core import Handled, Planner
from pacer_planner.core.consume import IntakeLoop, IntakePolicy
from pacer_planner.core.intake import DispatchFailed
from pacer_planner.domain.planning import Plan
from pacer_planner.ports import Known, Stored, StoreRefused


class Down(Exception):
    """Stands for the database or the broker being unavailable."""


def request(rid: str, to_id: str = "room-1", **more: object) -> bytes:
    return json.dumps({
        "request_id": rid, "kind": "campaign", "created_by": "t", "message": {"content": "hi"},
        "targets": {"items": [{"guid": "g1", "to_id": to_id}]}, **more,
    }).encode()


@dataclass
class Store:
    fail: list[BaseException] = field(default_factory=list)  # raised by store(), one per call
    jobs: dict[str, bool] = field(default_factory=dict)  # job id → dispatched
    tenants: dict[str, str] = field(default_factory=dict)  # job id → its tenant
    hidden: int = 0  # this many calls to known() answer None, as before a concurrent store
    paging: dict[str, bool] = field(default_factory=dict)  # job id → a requery job (its targets paged in)
    items: dict[str, list[ItemCommand]] = field(default_factory=dict)  # job id → its items' commands, all pending

    async def store(self, plan: Plan) -> Stored:
        if self.fail:
            raise self.fail.pop(0)
        self.items.setdefault(plan.job_id, [ItemCommand(
            item_id=it.item_id, job_id=plan.job_id, shard_id=1, guid=it.guid, to_id=it.to_id, content=it.content,
            idem_key=it.idem_key, priority=plan.priority, kind=plan.request.kind.value) for it in plan.items])
        created = plan.job_id not in self.jobs
        self.jobs.setdefault(plan.job_id, False)
        self.tenants.setdefault(plan.job_id, plan.request.tenant)
        self.paging.setdefault(plan.job_id, plan.request.targets.mode == "requery")
        return Stored(plan.job_id, created, self.jobs[plan.job_id], {k: 1 for k in plan.shards})

    async def pending_commands(self, job_id: str, after: str | None, limit: int) -> Sequence[ItemCommand]:
        ordered = sorted(self.items.get(job_id, []), key=lambda c: c.item_id)
        return [c for c in ordered if after is None or c.item_id > after][:limit]

    async def mark_dispatched(self, job_id: str) -> None:
        self.jobs[job_id] = True

    async def queued(self, guids: Sequence[Guid]) -> dict[Guid, int]:
        return {}

    async def known(self, request_id: str) -> Known | None:
        if self.hidden:
            self.hidden -= 1
            return None
        job_id = job_id_for(RequestId(request_id))
        return Known(job_id, self.jobs[job_id], self.paging[job_id], self.tenants[job_id]) if job_id in self.jobs else None


@dataclass
class Bus:
    fail_dispatch: list[BaseException] = field(default_factory=list)
    fail_dlq: list[BaseException] = field(default_factory=list)
    sent: list[ItemCommand] = field(default_factory=list)
    dlq: list[tuple[bytes, str]] = field(default_factory=list)
    tenants: list[str | None] = field(default_factory=list)

    def dispatch(self, commands: Sequence[ItemCommand]) -> int:
        if self.fail_dispatch:
            raise self.fail_dispatch.pop(0)
        self.sent.extend(commands)
        return len(commands)

    def dead_letter(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None) -> None:
        if self.fail_dlq:
            raise self.fail_dlq.pop(0)
        self.dlq.append((value, reason))
        self.tenants.append(tenant)


@dataclass
class Events:
    outcomes: list[str] = field(default_factory=list)
    environment: int = 0
    internal: int = 0

    def handled(self, result: Handled) -> None:
        self.outcomes.append(result.outcome)

    def environment_fault(self) -> None:
        self.environment += 1

    def internal_error(self) -> None:
        self.internal += 1


@dataclass
class Msg:
    v: bytes
    at: int = 0  # its offset
    k: bytes | None = None

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return None

    def topic(self) -> str | None:
        return "requests"

    def partition(self) -> int | None:
        return 0

    def offset(self) -> int | None:
        return self.at


@dataclass
class Source:
    msgs: list[Msg]
    stop: asyncio.Event
    committed: list[bytes] = field(default_factory=list)

    async def consume(self, n: int, timeout_s: float) -> list[Msg]:
        if not self.msgs:
            self.stop.set()
            return []
        out, self.msgs = self.msgs[:n], self.msgs[n:]
        return out

    async def commit(self, msg: Msg) -> None:
        self.committed.append(msg.v)


def loop(store: Store, bus: Bus, msgs: Sequence[bytes] = ()) -> tuple[IntakeLoop, Events, Source]:
    stop = asyncio.Event()
    events = Events()
    source = Source([Msg(m, at) for at, m in enumerate(msgs)], stop)
    policy = IntakePolicy((Down,), internal_attempts=3, backoff_initial_s=0.001, backoff_max_s=0.002)
    return IntakeLoop(Planner(store, bus), source, policy, events, stop), events, source


def test_an_unavailable_database_is_waited_for_and_nothing_is_dead_lettered() -> None:
    store, bus = Store(fail=[Down("db"), Down("db"), Down("db")]), Bus()
    intake, events, _ = loop(store, bus)
    h = asyncio.run(intake.process(None, request("r1")))
    assert (h.outcome, h.items, events.environment, events.internal) == ("planned", 1, 3, 0)
    assert bus.dlq == [] and len(bus.sent) == 1


def test_a_programming_error_is_tried_a_few_times_then_dead_lettered_with_its_type() -> None:
    store, bus = Store(fail=[RuntimeError("boom")] * 5), Bus()
    intake, events, _ = loop(store, bus)
    h = asyncio.run(intake.process(None, request("r1")))
    assert h.outcome == "dead_lettered" and events.internal == 3
    assert bus.dlq == [(request("r1"), "internal error: RuntimeError: boom")]
    assert len(store.fail) == 2  # three attempts, not more


def test_a_programming_error_that_goes_away_is_not_dead_lettered() -> None:
    store, bus = Store(fail=[KeyError("once")]), Bus()
    intake, events, _ = loop(store, bus)
    assert asyncio.run(intake.process(None, request("r1"))).outcome == "planned"
    assert events.internal == 1 and bus.dlq == []


def test_a_job_the_database_refuses_is_dead_lettered_at_once_and_not_stored() -> None:
    store, bus = Store(fail=[StoreRefused("value out of range")]), Bus()
    intake, events, _ = loop(store, bus)
    h = asyncio.run(intake.process(None, request("r1")))
    assert h.outcome == "dead_lettered" and events.internal == 0 and store.jobs == {}
    assert bus.dlq == [(request("r1"), "cannot store job request: value out of range")]


@pytest.mark.parametrize(("fail", "body", "reason"), [
    ([StoreRefused("value out of range")], request("r1"), "cannot store job request: value out of range"),
    ([], request("r1", kind="nonsense"), "kind"),  # refused before any plan
])
def test_a_refused_request_s_log_line_names_its_request_id_and_no_job(fail: list[BaseException], body: bytes,
                                                                       reason: str) -> None:
    """The planner's warning says which request went to the dead letters (one published
    without a key is found by it), and names no job: none was stored."""
    from pacer_common.logs import JsonFormatter

    class Lines(logging.Handler):  # formats each record as it is logged, in its context
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.setFormatter(JsonFormatter("planner"))
            self.lines: list[dict[str, Any]] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(json.loads(self.format(record)))

    store, bus, lines = Store(fail=fail), Bus(), Lines()
    intake, _, _ = loop(store, bus)
    logging.getLogger().addHandler(lines)
    try:
        asyncio.run(intake.process(None, body))
    finally:
        logging.getLogger().removeHandler(lines)
    (line,) = [x for x in lines.lines if x["msg"] == "job request dead-lettered"]
    assert line["request_id"] == "r1" and line.get("job_id") is None, line
    assert reason in line["reason"]


def test_a_stored_job_whose_dispatch_keeps_failing_is_never_dead_lettered() -> None:
    store, bus = Store(), Bus(fail_dispatch=[RuntimeError("encode")] * 5)
    intake, events, _ = loop(store, bus)
    h = asyncio.run(intake.process(None, request("r1")))
    assert (h.outcome, bus.dlq, events.internal) == ("undispatched", [], 3)
    assert list(store.jobs.values()) == [False] and "RuntimeError: encode" in (h.reason or "")


def test_a_broker_down_during_dispatch_is_waited_for_then_the_stored_job_goes_out() -> None:
    store, bus = Store(), Bus(fail_dispatch=[Down("kafka"), Down("kafka")])
    intake, events, _ = loop(store, bus)
    h = asyncio.run(intake.process(None, request("r1")))
    # The retry finds the job stored and not dispatched: its pending commands are re-sent.
    assert (h.outcome, events.environment, events.internal, bus.dlq) == ("redispatched", 2, 0, [])


def test_a_stored_job_judged_again_past_its_expiry_is_dispatched_not_dead_lettered() -> None:
    # Stored, then the broker fails its dispatch until after the request's expire_at: judged
    # again then, the request is "already expired", but its job is stored and goes out.
    t0 = datetime.now(UTC)
    body = request("r1", expire_at=(t0 + timedelta(seconds=1)).isoformat())
    store, bus = Store(), Bus(fail_dispatch=[Down("kafka")])
    planner = Planner(store, bus)
    with pytest.raises(DispatchFailed):
        asyncio.run(planner.handle(None, body, now=t0))
    h = asyncio.run(planner.handle(None, body, now=t0 + timedelta(seconds=5)))
    assert (h.outcome, h.job_id, bus.dlq) == ("redispatched", job_id_for(RequestId("r1")), [])
    assert list(store.jobs.values()) == [True]
    # A new request past its expire_at is still refused.
    late = request("r2", expire_at=t0.isoformat())
    assert asyncio.run(planner.handle(None, late, now=t0 + timedelta(seconds=5))).outcome == "dead_lettered"
    assert len(bus.dlq) == 1 and "already expired" in bus.dlq[0][1]


def test_a_large_stored_job_judged_again_past_its_expiry_is_dispatched_not_dead_lettered() -> None:
    # Over the 1 MiB a refused request's bytes are read again for its id: the id comes from
    # the parse that judged it.
    t0 = datetime.now(UTC)
    body = json.loads(request("big", expire_at=(t0 + timedelta(seconds=1)).isoformat()))
    body["targets"]["items"] = [{"guid": f"g{i % 50}", "to_id": f"room-{i:08d}"} for i in range(30_000)]
    raw = json.dumps(body).encode()
    assert len(raw) > MAX_TENANT_PARSE_BYTES
    store, bus = Store(), Bus(fail_dispatch=[Down("kafka")])
    planner = Planner(store, bus)
    with pytest.raises(DispatchFailed):
        asyncio.run(planner.handle(None, raw, now=t0))
    h = asyncio.run(planner.handle(None, raw, now=t0 + timedelta(seconds=5)))
    assert (h.outcome, bus.dlq) == ("redispatched", [])


def test_a_stored_job_the_database_refuses_on_redelivery_is_not_dead_lettered() -> None:
    # Delivered again after a quota was lowered below what the tenant holds: the store
    # refuses it, but it is a job already (dispatched: a duplicate), not a refused request.
    store, bus = Store(), Bus()
    intake, _, _ = loop(store, bus)
    assert asyncio.run(intake.process(None, request("r1"))).outcome == "planned"
    store.fail.append(StoreRefused("tenant acme holds 3 guids, max_guids 2"))
    h = asyncio.run(intake.process(None, request("r1")))
    assert (h.outcome, bus.dlq, len(bus.sent)) == ("duplicate", [], 1)


def test_a_failing_dead_letter_produce_is_retried_and_never_skipped() -> None:
    bad = request("r1", to_id="r\u0000x")
    store, bus = Store(), Bus(fail_dlq=[Down("dlq"), Down("dlq")])
    intake, events, source = loop(store, bus, [bad, request("r2")])
    asyncio.run(intake.run())
    assert len(bus.dlq) == 1 and "contains a NUL character" in bus.dlq[0][1]
    assert events.environment == 2 and source.committed == [bad, request("r2")]
    assert events.outcomes == ["dead_lettered", "planned"]


def test_every_message_ends_as_a_job_or_a_dead_letter_record_and_then_is_committed() -> None:
    msgs = [request("a"), b"", request("b", to_id="x" * 300), b"[]", request("c")]
    intake, events, source = loop(Store(), bus := Bus(), msgs)
    asyncio.run(intake.run())
    assert events.outcomes == ["planned", "dead_lettered", "dead_lettered", "dead_lettered", "planned"]
    assert source.committed == msgs and len(bus.dlq) == 3


def test_a_dead_letter_names_the_tenant_of_the_request_where_it_can_be_read() -> None:
    acme = json.loads(request("r-acme"))
    acme["tenant"] = "acme"
    invalid_acme = dict(acme, request_id="r-bad", targets={"items": []})
    refused = [json.dumps(acme).encode(), json.dumps(invalid_acme).encode(), request("r-default", to_id="r\u0000x"),
               b"not json", b'{"tenant": 7}', json.dumps({"tenant": "x" * 100_000}).encode()]
    store, bus = Store(fail=[StoreRefused("value out of range")]), Bus()
    intake, _, source = loop(store, bus, refused)
    asyncio.run(intake.run())
    assert source.committed == refused
    # Refused by the database (the parsed request's tenant), invalid but readable (the tenant
    # its bytes name, or the default tenant's when they name none), unreadable: none.
    assert bus.tenants == ["acme", "acme", "default", None, None, None]  # the last: no tenant's name


def test_a_stop_while_waiting_for_the_environment_commits_nothing() -> None:
    store = Store(fail=[Down("db")] * 1000)
    intake, events, source = loop(store, Bus(), [request("r1")])
    intake.policy = IntakePolicy((Down,), backoff_initial_s=0.01, backoff_max_s=0.01)

    async def go() -> None:
        task = asyncio.create_task(intake.run())
        deadline = asyncio.get_running_loop().time() + 10
        while events.environment < 3:
            assert asyncio.get_running_loop().time() < deadline, "the outage was not retried"
            await asyncio.sleep(0.01)
        intake.stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    assert source.committed == [] and events.outcomes == []


@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_the_number_of_attempts_at_a_programming_error_is_the_policys(attempts: int) -> None:
    store, bus = Store(fail=[RuntimeError("x")] * 10), Bus()
    intake, events, _ = loop(store, bus)
    intake.policy = IntakePolicy((Down,), internal_attempts=attempts, backoff_initial_s=0.001, backoff_max_s=0.001)
    asyncio.run(intake.process(None, request("r1")))
    assert events.internal == attempts and len(bus.dlq) == 1



def test_an_index_row_too_large_is_the_inputs_fault_not_a_transient_one() -> None:
    from psycopg import errors as pgerr

    from pacer_common.db.errors import RefusedError, TransientError, translate
    from pacer_planner.adapters.faults import ENVIRONMENT

    refused = translate(pgerr.ProgramLimitExceeded("index row size 3000 exceeds btree version 4 maximum 2704"))
    assert isinstance(refused, RefusedError) and not isinstance(refused, ENVIRONMENT)
    assert isinstance(translate(pgerr.AdminShutdown("restarting")), TransientError)


@dataclass
class SlowBus(Bus):
    """A broker that answers only once the event loop has run meanwhile: a flush or a
    dead-letter produce that blocked the loop (its ops endpoints, the paging leases) times out."""

    loop_ran: threading.Event = field(default_factory=threading.Event)
    blocked: list[str] = field(default_factory=list)

    def _wait(self, what: str) -> None:
        if not self.loop_ran.wait(5):
            self.blocked.append(what)

    def dispatch(self, commands: Sequence[ItemCommand]) -> int:
        self._wait("dispatch")
        return super().dispatch(commands)

    def dead_letter(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None) -> None:
        self._wait("dead_letter")
        super().dead_letter(key, value, reason, tenant)


@pytest.mark.parametrize("body", [request("r1"), b"not json"], ids=["dispatch", "dead_letter"])
def test_waiting_for_the_broker_leaves_the_event_loop_free(body: bytes) -> None:
    bus = SlowBus()
    intake, _, _ = loop(Store(), bus)

    async def run() -> Handled:
        async def meanwhile() -> None:  # runs only if the loop gets control back during process()
            bus.loop_ran.set()

        ticker = asyncio.create_task(meanwhile())
        handled = await intake.process(None, body)
        await ticker
        return handled

    h = asyncio.run(run())
    assert bus.blocked == [], "the event loop was blocked while the planner waited for Kafka"
    assert h.outcome == ("planned" if body == request("r1") else "dead_lettered")


def test_a_stop_during_a_batch_leaves_the_rest_of_it_uncommitted() -> None:
    # The requests consumed with the one in hand are not planned once the service stops: a
    # batch of large jobs would otherwise overrun the grace period. They are read again.
    msgs = [request(f"r{i}") for i in range(3)]
    intake, _, source = loop(Store(), Bus(), msgs)

    class StopAfterOne(Events):
        def handled(self, result: Handled) -> None:
            super().handled(result)
            intake.stop.set()

    intake.events = StopAfterOne()
    asyncio.run(intake.run())
    assert source.committed == msgs[:1]


def test_every_log_line_about_a_request_names_where_it_is_and_its_key() -> None:
    # A programming error is logged before (or without) the request being read for its id.
    from pacer_common.logs import JsonFormatter

    intake, _, source = loop(Store(fail=[RuntimeError("boom")] * 5), Bus())
    source.msgs = [Msg(request("r7"), 41, b"req-7")]
    lines: list[dict[str, object]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter("planner").format(record)))

    handler = Capture()
    logger = logging.getLogger("pacer_planner")
    logger.addHandler(handler)
    try:
        asyncio.run(intake.run())
    finally:
        logger.removeHandler(handler)
    assert [d["msg"] for d in lines if d["level"] == "error"][:1] == [
        "internal error handling a job request (attempt 1 of 3)"], lines
    assert all((d["topic"], d["partition"], d["offset"], d["request_key"]) == ("requests", 0, 41, "req-7")
               for d in lines), lines


def test_a_request_over_the_records_limit_once_decompressed_is_planned_and_an_invalid_one_dead_lettered() -> None:
    # Kafka bounds a record compressed: a request of a million targets is more than
    # MAX_REQUEST_BYTES once decompressed, and is planned like any other. Trailing spaces keep
    # it valid JSON; the invalid one is the same with a field the model does not know.
    big = request("r-big") + b" " * MAX_REQUEST_BYTES
    bad = request("r-bad")[:-1] + b', "unknown": 1}' + b" " * MAX_REQUEST_BYTES
    store, bus = Store(), Bus()
    intake, events, source = loop(store, bus, [big, bad, request("r2")])
    asyncio.run(intake.run())
    assert events.outcomes == ["planned", "dead_lettered", "planned"] and source.committed == [big, bad, request("r2")]
    assert list(store.jobs) == [job_id_for(RequestId("r-big")), job_id_for(RequestId("r2"))]
    ((value, reason),) = bus.dlq
    assert value is bad and reason.startswith("invalid job request: unknown: Extra inputs are not permitted"), reason


@dataclass
class Producer:
    """librdkafka as the dead-letter producer meets it: a record past ``max_bytes`` refused at
    once (MSG_SIZE_TOO_LARGE, as the client does), one past ``broker_max`` in its delivery
    report (as the broker does past the topic's max.message.bytes); ``fail`` a code every
    record's delivery report carries (the environment's)."""

    max_bytes: int = 65 * 1_048_576
    broker_max: int = 65 * 1_048_576
    fail: int | None = None
    written: list[tuple[bytes | None, bytes, dict[str, str]]] = field(default_factory=list)
    tried: list[int] = field(default_factory=list)  # the size of each record offered
    queued: list[tuple[Any, ...]] = field(default_factory=list)

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]] | None,
                on_delivery: Any) -> None:
        size = len(value) + len(key or b"")
        self.tried.append(size)
        if size > self.max_bytes:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.queued.append((key, value, headers, on_delivery, size))

    def flush(self, timeout: float) -> int:
        self.poll(timeout)
        return 0

    def poll(self, timeout: float) -> int:
        """Serves the delivery reports of every record queued, as librdkafka's poll does once
        the broker has answered."""
        served = len(self.queued)
        for key, value, headers, on_delivery, size in self.queued:
            err = (KafkaError(self.fail) if self.fail is not None
                   else KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if size > self.broker_max else None)
            if err is None:
                self.written.append((key, value, {k: v.decode() for k, v in headers or []}))
            on_delivery(err, None)
        self.queued.clear()
        return served


def kafka_bus(producer: Producer) -> KafkaCommandBus:
    return KafkaCommandBus(producer, lambda lane: f"commands.{lane}", "dlq")  # type: ignore[arg-type]


@pytest.mark.parametrize("producer", [Producer(max_bytes=1_048_576), Producer(broker_max=1_048_576)],
                         ids=["refused-by-the-client", "refused-by-the-broker"])
def test_a_dead_letter_record_kafka_refuses_for_its_size_is_kept_cut_and_the_partition_goes_on(
        producer: Producer) -> None:
    # Through the planner's own fault classes: the refusal of one record is not an outage.
    bad = request("r-bad", to_id="x" * 300).replace(b'"hi"', b'"' + b"h" * 2_000_000 + b'"')
    store = Store()
    stop = asyncio.Event()
    source = Source([Msg(bad, 0, b"r-bad"), Msg(request("r2"), 1)], stop)
    events = Events()
    policy = IntakePolicy(ENVIRONMENT, internal_attempts=3, backoff_initial_s=0.001, backoff_max_s=0.002)
    intake = IntakeLoop(Planner(store, kafka_bus(producer)), source, policy, events, stop)
    asyncio.run(asyncio.wait_for(intake.run(), 10))
    assert (events.outcomes, events.environment, source.committed) == (
        ["dead_lettered", "planned"], 0, [bad, request("r2")])
    (key, value, headers), command = producer.written
    assert json.loads(command[1])["to_id"] == "room-1"
    held = f"first {KEPT_BYTES} of {len(bad)} bytes"
    assert (key, value, headers[TRUNCATED_HEADER]) == (b"r-bad", bad[:KEPT_BYTES], held)
    assert headers[REASON_HEADER].startswith("invalid job request: ")
    assert headers[REASON_HEADER].endswith(f"; the record holds only its {held} (Kafka refused it whole: "
                                           f"{KafkaError(KafkaError.MSG_SIZE_TOO_LARGE).str()})")


def test_a_dead_letter_past_the_request_limit_is_cut_before_kafka_sees_it() -> None:
    producer = Producer()
    big, long_key = b"{" + b" " * MAX_REQUEST_BYTES, b"k" * 5_000
    kafka_bus(producer).dead_letter(long_key, big, "job request is N bytes, over the 64 MiB limit", "acme")
    (key, value, headers), = producer.written
    held = f"first {KEPT_BYTES} of {len(big)} bytes; key: first {KEPT_KEY_BYTES} of 5000 bytes"
    assert producer.tried == [KEPT_BYTES + KEPT_KEY_BYTES], "the whole was never offered"
    assert (key, value, headers[TRUNCATED_HEADER], headers[TENANT_HEADER]) == (
        long_key[:KEPT_KEY_BYTES], big[:KEPT_BYTES], held, "acme")
    assert headers[REASON_HEADER] == f"job request is N bytes, over the 64 MiB limit; the record holds only its {held}"
    # A long reason is cut, not what the record holds.
    kafka_bus(producer).dead_letter(None, big, "x" * 5_000)
    assert producer.written[1][2][REASON_HEADER].endswith(f"…; the record holds only its first {KEPT_BYTES} of "
                                                          f"{len(big)} bytes")
    assert len(producer.written[1][2][REASON_HEADER]) == MAX_REASON_CHARS


@pytest.mark.parametrize("code", [KafkaError._MSG_TIMED_OUT, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                  KafkaError.UNKNOWN_TOPIC_OR_PART])
def test_a_dead_letter_the_environment_keeps_from_kafka_is_waited_for_never_cut(code: int) -> None:
    producer = Producer(fail=code)
    with pytest.raises(ENVIRONMENT):
        kafka_bus(producer).dead_letter(b"k", request("r1"), "invalid job request: x")
    assert producer.written == [] and producer.tried == [len(request("r1")) + 1], "tried once, whole"


def test_a_dead_letter_topic_that_takes_not_even_the_first_part_is_the_environments_fault() -> None:
    producer = Producer(broker_max=1_000)
    with pytest.raises(ENVIRONMENT, match="refused even a dead-letter record's first"):
        kafka_bus(producer).dead_letter(b"k", b"x" * 100_000, "invalid job request: x")
    assert producer.written == []


def of_size(rid: str, tenant: str | None = None, to_id: str = "room-1", **more: object) -> bytes:
    """A request of 40,000 targets, over :data:`MAX_TENANT_PARSE_BYTES` (its bytes are not read
    again for its tenant), its ``tenant`` (if any) named after them: at the tail, past any head."""
    body = {**json.loads(request(rid, to_id)), **more}
    body["targets"]["items"] += [{"guid": f"g{i % 50}", "to_id": f"room-{i:08d}"} for i in range(40_000)]
    raw = json.dumps(body if tenant is None else {**body, "tenant": tenant}).encode()
    assert len(raw) > MAX_TENANT_PARSE_BYTES
    return raw


def test_a_refused_request_too_large_to_read_again_is_filed_under_the_tenant_it_parsed_to() -> None:
    # The tenant comes from the parse that judged the request: the model's (it could not be
    # planned: past its expire_at), or its JSON object's (the model refused a target), the
    # default tenant's where it names none.
    t0 = datetime.now(UTC)
    refused = [of_size("r-late", "acme", expire_at=t0.isoformat()), of_size("r-long", "globex", to_id="x" * 300),
               of_size("r-untold", to_id="x" * 300)]
    store, bus = Store(), Bus()
    planner = Planner(store, bus)
    handled = [asyncio.run(planner.handle(None, body, t0 + timedelta(seconds=1))) for body in refused]
    assert [h.outcome for h in handled] == ["dead_lettered"] * 3 and store.jobs == {}
    assert "request already expired" in bus.dlq[0][1] and "to_id: String should have at most 256" in bus.dlq[1][1]
    assert bus.tenants == ["acme", "globex", "default"]


def test_a_cut_dead_letter_is_filed_under_its_tenant_and_one_read_at_its_head_says_so() -> None:
    # The dead-letter topic takes 1 MiB: each record below is kept cut. One that parsed names
    # its tenant; bytes that are no JSON are filed under the tenant their head names, marked;
    # one whose head names none is nobody's (an unscoped operator's to see).
    t0 = datetime.now(UTC)
    late = of_size("r-late", "acme", expire_at=t0.isoformat())
    garbled = b'{"request_id": "r-head", "tenant": "globex", "targets": {"items": [' + b"{]" * 1_000_000
    untold = b'{"request_id": "r-tail", "pad": "' + b"x" * 2_000_000 + b'", "tenant": "globex", '
    producer = Producer(broker_max=1_048_576)
    planner = Planner(Store(), kafka_bus(producer))
    handled = [asyncio.run(planner.handle(None, body, t0 + timedelta(seconds=1))) for body in (late, garbled, untold)]
    assert [h.outcome for h in handled] == ["dead_lettered"] * 3
    assert [(value, headers[TRUNCATED_HEADER], headers.get(TENANT_HEADER), headers.get(TENANT_FROM_HEADER))
            for _, value, headers in producer.written] == [
        (late[:KEPT_BYTES], f"first {KEPT_BYTES} of {len(late)} bytes", "acme", None),
        (garbled[:KEPT_BYTES], f"first {KEPT_BYTES} of {len(garbled)} bytes", "globex", "head"),
        (untold[:KEPT_BYTES], f"first {KEPT_BYTES} of {len(untold)} bytes", None, None)]
    # A tenant the planner gives is the record's, whatever its head says.
    kafka_bus(producer).dead_letter(None, garbled, "invalid job request: x", "acme")
    assert (producer.written[-1][2][TENANT_HEADER], TENANT_FROM_HEADER in producer.written[-1][2]) == ("acme", False)


def test_a_cut_dead_letter_record_is_never_republished_as_if_it_were_the_request() -> None:
    whole = DeadLetter(0, 1, datetime.now(UTC), b"k", request("r1"), {REASON_HEADER: "x"}, 10)
    cut = DeadLetter(0, 2, datetime.now(UTC), b"k", request("r1"),
                     {REASON_HEADER: "x", TRUNCATED_HEADER: "first 65536 of 70000000 bytes"}, 65_536)
    assert whole.not_republishable() is None
    assert "holds only part of the refused request (first 65536 of 70000000 bytes)" in (cut.not_republishable() or "")
    settings = KafkaSettings(kafka_bootstrap_servers="127.0.0.1:9", topic_prefix="nowhere")
    with pytest.raises(NotRepublishable):
        dlq.republish(settings, "nowhere.job-requests.dlq", cut, timeout_s=0.1)


def of_tenant(rid: str, tenant: str, **more: object) -> bytes:
    return json.dumps({**json.loads(request(rid)), **more, "tenant": tenant}).encode()


def test_a_request_id_another_tenants_job_has_is_dead_lettered_without_naming_that_tenant() -> None:
    theirs, mine = of_tenant("r1", "acme"), of_tenant("r1", "globex")
    store, bus = Store(), Bus()
    intake, events, source = loop(store, bus, [theirs, mine, theirs])
    asyncio.run(intake.run())
    assert events.outcomes == ["planned", "dead_lettered", "duplicate"] and source.committed == [theirs, mine, theirs]
    assert bus.dlq == [(mine, "request_id 'r1' is already used by another tenant")] and bus.tenants == ["globex"]
    assert len(bus.sent) == 1 and store.tenants == {job_id_for(RequestId("r1")): "acme"}


def test_a_request_id_another_tenant_stored_a_job_under_meanwhile_is_dead_lettered_too() -> None:
    store, bus = Store(), Bus()
    planner = Planner(store, bus)
    assert asyncio.run(planner.handle(None, of_tenant("r1", "acme"))).outcome == "planned"
    store.hidden = 1  # acme's job stored while globex's request was judged: its store() finds the id taken
    h = asyncio.run(planner.handle(None, of_tenant("r1", "globex")))
    assert (h.outcome, h.reason, bus.tenants) == ("dead_lettered", "request_id 'r1' is already used by another tenant",
                                                  ["globex"])


def test_a_requery_jobs_id_stored_meanwhile_and_published_as_a_snapshot_leaves_it_a_requery_job() -> None:
    # The requery job is stored while the snapshot request under its id is judged: its store()
    # finds the id taken, and the job as stored is what came again, not what the new bytes say.
    store, bus = Store(), Bus()
    planner = Planner(store, bus)
    paged = json.dumps({**json.loads(request("q1")), "targets": {
        "mode": "requery", "url": "http://audience.invalid/people", "page_size": 10}}).encode()
    first = asyncio.run(planner.handle(None, paged))
    assert (first.outcome, first.paging) == ("paging", True)
    store.hidden = 1
    again = asyncio.run(planner.handle(None, request("q1")))
    assert (again.outcome, again.job_id, again.items, again.paging) == ("duplicate", first.job_id, 0, True)
    # Never marked dispatched as if a snapshot's items had gone out: that would end its paging.
    assert store.jobs == {first.job_id: False} and bus.sent == [] and bus.dlq == []


def test_a_refused_request_under_another_tenants_id_is_refused_not_taken_for_that_job() -> None:
    # Judged invalid (past its expire_at): its own reason, not the other tenant's job again,
    # however large; the same tenant's is that job delivered again.
    t0 = datetime.now(UTC)
    late = t0.isoformat()
    pad = [{"guid": f"g{i % 50}", "to_id": f"room-{i:08d}"} for i in range(30_000)]
    large = json.dumps({**json.loads(of_tenant("r1", "globex", expire_at=late)), "targets": {"items": pad}}).encode()
    assert len(large) > MAX_TENANT_PARSE_BYTES
    store, bus = Store(), Bus()
    planner = Planner(store, bus)
    asyncio.run(planner.handle(None, of_tenant("r1", "acme", expire_at=(t0 + timedelta(hours=1)).isoformat()), t0))
    handled = [asyncio.run(planner.handle(None, body, t0 + timedelta(seconds=1)))
               for body in (of_tenant("r1", "globex", expire_at=late), large, of_tenant("r1", "acme", expire_at=late))]
    assert [h.outcome for h in handled] == ["dead_lettered", "dead_lettered", "duplicate"]
    assert all("request already expired" in reason for _, reason in bus.dlq) and bus.tenants == ["globex", "globex"]
