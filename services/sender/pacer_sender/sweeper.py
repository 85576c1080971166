"""Lost doorbells: find guids with queued work in Postgres that this sender owns and runs no
worker for, and start their workers.

A guid's item commands are only doorbells (their offsets are committed once noted), so
Kafka never holds the only trace of work: if a command is deleted by retention, skipped by
an offset reset, lost, or was handled by a sender that died, the item row is still pending
in Postgres. The sweep runs when partitions are assigned (the new owner gets going at once,
without waiting for commands) and every ``interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from pacer_common.lifecycle import attempt
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.ports import GuidQueueStore, Waiting

log = logging.getLogger(__name__)
Trigger = Literal["assign", "periodic"]


class Sweeper:
    def __init__(self, dispatcher: Dispatcher, queue: GuidQueueStore, owns: Callable[[str], bool],
                 recount: Callable[[], Awaitable[object]], interval_s: float,
                 on_swept: Callable[[Trigger, int], None] = lambda trigger, n: None,
                 owned: Callable[[], Sequence[tuple[int, int]]] | None = None,
                 on_error: Callable[[], None] | None = None) -> None:
        self.dispatcher = dispatcher
        self.queue = queue
        self.owns = owns  # is this guid mine? (by the partition counts last read)
        # The same, as (partition count, partition) pairs, for Postgres to read only the guids
        # of those partitions (None: it reads every guid, and ``owns`` keeps this sender's).
        self.owned = owned
        self.recount = recount  # read the partition counts afresh; gives back what hashes elsewhere
        self.interval_s = interval_s
        self.on_swept = on_swept
        self.on_error = on_error  # a sweep that failed (a metric's hook)
        self._asked = asyncio.Event()

    def request(self) -> None:
        """Sweep now (partitions were assigned). Call from the event loop's thread."""
        self._asked.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            trigger: Trigger = "assign" if self._asked.is_set() else "periodic"
            self._asked.clear()
            # The database, Kafka's metadata or a bug: this loop is what starts the owned
            # guids' work when their doorbells are gone, so it logs, counts and goes on.
            await attempt(functools.partial(self.sweep, trigger), "sweep for queued work", self.on_error)
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._asked.wait())]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED), self.interval_s)
            for w in waits:
                w.cancel()

    async def sweep(self, trigger: Trigger) -> int:
        """Start workers for owned guids with queued work; returns how many guids had work
        overdue and no worker (their doorbells were lost or handled by a previous owner)."""
        # Every sweep reads the partition counts afresh (partitions may have been added), but
        # starts the work it finds on the counts last read, without waiting for the new ones:
        # at an assignment under load the read takes up to a second, and the moved guids would
        # wait for it. Counts seldom change; when they have, the read itself gives back the
        # guids that now hash elsewhere, whatever this sweep started for them meanwhile (their
        # leases kept any two senders from sending for one guid at once).
        recount = asyncio.ensure_future(self.recount())
        try:
            # Work due within two sweeps gets its worker now; it sleeps until the work is due.
            found = self._start(await self.queue.waiting_guids(
                horizon_s=2 * self.interval_s, grace_s=self.interval_s,
                owned=None if self.owned is None else self.owned()))
        finally:
            await asyncio.wait([recount])
            failed = recount.exception()  # taken whatever happened above: never "never retrieved"
        if found:
            log.warning("sweep (%s) found %d guids with queued work and no worker", trigger, found)
        self.on_swept(trigger, found)
        if failed is not None:
            raise failed  # the last counts stand; run() logs it and the next sweep reads again
        return found

    def _start(self, waiting: list[Waiting]) -> int:
        found = 0
        for w in waiting:
            if not self.owns(w.guid):
                continue
            if w.guid in self.dispatcher.guids:
                if w.overdue and self.dispatcher.misses(w.guid, w.item_id):
                    # Its window may never reach this item, or only after every item it holds
                    # (the item may be an auto-reply): read the head of the guid's order now.
                    self.dispatcher.poke(w.guid, head=True)
                continue
            self.dispatcher.poke(w.guid)
            found += w.overdue
        return found
