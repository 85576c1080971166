"""The segment loop tails exactly the segments its leases hold: a segment handed over is
tailed no more, a new one starts at once, a lost lease in one segment stops only that
segment's batch, a segment whose tail keeps failing backs off alone (the sweeps and the other
segments go on), and only the holder of segment 0 exports the leader's numbers."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from pacer_common.db.leader import LeadershipLost
from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.core import Reconciler
from pacer_reconciler.leading import LoopConfig, SegmentLoop
from pacer_reconciler.metrics import ReconcilerMetrics
from pacer_reconciler.ports import InDoubt, Lease
from pacer_reconciler.verifier import Verifier

from .dispatching import until


class FakeLease:
    def __init__(self, name: str) -> None:
        self.name = name
        self.epoch: int | None = None


class FakeLeases:
    def __init__(self, n: int) -> None:
        self.n = n
        self.replicas = 1
        self.held: set[int] = set()
        self.leases = {s: FakeLease(f"r/{s}of{n}") for s in range(n)}

    def hold(self, *segments: int) -> None:
        for s in set(segments) - self.held:
            self.leases[s].epoch = (self.leases[s].epoch or 0) + 1
        self.held = set(segments)

    def owned(self) -> list[int]:
        return sorted(self.held)

    def lease(self, segment: int) -> Lease:
        return self.leases[segment]

    async def keep(self, stop: asyncio.Event) -> None:
        await stop.wait()

    async def release(self) -> None:
        self.held = set()


class FakeTail(Reconciler):
    """A segment's tail: counts its rounds; raises what ``fail_with`` holds once, and
    ``fails_always`` every round it is set (counted in ``failures``)."""

    def __init__(self, segment: int) -> None:
        self.segment = segment
        self.rounds = 0
        self.forgotten = 0
        self.fail_with: Exception | None = None
        self.fails_always: Exception | None = None
        self.failures = 0
        self.tripped = []
        self.bad = Counter()

    async def tail_once(self) -> int:
        self.rounds += 1
        if self.fail_with is not None:
            exc, self.fail_with = self.fail_with, None
            raise exc
        if self.fails_always is not None:
            self.failures += 1
            raise self.fails_always
        return 1

    def forget_position(self) -> None:
        self.forgotten += 1


class NoSweeps:
    """Sweeps that move nothing; each one run is counted by kind."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()

    async def sweep(self, kind: str, limit: int) -> int:
        self.runs[kind] += 1
        return 0

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        return []

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        return None


class Stats:
    def __init__(self) -> None:
        self.rounds = 0  # the leader's rounds of numbers, one a sweep
        self.stall_counts = 0
        self.guid_counts = 0  # reads of the guids by state

    async def lock_stats(self) -> dict[str, int]:
        self.rounds += 1
        return {"running_items": 3}

    async def governance_stats(self, stall_after: timedelta | None) -> dict[str, int]:
        if stall_after is None:
            return {"jobs_running": 1}
        self.stall_counts += 1
        return {"jobs_running": 1, "stalled_shards": 2, "in_doubt_quiet": 4}

    async def guid_stats(self) -> dict[str, int]:
        self.guid_counts += 1
        return {"guids:online": 5, "guids:kicked": 1, "guids_with_work:kicked": 1}


class NoBacklog:
    async def top(self, sort: str, limit: int) -> list[dict[str, Any]]:
        return []

    async def jobs(self, limit: int) -> list[dict[str, Any]]:
        return []

    async def held_back_s(self) -> float:
        return 0.0


class NoLookup:
    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        return None


def _sample(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name)


def _segment_loop(registry: CollectorRegistry, leases: FakeLeases, stats: Stats,
                  verify: NoSweeps | None = None, sweeps: NoSweeps | None = None,
                  ) -> tuple[SegmentLoop, dict[int, FakeTail]]:
    """A loop over ``leases`` whose tails (by segment, as they are made) only count rounds, and
    whose sweeps run through ``sweeps``; its verifier reads and resolves through ``verify``
    (none in doubt by default)."""
    tails: dict[int, FakeTail] = {}

    def tailer(segment: int, lease: Lease) -> Reconciler:
        tails[segment] = FakeTail(segment)
        return tails[segment]

    m = ReconcilerMetrics(registry, lambda: 0 in leases.owned())
    sweeps = sweeps or NoSweeps()
    loop = SegmentLoop(
        leases, tailer, Reconciler(None, sweeps, None), stats,  # type: ignore[arg-type]
        Verifier(verify or sweeps, NoLookup()), BacklogGauges(NoBacklog(), m, 3), m,
        LoopConfig(leader_ttl_s=3, sweep_interval_s=0.01, batch=1000, stall_after_s=60, error_backoff_max_s=1,
                   backlog_every_s=60, stall_count_every_s=60), prepare=_nothing)
    return loop, tails


def test_the_loop_tails_the_segments_held_and_follows_handovers() -> None:
    async def scenario() -> None:
        registry, leases, stats = CollectorRegistry(), FakeLeases(4), Stats()
        loop, tails = _segment_loop(registry, leases, stats)
        states: list[str] = []
        stop = asyncio.Event()
        leases.hold(0, 1)
        running = asyncio.create_task(loop.run(stop, lambda ok, state: states.append(state)))
        try:
            await until(lambda: all(s in tails and tails[s].rounds >= 2 for s in (0, 1)))
            assert set(tails) == {0, 1}
            assert _sample(registry, "pacer_reconciler_leader") == 1.0
            assert _sample(registry, "pacer_reconciler_segments_owned") == 2.0
            assert _sample(registry, "pacer_reconciler_segments") == 4.0
            await until(lambda: _sample(registry, "pacer_reconciler_running_items") == 3.0)
            rounds = stats.rounds
            await until(lambda: stats.rounds >= rounds + 3)
            assert stats.stall_counts == 1, "the stall count at its own pace, not at every sweep"
            assert _sample(registry, "pacer_reconciler_stalled_shards") == 2.0, "the last count is still exported"
            assert _sample(registry, "pacer_reconciler_in_doubt_quiet_items") == 4.0, "read with it, kept with it"

            # segment 1's lease is lost mid-batch: its batch is dropped, segment 0 goes on
            tails[1].fail_with = LeadershipLost("lease r/1of4 at epoch 1 expired or taken over")
            before = tails[0].rounds
            await until(lambda: tails[1].forgotten >= 1 and tails[0].rounds > before + 2)
            assert registry.get_sample_value("pacer_reconciler_round_errors_total", {"error": "LeadershipLost"}) is None

            # both handed over, segment 2 taken: only segment 2 is tailed from now on
            leases.hold(2)
            await until(lambda: 2 in tails and tails[2].rounds >= 2)
            frozen = (tails[0].rounds, tails[1].rounds)
            await until(lambda: tails[2].rounds >= 6)
            assert (tails[0].rounds, tails[1].rounds) == frozen, "a segment handed over is tailed no more"
            assert _sample(registry, "pacer_reconciler_leader") == 0.0
            assert _sample(registry, "pacer_reconciler_running_items") is None, "the leader's numbers go with it"

            # all given up (standby), then segment 2 taken again: a fresh tail for it
            leases.hold()
            await until(lambda: states[-1] == "standby")
            leases.hold(2)
            await until(lambda: 2 in tails and tails[2].rounds >= 2 and states[-1] == "active")
            leases.hold(0)
            await until(lambda: stats.stall_counts == 2)  # a new term as leader counts at once
            leases.hold()  # standing by, then leading again: at once too
            await until(lambda: states[-1] == "standby")
            leases.hold(0)
            await until(lambda: stats.stall_counts == 3)
        finally:
            stop.set()
            await running

    asyncio.run(scenario())


def test_a_segment_whose_tail_keeps_failing_backs_off_alone() -> None:
    """Segment 1's tail fails every round (a row it holds on, a message Kafka refuses): it is
    tried again after its own back-off, while segment 0 goes on tailing and the sweeps and the
    leader's numbers go on every round. The tail lag shows the segment left behind."""
    async def scenario() -> None:
        registry, leases, stats, sweeps = CollectorRegistry(), FakeLeases(2), Stats(), NoSweeps()
        loop, tails = _segment_loop(registry, leases, stats, sweeps=sweeps)
        stop = asyncio.Event()
        leases.hold(0, 1)
        running = asyncio.create_task(loop.run(stop, lambda ok, state: None))

        def lag() -> float:
            return _sample(registry, "pacer_reconciler_tail_lag_seconds") or 0.0

        try:
            await until(lambda: all(s in tails and tails[s].rounds >= 2 for s in (0, 1)))
            tails[1].fails_always = RuntimeError("KafkaException: message too large")
            await until(lambda: tails[1].failures >= 1)
            tail0, tail1, swept, read = tails[0].rounds, tails[1].rounds, sweeps.runs["retry_due"], stats.rounds
            await until(lambda: tails[1].failures >= 3 and tails[0].rounds >= tail0 + 10)
            rounds = tails[0].rounds - tail0  # segment 0's rounds meanwhile: the loop's
            assert tails[1].rounds - tail1 <= rounds // 2, "the failing segment is tried after its back-off only"
            assert sweeps.runs["retry_due"] - swept >= rounds - 1, "the sweeps run every round"
            assert sweeps.runs["release_held"] == sweeps.runs["retry_due"], "every sweep"
            assert stats.rounds - read >= rounds - 1, "and the leader's numbers"
            assert loop.guard.failures == 0, "the loop itself never backed off"
            loop.drain()
            errors = registry.get_sample_value("pacer_reconciler_round_errors_total", {"error": "RuntimeError"})
            assert errors == tails[1].failures, "each failure counted"
            await until(lambda: lag() >= 1.0)  # segment 1 has finished no round since

            tails[1].fails_always = None  # fixed: segment 1 catches up after its back-off
            back = tails[1].rounds
            await until(lambda: tails[1].rounds >= back + 3 and lag() < 1.0)
        finally:
            stop.set()
            await running

    asyncio.run(scenario())


class BrokenGuidStats(Stats):
    """The read of the guids by state fails while ``broken``."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = True

    async def guid_stats(self) -> dict[str, int]:
        if self.broken:
            self.guid_counts += 1
            raise RuntimeError("canceling statement due to statement timeout")
        return await super().guid_stats()


def test_the_guids_by_state_are_read_at_the_stall_counts_pace_not_at_every_sweep() -> None:
    """They read every guid: once a stall_count_every_s (60 s here) while the sweeps run every
    10 ms, exported in between as last read; again at once when a read failed or a new term
    begins."""
    async def scenario() -> None:
        registry, leases, stats = CollectorRegistry(), FakeLeases(2), BrokenGuidStats()
        loop, tails = _segment_loop(registry, leases, stats)
        stop = asyncio.Event()
        leases.hold(0, 1)
        running = asyncio.create_task(loop.run(stop, lambda ok, state: None))

        def held_with_work() -> float | None:
            return registry.get_sample_value("pacer_reconciler_held_guids_with_work", {"state": "kicked"})

        try:
            await until(lambda: stats.guid_counts >= 3)  # a failed read is tried again at the next sweep
            assert held_with_work() is None
            stats.broken = False
            await until(lambda: held_with_work() == 1.0)
            rounds, counts = stats.rounds, stats.guid_counts
            await until(lambda: stats.rounds >= rounds + 10)
            assert stats.guid_counts == counts, "not read again within stall_count_every_s"
            assert held_with_work() == 1.0, "the numbers last read are still exported"
            assert registry.get_sample_value("pacer_reconciler_guids_by_state", {"state": "online"}) == 5.0
            assert registry.get_sample_value("pacer_reconciler_held_guids_with_work", {"state": "online"}) is None
            assert _sample(registry, "pacer_reconciler_jobs_running") == 1.0, "the others read every sweep"
            leases.hold(1)  # the lead handed over and taken back: a new term reads them at once
            tailed = tails[1].rounds
            await until(lambda: tails[1].rounds >= tailed + 2)  # rounds (and sweeps) as a replica not leading
            leases.hold(0, 1)
            await until(lambda: stats.guid_counts == counts + 1)
        finally:
            stop.set()
            await running

    asyncio.run(scenario())


class BrokenLockStats(Stats):
    """The leader's lock numbers fail every time (a defect, not the environment)."""

    async def lock_stats(self) -> dict[str, int]:
        self.rounds += 1
        raise RuntimeError('column "granted" does not exist')


def test_leader_stats_that_fail_neither_fail_the_round_nor_stop_the_tail() -> None:
    async def scenario() -> None:
        registry, leases, stats = CollectorRegistry(), FakeLeases(2), BrokenLockStats()
        loop, tails = _segment_loop(registry, leases, stats)
        stop = asyncio.Event()
        leases.hold(0, 1)
        running = asyncio.create_task(loop.run(stop, lambda ok, state: None))
        try:
            await until(lambda: stats.rounds >= 3 and all(s in tails and tails[s].rounds >= 5 for s in (0, 1)))
            assert loop.guard.failures == 0, "no round failed for the leader's numbers"
            loop.drain()
            errors = registry.get_sample_value("pacer_reconciler_round_errors_total", {"error": "RuntimeError"})
            assert errors is not None and errors >= 3, "each failure counted"
            assert _sample(registry, "pacer_reconciler_jobs_running") == 1.0, "the other numbers still read"
            assert stats.stall_counts == 1
        finally:
            stop.set()
            await running

    asyncio.run(scenario())


class FailingVerification(NoSweeps):
    """The verifier's database steps fail: the read of in-doubt items while ``read_fails``, else
    every resolution of the one item in doubt."""

    def __init__(self) -> None:
        self.read_fails = True
        self.reads = 0
        self.resolves = 0

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        self.reads += 1
        if self.read_fails:
            raise RuntimeError("connection refused")
        return [InDoubt("item-1", "g1", "k1", datetime.now(UTC) - timedelta(days=2))]

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        self.resolves += 1
        raise RuntimeError("connection refused")


def test_a_verifier_that_keeps_failing_is_counted_by_step() -> None:
    """Items in doubt stay so while the verifier's reads or resolutions fail (the deadline is
    applied by the resolution): each failure must reach /metrics for an alert to see it."""
    async def scenario() -> None:
        registry, leases, verify = CollectorRegistry(), FakeLeases(1), FailingVerification()
        loop, _ = _segment_loop(registry, leases, Stats(), verify)
        assert registry.get_sample_value("pacer_reconciler_verifier_errors_total", {"step": "read"}) == 0.0
        stop = asyncio.Event()
        leases.hold(0)
        running = asyncio.create_task(loop.run(stop, lambda ok, state: None))

        def errors(step: str) -> float:
            loop.drain()
            return registry.get_sample_value("pacer_reconciler_verifier_errors_total", {"step": step}) or 0.0

        try:
            await until(lambda: verify.reads >= 2 and errors("read") >= 2)
            assert errors("resolve") == 0.0
            verify.read_fails = False
            await until(lambda: verify.resolves >= 2 and errors("resolve") >= 2)
        finally:
            stop.set()
            await running

    asyncio.run(scenario())


async def _stats_age(stats: Stats, stale: bool) -> None:
    registry, leases = CollectorRegistry(), FakeLeases(2)
    loop, _ = _segment_loop(registry, leases, stats)
    stop = asyncio.Event()
    leases.hold(0, 1)
    running = asyncio.create_task(loop.run(stop, lambda ok, state: None))

    def age() -> float:
        return _sample(registry, "pacer_reconciler_leader_stats_age_seconds") or 0.0

    try:
        if stale:
            await until(lambda: age() >= 1.5)  # every read fails: the last good one never comes
            assert _sample(registry, "pacer_reconciler_jobs_running") == 1.0, "the numbers of the last read"
        else:
            rounds = stats.rounds
            await until(lambda: stats.rounds >= rounds + 20)  # 20 sweeps of 10 ms
            assert age() < 1.0, age()
        leases.hold(1)  # segment 0 handed over: no longer the leader
        await until(lambda: _sample(registry, "pacer_reconciler_leader") == 0.0)
        assert age() == 0.0, "a replica that does not lead has no numbers to be stale"
    finally:
        stop.set()
        await running


def test_the_leader_stats_age_grows_while_they_fail_and_stays_low_while_they_are_read() -> None:
    asyncio.run(_stats_age(BrokenLockStats(), stale=True))
    asyncio.run(_stats_age(Stats(), stale=False))


async def _nothing() -> None:
    return None



def test_duplicate_intercepts_are_a_level_of_the_events_kept_not_a_counter() -> None:
    """The count is over item_events, whose partitions retention drops: it falls then, which
    a counter must never do (Prometheus would read a reset and count it again)."""
    registry = CollectorRegistry()
    m = ReconcilerMetrics(registry, lambda: True)
    for kept in (5, 3):  # a partition dropped in between
        m.leader_stats.update({"duplicate_intercepts": kept})
        assert _sample(registry, "pacer_reconciler_duplicate_intercepts_kept") == kept
    kinds = {metric.name: metric.type for metric in registry.collect() if "duplicate_intercepts" in metric.name}
    assert kinds == {"pacer_reconciler_duplicate_intercepts_kept": "gauge"}, kinds
