"""``produce_all_async`` tells a producer that acknowledges nothing (stalled) from one that is
slow but moving: only a wait with no delivery report at all for ``stall_s`` is a stall."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from pacer_common.kafka import ProduceError, ProduceStalled, produce_all_async


class Paced:
    """A producer stand-in that acknowledges one queued message every ``every_s`` (never, with
    ``None``)."""

    def __init__(self, every_s: float | None) -> None:
        self.every_s = every_s
        self.queued: list[Callable[[Any, Any], None]] = []
        self.last = time.monotonic()

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any, on_delivery: Any) -> None:
        self.queued.append(on_delivery)

    def poll(self, timeout: float) -> int:
        if self.every_s is None or not self.queued or time.monotonic() - self.last < self.every_s:
            return 0
        self.last = time.monotonic()
        self.queued.pop(0)(None, None)
        return 1


MSGS = [("t", b"k", b"v", None)] * 6


def test_a_producer_that_acknowledges_nothing_stalls_long_before_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(ProduceStalled, match="6 of this batch's 6 message"):
        asyncio.run(produce_all_async(Paced(None), MSGS, timeout_s=30.0, stall_s=0.3))  # type: ignore[arg-type]
    assert time.monotonic() - started < 10, "the stall must be seen after stall_s, not the timeout"


def test_a_slow_producer_that_keeps_acknowledging_is_not_stalled() -> None:
    # 6 acknowledgements 0.1 s apart: 0.6 s in all, twice the stall time, never 0.3 s without one
    assert asyncio.run(produce_all_async(Paced(0.1), MSGS, timeout_s=30.0, stall_s=0.3)) == 6  # type: ignore[arg-type]


def test_without_a_stall_time_only_the_timeout_ends_the_wait() -> None:
    with pytest.raises(ProduceError) as caught:
        asyncio.run(produce_all_async(Paced(None), MSGS, timeout_s=0.5))  # type: ignore[arg-type]
    assert not isinstance(caught.value, ProduceStalled)


def test_a_retired_producer_is_destroyed_on_the_reaper_thread_once_nothing_else_holds_it() -> None:
    """Destroying a client joins its threads: never on the caller's thread (an event loop)."""
    import threading

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
