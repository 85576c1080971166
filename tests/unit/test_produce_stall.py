"""A producer that serves no delivery report at all (stalled) is told from one that is slow but
moving, by ``produce_all_async``, ``produce_all`` and the planner's dead-letter wait; only
the first is replaced, once, and the client it was is destroyed off the caller's thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pacer_common.kafka import ProduceError, ProduceStalled, produce_all, produce_all_async
from pacer_planner.adapters import kafka as planner_kafka
from pacer_planner.adapters.kafka import KafkaCommandBus


class Paced:
    """A producer stand-in that acknowledges one queued message every ``every_s`` (never, with
    ``None``); ``full`` refuses every message as a full local queue does."""

    def __init__(self, every_s: float | None, full: bool = False) -> None:
        self.every_s = every_s
        self.full = full
        self.queued: list[Callable[[Any, Any], None]] = []
        self.last = time.monotonic()
        self.purged: dict[str, Any] | None = None
        self.on_poll: Callable[[], None] = lambda: None

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any, on_delivery: Any) -> None:
        if self.full:
            raise BufferError("Local: Queue full")
        self.queued.append(on_delivery)

    def purge(self, **flags: Any) -> None:
        self.purged = flags

    def poll(self, timeout: float) -> int:
        self.on_poll()
        if self.every_s is None or not self.queued or time.monotonic() - self.last < self.every_s:
            threading.Event().wait(min(timeout, 0.01))  # as librdkafka waits for an event
            return 0
        self.last = time.monotonic()
        self.queued.pop(0)(None, None)
        return 1

    def flush(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.queued and time.monotonic() < deadline:
            self.poll(min(0.01, max(0.0, deadline - time.monotonic())))
        return len(self.queued)


MSGS = [("t", b"k", b"v", None)] * 15


def test_a_producer_that_acknowledges_nothing_stalls_long_before_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(ProduceStalled, match="15 of this batch's 15 message"):
        asyncio.run(produce_all_async(Paced(None), MSGS, timeout_s=30.0, stall_s=0.3))  # type: ignore[arg-type]
    with pytest.raises(ProduceStalled, match="15 message"):
        produce_all(Paced(None), MSGS, timeout_s=30.0, stall_s=0.3)  # type: ignore[arg-type]
    assert time.monotonic() - started < 20, "the stall must be seen after stall_s, not the timeout"


def test_a_slow_producer_that_keeps_acknowledging_is_not_stalled() -> None:
    # 15 acknowledgements 0.1 s apart: 1.5 s in all, never 0.6 s without one
    assert asyncio.run(produce_all_async(Paced(0.1), MSGS, timeout_s=30.0, stall_s=0.6)) == 15  # type: ignore[arg-type]
    assert produce_all(Paced(0.1), MSGS, timeout_s=30.0, stall_s=0.6) == 15  # type: ignore[arg-type]


def test_a_local_queue_that_stays_full_is_a_stall_not_a_wait_for_ever() -> None:
    with pytest.raises(ProduceStalled, match="local queue is full"):
        produce_all(Paced(None, full=True), MSGS, timeout_s=30.0, stall_s=0.3)  # type: ignore[arg-type]
    with pytest.raises(ProduceStalled, match="local queue is full"):
        asyncio.run(produce_all_async(Paced(None, full=True), MSGS, timeout_s=30.0, stall_s=0.3))  # type: ignore[arg-type]


def test_without_a_stall_time_only_the_timeout_ends_the_wait() -> None:
    with pytest.raises(ProduceError) as caught:
        asyncio.run(produce_all_async(Paced(None), MSGS, timeout_s=0.5))  # type: ignore[arg-type]
    assert not isinstance(caught.value, ProduceStalled)


def _bus(first: Paced, stall_s: float) -> tuple[KafkaCommandBus, list[Paced]]:
    renewed: list[Paced] = []

    def renew() -> Paced:
        renewed.append(Paced(0.0))
        return renewed[-1]

    return KafkaCommandBus(first, lambda lane: f"c.{lane}", "dlq", renew=renew, stall_s=stall_s), renewed  # type: ignore[arg-type]


def test_the_planner_s_threads_stalling_at_once_replace_the_producer_once() -> None:
    from tests.integration.helpers import cmd

    stalled = Paced(None)
    bus, renewed = _bus(stalled, stall_s=0.3)
    errors: list[BaseException] = []

    def dispatch(n: int) -> None:
        try:
            bus.dispatch([cmd(f"i{n}", f"k{n}")])
        except ProduceError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=dispatch, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 3 and all(isinstance(e, ProduceStalled) for e in errors), errors
    assert len(renewed) == 1 and bus.producer is renewed[0] and bus.client.renewals == 1
    assert stalled.purged == {"in_queue": True, "in_flight": True}


def test_a_planner_dead_letter_on_a_stalled_producer_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_kafka, "DLQ_TIMEOUT_S", 10.0)
    stalled = Paced(None)
    bus, renewed = _bus(stalled, stall_s=0.3)
    started = time.monotonic()
    with pytest.raises(ProduceStalled):
        bus.dead_letter(b"k", b"{}", "bad request")
    assert time.monotonic() - started < 5, "the stall, not the record's 10 s, ends the wait"
    assert renewed and bus.producer is renewed[0], "the next attempt must go through a new producer"
    assert stalled.purged == {"in_queue": True, "in_flight": True}


def test_a_dead_letter_waiting_on_a_producer_busy_with_others_does_not_replace_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports keep coming for other callers' messages (a pager's commands): the producer is
    alive; the record waits out its own time and fails, to be tried again."""
    monkeypatch.setattr(planner_kafka, "DLQ_TIMEOUT_S", 1.0)
    busy = Paced(None)
    bus, renewed = _bus(busy, stall_s=0.3)

    def others_reported() -> None:
        bus.client.current[1].reported_at = time.monotonic()

    busy.on_poll = others_reported
    with pytest.raises(ProduceError) as caught:
        bus.dead_letter(b"k", b"{}", "bad request")
    assert not isinstance(caught.value, ProduceStalled) and renewed == [] and bus.producer is busy


def test_a_retired_producer_is_destroyed_on_the_reaper_thread_once_nothing_else_holds_it() -> None:
    """Destroying a client joins its threads: never on the caller's thread (an event loop)."""
    from pacer_common.kafka import retire

    destroyed_on: list[str] = []
    held = threading.Event()

    class Client:
        def __del__(self) -> None:
            destroyed_on.append(threading.current_thread().name)
            held.set()

    client: Client | None = Client()
    retire(client, within_s=60.0)  # type: ignore[arg-type]
    assert not held.wait(1.0), "destroyed while the caller still held it"
    client = None
    assert held.wait(10.0), "not destroyed once let go"
    assert destroyed_on == ["pacer-producer-reaper"]
