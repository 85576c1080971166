"""Paging requery target sets: fetch a page, store it in one transaction, dispatch its items.

Each requery job is paged by one background task (``PagingSupervisor``), so the Kafka
consumer loop never waits on an audience service. The task holds the job's paging lease
(``jobs.target_owner``) and, page after page:

  claim (renew lease, read cursor) → fetch ``cursor`` (retried with backoff) → plan the page
  → admission (wait and fetch again if a guid's backlog is full) → store the page (items,
  shards, totals, cursor, page row; one transaction) → produce its commands → mark it
  dispatched.

A crash anywhere resumes from the stored cursor: a page is stored whole or not at all, a
stored page whose commands may not have gone out is re-dispatched first, and a planner whose
lease was taken over cannot store the page it fetched. Fetch failures are retried
``page_attempts`` times; then the job is paused with the reason (``system:planner``), and
resuming it resumes paging. A page that takes the job past the approval size holds it as
``awaiting_approval`` (the store decides, in the page's transaction); paging stops at the
next claim and an admin's approval resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from pacer_common import tracing
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.requests import RequeryTargets, expired
from pacer_common.logs import bind
from pacer_planner.core.intake import item_commands
from pacer_planner.domain.admission import page_refusal
from pacer_planner.domain.sharding import DEFAULT_MAX_SHARD_ITEMS
from pacer_planner.domain.targets import Page, TargetFetchError, parse_page, plan_page, redact_url
from pacer_planner.ports import CommandBus, PageRejected, PagingEvents, PagingState, TargetSource, TargetStore

log = logging.getLogger(__name__)

RunOutcome = Literal["complete", "paused", "not_running", "not_claimed", "lost", "stopped"]


@dataclass(frozen=True)
class PagingConfig:
    owner: str  # this planner's name on the leases it takes
    page_attempts: int = 5  # fetches of one page before the job is paused
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    lease_ttl_s: float = 120.0  # must outlast one page's fetch attempts and backoff
    admission_wait_s: float = 5.0
    max_backlog_per_guid: int = 100_000
    max_shard_items: int = DEFAULT_MAX_SHARD_ITEMS


class _NoEvents:
    def page_stored(self, fetched: int, added: int, duplicates: int, invalid: int) -> None: ...
    def fetch_failed(self) -> None: ...
    def job_paused(self) -> None: ...
    def page_lost(self) -> None: ...


class TargetPager:
    """Pages one requery job at a time (call ``run`` once per job, concurrently if you like)."""

    def __init__(self, store: TargetStore, source: TargetSource, bus: CommandBus, cfg: PagingConfig,
                 events: PagingEvents | None = None) -> None:
        self.store = store
        self.source = source
        self.bus = bus
        self.cfg = cfg
        self.events: PagingEvents = events or _NoEvents()

    async def run(self, job_id: str, max_pages: int | None = None) -> RunOutcome:
        """Page ``job_id`` until its set is complete, it stops running, or another planner has
        it; ``max_pages`` stops early (the lease is released)."""
        with bind(job_id=job_id):
            owner, ttl = self.cfg.owner, self.cfg.lease_ttl_s
            state = await self.store.claim(job_id, owner, ttl)
            if state is None:
                return "not_claimed"
            await self._redispatch(job_id)
            stored = 0
            while True:
                if state.complete:
                    await self.store.mark_dispatched(job_id)
                    await self.store.release(job_id, owner)
                    log.info("target set complete after %d pages", state.pages)
                    return "complete"
                if state.status != "running":
                    await self.store.release(job_id, owner)
                    log.info("paging stops: job is %s", state.status)
                    return "not_running"
                if max_pages is not None and stored >= max_pages:
                    await self.store.release(job_id, owner)
                    return "stopped"
                # Each page in the job request's trace: the audience's fetch, the items' rows
                # and their commands carry it, as a snapshot job's do.
                with tracing.span("page requery targets", tracing.parent(state.traceparent), page=state.pages + 1):
                    outcome = await self._page(state)
                if outcome == "stored":
                    stored += 1
                elif outcome != "waited":
                    return outcome
                next_state = await self.store.claim(job_id, owner, ttl)
                if next_state is None:
                    return "lost"
                state = next_state

    async def _page(self, state: PagingState) -> Literal["stored", "waited", "paused", "lost"]:
        req = state.request
        assert isinstance(req.targets, RequeryTargets)
        job_id, page_no = state.job_id, state.pages + 1
        now = datetime.now(UTC)
        if expired(req.expire_at, now):
            reason = f"request expired after {state.pages} pages; no more targets are fetched"
            await self.store.close_set(job_id, self.cfg.owner, reason)
            log.warning("target set closed: %s", reason)
            return "stored"  # the next claim sees the set complete
        try:
            page = await self._fetch(state, req.targets, page_no)
        except TargetFetchError as exc:  # every attempt failed
            return await self._pause(job_id, (
                f"target_fetch_failed: page {page_no} of {redact_url(str(req.targets.url))} "
                f"(cursor {state.cursor!r}) failed {self.cfg.page_attempts} times, last: {exc}"))
        known = await self.store.known_subs(job_id, sorted({t.guid for _, t in page.targets}))
        plan = plan_page(req, page, known, self.cfg.max_shard_items, job_created_at=state.created_at)
        adds = plan.per_guid
        if adds:
            refused = page_refusal(req.kind, req.effective_priority, adds, await self.store.queued(list(adds)),
                                   self.cfg.max_backlog_per_guid)
            if refused is not None:
                await self.store.note_wait(job_id, self.cfg.owner, f"page {page_no} waits: {refused}")
                log.info("page %d waits for admission: %s", page_no, refused)
                await asyncio.sleep(self.cfg.admission_wait_s)
                return "waited"
        try:
            result = await self.store.store_page(state, self.cfg.owner, page, plan, now, self.cfg.lease_ttl_s)
        except PageRejected as exc:
            return await self._pause(job_id, f"target_page_rejected: page {page_no} cannot be stored: {exc}")
        if result is None:
            # Fetched under a lease that lapsed meanwhile (a pause, a freeze): another planner
            # has the job; nothing of this page was kept.
            self.events.page_lost()
            log.warning("page %d not stored: the job moved on without this planner", page_no)
            return "lost"
        added = [it for it in plan.items if it.item_id in result.added]
        duplicates = plan.duplicates + len(plan.items) - len(added)
        self.events.page_stored(page.fetched, len(added), duplicates, plan.invalid)
        log.info("page %d stored: %d fetched, %d added, %d duplicates, %d invalid%s", page_no, page.fetched,
                 len(added), duplicates, plan.invalid, " (last)" if page.last else "")
        if result.awaiting_approval is not None:
            # Its commands still go out: senders hold the items of a job that is not running
            # until an admin approves (paging resumes then) or rejects it.
            log.warning("job held for approval after page %d: %s", page_no, result.awaiting_approval)
        commands = item_commands(job_id, req, req.effective_priority, req.not_before, added, result.shard_ids)
        await self._dispatch(job_id, [page_no], commands)
        return "stored"

    async def _fetch(self, state: PagingState, targets: RequeryTargets, page_no: int) -> Page:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.cfg.page_attempts),
            # initial * 2**n plus up to one initial of jitter, capped at backoff_max_s.
            wait=wait_exponential_jitter(multiplier=self.cfg.backoff_initial_s, max=self.cfg.backoff_max_s,
                                         jitter=self.cfg.backoff_initial_s),
            retry=retry_if_exception_type(TargetFetchError),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                doc = await self.source.fetch(str(targets.url), state.cursor, targets.page_size)
                return parse_page(doc, state.cursor)
            outcome = attempt.retry_state.outcome
            if outcome is not None and outcome.failed:
                # Say why paging is stuck meanwhile (after the last attempt, the loop re-raises).
                n = attempt.retry_state.attempt_number
                self.events.fetch_failed()
                reason = f"page {page_no}: attempt {n} of {self.cfg.page_attempts} failed: {outcome.exception()}"
                log.warning("target fetch failed: %s", reason)
                await self.store.note_wait(state.job_id, self.cfg.owner, reason)
        raise AssertionError("unreachable")

    async def _pause(self, job_id: str, reason: str) -> Literal["paused"]:
        held = await self.store.hold(job_id, reason)
        await self.store.release(job_id, self.cfg.owner)
        self.events.job_paused()
        log.error("paging stopped, job %s: %s", "paused" if held else "not running", reason)
        return "paused"

    async def _redispatch(self, job_id: str) -> None:
        """Commands of pages stored by a run that stopped before they were flushed."""
        pages = await self.store.undispatched_pages(job_id)
        if pages:
            commands = await self.store.page_commands(job_id, pages)
            await self._dispatch(job_id, pages, commands)
            log.info("re-dispatched %d pending items of pages %s", len(commands), pages)

    async def _dispatch(self, job_id: str, pages: Sequence[int], commands: Sequence[ItemCommand]) -> None:
        # Produce and flush off the event loop: a flush may take a while, and the consumer
        # loop and other pagers share this loop.
        await asyncio.to_thread(self.bus.dispatch, commands)
        await self.store.mark_pages_dispatched(job_id, pages)


class PagingSupervisor:
    """Runs a pager task per requery job, at most ``max_jobs`` at once, and sweeps for jobs
    that need one: new ones, ones whose planner died (their lease ran out), resumed ones."""

    def __init__(self, pager: TargetPager, store: TargetStore, max_jobs: int = 4, sweep_s: float = 5.0) -> None:
        self.pager = pager
        self.store = store
        self.max_jobs = max_jobs
        self.sweep_s = sweep_s
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def ensure(self, job_id: str) -> bool:
        """Start paging ``job_id`` unless it is being paged here or there is no room (the
        sweep comes back for it)."""
        if job_id in self.tasks or len(self.tasks) >= self.max_jobs:
            return False
        self.tasks[job_id] = asyncio.create_task(self._run(job_id), name=f"paging-{job_id}")
        return True

    async def _run(self, job_id: str) -> None:
        try:
            await self.pager.run(job_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Postgres or Kafka unavailable past their own retries: the lease runs out and
            # the next sweep (here or on another planner) resumes from the stored cursor.
            log.exception("paging job %s failed; it resumes at a later sweep", job_id)
        finally:
            self.tasks.pop(job_id, None)

    async def sweep(self) -> int:
        room = self.max_jobs - len(self.tasks)
        if room <= 0:
            return 0
        found = await self.store.candidates(self.pager.cfg.owner, room + len(self.tasks))
        return sum(self.ensure(job_id) for job_id in found)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sweep()
            except Exception:
                log.exception("paging sweep failed; trying again in %.1fs", self.sweep_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.sweep_s)

    async def close(self) -> None:
        """Stop every pager; their leases are released so another planner takes over at once."""
        tasks = dict(self.tasks)
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for job_id in tasks:
            try:
                await self.store.release(job_id, self.pager.cfg.owner)
            except Exception:
                log.warning("could not release the paging lease of job %s; it runs out by itself", job_id)
