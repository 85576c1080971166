"""The reconciler's loop: hold the leader lease; while leader, tail the event log and run
the sweeps; as a standby, wait for the lease to run out.

Alongside it run the lease's renewals, the verification of in-doubt sends (its own task:
a slow gateway holds up only verification) and the backlog metrics. Nothing a round raises
stops the loop (``RoundGuard``): it is logged, counted and followed by a back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import get_args

from pacer_common.db.leader import LeaderLock, LeadershipLost
from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.core import SWEEP_KINDS, Reconciler, RoundGuard, SkipReason
from pacer_reconciler.metrics import ReconcilerMetrics
from pacer_reconciler.ports import CursorMoved, LeaderStats
from pacer_reconciler.verifier import LOOKUP_RESULTS, Verifier

log = logging.getLogger("pacer.reconciler")
Ready = Callable[[bool, str], None]  # the readiness probe's (ready, state)


@dataclass(frozen=True)
class LoopConfig:
    leader_ttl_s: float
    sweep_interval_s: float  # least time between sweep rounds and between verification rounds
    batch: int  # most events per tail round: a full round is followed at once by the next
    stall_after_s: float
    error_backoff_max_s: float
    backlog_every_s: float


class LeaderLoop:
    def __init__(self, leader: LeaderLock, rec: Reconciler, stats: LeaderStats, verifier: Verifier,
                 backlog: BacklogGauges, m: ReconcilerMetrics, config: LoopConfig) -> None:
        self.leader = leader
        self.rec = rec
        self.stats = stats
        self.verifier = verifier
        self.backlog = backlog
        self.m = m
        self.config = config
        self.guard = RoundGuard(max_s=config.error_backoff_max_s)
        self.epoch: int | None = None  # the leader term being served
        self.now = asyncio.get_running_loop().time
        self.last_tail = self.now()
        self.next_sweep = 0.0
        _export(m, self)

    async def run(self, stop: asyncio.Event, ready: Ready) -> None:
        ready(True, "standby")
        tasks = [asyncio.create_task(self.leader.keep(stop), name="leader-lease"),
                 asyncio.create_task(self.verifier.run(stop, self.is_leader, self.config.sweep_interval_s),
                                     name="verifier"),
                 asyncio.create_task(self.backlog.run(stop, self.is_leader, self.config.backlog_every_s),
                                     name="backlog-metrics")]
        try:
            while not stop.is_set():
                await self._turn(stop, ready)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.drain()
            await self.leader.release()

    def is_leader(self) -> bool:
        return self.leader.is_leader

    async def _turn(self, stop: asyncio.Event, ready: Ready) -> None:
        self.drain()
        if not await self.leader.hold():
            await self._stand_by(stop, ready)
            return
        if self.leader.epoch != self.epoch:  # a new term: the cursor may have moved meanwhile
            self.rec.forget_position()
            self.epoch = self.leader.epoch
            ready(True, "leader")
            self.last_tail = self.now()
        n, delay = await self.guard.run(self._round)
        if delay:
            await _idle(stop, delay)
            return
        self.last_tail = self.now()
        if n < self.config.batch:
            await _idle(stop, 0.1)

    async def _stand_by(self, stop: asyncio.Event, ready: Ready) -> None:
        if self.epoch is not None:
            log.warning("stepped down from leadership (epoch %s)", self.epoch)
        self.epoch = None
        ready(True, "standby")
        self.rec.forget_position()
        self.m.leader_stats.forget()
        await _idle(stop, min(0.5, self.config.leader_ttl_s / 3))

    async def _round(self) -> int:
        try:
            n = await self.rec.tail_once()
        except CursorMoved as exc:
            log.error("event batch not applied: %s; reading again from the stored cursor", exc)
            return 0
        except LeadershipLost as exc:
            log.warning("event batch not applied: %s", exc)
            self.rec.forget_position()
            return 0
        self.m.events.inc(n)
        if self.now() >= self.next_sweep:
            await self._sweep()
        return n

    async def _sweep(self) -> None:
        report = await self.rec.sweep_once()
        for kind, k in report.moved.items():
            self.m.sweep_items.labels(kind).inc(k)
        for kind in report.failed:
            self.m.sweep_errors.labels(kind).inc()
        stall_after = timedelta(seconds=self.config.stall_after_s)
        self.m.leader_stats.update(await self.stats.lock_stats() | await self.stats.governance_stats(stall_after))
        self.next_sweep = self.now() + self.config.sweep_interval_s

    def drain(self) -> None:
        """Move the counts the reconciler, the verifier and the guard keep into the metrics."""
        m, rec = self.m, self.rec
        while rec.tripped:
            m.trips.labels(rec.tripped.pop().scope).inc()
        for src, counter in ((rec.bad, m.bad_events), (self.verifier.lookups, m.lookups),
                             (self.verifier.resolved, m.verifications), (self.guard.errors, m.round_errors)):
            for label, k in src.items():
                counter.labels(label).inc(k)
            src.clear()


def _export(m: ReconcilerMetrics, loop: LeaderLoop) -> None:
    """The gauges read from the loop; known label values start at 0, so boards and rates see
    them before the first event."""
    for counter, values in ((m.lookups, LOOKUP_RESULTS), (m.sweep_items, SWEEP_KINDS), (m.sweep_errors, SWEEP_KINDS),
                            (m.verifications, ("confirmed", "pending", "unverified")),
                            (m.bad_events, get_args(SkipReason)), (m.trips, ("job", "guid"))):
        for value in values:
            counter.labels(value)
    leader = loop.leader
    m.leader.set_function(lambda: float(leader.is_leader))
    m.leader_epoch.set_function(lambda: float(leader.epoch or 0) if leader.is_leader else 0.0)
    m.tail_lag.set_function(lambda: loop.now() - loop.last_tail if leader.is_leader else 0.0)
    m.lookups_in_flight.set_function(lambda: float(loop.verifier.in_flight))


async def _idle(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
