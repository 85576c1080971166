"""The dispatcher's guid-lease bookkeeping: a guid's lease is taken before its first send
(its pacing resumes where the previous holder left off; a rested guid's first campaign send
is spread over one interval) and given back once the guid's partition went and no item of it
is in hand."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from pacer_common.db.errors import TransientError
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.leases import GuidLeases

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, leases: GuidLeases, clock: Callable[[], float], *, spread: float,
                 rng: random.Random) -> None:
        self.leases = leases
        self.clock = clock
        # Up to this fraction of a batch interval, drawn per guid, holds the first campaign
        # send of a guid taken rested (no send within its batch interval); 0: none is held.
        self.spread = spread
        self.rng = rng
        self._releasing: set[asyncio.Future[None]] = set()

    def holds(self, guid: str) -> bool:
        return guid in self.leases.held

    async def take(self, guid: str, pacer: GuidPacer, limits: Limits) -> bool:
        """Hold the guid's lease (taking it if need be); False while another sender holds it
        or the database cannot be reached."""
        if self.holds(guid):
            return True
        try:
            lease = await self.leases.acquire(guid)
        except TransientError:
            log.exception("guid lease for %s not taken; trying again", guid)
            return False
        if lease is None:
            return False  # another sender still holds the guid (finishing, or not yet expired)
        since = None if lease.last_send_at is None else (lease.db_now - lease.last_send_at).total_seconds()
        now = self.clock()
        pacer.resume_after(now, since, limits, lease.windows)
        if self.spread > 0 and (since is None or since >= limits.batch_interval_s):
            pacer.spread_start(now, limits, self.rng.random() * self.spread)
        return True

    def lost(self, guid: str) -> None:
        """The database says the lease is gone (``guid_lost``)."""
        self.leases.forget(guid)

    def hand_back(self, guid: str) -> None:
        """Give the guid's lease back in the background (its worker ended after its partition went)."""
        if not self.holds(guid):
            return
        task = asyncio.ensure_future(self.leases.release([guid]))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def release(self, gone: Callable[[str], bool], in_hand: set[str]) -> None:
        """Give back every lease of a guid that went (idle guids keep theirs, so workers or
        not), except those with an item still in hand: their workers give them back when it
        is done."""
        await self.leases.release([guid for guid in list(self.leases.held) if gone(guid) and guid not in in_hand])
