"""The operator console: server-rendered HTML over the same use cases as the API.

Pages (``/console/jobs`` …) are empty shells that hold no data and need no token. Each shell
loads its content from a *part* (``/console/part/…``) with htmx; the browser's script adds the
token kept in ``sessionStorage`` as ``Authorization: Bearer …`` to every such request. Parts
and console actions are guarded exactly like the API routes (the same ``guard(action)``), so
an operator is not shown what its role may not do, and is refused it anyway. No cookie is
ever set, so a request from another site carries no credentials (nothing to forge).
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from importlib import resources
from typing import Annotated, Any, Literal, TypeVar, get_args
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, FastAPI, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from pacer_common.domain import ids
from pacer_common.domain.dead_letters import SEARCH_DEPTH, Queue, cursor_text
from pacer_common.domain.requests import MAX_ID_CHARS, JobKind
from pacer_common.domain.status import ItemStatus
from pacer_control.api import dead_letters as dead_letter_api
from pacer_control.api.auth import Caller, Ctl, guard
from pacer_control.domain import views
from pacer_control.domain.errors import Invalid, NotFound
from pacer_control.domain.filters import (
    MAX_RETRY,
    RETRYABLE,
    AuditFilter,
    ItemFilter,
    JobFilter,
    JobStatus,
    Part,
    RetryFilter,
    ShardPage,
)
from pacer_control.domain.outcomes import ActionResult
from pacer_control.domain.permissions import Action, Principal, may, scope_refusal
from pacer_control.ports import ExpectedHolder

HERE = resources.files("pacer_control.api.console")
PREFIX = "/console"
STATIC = f"{PREFIX}/static"
HTMX = f"{STATIC}/vendor/htmx-2.0.11/htmx.min.js"
SWAGGER = f"{STATIC}/vendor/swagger-ui-5.35.0"
# Pages need no script from elsewhere, no frames, no inline script.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
PAGES = {"jobs": "Jobs", "approvals": "Approvals", "guids": "Guids", "locks": "Locks", "in-doubt": "In doubt",
         "dead-letters": "Dead letters", "audit": "Audit"}
PAGE_ACTION: dict[str, Action] = {"jobs": "jobs.view", "approvals": "jobs.view", "guids": "guids.health", "locks": "locks.view",
                                  "in-doubt": "items.view", "dead-letters": "dead_letters.view", "audit": "audit.view"}
TENANT_PAGES = frozenset({"jobs", "dead-letters"})  # pages that show a scoped token its tenants' rows only
DLQ_TITLES: dict[Queue, str] = {"requests": "Job requests", "callbacks": "Callbacks"}
DLQ_LAST = 100  # records of each partition read for the Dead letters page

# The job statuses each action applies to (the buttons offered), and what it does, said on
# screen and in its confirmation. A cancelled job is offered Cancel again only while it has
# items come back to waiting since (CANCEL_AGAIN; job_actions).
JOB_ACTION_FROM: dict[str, tuple[str, ...]] = {
    "pause": ("running",), "resume": ("paused", "terminated"),
    "cancel": ("running", "paused", "terminated", "awaiting_approval"), "terminate": ("running", "paused"),
}
CANCEL_AGAIN = ("Cancel again: the job is cancelled, but {n} of its items came back to pending or waiting_retry "
                "since (sends then in flight, retried or proved not delivered); they are abandoned now, not sent.")
JOB_ACTIONS: dict[str, tuple[Action, str]] = {
    "pause": ("jobs.pause", "Pause: no new sends start; sends already in flight finish. Resumable."),
    "resume": ("jobs.resume", "Resume: pending items start sending again."),
    "cancel": ("jobs.cancel", ("Cancel: pending and waiting items are abandoned. Cancel does not undo messages "
                               "already sent. Irreversible.")),
    "terminate": ("jobs.terminate", ("Terminate: no new sends; in-flight sends settle; resumable once nothing "
                                     "is in flight. It does not undo messages already sent.")),
}

templates = Jinja2Templates(directory=str(HERE.joinpath("templates")))
templates.env.globals.update(STATIC=STATIC, HTMX=HTMX, PAGES=PAGES)
templates.env.filters["ts"] = lambda v: (views.in_utc(v).strftime("%Y-%m-%d %H:%M:%S") if isinstance(v, datetime)
                                          else (v or "–"))
templates.env.filters["ago"] = lambda v: views.ago(v, datetime.now(UTC))
templates.env.filters["until"] = lambda v: views.duration(max(0.0, (v - datetime.now(UTC)).total_seconds()))
templates.env.filters["stamp"] = views.stamp
templates.env.filters["duration"] = views.duration
templates.env.globals["changes"] = views.changes
templates.env.filters["shown"] = views.shown
templates.env.globals["limits_shown"] = views.limits_shown
templates.env.filters["seg"] = lambda v: quote(str(v), safe="")  # a value as one segment of a URL path
# A part's query string (blank values left out), escaped: a filter such as a creator "a&b" survives paging.
templates.env.globals["query"] = lambda **params: urlencode({k: v for k, v in params.items() if v not in (None, "")})

pages = APIRouter(include_in_schema=False)
router = APIRouter(prefix=f"{PREFIX}/part", include_in_schema=False)
JobId = Annotated[uuid.UUID, Path()]
GuidPath = Annotated[str, Path(min_length=1, max_length=256, pattern=r"^[^\x00]*$")]
GUID_PAGE = 200  # guids per page of the Guids page
SHARDS_SHOWN = 50  # shards a job's page lists: those to look at first
KEPT_SHOWN = timedelta(seconds=1)  # counts older than this are shown with when they were read
E = TypeVar("E", bound=StrEnum)


def install(app: FastAPI) -> None:
    """The console's pages, parts, static files (htmx, Swagger UI's assets) and the API docs page."""
    app.mount(STATIC, StaticFiles(directory=str(HERE.joinpath("static"))), name="console-static")
    app.include_router(pages)
    app.include_router(router)
    app.add_api_route(f"{PREFIX}/{{rest:path}}", not_a_page, methods=["GET"], include_in_schema=False)  # last


async def not_a_page(request: Request, rest: str) -> Response:
    """Any other console address: a page that says so and links the console's pages (a part,
    which the console's own script asks for, gets the API's error)."""
    if rest.startswith("part/"):
        raise NotFound(f"the console has no part {PREFIX}/{rest}")
    if rest.endswith("/") or not rest:  # /console/guids/ is /console/guids
        return RedirectResponse(f"{PREFIX}/{quote(rest.rstrip('/'), safe='/')}".rstrip("/") or PREFIX)
    return templates.TemplateResponse(request, "missing.html", {"path": request.url.path}, status_code=404,
                                      headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})


# -- pages: shells without data ----------------------------------------------------------
def _page(request: Request, name: str, part: str, title: str) -> HTMLResponse:
    query = request.url.query
    return templates.TemplateResponse(request, "shell.html", {
        "page": name, "title": title, "part": f"{PREFIX}/part/{part}" + (f"?{query}" if query else ""),
        "refresh": True},  # after an action the page shows its effect
        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})


@pages.get(PREFIX)
async def home() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/jobs")


@pages.get(f"{PREFIX}/login", response_class=HTMLResponse)
async def login(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "login.html", {}, headers={"Content-Security-Policy": CSP})


@pages.get(f"{PREFIX}/jobs/{{ref:path}}", response_class=HTMLResponse)
async def job_page(request: Request, ref: str) -> Response:
    """A job's page by its id (as the console writes it); by anything else, the jobs list
    filtered by request id (the id an operator knows a job by), which shows that job or says
    none matches. A request id written as a job id is would name no job: the job's part then
    sends the page to the job of that request id, if there is one (``job``)."""
    if not ref.strip("/"):
        return RedirectResponse(f"{PREFIX}/jobs")
    if ref.endswith("/"):
        return RedirectResponse(f"{PREFIX}/jobs/{quote(ref.rstrip('/'), safe='')}")
    if _is_job_id(ref):
        return _page(request, "jobs", f"jobs/{ref}", "Job")
    return RedirectResponse(f"{PREFIX}/jobs?{urlencode({'request_id': ref})}")


def _is_job_id(ref: str) -> bool:
    """Whether ``ref`` is a job id as the console and the API write one (a UUID's canonical text)."""
    try:
        return str(uuid.UUID(ref)) == ref
    except ValueError:
        return False


def _shell(name: str) -> Any:
    async def shell(request: Request) -> HTMLResponse:
        return _page(request, name, name, PAGES[name])

    return shell


for _name in PAGES:
    pages.add_api_route(f"{PREFIX}/{_name}", _shell(_name), methods=["GET"], response_class=HTMLResponse)


# -- parts: data, guarded like the API ---------------------------------------------------
def _render(request: Request, template: str, who: Principal, **ctx: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, template, {
        "who": who, "may": lambda action: may(who.role, action), **ctx}, headers={"Cache-Control": "no-store"})


async def _form(request: Request) -> dict[str, str]:
    """The posted form (application/x-www-form-urlencoded), blank fields left out."""
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1].strip() for k, v in parse_qs(raw).items() if v[-1].strip()}


def _text(form: dict[str, str], key: str, required: bool = False, limit: int = 500) -> str | None:
    value = form.get(key)
    if value is None and required:
        raise Invalid(f"{key} is required")
    if value is not None and (len(value) > limit or "\x00" in value):
        raise Invalid(f"{key} must be at most {limit} characters, without NUL")
    return value


def _flash(request: Request, result: ActionResult | str, ok: bool = True) -> HTMLResponse:
    """An action's answer for the banner; a done action also tells the page to refresh."""
    if isinstance(result, ActionResult):
        ok, message = result.outcome in ("done", "noop"), result.message
    else:
        message = result
    headers = {"HX-Trigger": "pacer-changed", "Cache-Control": "no-store"}
    return templates.TemplateResponse(request, "flash.html", {"ok": ok, "message": message}, headers=headers)


@router.get("/nav", response_class=HTMLResponse, **guard("jobs.view", tenant_filtered=True))
async def nav(request: Request, who: Caller) -> HTMLResponse:
    """The pages the caller may open: by its role, and for a token scoped to tenants only those
    that show their tenants' rows alone."""
    allowed = {name: title for name, title in PAGES.items() if may(who.role, PAGE_ACTION[name])
               and scope_refusal(who, PAGE_ACTION[name], lists=name not in TENANT_PAGES) is None}
    return _render(request, "nav.html", who, allowed=allowed)


@router.get("/jobs", response_class=HTMLResponse, **guard("jobs.view", tenant_filtered=True))
async def jobs(request: Request, ctl: Ctl, who: Caller, status: str | None = None, kind: str | None = None,
               created_by: str | None = None, since: str | None = None, before: str | None = None,
               request_id: str | None = None) -> HTMLResponse:
    request_id = _text({"request_id": (request_id or "").strip()}, "request_id", limit=MAX_ID_CHARS) or None
    f = JobFilter(status or None, _choice(JobKind, "kind", kind) if kind else None, created_by or None, 50,  # type: ignore[arg-type]  # the form's status goes to SQL as text: an unknown one matches no job
                  ids.JobId(before) if before else None, _day(since), who.tenants, request_id=request_id)
    rows = await ctl.jobs(f)
    for r in rows:
        r["progress"] = views.progress(r["counts"], r["total"])
    return _render(request, "jobs.html", who, jobs=rows, f={"status": status or "", "kind": kind or "",
                   "created_by": created_by or "", "since": since or "", "request_id": request_id or ""},
                   statuses=list(get_args(JobStatus)),
                   kinds=[k.value for k in JobKind], next_before=rows[-1]["job_id"] if len(rows) == 50 else None)


def _choice(kind: type[E], name: str, value: str) -> E:
    """``value`` as one of ``kind``'s members, or a 422 that lists them."""
    try:
        return kind(value)
    except ValueError:
        raise Invalid(f"{name}: {value[:64]!r} is not one of {', '.join(m.value for m in kind)}") from None


def _day(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.combine(date.fromisoformat(value), time(), UTC)
    except ValueError:
        raise Invalid(f"since: {value!r} is not a date (YYYY-MM-DD)") from None


def job_actions(row: dict[str, Any]) -> dict[str, tuple[Action, str]]:
    """The actions offered on a job (its role aside), each with what it does: those its status
    takes, and Cancel on a cancelled job that has items waiting again (``waiting_after_cancel``,
    read from the items: the job's counts lag the cancel itself)."""
    offered = {a: v for a, v in JOB_ACTIONS.items() if row["status"] in JOB_ACTION_FROM[a]}
    if views.budget_used_up(row.get("budget")):
        offered.pop("resume", None)  # refused until an admin confirms a larger budget (the page says so)
    left = int(row.get("waiting_after_cancel") or 0)
    if row["status"] == "cancelled" and left > 0:
        offered["cancel"] = (JOB_ACTIONS["cancel"][0], CANCEL_AGAIN.format(n=left))
    return offered


@router.get("/jobs/{job_id}", response_class=HTMLResponse, **guard("jobs.view"))
async def job(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    try:
        row = await ctl.job(str(job_id), ShardPage(0), failures=False)  # its parts read the rest
    except NotFound:
        # No job has that id; a request may (publishers use UUIDs as request ids): its job's page.
        named = await ctl.jobs(JobFilter(limit=1, tenants=who.tenants, request_id=str(job_id)))
        if not named:
            raise
        return HTMLResponse("", headers={"HX-Redirect": f"{PREFIX}/jobs/{named[0]['job_id']}"})
    applies = job_actions(row)
    return _render(request, "job.html", who, job=row, applies=bool(applies),
                   actions={a: v for a, v in applies.items() if may(who.role, v[0])},  # those the role may take
                   retry_statuses=[s.value for s in RETRYABLE], budget_used_up=views.budget_used_up(row["budget"]))


@router.get("/jobs/{job_id}/progress", response_class=HTMLResponse, **guard("jobs.view"))
async def job_progress(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    """The job's status and counts, read every second while shown: the job's row and one
    aggregate of its shards' counts (15 ms at 10,000 shards: bench console), the aggregate kept
    a while where it takes longer (``PACER_CONTROL_COUNTS_SHARE``): the page then says when
    the counts were read."""
    row = await ctl.job(str(job_id), ShardPage(0), failures=False)
    now = datetime.now(UTC)
    kept = row["counts_read_at"] if now - row["counts_read_at"] >= KEPT_SHOWN else None
    return _render(request, "job_progress.html", who, job=row, progress=views.progress(row["counts"], row["total"]),
                   counts_read=row["counts_read_at"].timestamp(), counts_kept=kept)


@router.get("/jobs/{job_id}/shards", response_class=HTMLResponse, **guard("jobs.view"))
async def job_shards(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    """The job's shards to look at first (a job has one a guid: tens of thousands of them),
    and how many there are per status."""
    row = await ctl.job(str(job_id), ShardPage(SHARDS_SHOWN, attention=True), failures=False)
    for s in row["shards"]:
        s["progress"] = views.progress(s["counts"], s["total"])
    return _render(request, "job_shards.html", who, job=row, stalled_after=views.duration(ctl.stalled_after_s))


@router.get("/jobs/{job_id}/failures", response_class=HTMLResponse, **guard("jobs.view"))
async def job_failures(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    """Why the job's items did not go out: a read of its items, not of the projection, so
    refreshed less often than the progress."""
    row = await ctl.job(str(job_id), ShardPage(0))
    failed = await ctl.items(str(job_id), ItemFilter(limit=200).failed()) if may(who.role, "items.view") else []
    return _render(request, "job_failures.html", who, job=row, failed=failed[:20], examples=views.examples(failed),
                   read_ahead=views.read_ahead(row["counts"], row["failures"]), read_at=datetime.now(UTC))


def _job_action(action: str) -> Any:
    async def handler(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
        form = await _form(request)
        return _flash(request, await ctl.job_action(str(job_id), action, who, _text(form, "reason")))

    return handler


for _action, (_perm, _) in JOB_ACTIONS.items():
    router.add_api_route(f"/jobs/{{job_id}}/{_action}", _job_action(_action), methods=["POST"],
                         response_class=HTMLResponse, **guard(_perm))


@router.post("/jobs/{job_id}/budget", response_class=HTMLResponse, **guard("jobs.budget"))
async def budget(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    raw = _text(await _form(request), "max_sends", required=True) or ""
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 2**31:
        raise Invalid("max_sends must be a whole number above 0")
    return _flash(request, await ctl.confirm_budget(str(job_id), int(raw), who))


def _more(next_after: str | None, acted: int) -> str:
    """What a console bulk action, which takes up to MAX_RETRY items a click, says when more
    match. A click that acted on some starts again from the first: those it acted on no longer
    match. One that acted on none would take the same items again; the API goes on past them."""
    if next_after is None:
        return ""
    if acted:
        return f"; more than {MAX_RETRY:,} matched: these were the first {MAX_RETRY:,}, press again for the next"
    return (f"; more than {MAX_RETRY:,} matched and none of the first {MAX_RETRY:,} could be acted on: take the rest "
            f"in parts with the API (at_most, then after={next_after})")


@router.post("/jobs/{job_id}/retry", response_class=HTMLResponse, **guard("items.retry"))
async def bulk_retry(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    form = await _form(request)
    f = RetryFilter(_choice(ItemStatus, "status", form.get("status", "failed")), _text(form, "error_class", limit=256),
                    _guid(_text(form, "guid", limit=256)))
    results, totals, next_after = await ctl.retry_job_items(str(job_id), who, None, f, _text(form, "reason"),
                                                            Part(MAX_RETRY))
    # why items were not retried, by the first of each such outcome (the API lists every item's)
    why = "".join(f"; {outcome}, e.g. item {r.item_id}: {r.message}" for outcome in ("conflict", "refused")
                  for r in [next((r for r in results if r.outcome == outcome), None)] if r is not None)
    return _flash(request, f"retry: {views.describe_totals(totals)}{why}{_more(next_after, totals['created'])}",
                  ok=totals.get("created", 0) > 0)


@router.post("/jobs/{job_id}/cancel-items", response_class=HTMLResponse, **guard("items.cancel"))
async def bulk_cancel(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    form = await _form(request)
    totals, next_after = await ctl.cancel_job_items(str(job_id), who, _text(form, "guid", limit=256),
                                                    _text(form, "reason"), Part(MAX_RETRY))
    return _flash(request, f"cancel: {views.describe_totals(totals)} (sent messages are not undone)"
                           f"{_more(next_after, totals['cancelled'])}", ok=totals.get("cancelled", 0) > 0)


@router.get("/guids", response_class=HTMLResponse, **guard("guids.health"))
async def guids(request: Request, ctl: Ctl, who: Caller, paused: bool = False, after: str | None = None,
                find: str | None = None, sort: Literal["name", "backlog", "wait"] = "name") -> HTMLResponse:
    """Guids by name, a page at a time (``after`` the last one shown, or ``find``: from that
    name on), or the guids with queued work, most queued or longest waiting first."""
    find = _text({"find": (find or "").strip()}, "find", limit=256) or None
    ctx: dict[str, Any] = {"paused": paused, "find": find or "", "sort": sort, "page_size": GUID_PAGE,
                           "sandbox": sorted(ctl.sandbox_targets), "stalled_after": views.duration(ctl.stalled_after_s)}
    if sort == "name":
        rows = await ctl.guids(who, paused, GUID_PAGE, after or None, start=find)
        ctx |= {"guids": rows, "next_after": rows[-1]["guid"] if len(rows) == GUID_PAGE else None,
                "fleet_limits": await ctl.fleet_limits()}
    else:
        ctx |= {"backlogs": await ctl.backlogs(sort, GUID_PAGE)}
    return _render(request, "guids.html", who, **ctx)


@router.get("/guids/{guid:path}/history", response_class=HTMLResponse, **guard("guids.health"))
async def guid_history(request: Request, guid: GuidPath, ctl: Ctl, who: Caller) -> HTMLResponse:
    rows = await ctl.guid_history(guid, 50, None)
    return _render(request, "guid_history.html", who, guid=guid, changes=rows)


@router.post("/guids/{guid:path}/pause", response_class=HTMLResponse, **guard("guids.pause"))
async def pause_guid(request: Request, guid: GuidPath, ctl: Ctl, who: Caller) -> HTMLResponse:
    reason = _text(await _form(request), "reason", required=True) or ""
    return _flash(request, await ctl.pause_guid(guid, reason, who))


@router.post("/guids/{guid:path}/resume", response_class=HTMLResponse, **guard("guids.resume"))
async def resume_guid(request: Request, guid: GuidPath, ctl: Ctl, who: Caller) -> HTMLResponse:
    return _flash(request, await ctl.resume_guid(guid, who, _text(await _form(request), "reason")))


@router.post("/guids/{guid:path}/limits", response_class=HTMLResponse, **guard("guids.limits"))
async def set_limits(request: Request, guid: GuidPath, ctl: Ctl, who: Caller) -> HTMLResponse:
    form = await _form(request)
    values = {k: views.number(v) for k, v in form.items() if k in ("min_interval_s", "per_hour", "per_day")}
    if not values:
        raise Invalid("give at least one limit (min_interval_s, per_hour, per_day)")
    row = await ctl.set_limits(guid, values, who, _text(form, "reason"))
    return _flash(request, f"limits of {guid} now {row['limits']}; {row['message']}")


@router.post("/test-send", response_class=HTMLResponse, **guard("gateway.test_send"))
async def test_send(request: Request, ctl: Ctl, who: Caller) -> HTMLResponse:
    form = await _form(request)
    made = await ctl.test_send(_text(form, "guid", True, 256) or "", _text(form, "to_id", True, 256) or "",
                               _text(form, "content", True, 4096) or "", who)
    return _flash(request, made["message"])


LOCK_PAGE = 500


@router.get("/locks", response_class=HTMLResponse, **guard("locks.view"))
async def locks(request: Request, ctl: Ctl, who: Caller, find: str | None = None) -> HTMLResponse:
    """The guid leases, expired first, or from the guid ``find`` on (a fleet has more than a
    page of them), and the item leases."""
    find = _text({"find": (find or "").strip()}, "find", limit=256) or None
    return _render(request, "locks.html", who, view=await ctl.locks(LOCK_PAGE, find), find=find or "",
                   page_size=LOCK_PAGE)


@router.post("/guids/{guid:path}/release-lock", response_class=HTMLResponse, **guard("guids.release_lock"))
async def release_lock(request: Request, guid: GuidPath, ctl: Ctl, who: Caller) -> HTMLResponse:
    form = await _form(request)
    reason = _text(form, "reason", required=True) or ""
    # The holder the page showed and the admin confirmed: a lease taken over since is not released.
    owner, epoch = _text(form, "expected_owner", required=True, limit=256), _text(form, "expected_epoch", required=True)
    if not (epoch or "").isascii() or not (epoch or "").isdigit():
        raise Invalid(f"expected_epoch: {epoch!r} is not a whole number")
    return _flash(request, await ctl.release_guid_lock(guid, who, reason, ExpectedHolder(owner, int(epoch or 0))))


@router.get("/in-doubt", response_class=HTMLResponse, **guard("items.view"))
async def in_doubt(request: Request, ctl: Ctl, who: Caller) -> HTMLResponse:
    return _render(request, "in_doubt.html", who, items=await ctl.in_doubt(200))


@router.post("/items/{item_id}/resolve", response_class=HTMLResponse, **guard("items.resolve"))
async def resolve(request: Request, item_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    form = await _form(request)
    verdict = form.get("delivered")
    if verdict not in ("yes", "no"):
        raise Invalid("say whether it was delivered (yes) or not (no)")
    reason = _text(form, "reason", required=True) or ""
    return _flash(request, await ctl.resolve_in_doubt(str(item_id), verdict == "yes", reason, who))


@router.get("/approvals", response_class=HTMLResponse, **guard("jobs.view"))
async def approvals(request: Request, ctl: Ctl, who: Caller) -> HTMLResponse:
    jobs, waiting = await ctl.approvals()
    return _render(request, "approvals.html", who, jobs=jobs, waiting=waiting)


@router.post("/jobs/{job_id}/approve", response_class=HTMLResponse, **guard("jobs.approve"))
async def approve(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    reason = _text(await _form(request), "reason")
    return _flash(request, await ctl.decide_approval(str(job_id), True, reason, who))


@router.post("/jobs/{job_id}/reject", response_class=HTMLResponse, **guard("jobs.approve"))
async def reject(request: Request, job_id: JobId, ctl: Ctl, who: Caller) -> HTMLResponse:
    reason = _text(await _form(request), "reason", required=True) or ""
    return _flash(request, await ctl.decide_approval(str(job_id), False, reason, who))


@router.get("/dead-letters", response_class=HTMLResponse, **guard("dead_letters.view", tenant_filtered=True))
async def dead_letters(request: Request, ctl: Ctl, who: Caller, queue: Queue = "requests", tenant: str | None = None,
                       key: str | None = None, before: str | None = None, older: str | None = None) -> HTMLResponse:
    form = {"tenant": (tenant or "").strip(), "key": (key or "").strip(), "before": (before or "").strip()}
    f = {k: _text(form, k, limit=256) or "" for k in form}
    at = _moment(f["before"]) if f["before"] and not older else None
    page = await ctl.dead_letters(who, queue, DLQ_LAST, f["tenant"] or None, f["key"] or None, at,
                                  dead_letter_api.cursor(older))
    return _render(request, "dead_letters.html", who, queue=queue, queues=DLQ_TITLES, last=DLQ_LAST, f=f,
                   depth=SEARCH_DEPTH, topic=ctl.dead_letter_topic(queue), letters=page.letters, paged=bool(older),
                   older=cursor_text(page.older) if page.older else None)


def _moment(value: str) -> datetime:
    """A time from the console's forms: ISO 8601, UTC unless it says otherwise (as the pages show times)."""
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise Invalid(f"before: {value!r} is not a time (YYYY-MM-DDTHH:MM, UTC)") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@router.get("/dead-letters/{queue}/{partition}/{offset}", response_class=HTMLResponse,
            **guard("dead_letters.view", tenant_filtered=True))
async def dead_letter(request: Request, queue: Queue, partition: Annotated[int, Path(ge=0, le=2**31 - 1)],
                      offset: Annotated[int, Path(ge=0, le=2**63 - 1)], ctl: Ctl, who: Caller) -> HTMLResponse:
    d = await ctl.dead_letter(who, queue, partition, offset)
    body, cut = views.body_preview(d.value)
    return _render(request, "dead_letter.html", who, d=d, queue=queue, topic=ctl.dead_letter_topic(queue),
                   body=body, truncated=cut, not_resendable=views.not_resendable(d) if queue == "requests" else None)


@router.post("/dead-letters/requests/{partition}/{offset}/republish", response_class=HTMLResponse,
             **guard("dead_letters.republish", tenant_filtered=True))
async def republish(request: Request, partition: Annotated[int, Path(ge=0, le=2**31 - 1)],
                    offset: Annotated[int, Path(ge=0, le=2**63 - 1)], ctl: Ctl, who: Caller) -> HTMLResponse:
    reason = _text(await _form(request), "reason")
    return _flash(request, await ctl.republish_dead_letter(who, partition, offset, reason, request.app.state.dry_runs))


@router.get("/audit", response_class=HTMLResponse, **guard("audit.view"))
async def audit(request: Request, ctl: Ctl, who: Caller, target_type: str | None = None,
                target_id: str | None = None, actor: str | None = None, before: int | None = None) -> HTMLResponse:
    f = AuditFilter(target_type or None, target_id or None, actor or None, 100, None, before)
    rows = await ctl.audit_log(f)
    return _render(request, "audit.html", who, entries=rows, f={"target_type": target_type or "",
                   "target_id": target_id or "", "actor": actor or ""},
                   next_before=rows[-1]["id"] if len(rows) == 100 else None)


def docs_page(openapi_url: str) -> Response:
    """Swagger UI with its script and style served by Pacer (nothing from a CDN)."""
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(openapi_url=openapi_url, title="Pacer Control API",
                               swagger_js_url=f"{SWAGGER}/swagger-ui-bundle.js",
                               swagger_css_url=f"{SWAGGER}/swagger-ui.css",
                               swagger_favicon_url=f"{SWAGGER}/favicon-32x32.png")


def _guid(value: str | None) -> ids.Guid | None:
    return None if value is None else ids.Guid(value)
