"""Admission control: only online work is exempt, an online kind sent in the online lane;
neither the kind nor the priority a request asks for is enough alone."""

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
@pytest.mark.parametrize("priority", [None, 0, 1])
def test_online_work_on_a_guid_at_its_limit_is_still_admitted(kind: str, priority: int | None) -> None:
    assert refusal(plan(request(kind, priority), NOW), AT_LIMIT, LIMIT) is None


@pytest.mark.parametrize("kind", ["auto_reply", "takeover_prompt"])
@pytest.mark.parametrize("priority", [2, 5, 9])
def test_an_online_kind_asking_for_a_batch_priority_is_bounded_like_batch_work(kind: str, priority: int) -> None:
    # It goes out in the batch lane, behind campaigns: nothing makes it online work any more.
    reason = refusal(plan(request(kind, priority), NOW), AT_LIMIT, LIMIT)
    assert reason == ("admission refused: guid 'g1' has 10 queued items and this request adds 2, over the limit "
                      "of 10 per guid; retry later or split the request")


def test_a_requery_page_waits_unless_it_is_online_work_in_the_online_lane() -> None:
    adds = {Guid("g1"): 5}
    queued = {Guid("g1"): 8}
    assert page_refusal(JobKind.CAMPAIGN, 3, adds, queued, LIMIT) is not None
    assert page_refusal(JobKind.CAMPAIGN, 0, adds, queued, LIMIT) is not None
    assert page_refusal(JobKind.AUTO_REPLY, 1, adds, queued, LIMIT) is None
    assert page_refusal(JobKind.TAKEOVER_PROMPT, 0, adds, queued, LIMIT) is None
    # A requery auto-reply at a batch priority (a large audience, in the batch lane) waits too.
    assert page_refusal(JobKind.AUTO_REPLY, 5, adds, queued, LIMIT) is not None
    assert page_refusal(JobKind.TAKEOVER_PROMPT, 2, adds, queued, LIMIT) is not None
