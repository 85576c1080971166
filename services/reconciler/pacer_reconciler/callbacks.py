"""The consumer of gateway callbacks (``<prefix>.callbacks``, appended by the intake).

``device.status`` moves the guid's lifecycle (``pacer_set_guid_state``: ordered by the
event's ts, so a late or repeated callback changes nothing); ``media.ready`` settles a
pending upload (ready or failed, once); other commands are for business consumers and are
passed over. A body that cannot be read, or whose handling raises a defect, is logged,
counted in ``bad`` and skipped: one bad event never stops the others. A database or broker
outage fails the round; the same records are handled again after a back-off (handling is
idempotent) and their offsets are committed only once all of them are done.

It runs in every replica, not only the leader: the consumer group spreads the topic's
partitions over the replicas, and the state writes need no fence (an event applies only if
newer than the state it finds).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Literal

from pacer_reconciler.domain.callbacks import BadCallback, DeviceStatus, MediaReady, parse
from pacer_reconciler.ports import CallbackSource, GuidStates, RawCallback

log = logging.getLogger(__name__)
# What became of one callback (the ``result`` label of pacer_reconciler_callbacks_total).
Result = Literal["applied", "stale", "ignored", "bad"]
CALLBACK_CMDS = ("device.status", "media.ready", "other")
RESULTS: tuple[Result, ...] = ("applied", "stale", "ignored", "bad")


class CallbackConsumer:
    def __init__(self, source: CallbackSource, states: GuidStates, *, batch: int = 500,
                 environment_errors: tuple[type[BaseException], ...] = ()) -> None:
        self.source = source
        self.states = states
        self.batch = batch
        self.environment_errors = environment_errors
        self.handled: Counter[tuple[str, str]] = Counter()  # (cmd, result); drained by the caller
        self._pending: list[RawCallback] = []  # fetched, not yet all handled: kept across a failed round

    async def round(self, timeout_s: float = 0.5) -> int:
        """Handle one batch and commit it; returns how many records it held."""
        if not self._pending:
            self._pending = await self.source.fetch(self.batch, timeout_s)
        batch = self._pending
        for rec in batch:
            cmd, result = await self._handle(rec)
            self.handled[(cmd, result)] += 1
        await self.source.commit(batch)
        self._pending = []
        return len(batch)

    async def _handle(self, rec: RawCallback) -> tuple[str, Result]:
        try:
            cb = parse(rec.value)
        except BadCallback as exc:
            log.warning("callback at %s skipped: %s", rec.position, exc)
            return "other", "bad"
        try:
            if isinstance(cb, DeviceStatus):
                changed = await self.states.set_state(cb.guid, cb.event)
                if changed:
                    log.info("guid %s is %s (callback at %s)", cb.guid, cb.event.state.value, cb.event.ts)
                return "device.status", "applied" if changed else "stale"
            if isinstance(cb, MediaReady):
                settled = await self.states.media_ready(cb.guid, cb.media_id, cb.ok, cb.reason)
                return "media.ready", "applied" if settled else "stale"
            return "other", "ignored"
        except self.environment_errors:
            raise
        except Exception:
            log.exception("callback at %s skipped: its handling failed", rec.position)
            return "other", "bad"
