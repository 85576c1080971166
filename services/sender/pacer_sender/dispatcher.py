"""Per-guid serial execution, guids in parallel, paced; offsets committed only when done.

Each guid with work has one worker task that takes its most urgent ready item, waits out
the guid's pacing gap, and executes it. The Kafka poll loop never waits on pacing: it only
hands envelopes over and pauses partitions when too much is buffered.

A guid with more batch commands than ``guid_cap`` in memory *parks* the rest: only the
item id and the offset are kept (the offset stays uncommitted), and the worker reads the
commands back from Postgres as its queue runs low. A campaign backlog of one guid thus
never fills its partition's share of the buffer, and the other guids of that partition
keep being read: no head-of-line blocking across guids, with memory bounded by
``guid_cap`` commands per guid plus a small entry per parked command.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.offsets import PartitionOffsets
from pacer_sender.domain.pacing import GuidPacer, Lane, Limits, lane_of
from pacer_sender.domain.queue import GuidLanes
from pacer_sender.leases import GuidLeases

log = logging.getLogger(__name__)
TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Envelope:
    tp: TP
    offset: int
    cmd: ItemCommand


class Dispatcher:
    def __init__(self, executor: Executor, limits: Callable[[str], Limits], leases: GuidLeases, *,
                 on_executed: Callable[[Envelope, Executed], None] | None = None,
                 job_interval: Callable[[str], float | None] = lambda job_id: None,
                 read_back: Callable[[Sequence[str]], Awaitable[list[ItemCommand]]] | None = None,
                 guid_cap: int = 50,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.executor = executor
        self.limits = limits  # guid → its current limits (hot-adjustable)
        self.job_interval = job_interval  # job → its own interval per guid, if set (hot-adjustable)
        self.max_idle_s = 30.0  # a waiting guid re-checks at least this often (changes wake it sooner)
        self.fatal: BaseException | None = None
        self.leases = leases
        self.lease_retry_s = 1.0
        self.guid_tp: dict[str, TP] = {}
        self.on_executed = on_executed or (lambda env, res: None)
        self.rng = rng or random.Random()
        self.clock = clock
        self.queues: dict[str, GuidLanes[Envelope]] = {}
        self.paces: dict[str, GuidPacer] = {}
        self.wakes: dict[str, asyncio.Event] = {}
        self.workers: dict[str, asyncio.Task[None]] = {}
        self.executing: dict[str, Envelope] = {}
        self._releasing: set[asyncio.Future[None]] = set()
        self.books: dict[TP, PartitionOffsets] = {}
        self.by_lane: dict[Lane, int] = {"online": 0, "batch": 0}  # commands held, per lane
        self.by_tp: dict[TP, int] = {}  # commands held, per partition (flow control)
        # Parking (module docstring): item ids → their still-pending commands, or None: never park.
        self.read_back = read_back
        self.guid_cap = guid_cap  # batch commands of one guid held in memory before parking
        self.parked: dict[str, dict[str, tuple[TP, int]]] = {}  # guid → item id → (tp, offset), oldest first
        self.parked_by_tp: dict[TP, int] = {}  # parked entries, per partition (flow control)
        self._reading: set[str] = set()  # guids reading parked commands back right now
        self._progress = asyncio.Event()

    # -- intake ---------------------------------------------------------------------------
    def submit(self, env: Envelope) -> None:
        book = self.books.setdefault(env.tp, PartitionOffsets())
        book.add(env.offset)
        lanes = self.queues.setdefault(env.cmd.guid, GuidLanes())
        self.guid_tp[env.cmd.guid] = env.tp
        if self._parks(env.cmd, lanes):
            parked = self.parked.setdefault(env.cmd.guid, {})
            if env.cmd.item_id in parked:
                book.done(env.offset)  # a repeated command: the parked entry stands for the item
            else:
                parked[env.cmd.item_id] = (env.tp, env.offset)
                self.parked_by_tp[env.tp] = self.parked_by_tp.get(env.tp, 0) + 1
        else:
            self._hold(lanes, env)
        if env.cmd.guid not in self.workers:
            self.workers[env.cmd.guid] = asyncio.create_task(self._run(env.cmd.guid), name=f"guid:{env.cmd.guid}")

    def _parks(self, cmd: ItemCommand, lanes: GuidLanes[Envelope]) -> bool:
        if self.read_back is None or lane_of(cmd.priority) != "batch":
            return False  # online commands are few and urgent: always in memory
        return bool(self.parked.get(cmd.guid)) or len(lanes.lanes["batch"]) >= self.guid_cap

    def _hold(self, lanes: GuidLanes[Envelope], env: Envelope) -> None:
        lanes.push(env, env.cmd.priority, self._due(env.cmd), env.cmd.job_id)
        self.by_lane[lane_of(env.cmd.priority)] += 1
        self.by_tp[env.tp] = self.by_tp.get(env.tp, 0) + 1
        wake = self.wakes.get(env.cmd.guid)
        if wake is not None:
            wake.set()

    def skip(self, tp: TP, offset: int) -> None:
        """An offset with nothing to execute (unreadable command): count it done."""
        book = self.books.setdefault(tp, PartitionOffsets())
        book.add(offset)
        book.done(offset)

    def _due(self, cmd: ItemCommand) -> float | None:
        if cmd.not_before is None:
            return None
        delta = (cmd.not_before - datetime.now(UTC)).total_seconds()
        return self.clock() + delta if delta > 0 else None

    # -- per-guid worker ------------------------------------------------------------------
    async def _run(self, guid: str) -> None:
        lanes = self.queues[guid]
        pacer = self.paces.setdefault(guid, GuidPacer())
        wake = self.wakes.setdefault(guid, asyncio.Event())
        try:
            while lanes or self.parked.get(guid):
                if self.parked.get(guid) and len(lanes.lanes["batch"]) <= self.guid_cap // 2:
                    if not await self._read_back(guid, lanes):
                        await self._sleep(wake, self.lease_retry_s)
                        continue
                    if not lanes:
                        continue  # every parked item read was finished meanwhile
                limits = self.limits(guid)
                if guid not in self.leases.held and not await self._take_lease(guid, pacer, limits):
                    await self._sleep(wake, self.lease_retry_s)
                    continue
                picked, wait = self._pick(lanes, pacer, limits)
                if picked is None:
                    if wait is None:
                        break
                    await self._sleep(wake, wait)  # the guid's next moment; new work wakes it early
                    continue
                lane, env = picked
                self.executing[guid] = env
                try:
                    result = await self.executor.execute(env.cmd)
                except TransientError:
                    # The database stayed away past the retry deadline. Every step is guarded,
                    # so running the item again is safe: back off, put it back, go on.
                    log.exception("item execution failed; retrying it after a pause")
                    lanes.push(env, env.cmd.priority, self.clock() + 1.0, env.cmd.job_id)
                    continue
                except Exception as exc:
                    self.fatal = exc  # a bug, not weather: stop the service rather than loop
                    raise
                finally:
                    self.executing.pop(guid, None)
                if result.outcome == "guid_lost":
                    self.leases.forget(guid)
                    lanes.push(env, env.cmd.priority, None, env.cmd.job_id)
                    continue
                if result.called_gateway:
                    if result.outcome == "rate_limited":
                        pacer.slowed(lane, limits, self.clock(), self.rng)
                    else:
                        pacer.sent(lane, limits, self.clock(), time.time(), self.rng,
                                   self.job_interval(env.cmd.job_id))
                self._done(env)
                self.on_executed(env, result)
        finally:
            self.workers.pop(guid, None)
            idle = not lanes and not self.parked.get(guid)
            if idle:
                self.queues.pop(guid, None)
                self.wakes.pop(guid, None)
            tp = self.guid_tp.get(guid)
            if idle and tp is not None and tp not in self.books:
                # Its partition was revoked while it was executing: release() had to leave
                # the lease to it. Give it back now, or it would be renewed for nobody.
                self.guid_tp.pop(guid, None)
                task = asyncio.ensure_future(self.leases.release([guid]))
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)

    async def _read_back(self, guid: str, lanes: GuidLanes[Envelope]) -> bool:
        """Bring the oldest parked commands of ``guid`` back into memory, up to ``guid_cap``.
        Items no longer pending are done. False when the database could not be read."""
        assert self.read_back is not None
        parked = self.parked[guid]
        taken = list(itertools.islice(parked.items(), max(1, self.guid_cap - len(lanes.lanes["batch"]))))
        books = {tp: self.books.get(tp) for _, (tp, _) in taken}
        self._reading.add(guid)
        try:
            found = {c.item_id: c for c in await self.read_back([item_id for item_id, _ in taken])}
        except TransientError:
            log.exception("parked commands of guid %s not read back; trying again", guid)
            return False
        finally:
            self._reading.discard(guid)
        for item_id, (tp, offset) in taken:
            book = self.books.get(tp)
            if book is None or book is not books[tp] or parked.pop(item_id, None) is None:
                continue  # its partition went meanwhile (its next owner reads the command again)
            self.parked_by_tp[tp] -= 1
            cmd = found.get(item_id)
            if cmd is None:
                book.done(offset)  # finished, cancelled or taken since: nothing to send
            else:
                self._hold(lanes, Envelope(tp, offset, cmd))
        if not parked and self.parked.get(guid) is parked:
            del self.parked[guid]
        return True

    async def _take_lease(self, guid: str, pacer: GuidPacer, limits: Limits) -> bool:
        try:
            lease = await self.leases.acquire(guid)
        except TransientError:
            log.exception("guid lease for %s not taken; trying again", guid)
            return False
        if lease is None:
            return False  # another sender still holds the guid (finishing, or not yet expired)
        since = None if lease.last_send_at is None else (lease.db_now - lease.last_send_at).total_seconds()
        pacer.resume_after(self.clock(), since, limits, lease.windows)
        return True

    def _pick(self, lanes: GuidLanes[Envelope], pacer: GuidPacer,
              limits: Limits) -> tuple[tuple[Lane, Envelope] | None, float | None]:
        """The next item to send now (online lane first), or how long to wait (None: no work)."""
        now, wall = self.clock(), time.time()
        wait: float | None = None
        for lane, q in lanes.lanes.items():
            if not q:
                continue
            due = q.next_due()
            if q.has_ready() or (due is not None and due <= now):
                ready_at = pacer.ready_at(lane, limits, now, wall)
                if ready_at <= now:
                    env = q.pop(now)
                    if env is not None:
                        return (lane, env), None
                candidate = ready_at - now
            else:
                candidate = (due or now) - now
            wait = candidate if wait is None else min(wait, candidate)
        return None, wait

    async def _sleep(self, wake: asyncio.Event, seconds: float) -> None:
        """Wait for the guid's next moment; a new command for the guid ends the wait early."""
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=max(0.0, min(seconds, self.max_idle_s)))

    def _done(self, env: Envelope) -> None:
        self.by_lane[lane_of(env.cmd.priority)] -= 1
        self.by_tp[env.tp] = self.by_tp.get(env.tp, 1) - 1
        book = self.books.get(env.tp)
        if book is not None:
            book.done(env.offset)
        self._progress.set()

    # -- commit points, revocation, shutdown ----------------------------------------------
    def commit_points(self, tps: Iterable[TP] | None = None) -> dict[TP, int]:
        out = {}
        for tp in list(self.books) if tps is None else tps:
            book = self.books.get(tp)
            cp = book.commit_point() if book is not None else None  # (an empty book is falsy)
            if cp is not None and cp > book.committed:  # type: ignore[union-attr]
                out[tp] = cp
        return out

    def mark_committed(self, points: dict[TP, int]) -> None:
        for tp, cp in points.items():
            if tp in self.books:
                self.books[tp].committed = cp

    async def release(self, tps: set[TP], timeout_s: float = 30.0) -> dict[TP, int]:
        """Stop work for these partitions: drop queued items, let in-hand ones finish.

        Returns the commit points to commit before the partitions go. Dropped items stay
        uncommitted, so whoever owns the partitions next reads them again.
        """
        for guid, q in list(self.queues.items()):
            for env in q.remove_if(lambda e: e.tp in tps):
                self.by_lane[lane_of(env.cmd.priority)] -= 1
            parked = self.parked.get(guid, {})
            for item_id in [i for i, (tp, _) in parked.items() if tp in tps]:
                del parked[item_id]  # uncommitted: the partition's next owner reads them again
            if not parked:
                self.parked.pop(guid, None)
            task = self.workers.get(guid)
            if not q and not parked and task is not None and guid not in self.executing and guid not in self._reading:
                task.cancel()  # only ever cancelled while waiting, never mid-item
        for tp in tps:
            self.by_tp.pop(tp, None)
            self.parked_by_tp.pop(tp, None)
        deadline = self.clock() + timeout_s
        while any(e.tp in tps for e in self.executing.values()) and self.clock() < deadline:
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), timeout=0.5)
            except TimeoutError:
                pass
        points = self.commit_points(tps)
        for tp in tps:
            self.books.pop(tp, None)
        gone = [g for g, tp in self.guid_tp.items() if tp in tps and g not in self.executing]
        await self.leases.release(gone)
        for g in gone:
            self.guid_tp.pop(g, None)
        return points

    def wake(self, guids: list[str]) -> None:
        """Make waiting workers look again now (their limits changed); ``*`` wakes all."""
        targets = self.wakes.keys() if "*" in guids else [g for g in guids if g in self.wakes]
        for guid in list(targets):
            self.wakes[guid].set()

    @property
    def buffered(self) -> int:
        return sum(self.by_lane.values())

    @property
    def parked_count(self) -> int:
        return sum(self.parked_by_tp.values())

    @property
    def active_guids(self) -> int:
        return len(self.workers)
