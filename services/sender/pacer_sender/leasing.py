"""The dispatcher's guid-lease bookkeeping: a guid's lease is taken before its first send
(its pacing resumes where the previous holder left off) and given back once the guid's
partition went and no item of it is in hand."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pacer_common.db.errors import TransientError
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.leases import GuidLeases

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, leases: GuidLeases, clock: Callable[[], float]) -> None:
        self.leases = leases
        self.clock = clock
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
        pacer.resume_after(self.clock(), since, limits, lease.windows)
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
