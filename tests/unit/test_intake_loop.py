"""The intake loop tells a message's fault from the environment's and from its own bugs."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.dead_letters import MAX_TENANT_PARSE_BYTES
from pacer_common.domain.ids import Guid, RequestId, job_id_for
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

    async def store(self, plan: Plan) -> Stored:
        if self.fail:
            raise self.fail.pop(0)
        created = plan.job_id not in self.jobs
        self.jobs.setdefault(plan.job_id, False)
        return Stored(plan.job_id, created, self.jobs[plan.job_id], {k: 1 for k in plan.shards})

    async def pending_commands(self, job_id: str) -> Sequence[ItemCommand]:
        return []

    async def mark_dispatched(self, job_id: str) -> None:
        self.jobs[job_id] = True

    async def queued(self, guids: Sequence[Guid]) -> dict[Guid, int]:
        return {}

    async def known(self, request_id: str) -> Known | None:
        job_id = job_id_for(RequestId(request_id))
        return Known(job_id, self.jobs[job_id], paging=False) if job_id in self.jobs else None


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
    store, bus = Store(fail=[StoreRefused("DataError: value out of range")]), Bus()
    intake, events, _ = loop(store, bus)
    h = asyncio.run(intake.process(None, request("r1")))
    assert h.outcome == "dead_lettered" and events.internal == 0 and store.jobs == {}
    assert bus.dlq == [(request("r1"), "cannot store job request: DataError: value out of range")]


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
    store.fail.append(StoreRefused("RefusedError: tenant acme holds 3 guids, max_guids 2"))
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
    store, bus = Store(fail=[StoreRefused("DataError: value out of range")]), Bus()
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
