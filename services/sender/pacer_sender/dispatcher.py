"""Doorbells in, one worker per guid out; Postgres holds every guid's queue.

A consumed item command is a doorbell: "guid G, whose partition this sender owns, has
work". Each guid with work has one worker (``worker.py``: serial, paced, reading the guid's
ready work from Postgres) and a small window of ready commands in memory. A command that
fits is held (``flow.py`` keeps the memory of all windows bounded), so most sends need no
read; one that does not fit, a scheduled one, or a doorbell without a readable command
*rings* the window instead. A backlog of any size thus costs one window per guid, and
nothing in memory stands for work Postgres does not also hold.

What goes next is decided in Postgres over all of the guid's ready work (``order.py``); the
window is a prefix of that order: when a doorbell sorts ahead of it, or scheduled work comes
due, the worker reads the head of the order at once and the rest after its next send. A
doorbell for a guid whose window would not hold it anyway is read only for its head
(``CommandHead``: lane, priority, job, due time), enough to tell whether it sorts ahead; a
doorbell that changes nothing the worker acts on does not wake it. The guid's lease is taken
before its first send and given back when its partition goes (``leasing.py``); what goes
wrong with one item stays with that item (``execution.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pacer_common.domain.commands import CommandHead, ItemCommand
from pacer_common.domain.requests import Lane
from pacer_sender.core import Executed, Executor
from pacer_sender.crew import QUIET_WAIT_S, Crew, Hooks, WorkerConfig
from pacer_sender.domain.pacing import ClaimAhead, GuidPacer, Limits
from pacer_sender.domain.vetting import unsendable
from pacer_sender.flow import Buffer
from pacer_sender.leases import GuidLeases
from pacer_sender.leasing import LeaseKeeper
from pacer_sender.ports import GuidQueueStore
from pacer_sender.worker import GuidWorker


class Dispatcher:
    def __init__(self, executor: Executor, limits: Callable[[str], Limits], leases: GuidLeases,
                 queue: GuidQueueStore, *,
                 on_executed: Callable[[ItemCommand, Executed], None] | None = None,
                 on_internal_error: Callable[[], None] | None = None,
                 job_interval: Callable[[str], float | None] = lambda job_id: None,
                 job_weight: Callable[[str], float | None] = lambda job_id: None,
                 on_shed: Callable[[int], None] | None = None,
                 on_send_delay: Callable[[Lane, float], None] | None = None,
                 shed_every_s: float = 30.0,
                 owns: Callable[[str], bool] = lambda guid: True,
                 guid_cap: int = 50, max_buffered: int = 20_000, guid_cap_max: int | None = None,
                 horizon_s: float = 60.0, idle_lease_s: float = 60.0,
                 error_attempts: int = 3, error_backoff_s: float = 1.0, first_send_spread: float = 0.0,
                 claim_ahead_s: float = 0.0, quiet_wait_s: float = QUIET_WAIT_S,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = leases
        self.owns = owns  # is this guid's partition assigned to this sender?
        hooks = Hooks(job_interval=job_interval, job_weight=job_weight)
        if on_executed is not None:
            hooks.on_executed = on_executed
        if on_internal_error is not None:
            hooks.on_internal_error = on_internal_error
        if on_shed is not None:
            hooks.on_shed = on_shed
        if on_send_delay is not None:
            hooks.on_send_delay = on_send_delay
        rng = rng or random.Random()
        self.guids: dict[str, GuidWorker] = {}
        self.crew = Crew(executor, limits, queue, Buffer(guid_cap, max_buffered, lambda: len(self.guids), guid_cap_max),
                         LeaseKeeper(leases, clock, idle_lease_s),
                         WorkerConfig(shed_every_s=shed_every_s, horizon_s=horizon_s, error_attempts=error_attempts,
                                      error_backoff_s=error_backoff_s, first_send_spread=first_send_spread,
                                      quiet_wait_s=quiet_wait_s),
                         hooks, rng, clock, owns=lambda guid: self.owns(guid), ahead=ClaimAhead(claim_ahead_s))
        self.paces: dict[str, GuidPacer] = {}  # kept across workers: spacing survives an idle spell
        leases.quiet = self._hushed

    def _hushed(self, guid: str, seconds: float) -> None:
        """A renewal found a quiet a gateway asked of a held guid (another caller's): its pacer
        holds every call of the guid until it ends."""
        self.paces.setdefault(guid, GuidPacer()).hush(self.crew.clock() + seconds)

    @property
    def buffered(self) -> int:
        """Commands held in memory by every guid's window."""
        return self.crew.buffer.held

    @property
    def active_guids(self) -> int:
        return len(self.guids)

    @property
    def lease_retry_s(self) -> float:
        return self.crew.config.lease_retry_s

    @lease_retry_s.setter
    def lease_retry_s(self, seconds: float) -> None:
        self.crew.config.lease_retry_s = seconds

    # -- doorbells ------------------------------------------------------------------------
    def ring(self, guid: str, cmd: ItemCommand | CommandHead | None = None) -> bool:
        """Guid ``guid`` has work (``cmd``, if its command was readable; only its head, if the
        window would not hold it anyway). True if this started a worker for it."""
        worker = self.guids.get(guid)
        started = worker is None
        if worker is None:
            worker = self.guids[guid] = GuidWorker(guid, self.crew, self.paces.setdefault(guid, GuidPacer()),
                                                   self._ended)
            self.crew.leases.busy(guid)
        seen = worker.acted_on()
        if cmd is None or cmd.guid != guid or (isinstance(cmd, ItemCommand) and unsendable(cmd) is not None):
            worker.ring()  # Postgres has it: the worker reads it from there
        elif _scheduled(cmd):
            worker.ring(cmd.not_before)  # on time, whatever the window holds
        elif isinstance(cmd, CommandHead):
            worker.note(cmd)  # not held: does it sort ahead of the window?
        else:
            worker.hold(cmd)
        # A doorbell that changes nothing the worker acts on leaves it to its next moment.
        worker.start(wake=started or worker.acted_on() != seen)
        return started

    def full(self, guid: str) -> bool:
        """Whether a batch command for ``guid`` would not be held (its head is enough)."""
        worker = self.guids.get(guid)
        return worker is not None and self.crew.buffer.full(worker.window)

    def misses(self, guid: str, item_id: str | None) -> bool:
        """Whether the worker of ``guid`` might never reach ``item_id``, ready in Postgres: it
        neither holds the item nor means to read Postgres again. A guid with a deep queue
        always has work ready for long; poking its worker for that would re-read its queue
        after every sweep for nothing."""
        worker = self.guids.get(guid)
        return worker is None or item_id is None or not (worker.window.more or item_id in worker.window.ids)

    def poke(self, guid: str, head: bool = False) -> bool:
        """The sweep found queued work for ``guid``: a worker reads it from Postgres. With
        ``head`` (an overdue item its worker :meth:`misses`), a running worker reads the head
        of the guid's order at once: the item may sort ahead of all its window holds (an
        auto-reply whose doorbell was lost), and a read left for when the window runs low came
        after up to half a window of campaign sends. True if that needed a new worker (its
        doorbell was lost, or handled by a previous owner)."""
        worker = self.guids.get(guid)
        if worker is None or not head:
            return self.ring(guid)
        seen = worker.acted_on()
        worker.reorder()
        worker.start(wake=worker.acted_on() != seen)
        return False

    def wake(self, guids: list[str]) -> None:
        """Make waiting workers look again now (their limits changed); ``*`` wakes all."""
        targets = list(self.guids) if "*" in guids else [g for g in guids if g in self.guids]
        for guid in targets:
            self.guids[guid].wake.set()

    # -- workers ending, partitions going -------------------------------------------------
    def _ended(self, worker: GuidWorker) -> None:
        """A worker ended: forget the guid's window; give its lease back if the guid is no
        longer this sender's (its partition went while an item was in hand)."""
        guid = worker.guid
        if self.guids.get(guid) is worker:
            del self.guids[guid]
        worker.drop_window()
        if worker.revived and self.owns(guid):
            self.ring(guid)  # rung again meanwhile: a fresh worker reads Postgres
        elif not self.owns(guid):
            self.crew.leases.hand_back(guid)
            self.paces.pop(guid, None)
        elif self.guids.get(guid) is None:
            self.crew.leases.rested(guid)

    async def release(self, gone: Callable[[str], bool], timeout_s: float = 30.0) -> None:
        """Stop the workers of the guids for which ``gone(guid)``: drop their windows (their
        work stays in Postgres for the next owner), let items in hand finish, and give the
        guids' leases back."""
        stopped = {guid: w for guid, w in self.guids.items() if gone(guid)}
        for guid, worker in stopped.items():
            if worker.stop():
                del self.guids[guid]
                if worker.task is not None:
                    # Between items, never mid-item; it may be mid-read (a refill, a lease), whose
                    # connection the pool then closes rather than serve again (db.pool.Pool).
                    worker.task.cancel()
        clock, progress = self.crew.clock, self.crew.progress
        deadline = clock() + timeout_s
        while any(w.executing is not None for w in stopped.values()) and clock() < deadline:
            progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), timeout=0.5)
        await self.crew.leases.release(gone, {guid for guid, w in stopped.items() if w.executing is not None})
        for guid in [g for g in self.paces if gone(g) and g not in self.guids]:
            del self.paces[guid]  # its pacing went with its lease: memory bounded by the guids owned


def _scheduled(cmd: ItemCommand | CommandHead) -> bool:
    return cmd.not_before is not None and cmd.not_before > datetime.now(UTC)
