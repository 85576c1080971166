"""The reconciler's loop: hold a fair share of the segment leases; tail each held segment's
events and run the sweeps of the held segments; a replica that holds none stands by.

Alongside it run the leases' renewals and claims, the verification of the held segments'
in-doubt sends (its own task: a slow gateway holds up only verification) and the backlog
metrics. The owner of segment 0 also runs the duties that are not per guid: the
release of lifted holds, the backlog metrics and the database-wide stats (it is "the
leader" in the metrics). Nothing a round raises stops the loop: it is logged, counted and
followed by a back-off, of the one segment whose tail failed (the other segments' tails, the
sweeps and the leader's numbers go on), or of the whole loop if the round itself failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import get_args

from pacer_common.db.leader import LeadershipLost
from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.core import SWEEP_KINDS, Reconciler, RoundGuard, SkipReason
from pacer_reconciler.domain.segments import SINGLETON_SEGMENT
from pacer_reconciler.metrics import GUIDS_PREFIX, WORK_PREFIX, ReconcilerMetrics
from pacer_reconciler.ports import CursorMoved, LeaderStats, Lease, Leases
from pacer_reconciler.verifier import LOOKUP_RESULTS, VERIFY_STEPS, Verifier

log = logging.getLogger("pacer.reconciler")
Ready = Callable[[bool, str], None]  # the readiness probe's (ready, state)
Tailer = Callable[[int, Lease], Reconciler]  # the tail of one segment, fenced by its lease


@dataclass
class _Backoff:
    """A segment's tail rounds failed in a row, and the loop time before which it is not tried again."""

    failures: int = 0
    until: float = 0.0


@dataclass(frozen=True)
class LoopConfig:
    leader_ttl_s: float
    sweep_interval_s: float  # least time between sweep rounds and between verification rounds
    batch: int  # most events per segment per tail round: a full round is followed at once by the next
    stall_after_s: float
    error_backoff_max_s: float
    backlog_every_s: float
    stall_count_every_s: float = 30.0  # least time between two counts of stalled shards (the leader's)
    tail_concurrency: int = 4  # segment tails running at once (each takes a pool connection)


class SegmentLoop:
    def __init__(self, leases: Leases, tailer: Tailer, sweeper: Reconciler, stats: LeaderStats,
                 verifier: Verifier, backlog: BacklogGauges, m: ReconcilerMetrics, config: LoopConfig,
                 prepare: Callable[[], Awaitable[None]]) -> None:
        self.leases = leases
        self.tailer = tailer
        self.sweeper = sweeper  # runs the sweeps of the segments held
        self.stats = stats
        self.verifier = verifier
        self.backlog = backlog
        self.m = m
        self.config = config
        self.prepare = prepare  # the cursors of the layout, once before the first tail
        self.prepared = False
        self.guard = RoundGuard(max_s=config.error_backoff_max_s)  # the rounds'; each segment's tail backs off alone
        self._slots = asyncio.Semaphore(config.tail_concurrency)
        self.tails: dict[int, Reconciler] = {}
        self.epochs: dict[int, int | None] = {}  # the lease term each tail serves
        self.backoff: dict[int, _Backoff] = {}  # each tail's failures in a row
        self.now = asyncio.get_running_loop().time
        self.tailed_at: dict[int, float] = {}  # when each tail last finished a round (or its segment was taken)
        self.next_sweep = 0.0
        self.next_stall_count = 0.0
        # When the leader last read all its numbers (or took the lead); None while not leading.
        self.stats_read_at: float | None = None
        _export(m, self)

    async def run(self, stop: asyncio.Event, ready: Ready) -> None:
        ready(True, "standby")
        tasks = [asyncio.create_task(self.leases.keep(stop), name="segment-leases"),
                 asyncio.create_task(self.verifier.run(stop, self.is_active, self.config.sweep_interval_s),
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
            await self.leases.release()

    def is_leader(self) -> bool:
        """Owner of segment 0: runs the duties that are not per guid."""
        return SINGLETON_SEGMENT in self.leases.owned()

    def is_active(self) -> bool:
        return bool(self.leases.owned())

    async def _turn(self, stop: asyncio.Event, ready: Ready) -> None:
        self.drain()
        owned = self.leases.owned()
        if not owned:
            await self._stand_by(stop, ready)
            return
        self._follow(owned)
        ready(True, "leader" if SINGLETON_SEGMENT in owned else "active")
        n, delay = await self.guard.run(self._round)
        if delay:
            await _idle(stop, delay)
            return
        if n < self.config.batch:
            await _idle(stop, 0.1)

    def _follow(self, owned: list[int]) -> None:
        """Tails for the segments held now; a segment taken at a new term reloads its cursor
        (another replica may have moved it meanwhile)."""
        for s in [s for s in self.tails if s not in owned]:
            self._drain(self.tails.pop(s))
            self.backoff.pop(s, None)
            self.tailed_at.pop(s, None)
            log.info("segment %d no longer held (epoch %s)", s, self.epochs.pop(s, None))
        for s in owned:
            lease = self.leases.lease(s)
            if s not in self.tails:
                self.tails[s] = self.tailer(s, lease)
                self.tailed_at[s] = self.now()
                self.backoff[s] = _Backoff()
            elif self.epochs.get(s) != lease.epoch:
                self.tails[s].forget_position()
                self.backoff[s] = _Backoff()  # a new term is tried at once
            self.epochs[s] = lease.epoch

    async def _stand_by(self, stop: asyncio.Event, ready: Ready) -> None:
        if self.tails:
            log.warning("holding no segment: standing by")
        for s in list(self.tails):
            self._drain(self.tails.pop(s))
        self.epochs.clear()
        self.backoff.clear()
        self.tailed_at.clear()
        ready(True, "standby")
        self._not_leading()
        await _idle(stop, min(0.5, self.config.leader_ttl_s / 3))

    async def _round(self) -> int:
        """One tail round of every segment held and not backing off, up to
        ``tail_concurrency`` at once (one's database and Kafka waits overlap another's work),
        then the sweeps when due, whatever the tails did; returns the most events one segment
        had. A tail that fails backs off alone (:meth:`_tail`): one segment held on a poison
        row or a message Kafka refuses neither stops the sweeps and the leader's numbers nor
        slows the other segments."""
        if not self.prepared:
            await self.prepare()
            self.prepared = True
        now = self.now()
        due = [(s, rec) for s, rec in self.tails.items() if self.backoff[s].until <= now]
        counts = await asyncio.gather(*(self._tail(s, rec) for s, rec in due))
        self.m.events.inc(sum(counts))
        if self.now() >= self.next_sweep:
            await self._sweep()
        return max(counts, default=0)

    async def _tail(self, s: int, rec: Reconciler) -> int:
        """One tail round of segment ``s``. A lost lease or a moved cursor drops the batch
        (read again next round); any other failure is logged, counted (by exception type, in
        ``pacer_reconciler_round_errors_total``) and followed by this segment's own back-off,
        doubling from ``RoundGuard.base_s`` up to ``error_backoff_max_s``; a round that
        finishes resets it."""
        async with self._slots:
            try:
                n = await rec.tail_once()
            except CursorMoved as exc:
                log.error("segment %d: event batch not applied: %s; reading again from the stored cursor", s, exc)
                n = 0
            except LeadershipLost as exc:
                log.warning("segment %d: event batch not applied: %s", s, exc)
                rec.forget_position()
                n = 0
            except Exception as exc:
                backoff = self.backoff[s]
                backoff.failures += 1
                delay = min(self.guard.max_s, self.guard.base_s * 2 ** min(backoff.failures - 1, 16))
                backoff.until = self.now() + delay
                self.m.count_round_error(type(exc).__name__, 1)
                log.exception("segment %d: tail round failed (%d in a row); next try in %.1fs, the other segments "
                              "and the sweeps go on", s, backoff.failures, delay)
                return 0
        self.backoff[s] = _Backoff()
        self.tailed_at[s] = self.now()
        return n

    def tail_lag(self) -> float:
        """Seconds since the held segment furthest behind last finished a tail round (0 while
        holding none): one segment whose tail keeps failing shows, however well the others go."""
        if not self.is_active() or not self.tailed_at:
            return 0.0
        return self.now() - min(self.tailed_at.values())

    async def _sweep(self) -> None:
        report = await self.sweeper.sweep_once()
        for kind, k in report.moved.items():
            self.m.sweep_items.labels(kind).inc(k)
        for kind in report.failed:
            self.m.sweep_errors.labels(kind).inc()
        if self.is_leader():
            await self._leader_stats()
        else:
            self._not_leading()
        self.next_sweep = self.now() + self.config.sweep_interval_s

    async def _leader_stats(self) -> None:
        """The leader's database-wide numbers. They run inside the tail's round, so nothing
        they raise fails it: a failure is logged and counted, the numbers last read stay (their
        age is exported: ``pacer_reconciler_leader_stats_age_seconds``), and the next sweep reads
        them again (the adapter retries each for 2 s at most, not the 60 s
        of other work)."""
        if self.stats_read_at is None:
            self.stats_read_at = self.now()  # a new term: its age counts from here until a read succeeds
        # The stall count reads every open shard that has not moved, and the guids by state
        # every guid: at their own, slower pace; the numbers last read are exported meanwhile.
        slow = self.now() >= self.next_stall_count
        stall_after = timedelta(seconds=self.config.stall_after_s) if slow else None
        last = self.m.leader_stats.values
        fresh: dict[str, int] = {}
        failed = False
        reads: list[tuple[str, Callable[[], Awaitable[dict[str, int]]]]] = [
            ("lock", self.stats.lock_stats), ("governance", lambda: self.stats.governance_stats(stall_after))]
        if slow:
            reads.append(("guid state", self.stats.guid_stats))
        for name, read in reads:
            try:
                fresh |= await read()
            except Exception as exc:
                failed = True
                self.m.count_round_error(type(exc).__name__, 1)
                log.exception("leader's %s stats not read; the tail goes on, next try at the next sweep", name)
                if name != "lock":
                    slow = False  # a slow number was not read: they are due again at once
        kept = last if failed else {k: v for k, v in last.items() if _read_slowly(k)}
        self.m.leader_stats.update(kept | fresh)
        if not failed:
            self.stats_read_at = self.now()
        if slow:
            self.next_stall_count = self.now() + self.config.stall_count_every_s

    def _not_leading(self) -> None:
        """The leader's numbers go with the lead; a new term counts stalls at once."""
        self.m.leader_stats.forget()
        self.next_stall_count = 0.0
        self.stats_read_at = None

    def drain(self) -> None:
        """Move the counts the tails, the verifier and the guard keep into the metrics."""
        m = self.m
        for rec in [*self.tails.values(), self.sweeper]:
            self._drain(rec)
        for src, counter in ((self.verifier.lookups, m.lookups), (self.verifier.resolved, m.verifications),
                             (self.verifier.errors, m.verifier_errors), (self.guard.errors, m.round_errors)):
            for label, k in src.items():
                counter.labels(label).inc(k)
            src.clear()

    def _drain(self, rec: Reconciler) -> None:
        while rec.tripped:
            self.m.trips.labels(rec.tripped.pop().scope).inc()
        for label, k in rec.bad.items():
            self.m.bad_events.labels(label).inc(k)
        rec.bad.clear()


def _read_slowly(key: str) -> bool:
    """A leader's number read every ``stall_count_every_s``, not at every sweep."""
    return key in ("stalled_shards", "in_doubt_quiet") or key.startswith((GUIDS_PREFIX, WORK_PREFIX))


def _export(m: ReconcilerMetrics, loop: SegmentLoop) -> None:
    """The gauges read from the loop; known label values start at 0, so boards and rates see
    them before the first event."""
    for counter, values in ((m.lookups, LOOKUP_RESULTS), (m.verifier_errors, VERIFY_STEPS),
                            (m.sweep_items, SWEEP_KINDS), (m.sweep_errors, SWEEP_KINDS),
                            (m.verifications, ("confirmed", "pending", "unverified")),
                            (m.bad_events, get_args(SkipReason)), (m.trips, ("job", "guid"))):
        for value in values:
            counter.labels(value)
    leases = loop.leases

    def epoch() -> float:
        return float(leases.lease(SINGLETON_SEGMENT).epoch or 0) if loop.is_leader() else 0.0

    m.leader.set_function(lambda: float(loop.is_leader()))
    m.leader_epoch.set_function(epoch)
    m.segments_owned.set_function(lambda: float(len(leases.owned())))
    m.segments.set(leases.n)
    m.replicas.set_function(lambda: float(leases.replicas))
    m.tail_lag.set_function(loop.tail_lag)
    m.lookups_in_flight.set_function(lambda: float(loop.verifier.in_flight))

    def stats_age() -> float:
        read_at = loop.stats_read_at
        return loop.now() - read_at if read_at is not None and loop.is_leader() else 0.0

    m.leader_stats_age.set_function(stats_age)


async def _idle(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
