"""Locks, the audit log, tokens, dry runs and sandbox test sends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from pacer_common.domain.requests import JobRequest
from pacer_control.api.auth import Caller, Ctl, guard
from pacer_control.api.responses import next_cursor, respond
from pacer_control.api.schemas import (
    NO_NUL,
    ActionBody,
    ActionResponse,
    AuditPage,
    CreatedToken,
    DryRunResponse,
    LockView,
    TestSendBody,
    TestSendResponse,
    TokenBody,
    TokenName,
    TokenView,
)
from pacer_control.domain.errors import Invalid, TooLarge, Unavailable
from pacer_control.domain.filters import DEFAULT_PAGE, MAX_PAGE, AuditFilter, AuditPosition

router = APIRouter()

TextQuery = Annotated[str | None, Query(min_length=1, max_length=256, pattern=NO_NUL)]
AuditId = Annotated[int | None, Query(ge=0, le=2**63 - 1)]
AuditAfter = Annotated[str | None, Query(max_length=41, pattern=r"^[0-9]+(\.[0-9]+)?$", description=(
    "an entry's `position` or a page's `next_after` (`<xid>.<id>`), or an entry id: the entries committed "
    "after it, oldest first"))]


@router.get("/locks", response_model=LockView, tags=["guids"],
            summary="Guid and item leases as lock records, with the lock dashboard counts",
            **guard("locks.view", 422))
async def locks(ctl: Ctl, limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
                guid: Annotated[TextQuery, Query(description=(
                    "the guid leases from this guid on, in guid order (default: expired leases first)"))] = None) -> Any:
    return await ctl.locks(limit, guid)


@router.get("/audit", response_model=AuditPage, tags=["audit"],
            summary="The audit log: newest first, or what was committed after a position, oldest first",
            **guard("audit.view", 422))
async def audit(ctl: Ctl, target_type: TextQuery = None, target_id: TextQuery = None, actor: TextQuery = None,
                limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
                after: AuditAfter = None, before: AuditId = None) -> dict[str, Any]:
    try:
        position = None if after is None else AuditPosition.parse(after)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    rows = await ctl.audit_log(AuditFilter(target_type, target_id, actor, limit, position, before))
    if position is not None:
        return {"entries": rows, "next_after": rows[-1]["position"] if rows else str(position)}
    return {"entries": rows, "next_before": next_cursor(rows, limit, "id")}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with its ``$ref``s to ``defs`` replaced by what they name (no recursion in a request)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _inline(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _request_body() -> dict[str, Any]:
    schema = JobRequest.model_json_schema()
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": _inline(schema, schema.get("$defs", {}))}}}}


# The body is read as bytes and checked by the planner's own validation (not by FastAPI's
# parsing), so a dry run accepts and refuses exactly what the planner would.
def _with_request_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**kwargs, "openapi_extra": {**kwargs["openapi_extra"], **_request_body()}}


DRY_RUN_MAX_BYTES = 4 * 1024 * 1024
DRY_RUN_WAIT_S = 10.0
# What a refused dry run is told (after "the request body is larger than N bytes, "), by the
# body cap in front of the app and by the route alike.
DRY_RUN_TOO_LARGE = (
    "the largest dry run this control service takes (PACER_CONTROL_DRY_RUN_MAX_BYTES: a dry run holds up to "
    "about 25 times its request in memory); dry-run a part of its targets, or "
    "publish it: the planner, which takes up to 64 MiB, plans it or says why not in its dead letter")


class DryRuns:
    """What a control process spends on dry runs: a request of at most ``max_bytes``, and at
    most ``concurrency`` planned at a time. Each holds its targets parsed, each target's message
    rendered only while it is checked: up to about 25 times its body in memory, whatever the
    template.
    A dry run waits up to ``wait_s`` for its turn, before it reads its body, then is told to
    try again (503)."""

    def __init__(self, max_bytes: int = DRY_RUN_MAX_BYTES, concurrency: int = 1, wait_s: float = DRY_RUN_WAIT_S) -> None:
        self.max_bytes, self.concurrency, self.wait_s = max_bytes, concurrency, wait_s
        self.waiting = 0  # dry runs waiting for their turn now
        self._turns = asyncio.Semaphore(concurrency)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            async with asyncio.timeout(self.wait_s):
                await self._turns.acquire()
        except TimeoutError:
            raise Unavailable(
                f"{'another dry run is' if self.concurrency == 1 else f'{self.concurrency} other dry runs are'} being "
                f"planned by this control instance, {self.concurrency} at a time (PACER_CONTROL_DRY_RUN_CONCURRENCY), "
                f"and this one waited {self.wait_s:g} s for its turn; try again shortly") from None
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._turns.release()


@router.post("/dry-run", response_model=DryRunResponse, tags=["tools"],
             summary="Validate and plan a job request without storing or sending anything",
             **_with_request_body(guard("requests.dry_run", 413, 422, 503, tenant_filtered=True)))
async def dry_run(http: Request, ctl: Ctl,
                  samples: Annotated[int, Query(ge=0, le=50, description="rendered contents to show")] = 5) -> Any:
    # Its turn first, then its body: a dry run waiting for its turn holds no body. Validated
    # in a thread: a large request holds up no other caller.
    runs: DryRuns = http.app.state.dry_runs
    async with runs.turn():
        return await asyncio.to_thread(ctl.dry_run, await _body(http, runs.max_bytes), samples)


async def _body(http: Request, limit: int) -> bytearray:
    """The request's body, refused (413) once it is past ``limit`` bytes, before all of it is
    read; gathered in one buffer, never held twice (as chunks and joined)."""
    body = bytearray()
    async for chunk in http.stream():
        if len(body) + len(chunk) > limit:
            raise TooLarge(f"the request body is larger than {limit:,} bytes, {DRY_RUN_TOO_LARGE}")
        body += chunk
    return body  # every step of the validation reads a bytearray as it reads bytes


@router.post("/test-send", response_model=TestSendResponse, tags=["tools"],
             summary="Queue one message to a sandbox target (PACER_CONTROL_SANDBOX_TARGETS), sent like any item: "
                     "lease, pacing, ledger",
             **guard("gateway.test_send", 422, 503))
async def test_send(body: TestSendBody, ctl: Ctl, who: Caller) -> dict[str, Any]:
    return await ctl.test_send(body.guid, body.to_id, body.content, who)


@router.post("/tokens", response_model=CreatedToken, status_code=201, tags=["tokens"],
             summary="Create an API token; the secret is in this response only", **guard("tokens.create", 409, 422))
async def create_token(body: TokenBody, ctl: Ctl, who: Caller) -> dict[str, Any]:
    made = await ctl.create_token(body.name, body.role, who, body.tenants)
    return {"name": made.name, "role": made.role, "tenants": made.tenants, "token": made.token,
            "created_at": made.created_at,
            "message": "store this token now: it is not shown again (only its hash is kept)"}


@router.get("/tokens", response_model=list[TokenView], tags=["tokens"], summary="API tokens (no secrets)",
            **guard("tokens.view"))
async def list_tokens(ctl: Ctl) -> Any:
    return await ctl.tokens()


@router.delete("/tokens/{name}", response_model=ActionResponse, tags=["tokens"],
               summary="Revoke a token: refused from the next request on", **guard("tokens.revoke", 404, 422))
async def revoke_token(name: Annotated[TokenName, Path()], ctl: Ctl, who: Caller,
                       body: ActionBody | None = None) -> Any:
    return respond(await ctl.revoke_token(name, who, body.reason if body else None))
