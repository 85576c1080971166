"""The planner's use case: one job request in, a durable job and its item commands out.

A requery request is stored as a job without items; its targets are paged in afterwards
(``paging``), and ``Handled.paging`` tells the caller to start that.

A request that cannot become a job (``validation``, admission, or the database refusing what
it holds) is dead-lettered here, in one place, before anything of it is stored, unless its
request id already has a job of its tenant: then it is that job delivered again, whatever
judging it again now says. A request is not refused for its size: Kafka bounds a record
(:data:`MAX_REQUEST_BYTES`, compressed), and a compressed record of a million targets holds
more once decompressed; the dead-letter topic keeps what it cannot hold whole cut
(``adapters.kafka``). A request id another
tenant's job has is refused (``already used by another tenant``): one id, one job. A failure
once the job is stored is raised as :class:`DispatchFailed`: such a request is never
dead-lettered (``consume`` decides what to do with failures).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, overload

from pacer_common import gcpause, tracing
from pacer_common.domain.commands import ItemFields, JobCommands
from pacer_common.domain.dead_letters import request_id_named, tenant_named
from pacer_common.domain.ids import JobId
from pacer_common.domain.requests import MAX_REQUEST_BYTES, JobRequest
from pacer_common.domain.validation import InvalidRequest, validate_request
from pacer_common.logs import bind
from pacer_planner.domain.admission import refusal
from pacer_planner.domain.planning import Plan, PlannedItem, plan
from pacer_planner.domain.sharding import DEFAULT_MAX_SHARD_ITEMS, ShardKey
from pacer_planner.ports import CommandBus, JobStore, Known, Stored, StoreRefused

log = logging.getLogger(__name__)
REDISPATCH_PAGE = 10_000  # commands of a job read, produced and flushed at a time when it is re-dispatched

Outcome = Literal["planned", "paging", "duplicate", "redispatched", "dead_lettered", "undispatched"]


class DispatchFailed(Exception):
    """The job is durable, and putting out its commands failed (the cause is chained). The
    request must not be dead-lettered: it is a job; a redelivery re-dispatches it."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} is stored; dispatching its commands failed")
        self.job_id = job_id


@dataclass(frozen=True)
class Handled:
    outcome: Outcome
    job_id: str | None = None
    items: int = 0
    reason: str | None = None
    paging: bool = False  # a requery job: its targets are still to be paged in




def reused(request_id: str) -> str:
    """The reason a request is refused whose id another tenant's job has (that tenant unnamed)."""
    return f"request_id {request_id!r} is already used by another tenant"


class _ItemFields(Sequence[ItemFields]):
    """Items as command fields, each content rendered when read (``PlannedItem.content``): a
    job's commands are encoded one at a time, never all its rendered messages at once."""

    def __init__(self, items: Sequence[PlannedItem], shard_ids: Mapping[ShardKey, int]) -> None:
        self.items, self.shard_ids = items, shard_ids

    def _fields(self, it: PlannedItem) -> ItemFields:
        return it.item_id, self.shard_ids[it.shard], it.guid, it.to_id, it.content, it.idem_key

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, i: int) -> ItemFields: ...
    @overload
    def __getitem__(self, i: slice) -> list[ItemFields]: ...

    def __getitem__(self, i: int | slice) -> ItemFields | list[ItemFields]:
        if isinstance(i, slice):
            return [self._fields(it) for it in self.items[i]]
        return self._fields(self.items[i])

    def __iter__(self) -> Iterator[ItemFields]:
        return map(self._fields, self.items)


def item_commands(job_id: str, req: JobRequest, priority: int, not_before: datetime | None,
                  items: Sequence[PlannedItem], shard_ids: Mapping[ShardKey, int]) -> JobCommands:
    return JobCommands(JobId(job_id), priority, req.kind.value, req.expire_at, not_before,
                       _ItemFields(items, shard_ids), created_at=datetime.now(UTC), traceparent=tracing.current(),
                       tenant=req.tenant)


def commands_for(p: Plan, shard_ids: Mapping[ShardKey, int]) -> JobCommands:
    return item_commands(p.job_id, p.request, p.priority, p.not_before, p.items, shard_ids)


class Planner:
    """Validates, plans, stores, dispatches. Order: job durable → commands flushed → marked."""

    def __init__(self, store: JobStore, bus: CommandBus, max_backlog_per_guid: int = 100_000,
                 coalesce_window: timedelta = timedelta(0), max_shard_items: int = DEFAULT_MAX_SHARD_ITEMS) -> None:
        self.store = store
        self.bus = bus
        self.max_backlog_per_guid = max_backlog_per_guid
        self.coalesce_window = coalesce_window
        self.max_shard_items = max_shard_items

    async def handle(self, key: bytes | None, value: bytes, now: datetime | None = None) -> Handled:
        now = now or datetime.now(UTC)
        try:
            with gcpause.paused():  # millions of objects, none garbage, for a big request
                valid = validate_request(value, now)
                p = plan(valid, now, self.coalesce_window, self.max_shard_items)
        except InvalidRequest as exc:
            return await self._refuse(key, value, str(exc), exc.tenant, exc.request_id or request_id_named(value))
        request = valid.request
        with bind(request_id=request.request_id, job_id=p.job_id):
            # An id that has a job: that job delivered again, or another tenant's id. Nothing of
            # the request is judged or stored again (its guids are not claimed).
            known = await self.store.known(request.request_id)
            if known is not None:
                tenant, request_id = request.tenant, request.request_id
                del valid, p, request  # what goes out again is the stored job: not held meanwhile
                return await self._stored_before(key, value, known, tenant, request_id)
            guids = p.per_guid
            reason = refusal(p, await self.store.queued(list(guids)), self.max_backlog_per_guid) if guids else None
            if reason is not None:
                return await self._refuse(key, value, reason, request.tenant, request.request_id)
            try:
                stored = await self.store.store(p)  # one transaction: all of the job or nothing
            except StoreRefused as exc:
                return await self._refuse(key, value, f"cannot store job request: {exc}", request.tenant,
                                          request.request_id)
            if stored.created:
                try:
                    return await self._dispatch(p, stored)
                except Exception as exc:
                    raise DispatchFailed(p.job_id) from exc
            # The id got a job meanwhile (a planner of another partition stored it): that job, as
            # stored, is what came again. Whether it is paged in is the job's (a requery job's id
            # republished as a snapshot stays a requery job), and so is its tenant.
            known = await self.store.known(request.request_id)
            if known is None:  # the job was removed since (retention): the next attempt stores it anew
                raise LookupError(f"the job of request id {request.request_id!r} is gone since storing it")
            return await self._stored_before(key, value, known, request.tenant, request.request_id)

    async def _stored_before(self, key: bytes | None, value: bytes, known: Known, tenant: str,
                             request_id: str) -> Handled:
        """A request whose id already has a job (``known``): from that job's tenant, it is that
        job delivered again; from another tenant, it is refused, and the reason does not name
        the tenant whose id it is."""
        if known.tenant != tenant:
            return await self.reject(key, value, reused(request_id), tenant, request_id)
        with bind(job_id=known.job_id):
            try:
                return await self._again(known)
            except Exception as exc:
                raise DispatchFailed(known.job_id) from exc

    async def _refuse(self, key: bytes | None, value: bytes, reason: str, tenant: str | None,
                      request_id: str | None) -> Handled:
        """Dead-letter a request that cannot become a job, unless its job is already stored:
        such a request is that job delivered again (after a crash before its offset moved, a
        rebalance, a rewind, its publisher sending it again), judged again now: past its
        expire_at, over a backlog or a quota lowered since. It is never dead-lettered (the
        record would say refused while its items go out); it is re-dispatched if it was not.
        A job of another tenant under the same id is not its job: the request is refused."""
        known = await self.store.known(request_id) if request_id is not None else None
        if known is not None and tenant is None:  # invalid: the tenant its bytes name, however many
            with gcpause.paused():
                tenant = tenant_named(value, MAX_REQUEST_BYTES)
        if known is None or known.tenant != tenant:
            return await self.reject(key, value, reason, tenant, request_id)
        with bind(request_id=request_id, job_id=known.job_id):
            log.info("request not accepted again (%s), but its job is already stored", reason)
            try:
                return await self._again(known)
            except Exception as exc:
                raise DispatchFailed(known.job_id) from exc

    async def _dispatch(self, p: Plan, stored: Stored) -> Handled:
        """A job just stored: its commands out, then marked dispatched."""
        if p.request.targets.mode == "requery":
            # Admission is per page for these (domain/admission.py): nothing to refuse yet.
            log.info("requery job stored; its targets are paged in")
            return Handled("paging", p.job_id, paging=True)
        n = await asyncio.to_thread(self.bus.dispatch, commands_for(p, stored.shard_ids))
        await self.store.mark_dispatched(p.job_id)
        log.info("job planned: %d items over %d shards", n, len(p.shards))
        return Handled("planned", p.job_id, n)

    async def _again(self, known: Known) -> Handled:
        """A job stored before: its commands out if a previous run died before they were."""
        if known.paging:
            log.info("requery job known; its targets are paged in")
            return Handled("duplicate", known.job_id, paging=True)
        if not known.dispatched:
            # A page at a time, each flushed before the next is read: what a re-dispatch holds
            # does not grow with the job (a million items, each with its text).
            n, after = 0, None
            while page := await self.store.pending_commands(known.job_id, after, REDISPATCH_PAGE):
                n += await asyncio.to_thread(self.bus.dispatch, page)
                if len(page) < REDISPATCH_PAGE:
                    break
                after = page[-1].item_id
            await self.store.mark_dispatched(known.job_id)
            log.info("job re-dispatched: %d pending items", n)
            return Handled("redispatched", known.job_id, n)
        log.info("duplicate job request ignored")
        return Handled("duplicate", known.job_id)

    async def reject(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None,
                     request_id: str | None = None) -> Handled:
        """``value`` to the dead letters with ``reason`` and its tenant: ``tenant`` (the
        request's, where it parsed that far), or the one its bytes name if they can be read for
        it; else the bus files it under the tenant its head names, if any (a scoped operator
        sees only its tenants'). The log line names the request id the bytes name, if any:
        a request published without a key is found by it."""
        await asyncio.to_thread(self.bus.dead_letter, key, value, reason, tenant or tenant_named(value))
        request_id = request_id or request_id_named(value)
        with bind(job_id=None):  # no job was made of it (a plan's id may be bound: never stored)
            log.warning("job request dead-lettered", extra={"reason": reason} | (
                {"request_id": request_id} if request_id else {}))
        return Handled("dead_lettered", reason=reason)
