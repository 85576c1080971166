"""Admission control: what is exempt is decided by the kind of work, not by the priority a
request asks for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pacer_common.domain.ids import Guid
from pacer_common.domain.requests import JobKind, JobRequest
from pacer_planner.domain.admission import ADMITTED_KINDS, page_refusal, refusal
from pacer_planner.domain.planning import plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LIMIT = 10
AT_LIMIT = {Guid("g1"): LIMIT}
KIND_FIELDS: dict[str, dict[str, Any]] = {
    "takeover_prompt": {},
    "auto_reply": {"source_msg_uid": "msg-1"},
    "ticket_notify": {"business_id": "T-1", "status_version": 3},
    "campaign": {},
}


def request(kind: str, priority: int | None = None) -> JobRequest:
    data: dict[str, Any] = {
        "request_id": f"{kind}-1", "kind": kind, "created_by": "ops:alice", "message": {"content": "hi"},
        "targets": {"items": [{"guid": "g1", "to_id": "room-1"}, {"guid": "g1", "to_id": "room-2"}]},
        **KIND_FIELDS[kind],
    }
    if priority is not None:
        data["priority"] = priority
    return JobRequest.model_validate(data)


def test_only_takeover_prompts_and_auto_replies_pass_whatever_the_backlog() -> None:
    assert {JobKind.TAKEOVER_PROMPT, JobKind.AUTO_REPLY} == ADMITTED_KINDS


@pytest.mark.parametrize("priority", [0, 1, None])
def test_a_campaign_on_a_guid_at_its_limit_is_refused_whatever_priority_it_asks_for(priority: int | None) -> None:
    p = plan(request("campaign", priority), NOW)
    reason = refusal(p, AT_LIMIT, LIMIT)
    assert reason == ("admission refused: guid 'g1' has 10 queued items and this request adds 2, over the limit "
                      "of 10 per guid; retry later or split the request")


def test_a_ticket_notification_at_priority_0_is_refused_too() -> None:
    assert refusal(plan(request("ticket_notify", 0), NOW), AT_LIMIT, LIMIT) is not None


@pytest.mark.parametrize("kind", ["auto_reply", "takeover_prompt"])
@pytest.mark.parametrize("priority", [None, 5])
def test_online_work_on_a_guid_at_its_limit_is_still_admitted(kind: str, priority: int | None) -> None:
    assert refusal(plan(request(kind, priority), NOW), AT_LIMIT, LIMIT) is None


def test_a_requery_page_of_a_campaign_waits_and_one_of_an_auto_reply_does_not() -> None:
    adds = {Guid("g1"): 5}
    queued = {Guid("g1"): 8}
    assert page_refusal(JobKind.CAMPAIGN, adds, queued, LIMIT) is not None
    assert page_refusal(JobKind.AUTO_REPLY, adds, queued, LIMIT) is None
