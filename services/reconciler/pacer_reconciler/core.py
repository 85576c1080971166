"""The reconciler's duties: tail the event log, publish, project progress, sweep, verify."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pacer_common.domain.events import ItemEvent
from pacer_reconciler.domain.breakers import Breakers, Trip
from pacer_reconciler.domain.projection import to_dispatch
from pacer_reconciler.ports import DeliveryLookup, EventLog, Holds, Position, Publisher, SweepKind, Sweeps

log = logging.getLogger(__name__)
SWEEP_KINDS: tuple[SweepKind, ...] = ("claim_expired", "submit_expired", "retry_due", "release_held")


@dataclass
class SweepReport:
    moved: dict[str, int]
    verified: dict[str, int]
    failed: list[str] = field(default_factory=list)  # sweeps that raised this round


class Reconciler:
    def __init__(self, events: EventLog, sweeps: Sweeps, publisher: Publisher, lookup: DeliveryLookup,
                 *, holds: Holds | None = None, breakers: Breakers | None = None,
                 batch: int = 2000, sweep_limit: int = 1000, verify_limit: int = 200) -> None:
        self.events = events
        self.sweeps = sweeps
        self.publisher = publisher
        self.lookup = lookup
        self.batch = batch
        self.sweep_limit = sweep_limit
        self.verify_limit = verify_limit
        self._pos: Position | None = None
        self.holds = holds
        self.breakers = breakers
        self.tripped: list[Trip] = []  # breakers that paused something; drained by the caller

    def forget_position(self) -> None:
        """Reload the cursor from the database next time (after a leadership change)."""
        self._pos = None

    async def tail_once(self) -> int:
        """Handle one batch of finished events. Order: publish + flush → projection + cursor commit.

        A crash between the two republishes the batch: outcomes are at-least-once (consumers
        dedupe on item_id + version) and a repeated item command finds the item no longer
        pending, or claimed by its first delivery.
        """
        if self._pos is None:
            self._pos = await self.events.position()
        batch = await self.events.read(self._pos, self.batch)
        if not batch:
            return 0
        events = [ev for _, ev in batch]
        commands = await self.events.items_for_dispatch(to_dispatch(events))
        self.publisher.publish(events, commands)
        to = batch[-1][0]
        try:
            await self.events.commit_batch(events, self._pos, to)
        except Exception:
            self._pos = None  # reload: never apply a batch twice, never skip one
            raise
        self._pos = to
        await self._trip_breakers(events)
        return len(events)

    async def _trip_breakers(self, events: list[ItemEvent]) -> None:
        """Pause the jobs and guids whose recent outcomes tripped a breaker (after the commit:
        a replayed batch may count twice, which only makes a breaker trip sooner)."""
        if self.breakers is None or self.holds is None:
            return
        for trip in self.breakers.observe(events):
            if await self.holds.hold(trip.scope, trip.key, trip.reason, "system:breaker"):
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
        verified: dict[str, int] = {}
        now = datetime.now(UTC)
        for item in await self.sweeps.in_doubt(self.verify_limit):
            found = await self.lookup.lookup(item.guid, item.idem_key)
            result = await self.sweeps.resolve(item, found, now)
            if result:
                verified[result] = verified.get(result, 0) + 1
        if any(moved.values()) or verified:
            log.info("sweep: moved %s, verified %s", moved, verified)
        return SweepReport(moved, verified, failed)
