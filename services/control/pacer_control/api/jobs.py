"""Jobs, their shards and items: view, pause, resume, cancel, terminate, budget, retry, report."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from pacer_common.domain.ids import Guid, ItemId, JobId
from pacer_common.domain.requests import MAX_ID_CHARS, JobKind
from pacer_common.domain.status import ItemStatus
from pacer_control.api.auth import Caller, Ctl, guard
from pacer_control.api.responses import next_cursor, respond
from pacer_control.api.schemas import (
    NO_NUL,
    ActionBody,
    ActionResponse,
    ApprovalPage,
    BudgetBody,
    CancelItemsBody,
    CancelItemsResponse,
    InDoubtPage,
    ItemPage,
    JobDetail,
    JobPage,
    ReasonBody,
    ReleaseBody,
    ResolveBody,
    RetryBody,
    RetryItemBody,
    RetryResponse,
)
from pacer_control.domain.errors import Invalid
from pacer_control.domain.filters import (
    DEFAULT_PAGE,
    MAX_PAGE,
    ItemFilter,
    JobFilter,
    JobStatus,
    Part,
    RetryFilter,
    ShardPage,
)
from pacer_control.domain.permissions import Action
from pacer_control.ports import ExpectedHolder

router = APIRouter(tags=["jobs"])

JobIdPath = Annotated[uuid.UUID, Path(description="the job's id")]
ShardIdPath = Annotated[int, Path(ge=1, le=2**63 - 1, description="the shard's id (see the job's detail)")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
TextQuery = Annotated[str | None, Query(min_length=1, max_length=256, pattern=NO_NUL)]


@router.get("/jobs", response_model=JobPage, summary="List jobs, newest first (a scoped token: its tenants' only)",
            **guard("jobs.view", 404, 422, tenant_filtered=True))
async def list_jobs(ctl: Ctl, who: Caller, status: JobStatus | None = None, kind: JobKind | None = None,
                    created_by: TextQuery = None, limit: Limit = DEFAULT_PAGE,
                    before: Annotated[uuid.UUID | None, Query(description="a job id: jobs created before it")] = None,
                    since: Annotated[date | None, Query(description="only jobs created on or after this day (UTC)")]
                    = None,
                    request_id: Annotated[str | None, Query(min_length=1, max_length=MAX_ID_CHARS, pattern=NO_NUL, description=(
                        "only the job planned from this job request (its `request_id`)"))] = None) -> dict[str, Any]:
    f = JobFilter(status, kind, created_by, limit, JobId(str(before)) if before else None,
                  datetime.combine(since, time(), UTC) if since else None, who.tenants, request_id=request_id)
    rows = await ctl.jobs(f)
    return {"jobs": rows, "next_before": next_cursor(rows, limit, "job_id")}


@router.get("/jobs/{job_id}", response_model=JobDetail, summary="A job: progress, shards, failures, hold, budget",
            description="Every shard of the job by guid, or a page of them with `shards_limit`: a job has a shard "
                        "per guid (more for a guid with many items), and listing tens of thousands of them costs "
                        "the database a read of each. `counts`, `shard_statuses` and `shards_total` are the whole "
                        "job's whatever the page; `shards_limit=0` reads them alone. The failure categories read "
                        "every item of the job not delivered: a client paging through the shards asks for them "
                        "once, and `failures=false` on the other pages.",
            **guard("jobs.view", 404, 422))
async def get_job(job_id: JobIdPath, ctl: Ctl,
                  shards_limit: Annotated[int | None, Query(
                      ge=0, le=MAX_PAGE, description="list at most this many shards, by guid (default: every one)")]
                  = None,
                  shards_after: Annotated[int | None, Query(
                      ge=1, le=2**63 - 1, description="a shard id (`next_shards_after` of the page before): the "
                                                      "page starts after that shard, by guid")] = None,
                  failures: Annotated[bool, Query(
                      description="false: leave the failure categories out (`failures` empty, `shed` 0)")] = True
                  ) -> dict[str, Any]:
    if shards_after is not None and shards_limit is None:
        raise Invalid("shards_after pages the shards: give shards_limit with it")
    return await ctl.job(str(job_id), ShardPage(shards_limit, shards_after), failures)


_JOB_ACTIONS: dict[str, tuple[Action, str, str | None]] = {
    "pause": ("jobs.pause", "Pause a running job: no new sends; items in flight finish. Resumable.", None),
    "resume": ("jobs.resume", "Resume a paused job (or a terminated one once nothing is in flight); "
                              "one with nothing left open completes",
               "A job whose items all ended while it was held (they expired past their `expire_at`) has nothing "
               "left to send: it is completed at once (`status` `completed`) instead of running; no event would "
               "come for the reconciler to complete it."),
    "cancel": ("jobs.cancel", "Cancel a job: pending and waiting items are abandoned. Irreversible.",
               "Nothing already sent is undone. An item in flight that comes back to waiting after the cancel (a "
               "retry, a send proved or resolved not delivered) is abandoned when it does. Cancelling a cancelled "
               "job abandons any such item still left pending or waiting_retry and answers `done` with their "
               "count (the job stays `cancelled`); with none left, `noop`."),
    "terminate": ("jobs.terminate", "Terminate a job: no new sends; resumable once in-flight items settle.", None),
}


def _job_action(action: str) -> Any:
    async def handler(job_id: JobIdPath, ctl: Ctl, who: Caller, body: ActionBody | None = None) -> Any:
        return respond(await ctl.job_action(str(job_id), action, who, body.reason if body else None))

    handler.__name__ = f"{action}_job"
    return handler


for _action, (_perm, _doc, _more) in _JOB_ACTIONS.items():
    router.add_api_route(f"/jobs/{{job_id}}/{_action}", _job_action(_action), methods=["POST"],
                         response_model=ActionResponse, summary=_doc, description=_more or "",
                         **guard(_perm, 404, 409, 422))


def _shard_action(action: Literal["pause", "resume"]) -> Any:
    async def handler(job_id: JobIdPath, shard_id: ShardIdPath, ctl: Ctl, who: Caller,
                      body: ActionBody | None = None) -> Any:
        return respond(await ctl.shard_action(str(job_id), shard_id, action, who, body.reason if body else None))

    handler.__name__ = f"{action}_shard"
    return handler


router.add_api_route("/jobs/{job_id}/shards/{shard_id}/pause", _shard_action("pause"), methods=["POST"],
                     response_model=ActionResponse, summary="Pause one shard (one guid's part of the job)",
                     **guard("shards.pause", 404, 409, 422))
router.add_api_route("/jobs/{job_id}/shards/{shard_id}/resume", _shard_action("resume"), methods=["POST"],
                     response_model=ActionResponse,
                     summary="Resume a paused shard; one with nothing left open completes, and its job with it",
                     description=("A shard whose items all expired while it was paused has nothing left to send: it "
                                  "is completed at once (`status` `completed`), and its job too when it was the "
                                  "job's last open shard (a requery job with pages to come stays running)."),
                     **guard("shards.resume", 404, 409, 422))


@router.get("/approvals", response_model=ApprovalPage, summary="Jobs awaiting an admin's approval, with a preview",
            **guard("jobs.view", 422))
async def approvals(ctl: Ctl, samples: Annotated[int, Query(ge=0, le=50)] = 5) -> dict[str, Any]:
    jobs, waiting = await ctl.approvals(samples)
    return {"jobs": jobs, "waiting": waiting}


@router.post("/jobs/{job_id}/approve", response_model=ActionResponse,
             summary="Approve a job awaiting approval: it starts sending, or completes with nothing left to send",
             description=("Answers `status` `running`; or `completed` when nothing of the job is left open (every "
                          "item expired past its `expire_at` while it waited): it completes at once, sending "
                          "nothing. A requery job with pages to come stays running and goes on paging."),
             **guard("jobs.approve", 404, 409, 422))
async def approve_job(job_id: JobIdPath, ctl: Ctl, who: Caller, body: ActionBody | None = None) -> Any:
    return respond(await ctl.decide_approval(str(job_id), True, body.reason if body else None, who))


@router.post("/jobs/{job_id}/reject", response_model=ActionResponse,
             summary="Reject a job awaiting approval: it is cancelled, nothing is sent",
             **guard("jobs.approve", 404, 409, 422))
async def reject_job(job_id: JobIdPath, body: ReasonBody, ctl: Ctl, who: Caller) -> Any:
    return respond(await ctl.decide_approval(str(job_id), False, body.reason, who))


@router.post("/jobs/{job_id}/budget", response_model=ActionResponse,
             summary="Confirm a larger send budget (a job paused for its budget resumes)",
             **guard("jobs.budget", 404, 409, 422))
async def confirm_budget(job_id: JobIdPath, body: BudgetBody, ctl: Ctl, who: Caller) -> Any:
    return respond(await ctl.confirm_budget(str(job_id), body.max_sends, who))


@router.post("/jobs/{job_id}/retry", response_model=RetryResponse,
             summary="Retry items of a job (by id or by filter) as compensation items; one audit record",
             **guard("items.retry", 404, 422))
async def retry_job_items(job_id: JobIdPath, body: RetryBody, ctl: Ctl, who: Caller) -> dict[str, Any]:
    f = None
    if body.filter is not None:
        f = RetryFilter(ItemStatus(body.filter.status), body.filter.error_class, _guid(body.filter.guid))
    ids = [str(i) for i in body.item_ids] if body.item_ids is not None else None
    results, totals, next_after = await ctl.retry_job_items(str(job_id), who, ids, f, body.reason,
                                                            _part(body.filter.at_most, body.filter.after)
                                                            if body.filter is not None else None)
    return {"totals": totals, "results": results, "more": next_after is not None, "next_after": next_after}


@router.post("/jobs/{job_id}/cancel-items", response_model=CancelItemsResponse,
             summary="Cancel a job's items not yet taken (all, or one guid's); sent messages are not undone",
             **guard("items.cancel", 404, 422))
async def cancel_job_items(job_id: JobIdPath, body: CancelItemsBody, ctl: Ctl, who: Caller) -> dict[str, Any]:
    totals, next_after = await ctl.cancel_job_items(str(job_id), who, body.guid, body.reason,
                                                    _part(body.at_most, body.after))
    return {"totals": totals, "more": next_after is not None, "next_after": next_after}


def _part(at_most: int | None, after: uuid.UUID | None) -> Part | None:
    if at_most is None:
        if after is not None:
            raise Invalid("'after' goes with 'at_most': it names where the next part of a selection starts")
        return None
    return Part(at_most, str(after) if after else None)


@router.get("/in-doubt", response_model=InDoubtPage, tags=["items"],
            summary="Unverified sends (delivery unknown), oldest first, with their events and ledger state",
            **guard("items.view", 422))
async def in_doubt(ctl: Ctl, limit: Limit = DEFAULT_PAGE) -> dict[str, Any]:
    return {"items": await ctl.in_doubt(limit)}


@router.post("/items/{item_id}/resolve", response_model=ActionResponse, tags=["items"],
             summary="Resolve an unverified send: delivered → confirmed, not delivered → pending (sent again, "
                     "unless its job is cancelled or it has expired)",
             description=("Not delivered: the ledger's reservation is freed and the item is pending again under the "
                          "same key. It is sent again, except when its job is cancelled (it is abandoned when a "
                          "sender comes to claim it) or its `expire_at` has passed (it expires); the answer's "
                          "`message` says which. After a restore from a backup, an item unchanged since the "
                          "restore goes to `recovery_pending` instead, its key kept reserved: the verifier asks the "
                          "gateway before it is sent (it may have been resolved and sent after the backup)."),
             **guard("items.resolve", 404, 409, 422))
async def resolve_item(item_id: uuid.UUID, body: ResolveBody, ctl: Ctl, who: Caller) -> Any:
    return respond(await ctl.resolve_in_doubt(str(item_id), body.delivered, body.reason, who))


@router.get("/jobs/{job_id}/items", response_model=ItemPage, summary="A job's items, by item id (keyset pages)",
            **guard("items.view", 404, 422))
async def list_items(job_id: JobIdPath, ctl: Ctl, status: ItemStatus | None = None, guid: TextQuery = None,
                     error_class: TextQuery = None, limit: Limit = DEFAULT_PAGE,
                     after: Annotated[uuid.UUID | None, Query(description="an item id: the page starts after it")]
                     = None) -> dict[str, Any]:
    f = ItemFilter((status,) if status else None, _guid(guid), error_class, False, limit, ItemId(str(after)) if after else None)
    rows = await ctl.items(str(job_id), f)
    return {"items": rows, "next_after": next_cursor(rows, limit, "item_id")}


@router.get("/jobs/{job_id}/failed", response_model=ItemPage,
            summary="A job's items that ended without delivery (failed, unverified, expired, abandoned) with an error",
            **guard("items.view", 404, 422))
async def list_failed(job_id: JobIdPath, ctl: Ctl,
                      status: Literal["failed", "unverified", "expired", "abandoned"] | None = None,
                      guid: TextQuery = None, error_class: TextQuery = None, limit: Limit = DEFAULT_PAGE,
                      after: uuid.UUID | None = None) -> dict[str, Any]:
    f = ItemFilter((ItemStatus(status),) if status else None, _guid(guid), error_class, True, limit,
                   ItemId(str(after)) if after else None).failed()
    rows = await ctl.items(str(job_id), f)
    return {"items": rows, "next_after": next_cursor(rows, limit, "item_id")}


_report = guard("reports.view", 404, 422)
_report["responses"][200] = {"content": {"text/csv": {}}, "description": "one line per item"}


@router.get("/jobs/{job_id}/report.csv", response_class=StreamingResponse,
            summary="The delivery report as CSV, streamed", description=(
                "One line per item, by item id, read a page at a time while it streams (no database connection "
                "is held while the client reads). Not a snapshot of one moment: each item is as it was when its "
                "page was read, so items that change meanwhile may show states of different moments. Every item "
                "the job had when the download began is in it once; an item added meanwhile (a retry's "
                "compensation, a requery job's next page) may or may not be."), **_report)
async def report(job_id: JobIdPath, ctl: Ctl) -> StreamingResponse:
    name, chunks = await ctl.report(str(job_id))
    return StreamingResponse(chunks, media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.post("/items/{item_id}/retry", response_model=ActionResponse, tags=["items"],
             summary="Retry one item: a compensation item through the normal send path",
             **guard("items.retry", 404, 409, 422))
async def retry_item(item_id: uuid.UUID, ctl: Ctl, who: Caller, body: RetryItemBody | None = None) -> Any:
    return respond(await ctl.retry_item(str(item_id), who, body.reason if body else None,
                                        body.priority if body else None))


@router.post("/items/{item_id}/release-lock", response_model=ActionResponse, tags=["items"],
             summary="Force-release an item's lease: claimed → pending, submitted → recovery_pending (verified); "
                     "with expected_owner/expected_epoch, only that holder's",
             **guard("items.release_lock", 404, 409, 422))
async def release_item_lock(item_id: uuid.UUID, body: ReleaseBody, ctl: Ctl, who: Caller) -> Any:
    expected = ExpectedHolder(body.expected_owner, body.expected_epoch)
    return respond(await ctl.release_item_lock(str(item_id), who, body.reason, expected))


@router.post("/items/{item_id}/cancel", response_model=ActionResponse, tags=["items"],
             summary="Cancel one item that has not been taken yet (pending or waiting_retry)",
             **guard("items.cancel", 404, 409, 422))
async def cancel_item(item_id: uuid.UUID, ctl: Ctl, who: Caller, body: ActionBody | None = None) -> Any:
    return respond(await ctl.cancel_item(str(item_id), who, body.reason if body else None))


def _guid(value: str | None) -> Guid | None:
    return None if value is None else Guid(value)
