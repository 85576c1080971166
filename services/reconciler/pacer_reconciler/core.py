"""The reconciler's duties: tail the event log, publish, project progress, sweep.

Verification of in-doubt sends runs apart, in :mod:`pacer_reconciler.verifier`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_reconciler.domain.breakers import Breakers, Trip
from pacer_reconciler.domain.projection import to_dispatch
from pacer_reconciler.ports import EventLog, Holds, Position, Publisher, SweepKind, Sweeps, Unreadable

log = logging.getLogger(__name__)
# Why a row was passed over (the ``reason`` label of pacer_reconciler_bad_events_total).
SkipReason = Literal["unreadable_event", "bad_command", "unpublishable", "unprocessable", "bad_callback"]
# expire_due before retry_due and release_held: an item past its expire_at is expired, not
# re-published only for its sender to expire it (a claim the lease sweep made pending again too).
SWEEP_KINDS: tuple[SweepKind, ...] = ("claim_expired", "submit_expired", "expire_due", "retry_due", "release_held")


@dataclass
class SweepReport:
    moved: dict[str, int]
    failed: list[str] = field(default_factory=list)  # sweeps that raised this round


class Reconciler:
    def __init__(self, events: EventLog, sweeps: Sweeps, publisher: Publisher,
                 *, holds: Holds | None = None, breakers: Breakers | None = None,
                 batch: int = 2000, sweep_limit: int = 1000,
                 environment_errors: tuple[type[BaseException], ...] = (),
                 poison_after: int = 3, max_skips_in_row: int = 10, quiet_every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.events = events
        self.sweeps = sweeps
        self.publisher = publisher
        self.batch = batch
        # Errors that are not a row's fault (database or Kafka down, leadership lost): they
        # fail the round and nothing is isolated or skipped for them.
        self.environment_errors = environment_errors
        self.poison_after = poison_after
        self.max_skips_in_row = max_skips_in_row
        self._limit = batch  # halved while a batch fails for a reason of its own
        self._failed_at: Position | None = None
        self._fails_alone = 0  # failures of the single row at _failed_at
        self._skipped_in_row = 0
        self.sweep_limit = sweep_limit
        self.bad: Counter[str] = Counter()  # events/commands skipped, by reason; drained by the caller
        self._pos: Position | None = None
        self.holds = holds
        self.breakers = breakers
        self.tripped: list[Trip] = []  # breakers that paused something; drained by the caller
        self._owed: list[Trip] = []  # tripped, not yet held (the hold failed): _hold_owed
        # With nothing to read, the cursor moves past the finished transactions at most this
        # often (:meth:`_pass_quiet`).
        self.quiet_every_s = quiet_every_s
        self.clock = clock
        self._quiet_at: float | None = None

    def forget_position(self) -> None:
        """Reload the cursor from the database next time (after a leadership change)."""
        self._pos = None

    async def tail_once(self) -> int:
        """Handle one batch of finished events. Order: publish + flush → projection + cursor commit.

        A crash between the two republishes the batch: outcomes are at-least-once (consumers
        dedupe on item_id + version) and a repeated item command finds the item no longer
        pending, or claimed by its first delivery.

        A row that cannot be read as an event, a command that cannot be built, a message too
        large for Kafka: each is logged with its reason, counted in ``bad`` and skipped, and
        the rest of the batch goes on (the cursor passes it: it would fail the same way again).
        Any other failure that is not one of ``environment_errors`` is raised, and the next
        rounds read half as much until the row at fault is alone; it is skipped once it has
        failed alone ``poison_after`` times (see :meth:`_isolate`).
        """
        await self._hold_owed()
        if self._pos is None:
            self._pos = await self.events.position()
        start = self._pos
        batch = await self.events.read(start, min(self._limit, self.batch))
        if not batch:
            await self._pass_quiet(start)
            return 0
        try:
            await self._apply(start, batch)
        except self.environment_errors:
            raise
        except Exception as exc:
            if await self._isolate(start, batch, exc):
                return 1
            raise
        self._limit = min(self.batch, self._limit * 2)
        self._skipped_in_row = 0
        return len(batch)  # rows passed, skipped ones included

    async def _pass_quiet(self, start: Position) -> None:
        """With nothing to read, move the cursor past every finished transaction (at most
        every ``quiet_every_s``): a segment whose guids send nothing would otherwise hold its
        cursor at its last event, and the prune keeps every event partition newer than the
        oldest cursor. Passes no event: none of the segment's lies between."""
        now = self.clock()
        if self._quiet_at is not None and now - self._quiet_at < self.quiet_every_s:
            return
        self._quiet_at = now
        to = await self.events.quiet_position(start)
        if to is None:
            return
        try:
            await self.events.commit_batch([], start, to)
        except Exception:
            self._pos = None  # reload, as after any failed commit
            raise
        self._pos = to

    async def _isolate(self, start: Position, batch: list[tuple[Position, ItemEvent | Unreadable]],
                       exc: Exception) -> bool:
        """After a batch failed for a reason of its own: halve the next read; a single row that
        failed alone ``poison_after`` times is passed over (True). At most ``max_skips_in_row``
        rows are passed over in a row: past that the fault is more likely a defect than bad
        rows, and the tail holds (and alerts) rather than skip everything."""
        if len(batch) > 1:
            self._limit = max(1, len(batch) // 2)
            return False
        if start != self._failed_at:
            self._failed_at, self._fails_alone = start, 0
        self._fails_alone += 1
        if self._fails_alone < self.poison_after:
            return False
        if self._skipped_in_row >= self.max_skips_in_row:
            log.error("%d rows skipped in a row; holding the tail at %s instead of skipping more", self._skipped_in_row,
                      start)
            return False
        pos, ev = batch[0]
        await self.events.commit_batch([], start, pos)  # passes the row, with no effect
        self._pos = pos
        self._fails_alone = 0
        self._skipped_in_row += 1
        self._skip("unprocessable", f"event at {pos} of item {ev.item_id} failed alone {self.poison_after} times:"
                                    f" {type(exc).__name__}: {exc}")
        return True

    async def _apply(self, start: Position, batch: list[tuple[Position, ItemEvent | Unreadable]]) -> None:
        events: list[ItemEvent] = []
        for pos, ev in batch:
            if isinstance(ev, Unreadable):
                self._skip("unreadable_event", f"event seq {ev.seq} of item {ev.item_id} at {pos}: {ev.reason}")
            else:
                events.append(ev)
        commands = await self._commands(to_dispatch(events))
        for r in await self.publisher.publish(events, commands):
            self._skip("unpublishable", f"item {r.item_id}: {r.reason}")
        to = batch[-1][0]
        try:
            await self.events.commit_batch(events, start, to)
        except Exception:
            self._pos = None  # reload: never apply a batch twice, never skip one
            raise
        self._pos = to
        await self._trip_breakers(events)

    async def _commands(self, item_ids: list[str]) -> list[ItemCommand]:
        """The commands of the re-queued items; if one of them cannot be built (a bad value),
        each is built alone and only those that fail are skipped."""
        try:
            return await self.events.items_for_dispatch(item_ids)
        except ValueError:
            pass
        commands: list[ItemCommand] = []
        for item_id in item_ids:
            try:
                commands += await self.events.items_for_dispatch([item_id])
            except ValueError as exc:
                self._skip("bad_command", f"item {item_id}: command cannot be built: {exc}")
        return commands

    def _skip(self, reason: SkipReason, detail: str) -> None:
        log.error("skipped (%s): %s", reason, detail)
        self.bad[reason] += 1

    async def _trip_breakers(self, events: list[ItemEvent]) -> None:
        """Pause the jobs and guids whose recent outcomes tripped a breaker (after the commit:
        a replayed batch may count twice, which only makes a breaker trip sooner)."""
        if self.breakers is None or self.holds is None:
            return
        self._owed += self.breakers.observe(events)
        await self._hold_owed()

    async def _hold_owed(self) -> None:
        """Make the holds of tripped breakers, in order. A breaker forgets its count when it
        trips, and its batch is committed: a hold that fails stays owed, tried again next
        round (never raised: the batch must not be read again), or the job or guid would go
        on failing for as long again before tripping anew."""
        while self._owed and self.holds is not None:
            trip = self._owed[0]
            try:
                held = await self.holds.hold(trip.scope, trip.key, trip.reason, "system:breaker")
            except Exception:
                log.warning("pausing %s %s for its breaker failed; %d holds owed, tried again next round",
                            trip.scope, trip.key, len(self._owed), exc_info=True)
                return
            self._owed.pop(0)
            if held:
                log.warning("%s %s paused: %s", trip.scope, trip.key, trip.reason)
                self.tripped.append(trip)

    async def sweep_once(self) -> SweepReport:
        """Run every sweep once. A sweep that fails is logged and reported, and the others
        (and the tail, the reconciler's first duty) go on: one broken sweep must not stop
        projection and re-dispatch for every job, as a crash-restart loop would."""
        moved: dict[str, int] = {}
        failed: list[str] = []
        for kind in SWEEP_KINDS:
            try:
                moved[kind] = await self.sweeps.sweep(kind, self.sweep_limit)
            except Exception:
                log.exception("sweep %s failed; the other duties go on", kind)
                moved[kind] = 0
                failed.append(kind)
        if any(moved.values()):
            log.info("sweep: moved %s", moved)
        return SweepReport(moved, failed)


class RoundGuard:
    """Runs the leader's rounds so that nothing they raise stops the service.

    A database or broker that is down, or a bug met by one round, is logged, counted by
    error type and followed by an exponential back-off (``base_s`` doubling up to
    ``max_s``); the next round comes all the same, and a success resets the back-off.
    """

    def __init__(self, base_s: float = 0.5, max_s: float = 30.0) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.failures = 0  # in a row
        self.errors: Counter[str] = Counter()  # by exception type; drained by the caller

    async def run(self, round_: Callable[[], Awaitable[int]]) -> tuple[int, float]:
        """``(rows handled, seconds to wait before the next round)``."""
        try:
            n = await round_()
        except Exception as exc:
            self.failures += 1
            self.errors[type(exc).__name__] += 1
            delay = min(self.max_s, self.base_s * 2 ** min(self.failures - 1, 16))
            log.exception("reconciler round failed (%d in a row); next try in %.1fs", self.failures, delay)
            return 0, delay
        self.failures = 0
        return n, 0.0


async def run_rounds(round_: Callable[[], Awaitable[int]], stop: asyncio.Event, every_s: float, backoff_max_s: float,
                     count_error: Callable[[str, int], None]) -> None:
    """Run ``round_`` until ``stop``, ``every_s`` apart (0: back to back); a failed round is
    logged, counted by exception type (``count_error``) and followed by a back-off."""
    guard = RoundGuard(max_s=backoff_max_s)
    while not stop.is_set():
        _, delay = await guard.run(round_)
        for error, k in guard.errors.items():
            count_error(error, k)
        guard.errors.clear()
        if wait := delay or every_s:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
