"""Fakes and helpers for driving a Dispatcher in unit tests: a lease store that grants all,
an in-memory guid queue, an executor that records what it sent, and a dispatcher built on them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import Executed
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.order import Queued, fair_order, sheds
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.ports import GuidLease, Ready, Waiting


class GrantAll:
    """A lease store that grants every guid except those listed as held elsewhere."""

    def __init__(self, held_elsewhere: set[str] | None = None) -> None:
        self.held_elsewhere = held_elsewhere or set()
        self.asked = 0
        self.released: list[str] = []

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        self.asked += 1
        now = datetime.now(UTC)
        return [GuidLease(g, 1, None, False, now) for g in guids if g not in self.held_elsewhere]

    async def renew(self, held: Mapping[str, int], owner: str) -> set[str]:
        return set(held)

    async def release(self, guids: Sequence[str], owner: str) -> int:
        self.released.extend(guids)
        return len(guids)


class Store:
    """Postgres as the dispatcher sees it: the pending items of every guid, in order."""

    def __init__(self) -> None:
        self.pending: dict[str, ItemCommand] = {}
        self.created: dict[str, float] = {}
        self.failed: dict[str, tuple[str, str]] = {}
        self.shed_by: dict[str, float] = {}  # item id → the interval it was shed at
        self.reads: list[tuple[str, int]] = []

    def add(self, *cmds: ItemCommand) -> None:
        for c in cmds:
            self.pending[c.item_id] = c
            self.created.setdefault(c.item_id, time.time() + len(self.created) * 1e-6)

    def _ready(self, guid: str, exclude: Sequence[str] = ()) -> list[ItemCommand]:
        """The guid's ready items in the send order of domain/order.py, as next_ready.sql reads them."""
        now = datetime.now(UTC)
        ready = {c.item_id: c for c in self.pending.values() if c.guid == guid and c.item_id not in exclude
                 and (c.not_before is None or c.not_before <= now)}
        return [ready[q.item_id] for q in fair_order(
            Queued(c.item_id, c.job_id, c.priority, (c.not_before.timestamp() if c.not_before else self.created[i]))
            for i, c in ready.items())]

    async def next_ready(self, guid: str, exclude: Sequence[str], limit: int) -> Ready:
        self.reads.append((guid, limit))
        now = datetime.now(UTC)
        mine = [c for c in self.pending.values() if c.guid == guid]
        due = [c.not_before for c in mine if c.not_before is not None and c.not_before > now]
        return Ready(self._ready(guid, exclude)[:limit], (min(due) - now).total_seconds() if due else None)

    async def shed(self, guid: str, interval_s: float) -> int:
        batch = [c for c in self._ready(guid) if c.priority > 1]
        gone = [c for p, c in enumerate(batch, 1)
                if sheds(p, c.expire_at.timestamp() if c.expire_at else None, time.time(), interval_s)]
        for c in gone:
            del self.pending[c.item_id]
            self.shed_by[c.item_id] = interval_s
        return len(gone)

    async def waiting_guids(self, horizon_s: float, grace_s: float) -> list[Waiting]:
        soon = datetime.now(UTC) + timedelta(seconds=horizon_s)
        return [Waiting(g, True) for g in sorted({c.guid for c in self.pending.values()
                                                  if c.not_before is None or c.not_before <= soon})]

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        if self.pending.pop(cmd.item_id, None) is None:
            return False
        self.failed[cmd.item_id] = (error_class, reason)
        return True


class Recorder:
    """Executes an item as begin_send would: only if it is still pending in the store."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store or Store()
        self.sent: list[tuple[str, str, float]] = []

    async def execute(self, cmd: ItemCommand) -> Executed:
        await asyncio.sleep(0)  # as a database or gateway call would, let other guids run
        if self.store.pending.pop(cmd.item_id, None) is None:
            return Executed("not_pending", False)
        self.sent.append((cmd.guid, name(cmd.item_id), time.monotonic()))
        return Executed("confirmed", True)


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


def ring(d: Dispatcher, store: Store, c: ItemCommand) -> None:
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
