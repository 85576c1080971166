"""Per-guid serial execution, guids in parallel, paced; Postgres holds every guid's queue.

A consumed item command is a doorbell: "guid G, whose partition this sender owns, has
work". Each guid with work has one worker task and a small window of ready commands in
memory (``GuidWindow``, at most ``guid_cap`` per lane). A command that fits is held, so
most sends need no read; one that does not fit, a scheduled one, or a doorbell without a
readable command *rings* the window instead, and the worker reads the guid's next ready
items from Postgres as its window runs low. A backlog of any size thus costs one window per
guid, and nothing in memory stands for work Postgres does not also hold.

A worker with nothing ready learns from Postgres when the guid's next scheduled item is
due and sleeps until then (a doorbell wakes it sooner); if that is beyond ``horizon_s`` the
worker ends, and the sweep (``sweeper.py``) starts it again in time. Scheduled work is
never in the window, so it never holds up ready work.

What goes next is decided in Postgres over all of the guid's ready work (``order.py``); the
window is a prefix of that order: when a doorbell sorts ahead of it, or scheduled work comes
due (the worker's waits, pacing gaps included, end then), the head of the order is read at
once and the rest after the guid's next send. A doorbell that changes nothing the worker acts
on does not wake it. A guid's sends are spaced from the start of its last gateway call. While
an online command has waited longer than the guid's ``online_yield_s``, the batch lane
yields entirely. Every ``shed_every_s`` a guid with batch work checks, in Postgres, which of
its batch items cannot go out before their ``expire_at`` at its current rate, and expires
them early (reason ``shed``): the sender is where the guid's rate is known.

What goes wrong with an item stays with that item: the database away (``TransientError``)
is retried without end; a value the item holds that cannot be stored or sent fails it
(``bad_params``, with the reason); any other exception is logged, counted and retried a
few times with backoff, then fails the item as an internal error — but only while it is
pending: a submitted item is the reconciler's to verify. The guid goes on either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import CommandHead, ItemCommand
from pacer_common.domain.requests import Lane, lane_of
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.domain.queue import GuidWindow
from pacer_sender.domain.vetting import unsendable
from pacer_sender.leases import GuidLeases
from pacer_sender.ports import GuidQueueStore, UnstorableItem

log = logging.getLogger(__name__)


@dataclass(eq=False)
class GuidWork:
    """One guid's worker and what it holds."""

    window: GuidWindow
    pacer: GuidPacer
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    executing: ItemCommand | None = None
    due_at: float | None = None  # when its earliest scheduled item in Postgres is due (clock)
    shed_at: float | None = None  # when its batch queue was last checked for shedding (clock)
    stopping: bool = False  # its partition went: finish the item in hand, then end
    revived: bool = False  # rung again while stopping: start afresh once stopped
    errors: dict[str, int] = field(default_factory=dict)  # item id → internal errors so far
    sent: bool = False  # it executed an item since its last refill: time to top up, if low


class Dispatcher:
    def __init__(self, executor: Executor, limits: Callable[[str], Limits], leases: GuidLeases,
                 queue: GuidQueueStore, *,
                 on_executed: Callable[[ItemCommand, Executed], None] | None = None,
                 on_internal_error: Callable[[], None] | None = None,
                 job_interval: Callable[[str], float | None] = lambda job_id: None,
                 job_weight: Callable[[str], float | None] = lambda job_id: None,
                 on_shed: Callable[[int], None] | None = None,
                 shed_every_s: float = 30.0,
                 owns: Callable[[str], bool] = lambda guid: True,
                 guid_cap: int = 50, max_buffered: int = 20_000, horizon_s: float = 60.0,
                 error_attempts: int = 3, error_backoff_s: float = 1.0,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.executor = executor
        self.limits = limits  # guid → its current limits (hot-adjustable)
        self.job_interval = job_interval  # job → its own interval per guid, if set (hot-adjustable)
        self.job_weight = job_weight  # job → its weight in the guid's fair share (hot-adjustable)
        self.on_shed = on_shed or (lambda n: None)
        self.shed_every_s = shed_every_s
        self.leases = leases
        self.queue = queue
        self.owns = owns  # is this guid's partition assigned to this sender?
        self.on_executed = on_executed or (lambda cmd, res: None)
        self.on_internal_error = on_internal_error or (lambda: None)
        self.guid_cap = guid_cap
        self.max_buffered = max_buffered  # batch commands held in memory, all guids together
        self.horizon_s = horizon_s
        self.error_attempts = error_attempts
        self.error_backoff_s = error_backoff_s
        self.rng = rng or random.Random()
        self.clock = clock
        self.max_idle_s = 30.0  # a waiting guid re-checks at least this often (changes wake it sooner)
        self.lease_retry_s = 1.0
        self.guids: dict[str, GuidWork] = {}
        self.paces: dict[str, GuidPacer] = {}  # kept across workers: spacing survives an idle spell
        self.buffered = 0  # commands held in windows
        self._releasing: set[asyncio.Future[None]] = set()
        self._progress = asyncio.Event()

    # -- doorbells ------------------------------------------------------------------------
    def ring(self, guid: str, cmd: ItemCommand | CommandHead | None = None) -> bool:
        """Guid ``guid`` has work (``cmd``, if its command was readable; only its head, if the
        window would not hold it anyway). True if this started a worker for it."""
        g = self.guids.get(guid)
        started = g is None
        if g is None:
            g = self.guids[guid] = GuidWork(GuidWindow(self.guid_cap, self.job_weight),
                                            self.paces.setdefault(guid, GuidPacer()))
        if g.stopping:
            g.revived = True
        before = (g.window.more, g.window.urgent, len(g.window), g.due_at)
        if cmd is None or cmd.guid != guid or _scheduled(cmd) or (
                isinstance(cmd, ItemCommand) and unsendable(cmd) is not None):
            g.window.ring()  # Postgres has it: the worker reads it from there
            if cmd is not None and cmd.guid == guid and _scheduled(cmd) and cmd.not_before is not None:
                due = self.clock() + (cmd.not_before - datetime.now(UTC)).total_seconds()
                g.due_at = due if g.due_at is None else min(g.due_at, due)  # on time, whatever the window holds
        elif isinstance(cmd, CommandHead):
            g.window.note(cmd.priority, cmd.job_id)  # not held: does it sort ahead of the window?
        else:
            held = len(g.window)
            g.window.offer(cmd, lane_of(cmd.priority) == "online" or self.buffered < self.max_buffered, time.time())
            self.buffered += len(g.window) - held
        if started or before != (g.window.more, g.window.urgent, len(g.window), g.due_at):
            g.wake.set()  # else it changes nothing the worker would act on before its next moment
        if g.task is None:
            g.task = asyncio.create_task(self._run(guid, g), name=f"guid:{guid}")
        return started

    def full(self, guid: str) -> bool:
        """Whether a batch command for ``guid`` would not be held (its head is enough)."""
        g = self.guids.get(guid)
        return g is not None and (len(g.window.lanes.lanes["batch"]) >= self.guid_cap
                                  or self.buffered >= self.max_buffered)

    def poke(self, guid: str) -> bool:
        """The sweep found queued work for ``guid``: a worker reads it from Postgres. True if
        that needed a new worker (its doorbell was lost, or handled by a previous owner)."""
        return self.ring(guid)

    # -- per-guid worker ------------------------------------------------------------------
    async def _run(self, guid: str, g: GuidWork) -> None:
        try:
            while not g.stopping:
                if g.due_at is not None and g.due_at <= self.clock():
                    g.due_at = None
                    held = len(g.window)
                    g.window.reorder()  # scheduled work came due: it takes its place in the order
                    self.buffered += len(g.window) - held
                limits = self.limits(guid)
                n = g.window.refill_size()
                # A top-up (the window low, nothing ahead of it) comes right after a send, so a
                # hundred guids whose order changed at once top up spread over their gaps; the
                # window is a prefix of the guid's order, so what it reads goes after.
                if n and (g.window.urgent or not g.window or g.sent) and not await self._refill(guid, g, n):
                    await self._sleep(g, self.lease_retry_s)
                    continue
                if limits.shed and self._shed_due(g, limits):
                    await self._shed(guid, g, limits)
                if not g.window:
                    if g.window.more:
                        continue  # rung while reading: read again
                    if g.due_at is None or g.due_at - self.clock() > self.horizon_s:
                        break  # nothing ready, nothing due soon: the sweep restarts it in time
                    await self._sleep(g, g.due_at - self.clock())
                    continue
                if guid not in self.leases.held and not await self._take_lease(guid, g.pacer, limits):
                    await self._sleep(g, self.lease_retry_s)
                    continue
                picked, wait = self._pick(g, limits)
                if picked is None:
                    await self._sleep(g, wait if wait is not None else self.lease_retry_s)
                    continue
                pause = await self._execute(guid, g, *picked, limits)
                g.sent = True
                if pause:
                    await self._sleep(g, pause)
        except Exception:
            # A bug outside any one item. The guid's work is in Postgres: the next doorbell
            # or sweep starts a fresh worker; the sender itself goes on.
            log.exception("guid worker for %s failed", guid)
            self.on_internal_error()
        finally:
            self._retire(guid, g)

    async def _refill(self, guid: str, g: GuidWork, n: int) -> bool:
        """Read the guid's next ready items from Postgres into its window. False if the
        database could not be read."""
        rings = g.window.refilling()
        g.sent = False
        if self.buffered >= self.max_buffered:
            n = min(n, 1)  # memory is full: enough to keep this guid going
        try:
            ready = await self.queue.next_ready(guid, list(g.window.ids), n)
        except TransientError:
            log.exception("next items of guid %s not read; trying again", guid)
            return False
        if g.stopping:
            return True
        self.buffered += g.window.refilled(ready.commands, n, rings, ready.ready_since, time.time())
        g.due_at = None if ready.due_in_s is None else self.clock() + max(0.0, ready.due_in_s)
        return True

    def _shed_due(self, g: GuidWork, limits: Limits) -> bool:
        """Time to check the guid's batch queue for items that cannot make their expire_at:
        every ``shed_every_s`` while Postgres holds more than the window, or when an item in
        the window itself would miss it. The window holds the head of each job's queue (fair
        share), so a guid none of whose jobs has an expire_at there costs no read."""
        now = self.clock()
        if g.shed_at is not None and now - g.shed_at < self.shed_every_s:
            return False
        batch = g.window.lanes.lanes["batch"].values()
        if not any(c.expire_at is not None for c in batch):
            return False
        if not g.window.more:
            interval, wall = g.pacer.batch_rate_s(limits), time.time()
            if all(c.expire_at is None or c.expire_at.timestamp() > wall + len(batch) * interval for c in batch):
                return False
        return True

    async def _shed(self, guid: str, g: GuidWork, limits: Limits) -> None:
        g.shed_at = self.clock()
        try:
            shed = await self.queue.shed(guid, g.pacer.batch_rate_s(limits))
        except TransientError:
            log.exception("batch queue of guid %s not checked for shedding; trying again later", guid)
            return
        if shed:
            log.warning("guid %s: %d batch items shed (they could not go out before their expire_at)", guid, shed)
            self.on_shed(shed)
            held = len(g.window)
            g.window.drop("batch")  # some may be among those shed: read the rest afresh
            g.window.ring()
            self.buffered += len(g.window) - held

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

    def _pick(self, g: GuidWork, limits: Limits) -> tuple[tuple[Lane, ItemCommand] | None, float | None]:
        """The next item to send now (online lane first), or how long to wait."""
        now, wall = self.clock(), time.time()
        wait: float | None = None
        for lane, q in g.window.lanes.lanes.items():
            if not q:
                continue
            if lane == "batch" and self._online_behind(g, limits, wall):
                continue  # the online lane is behind: batch yields until it recovers
            ready_at = g.pacer.ready_at(lane, limits, now, wall)
            if ready_at <= now:
                cmd = g.window.take(lane)
                if cmd is not None:
                    self.buffered -= 1
                    return (lane, cmd), None
            wait = ready_at - now if wait is None else min(wait, ready_at - now)
        return None, wait

    @staticmethod
    def _online_behind(g: GuidWork, limits: Limits, wall: float) -> bool:
        oldest = g.window.oldest("online")
        return oldest is not None and wall - oldest > limits.online_yield_s

    async def _execute(self, guid: str, g: GuidWork, lane: Lane, cmd: ItemCommand, limits: Limits) -> float:
        """Execute one item; returns how long the worker should pause afterwards."""
        g.executing = cmd
        try:
            reason = unsendable(cmd)
            if reason is not None:
                raise UnstorableItem(reason)
            result = await self.executor.execute(cmd)
        except TransientError:
            # The database stayed away past the retry deadline. Every step is guarded, so
            # running the item again is safe: put it back, pause, go on.
            log.exception("item %s not executed: database unavailable; retrying it", cmd.item_id)
            return self._put_back(g, cmd, self.lease_retry_s)
        except UnstorableItem as exc:
            await self._fail(g, cmd, "bad_params", f"cannot be sent as it stands: {exc}")
            return 0.0
        except Exception as exc:
            log.exception("internal error executing item %s", cmd.item_id)
            self.on_internal_error()
            n = g.errors[cmd.item_id] = g.errors.get(cmd.item_id, 0) + 1
            if n < self.error_attempts:
                return self._put_back(g, cmd, min(60.0, self.error_backoff_s * 2 ** (n - 1)))
            await self._fail(g, cmd, "bad_params", f"internal error: {type(exc).__name__}: {exc}")
            return 0.0
        finally:
            g.executing = None
            self._progress.set()
        if result.outcome == "guid_lost":
            self.leases.forget(guid)
            return self._put_back(g, cmd, 0.0)
        if result.called_gateway:
            # Spaced from the moment the gateway was called (what the recipient sees), not from
            # the end of the confirmation: a send that takes 50 ms must not stretch the interval.
            at = self.clock() if result.called_at is None else min(result.called_at, self.clock())
            if result.outcome == "rate_limited":
                g.pacer.slowed(lane, limits, at, self.rng)
            else:
                g.pacer.sent(lane, limits, at, time.time(), self.rng, self.job_interval(cmd.job_id))
        g.window.finished(cmd)
        g.errors.pop(cmd.item_id, None)
        self.on_executed(cmd, result)
        return 0.0

    def _put_back(self, g: GuidWork, cmd: ItemCommand, pause: float) -> float:
        if not g.stopping:
            g.window.put(cmd, time.time())
            self.buffered += 1
        else:
            g.window.finished(cmd)
        return pause

    async def _fail(self, g: GuidWork, cmd: ItemCommand, error_class: str, reason: str) -> None:
        """Fail a pending item with ``reason``; an item no longer pending is left alone."""
        g.errors.pop(cmd.item_id, None)
        g.window.finished(cmd)
        try:
            moved = await self.queue.fail_unsent(cmd, error_class, reason)
        except TransientError:
            log.exception("item %s not failed: database unavailable; it stays pending", cmd.item_id)
            g.window.ring()  # read again from Postgres later
            return
        except UnstorableItem:
            moved = False  # not even its id can be stored: a bogus command; the row, if any, is swept
        if moved:
            log.warning("item %s failed (%s): %s", cmd.item_id, error_class, reason)
            self.on_executed(cmd, Executed("failed", False))
        else:
            log.warning("item %s not failed (no longer pending; a submitted one is verified): %s",
                        cmd.item_id, reason)

    async def _sleep(self, g: GuidWork, seconds: float) -> None:
        """Wait for the guid's next moment; a doorbell for the guid ends the wait early, and so
        does its scheduled work coming due (so it takes its place in the window while the guid
        waits out its pacing gap, not after)."""
        if g.due_at is not None:
            seconds = min(seconds, g.due_at - self.clock())
        g.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(g.wake.wait(), timeout=max(0.0, min(seconds, self.max_idle_s)))

    def _retire(self, guid: str, g: GuidWork) -> None:
        """A worker ended: forget the guid's window; give its lease back if the guid is no
        longer this sender's (its partition went while an item was in hand)."""
        if self.guids.get(guid) is g:
            del self.guids[guid]
        self.buffered -= g.window.clear()
        if g.revived and self.owns(guid):
            self.ring(guid)  # rung again meanwhile: a fresh worker reads Postgres
        elif not self.owns(guid) and guid in self.leases.held:
            task = asyncio.ensure_future(self.leases.release([guid]))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    # -- revocation, shutdown, hot limits --------------------------------------------------
    async def release(self, gone: Callable[[str], bool], timeout_s: float = 30.0) -> None:
        """Stop the workers of the guids for which ``gone(guid)``: drop their windows (their
        work stays in Postgres for the next owner), let items in hand finish, and give the
        guids' leases back."""
        stopped = {guid: g for guid, g in self.guids.items() if gone(guid)}
        for guid, g in stopped.items():
            g.stopping = True
            g.revived = False
            self.buffered -= g.window.clear()
            if g.executing is None:
                del self.guids[guid]
                if g.task is not None:
                    g.task.cancel()  # only ever cancelled between items, never mid-item
        deadline = self.clock() + timeout_s
        while any(g.executing is not None for g in stopped.values()) and self.clock() < deadline:
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), timeout=0.5)
        # Every lease of a guid that went, workers or not (idle guids keep theirs), except
        # those with an item still in hand: their workers give them back when it is done.
        in_hand = {guid for guid, g in stopped.items() if g.executing is not None}
        await self.leases.release([guid for guid in list(self.leases.held) if gone(guid) and guid not in in_hand])

    def wake(self, guids: list[str]) -> None:
        """Make waiting workers look again now (their limits changed); ``*`` wakes all."""
        targets = list(self.guids) if "*" in guids else [g for g in guids if g in self.guids]
        for guid in targets:
            self.guids[guid].wake.set()

    @property
    def active_guids(self) -> int:
        return len(self.guids)


def _scheduled(cmd: ItemCommand | CommandHead) -> bool:
    return cmd.not_before is not None and cmd.not_before > datetime.now(UTC)
