"""Dead letters: what the planner and the callback intake refused, read back from their DLQ
topics, and a refused job request sent again once what refused it is fixed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import AwareDatetime

from pacer_common.domain.dead_letters import CURSOR_PATTERN, Cursor, DeadLetter, Queue, cursor_text, parse_cursor
from pacer_control.api.auth import Caller, Ctl, guard
from pacer_control.api.responses import respond
from pacer_control.api.schemas import NO_NUL, ActionBody, ActionResponse, DeadLetterDetail, DeadLetterPage
from pacer_control.core import Control
from pacer_control.domain import views
from pacer_control.domain.errors import Invalid

router = APIRouter(tags=["dead letters"])
MAX_LAST = 500

QueuePath = Annotated[Queue, Path(description="`requests` (refused by the planner) or `callbacks` (by the intake)")]
PartitionPath = Annotated[int, Path(ge=0, le=2**31 - 1, description="the record's partition on its DLQ topic")]
OffsetPath = Annotated[int, Path(ge=0, le=2**63 - 1, description="the record's offset in that partition")]


def cursor(text: str | None) -> Cursor | None:
    try:
        return parse_cursor(text) if text else None
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def view(ctl: Control, queue: Queue, d: DeadLetter) -> dict[str, Any]:
    s = d.summary()
    return {"queue": queue, "topic": ctl.dead_letter_topic(queue), "partition": d.partition, "offset": d.offset,
            "at": d.at, "source": s["source"], "tenant": s["tenant"], "key": s["key"], "bytes": s["bytes"],
            "reason": d.reason}


def detail(ctl: Control, queue: Queue, d: DeadLetter) -> dict[str, Any]:
    body, cut = views.body_preview(d.value)
    return {**view(ctl, queue, d), "headers": d.headers, "body": body, "body_truncated": cut}


@router.get("/dead-letters", response_model=DeadLetterPage,
            summary="The newest dead letters of a queue, newest first, with their reasons",
            **guard("dead_letters.view", 422, 503, tenant_filtered=True))
async def list_dead_letters(ctl: Ctl, who: Caller, queue: Queue = "requests",
                            last: Annotated[int, Query(ge=1, le=MAX_LAST)] = 50,
                            tenant: Annotated[str | None, Query(min_length=1, max_length=256, pattern=NO_NUL)] = None,
                            key: Annotated[str | None, Query(min_length=1, max_length=256, pattern=NO_NUL)] = None,
                            before: Annotated[AwareDatetime | None, Query(
                                description="only records written before this time (the broker's time index): "
                                            "what was refused around an incident")] = None,
                            older: Annotated[str | None, Query(
                                max_length=131_072, pattern=CURSOR_PATTERN,
                                description="a page's `older`: the next page, of older records")] = None,
                            ) -> dict[str, Any]:
    """Among the last ``last`` records of each partition of the queue's DLQ topic; a token
    scoped to tenants is shown its tenants' records among them. ``tenant`` or ``key`` (a job
    request's id, as its publisher keyed it): the newest ``last`` that match among the last
    1,000 of each partition — "why was my request refused?". Older records, page by page:
    ``older``, as each page gives it, or from a time: ``before``."""
    page = await ctl.dead_letters(who, queue, last, tenant, key, before, cursor(older))
    return {"queue": queue, "topic": ctl.dead_letter_topic(queue),
            "letters": [view(ctl, queue, d) for d in page.letters],
            "older": cursor_text(page.older) if page.older else None}


@router.get("/dead-letters/{queue}/{partition}/{offset}", response_model=DeadLetterDetail,
            summary="One dead letter: where, why, its headers and its body",
            **guard("dead_letters.view", 404, 422, 503, tenant_filtered=True))
async def get_dead_letter(queue: QueuePath, partition: PartitionPath, offset: OffsetPath, ctl: Ctl,
                          who: Caller) -> dict[str, Any]:
    return detail(ctl, queue, await ctl.dead_letter(who, queue, partition, offset))


_body = guard("dead_letters.view", 404, 422, 503, tenant_filtered=True)
_body["responses"][200] = {"content": {"application/octet-stream": {}}, "description": "the record's value"}


@router.get("/dead-letters/{queue}/{partition}/{offset}/body",
            summary="One dead letter's original bytes, as they came (to fix and publish again)",
            response_class=Response, **_body)
async def get_dead_letter_body(queue: QueuePath, partition: PartitionPath, offset: OffsetPath, ctl: Ctl,
                               who: Caller) -> Response:
    d = await ctl.dead_letter(who, queue, partition, offset)
    name = f"{queue}-{partition}-{offset}.json"
    return Response(d.value, media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.post("/dead-letters/requests/{partition}/{offset}/republish", response_model=ActionResponse,
             summary="Send a refused job request to the planner again, as it came (checked first as the planner "
                     "checks it)",
             **guard("dead_letters.republish", 404, 422, 503, tenant_filtered=True))
async def republish(http: Request, partition: PartitionPath, offset: OffsetPath, ctl: Ctl, who: Caller,
                    body: ActionBody | None = None) -> Any:
    return respond(await ctl.republish_dead_letter(who, partition, offset, body.reason if body else None,
                                                   http.app.state.dry_runs))
