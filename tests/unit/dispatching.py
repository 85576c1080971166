"""Helpers for driving a Dispatcher in unit tests: an executor that records what it sent,
commands, and a dispatcher built on the fakes of ``fakes.py`` (a lease store that grants
all, the in-memory guid queue)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import Executed
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from tests.unit.fakes import GrantAll, InMemoryGuidQueue

BeforeCall = Callable[[], Awaitable[bool]] | None


EPS = 1e-6  # a difference of two clock readings, rounded


class SteppedClock:
    """``time.monotonic()``, moved on at once by :meth:`advance`: a step that took that long,
    without waiting for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class Recorder:
    """Executes an item as begin_send would: only if it is still pending in the store. The
    n-th claim takes ``claims[n]`` seconds of ``clock`` (the last, once they run out; give the
    dispatcher the same clock); ``sent`` holds each gateway call's start, ``claimed`` each
    claim's start, ``yielded`` each item that gave its turn up (pending again at once, as
    the reconciler makes it; its doorbell, which the reconciler publishes, is the test's)."""

    def __init__(self, store: InMemoryGuidQueue | None = None, claims: Sequence[float] = (0.0,)) -> None:
        self.store = store or InMemoryGuidQueue()
        self.claims = claims
        self.clock = SteppedClock()
        self.sent: list[tuple[str, str, float]] = []
        self.claimed: list[tuple[str, float]] = []
        self.spares: list[float] = []  # each execution's spare_s
        self.yielded: list[ItemCommand] = []

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        claim_s = self.claims[min(len(self.claimed), len(self.claims) - 1)]
        self.spares.append(spare_s)
        self.claimed.append((name(cmd.item_id), self.clock()))
        self.clock.advance(claim_s)
        await asyncio.sleep(0)  # as a database or gateway call would, let other guids run
        if self.store.pending.pop(cmd.item_id, None) is None:
            return Executed("not_pending", False)
        if before_call is not None and not await before_call():
            self.store.add(cmd)  # waiting_retry, then pending again: nothing was sent
            self.yielded.append(cmd)
            return Executed("yielded", False, claim_s=claim_s)
        self.sent.append((cmd.guid, name(cmd.item_id), self.clock()))
        return Executed("confirmed", True, claim_s=claim_s)


def item_id(guid: str, n: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"{guid}-{n}"))


NAMES: dict[str, str] = {}


def name(item: str) -> str:
    return NAMES.get(item, item)


def cmd(guid: str, n: int, priority: int = 3, job: str = "j", not_before: datetime | None = None,
        content: str = "x") -> ItemCommand:
    i = item_id(guid, n)
    NAMES[i] = f"{guid}-{n}"
    return ItemCommand(item_id=i, job_id=job, shard_id=1, guid=guid, to_id=f"r{n}", content=content,
                       idem_key=f"k-{guid}-{n}", priority=priority, kind="campaign", not_before=not_before)


def ring(d: Dispatcher, store: InMemoryGuidQueue, c: ItemCommand) -> None:
    """The planner's order: the item row first, then its command (a doorbell)."""
    store.add(c)
    d.ring(c.guid, c)


async def until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def dispatcher(limits: Limits, store: GrantAll | None = None, cap: int = 50, executor: Recorder | None = None,
               **kw: Any) -> tuple[Dispatcher, Recorder, dict[str, Limits]]:
    rec = executor or Recorder()
    table: dict[str, Limits] = {}
    d = Dispatcher(rec, lambda g: table.get(g, limits), GuidLeases(store or GrantAll(), "me", 30.0),  # type: ignore[arg-type]  # a Recorder for the Executor
                   rec.store, guid_cap=cap, **kw)
    d.lease_retry_s = 0.02
    return d, rec, table


def stop(d: Dispatcher) -> None:
    for g in d.guids.values():
        if g.task is not None:
            g.task.cancel()


FAST = Limits(min_interval_s=0.0, jitter_s=0.0)


async def unchanged_counts() -> None:
    """A sweep's fresh read of the partition counts: nothing changed."""
