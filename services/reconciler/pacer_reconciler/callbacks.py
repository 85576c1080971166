"""The consumer of gateway callbacks (``<prefix>.callbacks``, appended by the intake).

``device.status`` moves the guid's lifecycle (``pacer_set_guid_state``: ordered by the
event's ts, so a late or repeated callback changes nothing); ``media.ready`` settles a
pending upload (ready or failed, once); other commands are for business consumers and are
passed over. A callback changes only guids of the tenant whose signature the intake checked
(or guids no job has named yet): another tenant's is counted ``foreign`` and logged. A body
that cannot be read, or whose handling raises a defect, is logged,
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
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from pacer_common.domain.callbacks import BadCallback, DeviceStatus, MediaReady, parse
from pacer_common.domain.guid_health import StatusEvent
from pacer_common.domain.requests import DEFAULT_TENANT
from pacer_reconciler.ports import CallbackSource, GuidStates, RawCallback

log = logging.getLogger(__name__)
# What became of one callback (the ``result`` label of pacer_reconciler_callbacks_total).
Result = Literal["applied", "stale", "foreign", "ignored", "bad"]
CALLBACK_CMDS = ("device.status", "media.ready", "other")
RESULTS: tuple[Result, ...] = ("applied", "stale", "foreign", "ignored", "bad")


# How far a callback's ts may run ahead of this clock. A later one is taken as now plus this: a
# gateway clock ahead (or a ts in year 9999) would otherwise date the guid's state past every
# event and resume to come, and freeze it.
AHEAD = timedelta(minutes=5)


def _not_ahead(event: StatusEvent, rec: RawCallback) -> StatusEvent:
    latest = datetime.now(UTC) + AHEAD
    if event.ts <= latest:
        return event
    log.warning("callback at %s is dated %s, ahead of this clock: taken as %s", rec.position, event.ts.isoformat(),
                latest.isoformat())
    return replace(event, ts=latest)


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
        done: Counter[tuple[str, str]] = Counter()  # counted once the round commits: a retried round counts once
        for rec in batch:
            cmd, result = await self._handle(rec)
            done[(cmd, result)] += 1
        await self.source.commit(batch)
        self._pending = []
        self.handled.update(done)
        return len(batch)

    async def _handle(self, rec: RawCallback) -> tuple[str, Result]:
        try:
            cb = parse(rec.value)
        except BadCallback as exc:
            log.warning("callback at %s skipped: %s", rec.position, exc)
            return "other", "bad"
        tenant = rec.tenant or DEFAULT_TENANT  # records appended before the intake named their tenant
        try:
            if isinstance(cb, DeviceStatus):
                result = await self.states.set_state(cb.guid, _not_ahead(cb.event, rec), tenant)
                if result == "applied":
                    log.info("guid %s is %s (callback at %s)", cb.guid, cb.event.state.value, cb.event.ts)
                cmd = "device.status"
            elif isinstance(cb, MediaReady):
                result, cmd = await self.states.media_ready(cb.guid, cb.media_id, cb.ok, cb.reason, tenant), "media.ready"
            else:
                return "other", "ignored"
            if result == "foreign":
                log.warning("callback at %s not applied: guid %s is another tenant's, not %s's", rec.position,
                            cb.guid, tenant, extra={"tenant": tenant, "guid": cb.guid})
            return cmd, result
        except self.environment_errors:
            raise
        except Exception:
            log.exception("callback at %s skipped: its handling failed", rec.position)
            return "other", "bad"
