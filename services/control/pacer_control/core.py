"""The Control API's use cases: authenticate, authorize, act (audited), inspect.

Decisions about jobs, shards, guids and budgets are taken by database functions under row
locks (``pacer_common/db/schema/functions/``), which also write their audit records; the use
cases here add the ones the database does not audit (bulk and single retries, cancels, limits,
tokens, test sends), always in the same transaction as the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Protocol

from pacer_common.domain.dead_letters import Cursor, DeadLetter, Page, Queue, matches, page_of, read_depth
from pacer_common.domain.ids import ItemId
from pacer_common.domain.limits import Pacings, parse_limits
from pacer_common.domain.requests import DEFAULT_TENANT
from pacer_common.domain.tokens import Role, new_token, token_hash
from pacer_common.domain.validation import InvalidRequest, validate_request
from pacer_control.domain import report, views
from pacer_control.domain.dryrun import DryRun, dry_run
from pacer_control.domain.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Unauthorized,
    Unavailable,
)
from pacer_control.domain.filters import (
    EVERY_SHARD,
    MAX_RETRY,
    AuditFilter,
    ItemFilter,
    JobFilter,
    Part,
    RetryFilter,
    ShardPage,
    check_retry_status,
    in_parts,
    parts,
)
from pacer_control.domain.outcomes import (
    CANCEL_OUTCOMES,
    RETRY_OUTCOMES,
    ActionResult,
    ItemRetry,
    tally,
)
from pacer_control.domain.permissions import Action, Principal, may, refusal, scope_refusal
from pacer_control.domain.reuse import CostPaced, Totals
from pacer_control.ports import (
    AuditEntry,
    ControlStore,
    ControlTx,
    DeadLetterQueue,
    ExpectedHolder,
    ItemSpan,
    NewToken,
    Row,
)

log = logging.getLogger("pacer.control")

MISSING_TOKEN = "missing bearer token: send 'Authorization: Bearer <token>'"
UNKNOWN_TOKEN = "unknown or revoked token"
# What a job's shards are read with to tell a stall (views.stalled), not shown.
SHARD_READS = frozenset({"quiet_since", "guid_held", "limits", "windows", "sender_limits", "job_gap", "penalty"})
LEASE_FIELDS = ("owner", "epoch", "since", "lease_until", "renew_count", "takeovers", "last_send_at", "expired",
                "windows")
# A job's counts are read afresh unless their read took this long, then kept until reading
# them again would take more than this share of the time (CostPaced).
COUNTS_FRESH_S = 0.02
COUNTS_SHARE = 0.05
SPANS_KEPT = 4096  # jobs whose range of item ids a Control API keeps, the most recently used


class CheckTurns(Protocol):
    """Checking a whole job request in this process (a dry run, a republish's check): how large a
    one it takes (``max_bytes``), and a turn among the others (``turn()``, Unavailable when none
    comes soon): each holds up to about 25 times its request in memory."""
    max_bytes: int

    def turn(self) -> contextlib.AbstractAsyncContextManager[None]: ...


def _json(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class Control:
    def __init__(self, store: ControlStore, sandbox_targets: frozenset[str] = frozenset(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 stalled_after_s: float = views.STALLED_AFTER_S, dead_letters: DeadLetterQueue | None = None,
                 report_page_rows: int = report.PAGE_ROWS, counts_share: float = COUNTS_SHARE,
                 counts_fresh_s: float = COUNTS_FRESH_S) -> None:
        self.store = store
        self.dlq = dead_letters
        self.sandbox_targets = sandbox_targets
        self.clock = clock
        self.stalled_after_s = stalled_after_s
        self.report_page_rows = report_page_rows
        self._spans: OrderedDict[tuple[str, Any], ItemSpan] = OrderedDict()
        # A large job's counts, kept by what their read cost (domain/reuse.py).
        self._totals: CostPaced[str, Totals] = CostPaced(counts_share, counts_fresh_s)

    # -- who is calling ------------------------------------------------------------------
    async def authenticate(self, authorization: str | None) -> Principal:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized(MISSING_TOKEN)
        principal = await self.store.principal(token_hash(token))
        if principal is None:
            raise Unauthorized(UNKNOWN_TOKEN)
        return principal

    @staticmethod
    def authorize(principal: Principal, action: Action) -> None:
        why = refusal(principal.role, action)
        if why is not None:
            raise Forbidden(why)

    async def authorize_scope(self, who: Principal, action: Action, target: tuple[str, str] | None,
                              tenant_filtered: bool) -> None:
        """A token scoped to tenants: the job or item ``target`` (kind, id) must be one of its
        tenants' (else 404, as if it did not exist); with no target, the route must show it only
        its tenants' rows (else 403)."""
        why = scope_refusal(who, action, lists=target is None and not tenant_filtered)
        if why is not None:
            raise Forbidden(why)
        if target is None:
            return
        kind, target_id = target
        try:
            uuid.UUID(target_id)
        except ValueError:
            return  # not an id at all: the route's own validation answers 422
        tenant = await self.store.tenant_of(kind, target_id)
        if tenant is None or not who.sees(tenant):
            raise NotFound(f"no {kind} {target_id} among the jobs of tenant(s) {who.scope} (token '{who.name}')")

    # -- jobs ----------------------------------------------------------------------------
    async def jobs(self, f: JobFilter) -> list[Row]:
        if f.before is not None:
            head = await self.store.job_head(f.before)
            if head is None or (f.tenants is not None and head["tenant"] not in f.tenants):
                raise NotFound(f"no job {f.before} (the 'before' cursor names a job that does not exist, or not "
                               "one of your tenants')")
        return await self.store.jobs(f)

    async def job(self, job_id: str, shards: ShardPage = EVERY_SHARD, failures: bool = True) -> Row:
        """A job with the shards ``shards`` names, each marked ``stalled`` or not by its guid's
        limits (its own overrides over every guid's over the defaults of the sender holding
        it), and its failure categories if ``failures``. A full page by guid names its last
        shard in ``next_shards_after``, where the next page starts. The job's counts are as of
        ``counts_read_at``: those of a job whose counts take long to read are kept a while
        (:class:`~pacer_control.domain.reuse.CostPaced`); every other field is read afresh."""
        now = self.clock()
        kept = self._totals.get(job_id, now)
        row = await self.store.job(job_id, shards, failures, kept)
        if row is None:
            raise NotFound(f"no job {job_id}")
        took_s = row.pop("totals_took_s", None)
        if took_s is not None:
            kept = Totals(row["counts"], row["shard_statuses"], now)
            self._totals.keep(job_id, kept, took_s, now)
        assert kept is not None
        row["counts_read_at"] = kept.read_at
        if row["shards"]:  # none to judge stalled: the defaults are not read
            now, pacings = self.clock(), Pacings(await self.store.guid_limits("*"))
            row["shards"] = [{k: v for k, v in s.items() if k not in SHARD_READS}
                             | {"stalled": views.stalled(row["status"], s, now,
                                                         pacings(s.get("limits"), s.get("sender_limits")),
                                                         self.stalled_after_s)}
                             for s in row["shards"]]
        paged = shards.limit and not shards.attention and len(row["shards"]) == shards.limit
        row["next_shards_after"] = row["shards"][-1]["shard_id"] if paged else None
        return row

    async def _span(self, job_id: str) -> tuple[Row, ItemSpan]:
        """The job's head and the range of ids that holds its items (``ItemSpan``): every read
        of a job's items by item id stays within it, so it reads that job's rows and not those
        of the jobs created before and after it (adapters/sql/item_span.sql). Reading the range
        reads every item of the job; it is read once a job and kept (the most recent
        :data:`SPANS_KEPT` jobs): it holds the job's items as they were when read and the
        whole millisecond of its creation, which every item added to the job later carries.
        Kept by job id and creation time: a job pruned and planned again from the same request
        has the same id and a new time. NotFound if there is no such job."""
        head = await self.store.job_head(job_id)
        if head is None:
            raise NotFound(f"no job {job_id}")
        key = (job_id, head["created_at"])
        span = self._spans.get(key)
        if span is not None:
            self._spans.move_to_end(key)
            return head, span
        span = await self.store.item_span(job_id)
        if span is None:
            raise NotFound(f"no job {job_id}")
        self._spans[key] = span
        if len(self._spans) > SPANS_KEPT:
            self._spans.popitem(last=False)
        return head, span

    async def job_action(self, job_id: str, action: str, who: Principal, reason: str | None) -> ActionResult:
        try:
            return await self.store.atomically(lambda tx: tx.job_action(job_id, action, who.actor, reason))
        finally:
            self._totals.forget(job_id)  # the counts the action changed are read afresh

    async def shard_action(self, job_id: str, shard_id: int, action: str, who: Principal,
                           reason: str | None) -> ActionResult:
        try:
            return await self.store.atomically(lambda tx: tx.shard_action(job_id, shard_id, action, who.actor,
                                                                          reason))
        finally:
            self._totals.forget(job_id)

    async def confirm_budget(self, job_id: str, max_sends: int, who: Principal) -> ActionResult:
        return await self.store.atomically(lambda tx: tx.confirm_budget(job_id, max_sends, who.actor))

    async def retry_job_items(self, job_id: str, who: Principal, item_ids: Sequence[str] | None,
                              f: RetryFilter | None, reason: str | None,
                              part: Part | None = None) -> tuple[list[ItemRetry], dict[str, int], str | None]:
        """Compensation items for the chosen items of a job, all in one transaction with one
        audit record (action ``retry`` on the job, ``after`` = items per outcome). A filter
        matching more than ``MAX_RETRY`` items is refused unless taken in parts (``part``): the
        last value is then the next part's ``after`` (None: no more match)."""
        if f is not None and (why := check_retry_status(f.status)):
            raise Invalid(why)
        span = None if item_ids is not None else (await self._span(job_id))[1]

        async def work(tx: ControlTx) -> tuple[list[ItemRetry], dict[str, int], str | None]:
            # The job's bulk lock first (an advisory lock, not its row): two bulk retries of
            # one job take turns instead of deadlocking on each other's items and shard counters.
            if not await tx.lock_job(job_id):
                raise NotFound(f"no job {job_id}")
            foreign: list[str] = []
            next_after = None
            if item_ids is not None:
                wanted = sorted(set(item_ids))
                mine = await tx.items_of_job(job_id, wanted)
                targets = [i for i in wanted if i in mine]
                foreign = [i for i in wanted if i not in mine]
                selection: dict[str, Any] = {"item_ids": len(wanted)}
            else:
                assert f is not None and span is not None
                matched = await tx.select_for_retry(job_id, span, f, (part.at_most if part else MAX_RETRY) + 1,
                                                    part.after if part else None)
                targets, next_after = in_parts(matched, part, "the filter matches", "narrow it (error_class, guid)")
                selection = {"filter": {"status": f.status.value, "error_class": f.error_class, "guid": f.guid},
                             **parts(part)}
            results = await tx.retry_items(targets, who.actor)
            results += [ItemRetry(ItemId(i), "not_found", None, f"item {i} is not part of job {job_id}") for i in foreign]
            totals = tally(results)
            done = {"next_after": next_after} if part else {}
            await tx.audit(AuditEntry(who.actor, "retry", "job", job_id, reason,
                                      before={**selection, "matched": len(targets)}, after={**totals, **done}))
            return results, totals, next_after

        try:
            return await self.store.atomically(work)
        finally:
            self._totals.forget(job_id)  # the counts the action changed are read afresh

    async def retry_item(self, item_id: str, who: Principal, reason: str | None,
                         priority: int | None = None) -> ActionResult:
        async def work(tx: ControlTx) -> ActionResult:
            state = await tx.item_state(item_id)
            if state is None:
                return ActionResult("not_found", f"no item {item_id}")
            (r,) = await tx.retry_items([item_id], who.actor, priority)
            await tx.audit(AuditEntry(who.actor, "retry", "item", item_id, reason, before={"status": state["status"]},
                                      after={"outcome": r.outcome, "new_item": r.new_item}))
            return ActionResult(RETRY_OUTCOMES[r.outcome], r.message, state["status"],
                                {"result": r.outcome, "new_item": r.new_item})

        return await self.store.atomically(work)

    async def cancel_item(self, item_id: str, who: Principal, reason: str | None) -> ActionResult:
        async def work(tx: ControlTx) -> ActionResult:
            state = await tx.item_state(item_id)
            if state is None:
                return ActionResult("not_found", f"no item {item_id}")
            outcome, message = await tx.cancel_item(item_id, who.actor)
            after = await tx.item_state(item_id)
            status = after["status"] if after else None
            await tx.audit(AuditEntry(who.actor, "cancel", "item", item_id, reason, before={"status": state["status"]},
                                      after={"outcome": outcome, "status": status}))
            return ActionResult(CANCEL_OUTCOMES[outcome], message, status, {"result": outcome})

        return await self.store.atomically(work)

    async def cancel_job_items(self, job_id: str, who: Principal, guid: str | None, reason: str | None,
                               part: Part | None = None) -> tuple[dict[str, int], str | None]:
        """Cancel a job's items not yet taken (of one guid, or all), in one transaction with one
        audit record (action ``cancel_items`` on the job, ``after`` = items per outcome). Sent
        messages are not undone; items in flight finish. More than ``MAX_RETRY`` matching items
        are refused unless taken in parts (``part``): the second value is then the next part's
        ``after`` (None: no more match). Each item is cancelled as a cancel of it alone would
        cancel it (its outcome counted), all in one statement: no savepoint per item."""
        _, span = await self._span(job_id)

        async def work(tx: ControlTx) -> tuple[dict[str, int], str | None]:
            if not await tx.lock_job(job_id):
                raise NotFound(f"no job {job_id}")
            matched = await tx.select_for_cancel(job_id, span, guid, (part.at_most if part else MAX_RETRY) + 1,
                                                 part.after if part else None)
            targets, next_after = in_parts(matched, part, "the selection matches", "narrow it by guid, or cancel the job")
            totals = dict.fromkeys(CANCEL_OUTCOMES, 0)
            for _, outcome, _ in await tx.cancel_items(targets, who.actor):
                totals[outcome] = totals.get(outcome, 0) + 1
            done = {"next_after": next_after} if part else {}
            await tx.audit(AuditEntry(who.actor, "cancel_items", "job", job_id, reason,
                                      before={"filter": {"guid": guid}, "matched": len(targets), **parts(part)},
                                      after={**totals, **done}))
            return totals, next_after

        try:
            return await self.store.atomically(work)
        finally:
            self._totals.forget(job_id)  # the counts the action changed are read afresh

    async def approvals(self, samples: int = 5, limit: int = 50) -> tuple[list[Row], int]:
        """The oldest ``limit`` jobs awaiting an admin's approval, oldest first, each with its
        preview of what is left to send (rendered samples, items per guid and the projected
        duration at current rates; items that expired while it waited counted apart), and how
        many wait in all."""
        ids, waiting = await self.store.awaiting_approval(limit)
        found = {j["job_id"]: j for j in await self.store.jobs(JobFilter(limit=limit, ids=tuple(ids)))} if ids else {}
        pacings, out = Pacings(await self.store.guid_limits("*")), []
        for job in (found[i] for i in ids if i in found):
            preview = await self.store.approval_preview(job["job_id"], samples)
            # what is left to send: a guid whose items all expired while the job waited has none
            projected = views.projection([g for g in preview["guids"] if g["items"]],
                                         lambda g: pacings(g.get("limits"), g.get("sender_limits")),
                                         int(job["priority"]))
            projected["expired"] = sum(int(g["expired"]) for g in preview["guids"])
            out.append({**job, "samples": preview["samples"], "projection": projected})
        return out, waiting

    async def decide_approval(self, job_id: str, approve: bool, reason: str | None, who: Principal) -> ActionResult:
        """Approve (→ running; completed if nothing is left open) or reject (→ cancelled) a job awaiting
        approval; audited."""
        return await self.store.atomically(lambda tx: tx.decide_approval(job_id, approve, who.actor, reason))

    async def in_doubt(self, limit: int) -> list[Row]:
        """Sends left unverified, with what is known of each, for a person to decide."""
        return await self.store.in_doubt(limit)

    async def resolve_in_doubt(self, item_id: str, delivered: bool, reason: str, who: Principal) -> ActionResult:
        """An unverified send decided by a person: delivered → confirmed (its ledger key stays
        used); not delivered → pending again (the ledger reservation released). Audited."""
        async def work(tx: ControlTx) -> ActionResult:
            result = await tx.resolve_unverified(item_id, delivered, who.actor, reason)
            if result.outcome == "done":
                await tx.audit(AuditEntry(who.actor, "resolve", "item", item_id, reason,
                                          before={"status": "unverified"},
                                          after={"delivered": delivered, "status": result.status}))
            return result

        return await self.store.atomically(work)

    async def items(self, job_id: str, f: ItemFilter) -> list[Row]:
        _, span = await self._span(job_id)
        return await self.store.items(job_id, span, f)

    async def report(self, job_id: str) -> tuple[str, AsyncIterator[str]]:
        """The report's file name and its CSV text, a chunk per page of items by item id.

        Each page is its own short read: its pooled connection is given back before the page
        is written to the client, so a download that waits on a slow client (or runs for a
        million items) holds none meanwhile. It is therefore no snapshot: each item is shown
        as it was when its page was read. Every item the job had when the download began is
        in it once (pages go by the item id, which never changes); an item added to the job
        meanwhile (a retry's compensation, a requery job's next page) may or may not be."""
        head, span = await self._span(job_id)  # here: a database error is a 503, not a cut download
        size = self.report_page_rows

        async def chunks() -> AsyncIterator[str]:
            yield report.header()
            after = None
            while True:
                rows = await self.store.report_page(job_id, span, after, size)
                if rows:
                    yield report.lines(rows)
                if len(rows) < size:
                    return
                after = rows[-1][0]  # the item id (report.COLUMNS)

        return report.filename(head["request_id"]), chunks()

    # -- guids ---------------------------------------------------------------------------
    def _visible(self, row: Row, who: Principal, pacings: Pacings) -> Row:
        """Health for everyone (with what an unheld guid is doing, by its pacing: its own limits
        over every guid's, the ``*`` overrides, over the defaults of the sender holding it);
        the lease view only for roles that may see leases."""
        counts = row.get("backlog") or row  # one guid's view counts its queue in its backlog
        sender = row.get("sender_limits")
        row = {k: v for k, v in row.items() if k not in ("sender_limits", "job_gap")}  # read here, not shown
        now = self.clock()
        asked = row.get("gateway_quiet_until")  # over or not, a stall counts from its end
        row["gateway_quiet_until"] = asked if asked is not None and asked > now else None  # shown while it lasts
        penalty = views.applied_penalty(row)
        row["applied_penalty"] = penalty if penalty > 1 else None
        if "ready" in counts:
            pacing = pacings(row.get("limits"), sender)
            row = row | {"quiet_until": views.quiet_until(pacing, now),
                         "capped_until": views.capped_until(pacing, row.get("windows"), now),
                         "activity": None if row["held"] else views.activity(
                             views.queued_count(counts), counts["ready"], row.get("last_send_at"),
                             counts["oldest_ready"], now, pacing, self.stalled_after_s, row.get("windows"),
                             float(counts.get("job_gap") or 0.0), penalty, asked)}
        if may(who.role, "guids.leases"):
            return row
        return {k: v for k, v in row.items() if k not in LEASE_FIELDS and k != "limits"}

    async def guids(self, who: Principal, paused_only: bool, limit: int, after: str | None,
                    state: str | None = None, start: str | None = None) -> list[Row]:
        """Guids by name, after ``after`` (the previous page's last) or from ``start`` on."""
        rows = await self.store.guids(paused_only, limit, after, state, start)
        pacings = Pacings(await self.store.guid_limits("*"))
        return [self._visible(r, who, pacings) for r in rows]

    async def fleet_limits(self) -> dict[str, Any]:
        """The limits set for every guid (``'*'``): what a guid without its own goes by, over
        the defaults of the sender holding it."""
        fleet = await self.store.guid_limits("*")
        return dict(fleet) if isinstance(fleet, dict) else {}

    async def guid_history(self, guid: str, limit: int, before: int | None) -> list[Row]:
        """The guid's lifecycle changes (online, offline, kicked, unauthorized), newest first."""
        return await self.store.guid_history(guid, limit, before)

    async def guid(self, guid: str, who: Principal) -> Row:
        row = await self.store.guid(guid)
        if row is None:
            raise NotFound(f"no guid {guid} (it has never held a lease, been paused, had limits set or queued work)")
        return self._visible(row, who, Pacings(await self.store.guid_limits("*")))

    async def backlogs(self, sort: str, limit: int) -> list[Row]:
        """Guids with queued work, most queued (``backlog``) or longest waiting (``wait``) first."""
        return await self.store.backlogs(sort, limit)

    async def pause_guid(self, guid: str, reason: str, who: Principal) -> ActionResult:
        async def work(tx: ControlTx) -> ActionResult:
            if await tx.hold_guid(guid, reason, who.actor):
                return ActionResult("done", f"guid {guid} paused: {reason}; it sends nothing until resumed", "paused")
            health = await tx.guid_health(guid)
            was = health["paused_reason"] if health else None
            return ActionResult("noop", f"guid {guid} is already paused ({was}); nothing changed", "paused")

        return await self.store.atomically(work)

    async def resume_guid(self, guid: str, who: Principal, reason: str | None) -> ActionResult:
        return await self.store.atomically(lambda tx: tx.resume_guid(guid, who.actor, reason))

    async def release_guid_lock(self, guid: str, who: Principal, reason: str,
                                expected: ExpectedHolder | None = None) -> ActionResult:
        """Evict the guid's lease holder (fenced, audited by ``pacer_force_release_guid``); with
        ``expected``, only if it is still the holder the admin confirmed (else a conflict)."""
        async def work(tx: ControlTx) -> ActionResult:
            r = await tx.force_release_guid(guid, who.actor, reason, expected)
            extra = {} if r["outcome"] != "done" else {
                "previous_owner": r["previous_owner"], "epoch": r["epoch"],
                "evicted_until": _json(r["evicted_until"]), "sends_in_flight": r["in_flight"]}
            return ActionResult(r["outcome"], r["message"], None, extra)

        return await self.store.atomically(work)

    async def release_item_lock(self, item_id: str, who: Principal, reason: str,
                                expected: ExpectedHolder | None = None) -> ActionResult:
        """Take an item's lease from its holder: claimed → pending, submitted → recovery_pending
        (verified, never resent blindly), with a new epoch; audited by ``pacer_force_release_item``.
        With ``expected``, only if it is still the holder the admin confirmed (else a conflict)."""
        async def work(tx: ControlTx) -> ActionResult:
            r = await tx.force_release_item(item_id, who.actor, reason, expected)
            extra = {} if r["outcome"] != "done" else {"from_status": r["from_status"], "epoch": r["epoch"]}
            return ActionResult(r["outcome"], r["message"], r["to_status"], extra)

        return await self.store.atomically(work)

    async def set_limits(self, guid: str, values: dict[str, Any], who: Principal, reason: str | None) -> Row:
        try:
            overrides = parse_limits(values, guid)
        except ValueError as exc:
            raise Invalid(str(exc)) from None

        # A job's weight and rate (row job:<job_id>) are the job's: audited on it, where the
        # job's other changes are found (the audit log by target type job and its id).
        target = ("job", guid.removeprefix("job:")) if guid.startswith("job:") else ("guid", guid)

        async def work(tx: ControlTx) -> Row:
            # Locked: a concurrent change waits, so "before" is what this change replaced.
            before = await tx.lock_guid_limits(guid, who.actor)
            after = await tx.set_guid_limits(guid, overrides, who.actor)
            await tx.audit(AuditEntry(who.actor, "set_limits", *target, reason,
                                      before={"limits": before}, after={"limits": after}))
            return {"guid": guid, "limits": after, "changed": overrides,
                    "message": "stored; senders apply it within about a second"}

        return await self.store.atomically(work)

    async def locks(self, limit: int, find: str | None = None) -> Row:
        return await self.store.locks(limit, find)

    # -- dead letters --------------------------------------------------------------------
    def _queue(self) -> DeadLetterQueue:
        if self.dlq is None:
            raise Unavailable("this control service reads no dead letters: it was started without Kafka settings "
                              "(PACER_KAFKA_BOOTSTRAP_SERVERS)")
        return self.dlq

    def dead_letter_topic(self, queue: Queue) -> str:
        return self._queue().topic(queue)

    async def dead_letters(self, who: Principal, queue: Queue, last: int, tenant: str | None = None,
                           key: str | None = None, before: datetime | None = None,
                           older: Cursor | None = None) -> Page:
        """The newest ``last`` records of ``queue`` the caller may see, newest first, among the
        last ``last`` of each partition (written before ``before``, or before a page's ``older``
        cursor), and the cursor of the next page; a token scoped to tenants sees its tenants'
        (a record whose tenant cannot be told only an unscoped token sees). With ``tenant`` or
        ``key``, the newest ``last`` that match among the last :data:`SEARCH_DEPTH`."""
        if before is not None and older is not None:
            raise Invalid("give `before` (a time) or `older` (a page's cursor), not both")
        read = await self._queue().window(queue, read_depth(last, tenant, key), before, older)
        return page_of(read, last, lambda d: who.sees(d.tenant) and matches(d, tenant, key))

    async def dead_letter(self, who: Principal, queue: Queue, partition: int, offset: int) -> DeadLetter:
        letter = await self._queue().one(queue, partition, offset)
        if letter is None or not who.sees(letter.tenant):
            raise NotFound(f"no dead letter {partition}:{offset} on {self.dead_letter_topic(queue)} (never written, "
                           "gone with the topic's retention, or not one of your tenants')")
        return letter

    async def republish_dead_letter(self, who: Principal, partition: int, offset: int,
                                    reason: str | None, checks: CheckTurns | None = None) -> ActionResult:
        """A refused job request sent to the planner again, as it came, once what refused it is
        fixed elsewhere (a tenant created, a quota raised, a bug fixed). A request still invalid
        is not sent (422, the planner's own reason), nor a record that holds only part of the
        request (one too large to keep whole).

        No database transaction is open while Kafka is waited on: the broker may take up to
        ``PRODUCE_TIMEOUT_S`` to answer, and a transaction open that long would keep a pooled
        connection and hold back every reader of the audit log's tail. Audited in two records
        on the dead letter, each committed on its own: ``republish_attempt`` before the request
        is sent (once a republish slot is free: none free within a few seconds is a 503 with
        nothing written or sent), then ``republish`` once the broker acknowledged it, or
        ``republish_failed`` with the error if it did not (a timeout: it may still have reached
        the topic). So no request goes out without a record of it, and no record says it was
        sent unless the broker said so. A database error after the send leaves the attempt as
        its only record: the answer still says it was republished, and the error is logged.

        The check is the planner's validation, in this process, and that its tenant exists (the
        planner refuses a job of an unknown tenant): with ``checks``, a request over
        its ``max_bytes`` is not checked here (422: republish it unchecked, and the planner
        checks it), and the check waits for its turn among the dry runs."""
        letter = await self.dead_letter(who, "requests", partition, offset)
        if (why := letter.not_republishable()) is not None:
            raise Invalid(f"not republished: {why}")
        if checks is not None and len(letter.value) > checks.max_bytes:
            raise Invalid(
                f"not republished: the request is {len(letter.value):,} bytes, over the {checks.max_bytes:,} this "
                "control service checks (PACER_CONTROL_DRY_RUN_MAX_BYTES: a check holds up to about 25 times its "
                "request in memory). Republish it unchecked with `pacer dead-letters republish --raw`: the planner "
                "checks it, and dead-letters it again with its reason if it still refuses it")
        try:
            async with checks.turn() if checks is not None else contextlib.nullcontext():
                valid = await asyncio.to_thread(validate_request, letter.value, self.clock())
        except InvalidRequest as exc:
            raise Invalid(f"not republished, the planner would refuse it again: {exc}. Fix the request "
                          "(GET its body) and publish it as a new one") from None
        tenant = valid.request.tenant
        del valid  # what goes out is the record as it came
        if not await self.store.tenant_exists(tenant):
            raise Invalid(f"not republished, the planner would refuse it again: unknown tenant {tenant!r}. "
                          "Create the tenant first (POST /api/v1/tenants), then republish it")
        queue = self._queue()
        topic = queue.topic("requests")
        where = f"{topic}:{letter.where}"
        before = {"reason": letter.reason, "at": letter.at.isoformat()}
        sent = {"key": letter.key_text, "tenant": letter.tenant}

        async def record(action: str, after: dict[str, Any]) -> None:
            entry = AuditEntry(who.actor, action, "dead_letter", where, reason, before=before, after=after)
            await self.store.atomically(lambda tx: tx.audit(entry))

        async with queue.publishing():
            await record("republish_attempt", sent)
            try:
                await queue.republish(letter)
            except Unavailable as exc:
                try:
                    await record("republish_failed", {**sent, "error": str(exc)})
                except Unavailable:
                    log.error("dead letter republish failed; the failure is not audited (the database cannot be "
                              "reached): its record says it was attempted", extra={"where": where, "actor": who.actor})
                raise
            done = (f"republished {topic} {letter.where}: the planner takes it again (a request that is already a "
                    "job is not planned twice)")
            try:
                await record("republish", sent)
            except Unavailable:
                log.error("dead letter republished, but the database cannot be reached to audit it as sent: its "
                          "record says it was attempted", extra={"where": where, "actor": who.actor})
                return ActionResult("done", f"{done}. Its audit record says only that it was attempted: the "
                                    "database could not be reached to record it as sent")
        log.info("dead letter republished", extra={"where": where, "actor": who.actor})
        return ActionResult("done", done)

    # -- tools ---------------------------------------------------------------------------
    def dry_run(self, raw: bytes, samples: int) -> DryRun:
        """``raw`` as the planner would take it from Kafka: the same validation, the same reasons."""
        now = self.clock()
        try:
            valid = validate_request(raw, now)
        except InvalidRequest as exc:
            raise Invalid(str(exc)) from None
        return dry_run(valid, now, samples)

    async def test_send(self, guid: str, to_id: str, content: str, who: Principal) -> Row:
        """One message to a sandbox target, queued as a one-item job: a sender sends it under
        the guid's lease, paced, with its key in the ledger, like every other item. Audited in
        the same transaction."""
        if not self.sandbox_targets:
            raise Forbidden("test sends are disabled: PACER_CONTROL_SANDBOX_TARGETS lists no sandbox target")
        if to_id not in self.sandbox_targets:
            raise Forbidden(f"to_id {to_id!r} is not a sandbox target; test sends may only go to "
                            f"{', '.join(sorted(self.sandbox_targets))} (PACER_CONTROL_SANDBOX_TARGETS)")

        # Made once: a retry of the unit after a commit whose answer was lost finds its send.
        # The item's id is made with the job, stamped with its creation time (test_send.sql).
        job_id = str(uuid.uuid4())

        async def work(tx: ControlTx) -> Row:
            made = await tx.test_send_made(job_id)
            if made is None:
                made = await tx.test_send(job_id, guid, to_id, content, who.actor)
                await tx.audit(AuditEntry(who.actor, "test_send", "guid", guid, None, None,
                                          {"to_id": to_id, "job_id": made["job_id"], "item_id": made["item_id"],
                                           "idem_key": made["idem_key"], "content_chars": len(content)}))
            return {**made, "queued": True,
                    "message": f"queued as job {made['job_id']}: sent like any other item (the guid's lease, "
                               f"its pacing, the ledger); follow it at /jobs/{made['job_id']}"}

        return await self.store.atomically(work)

    async def audit_log(self, f: AuditFilter) -> list[Row]:
        if f.after is not None and f.before is not None:
            raise Invalid("give 'after' (oldest first) or 'before' (newest first), not both")
        return await self.store.audit_log(f)

    # -- tokens --------------------------------------------------------------------------
    async def create_token(self, name: str, role: Role, who: Principal, tenants: list[str] | None = None) -> NewToken:
        scope = None if tenants is None else sorted(set(tenants))
        # Drawn once: a rerun of the unit after a commit whose answer was lost finds its own
        # token by the secret's hash and answers it, instead of "already exists".
        secret = new_token()
        made = await self.store.atomically(lambda tx: tx.create_token(name, role, who.actor, scope, secret))
        if made is None:
            raise Conflict(f"a token named {name!r} already exists (names are never reused, even after revocation). "
                           "If it is yours from an earlier attempt whose answer you did not get, its secret cannot "
                           f"be shown again: GET /tokens shows it (created_by, created_at); revoke it with DELETE "
                           f"/tokens/{name} and create one under a new name")
        return made

    async def tokens(self) -> list[Row]:
        return await self.store.tokens()

    async def revoke_token(self, name: str, who: Principal, reason: str | None) -> ActionResult:
        async def work(tx: ControlTx) -> ActionResult:
            row = await tx.revoke_token(name)
            if row is None:
                return ActionResult("not_found", f"no token named {name!r}")
            if not row["revoked_now"]:
                return ActionResult("noop", f"token {name!r} was already revoked at {row['revoked_at'].isoformat()}")
            await tx.audit(AuditEntry(who.actor, "revoke_token", "token", name, reason,
                                      before={"revoked": False, "role": row["role"]}, after={"revoked": True}))
            return ActionResult("done", f"token {name!r} revoked; it is refused from now on")

        return await self.store.atomically(work)


    # -- tenants -------------------------------------------------------------------------
    async def tenants(self) -> list[Row]:
        return await self.store.tenants()

    async def create_tenant(self, name: str, fields: dict[str, Any], who: Principal) -> Row:
        async def work(tx: ControlTx) -> Row:
            if not await tx.create_tenant(name, fields):
                raise Conflict(f"a tenant named {name!r} already exists; change it with PATCH /tenants/{name}")
            after = await tx.tenant(name)
            await tx.audit(AuditEntry(who.actor, "create_tenant", "tenant", name, None, None, _public(after)))
            assert after is not None
            return after

        return await self.store.atomically(work)

    async def update_tenant(self, name: str, fields: dict[str, Any], who: Principal, reason: str | None) -> Row:
        async def work(tx: ControlTx) -> Row:
            # The row locked first: a concurrent change waits, so "before" is what this one replaced.
            before = await tx.tenant(name) if await tx.lock_tenant(name) else None
            if before is None or not await tx.update_tenant(name, fields):
                raise NotFound(f"no tenant {name!r}")
            after = await tx.tenant(name)
            await tx.audit(AuditEntry(who.actor, "update_tenant", "tenant", name, reason, _public(before),
                                      {**(_public(after) or {}), "changed": sorted(fields)}))
            assert after is not None
            return after

        return await self.store.atomically(work)

    async def delete_tenant(self, name: str, who: Principal, reason: str | None) -> ActionResult:
        if name == DEFAULT_TENANT:
            return ActionResult("conflict", "the tenant 'default' cannot be deleted (requests without 'tenant' use it)")

        async def work(tx: ControlTx) -> ActionResult:
            before = await tx.tenant(name) if await tx.lock_tenant(name) else None
            row = await tx.delete_tenant(name)
            if row is None:
                return ActionResult("not_found", f"no tenant {name!r}")
            if not row["deleted"]:
                return ActionResult("conflict", f"tenant {name!r} has {row['jobs']} jobs; a tenant with jobs is kept")
            await tx.audit(AuditEntry(who.actor, "delete_tenant", "tenant", name, reason, _public(before), None))
            return ActionResult("done", f"tenant {name!r} deleted; its guids may now be any tenant's")

        return await self.store.atomically(work)


def _public(row: Row | None) -> dict[str, Any] | None:
    """A tenant as the audit log keeps it: no secret, only whether each is set."""
    return None if row is None else {k: _json(v) for k, v in row.items() if k not in ("created_at", "updated_at")}


def as_dict(result: ActionResult) -> dict[str, Any]:
    out = asdict(result)
    extra = out.pop("extra")
    return {**out, **extra}
