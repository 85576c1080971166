"""Guids (WeCom accounts): health, leases, pause and resume, hot rate limits, forced release."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query

from pacer_control.api.auth import Caller, Ctl, guard
from pacer_control.api.responses import next_cursor, respond
from pacer_control.api.schemas import (
    NO_NUL,
    ActionBody,
    ActionResponse,
    BacklogPage,
    GuidHistory,
    GuidPage,
    GuidView,
    LimitsResponse,
    PauseGuidBody,
    ReleaseBody,
)
from pacer_control.domain.filters import DEFAULT_PAGE, MAX_PAGE
from pacer_control.ports import ExpectedHolder

router = APIRouter(tags=["guids"])

GuidPath = Annotated[str, Path(min_length=1, max_length=256, pattern=NO_NUL, description="the guid ('*' for limits of all)")]
GuidStateQuery = Annotated[Literal["online", "offline", "kicked", "unauthorized"] | None, Query()]
ReasonQuery = Annotated[str | None, Query(min_length=1, max_length=500, pattern=NO_NUL)]


@router.get("/guids", response_model=GuidPage, response_model_exclude_unset=True,
            summary="Guids by name: health; lease and limits too for tech_admin and up",
            **guard("guids.health", 422))
async def list_guids(ctl: Ctl, who: Caller, paused: bool = False,
                     limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
                     after: Annotated[str | None, Query(min_length=1, max_length=256, pattern=NO_NUL)] = None,
                     state: GuidStateQuery = None) -> dict[str, Any]:
    """``paused=true``: only guids that send nothing (paused, or a state other than online);
    ``state``: only guids in that lifecycle state."""
    rows = await ctl.guids(who, paused, limit, after, state)
    return {"guids": rows, "next_after": next_cursor(rows, limit, "guid")}


@router.get("/backlog", response_model=BacklogPage,
            summary="Guids with queued work, most queued (sort=backlog) or longest waiting (sort=wait) first",
            **guard("guids.health", 422))
async def backlog(ctl: Ctl, who: Caller, sort: Literal["backlog", "wait"] = "backlog",
                  limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20) -> dict[str, Any]:
    return {"guids": await ctl.backlogs(sort, limit)}


@router.get("/guids/{guid:path}/history", response_model=GuidHistory,
            summary="A guid's lifecycle changes (online, offline, kicked, unauthorized), newest first",
            **guard("guids.health", 422))
async def guid_history(guid: GuidPath, ctl: Ctl, who: Caller,
                       limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
                       before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None) -> dict[str, Any]:
    rows = await ctl.guid_history(guid, limit, before)
    return {"guid": guid, "changes": rows, "next_before": rows[-1]["id"] if len(rows) == limit else None}


@router.get("/guids/{guid:path}", response_model=GuidView, response_model_exclude_unset=True,
            summary="One guid: health; lease and limits too for tech_admin and up", **guard("guids.health", 404, 422))
async def get_guid(guid: GuidPath, ctl: Ctl, who: Caller) -> dict[str, Any]:
    return await ctl.guid(guid, who)


@router.put("/guids/{guid:path}/limits", response_model=LimitsResponse,
            summary="Hot-adjust a guid's pacing limits (merged into its overrides; senders apply them in ~1 s)",
            **guard("guids.limits", 422))
async def set_limits(guid: GuidPath, ctl: Ctl, who: Caller,
                     limits: Annotated[dict[str, Any], Body(examples=[{"min_interval_s": 2, "per_hour": 300}])],
                     reason: ReasonQuery = None) -> dict[str, Any]:
    return await ctl.set_limits(guid, limits, who, reason)


@router.post("/guids/{guid:path}/pause", response_model=ActionResponse, summary="Pause a guid: it sends nothing",
             **guard("guids.pause", 422))
async def pause_guid(guid: GuidPath, body: PauseGuidBody, ctl: Ctl, who: Caller) -> Any:
    return respond(await ctl.pause_guid(guid, body.reason, who))


@router.post("/guids/{guid:path}/resume", response_model=ActionResponse,
             summary="Resume a guid: clear its pause; set it online if its state held it",
             **guard("guids.resume", 404, 422))
async def resume_guid(guid: GuidPath, ctl: Ctl, who: Caller, body: ActionBody | None = None) -> Any:
    return respond(await ctl.resume_guid(guid, who, body.reason if body else None))


@router.post("/guids/{guid:path}/release-lock", response_model=ActionResponse,
             summary="Force-release a guid's lease: the holder is evicted (fenced) and may not take it back "
                     "before its lease would have run out; with expected_owner/expected_epoch, only that holder",
             **guard("guids.release_lock", 404, 409, 422))
async def release_lock(guid: GuidPath, body: ReleaseBody, ctl: Ctl, who: Caller) -> Any:
    expected = ExpectedHolder(body.expected_owner, body.expected_epoch)
    return respond(await ctl.release_guid_lock(guid, who, body.reason, expected))
