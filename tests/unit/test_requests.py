"""The job request contract: what is accepted, what is refused, and why."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pacer_common.domain.ids import RequestId
from pacer_common.domain.requests import JobKind, JobRequest, RequeryTargets, SnapshotTargets, expired

EXAMPLE: dict[str, Any] = {
    "request_id": "campaign-2026-11-29-001",
    "kind": "campaign",
    "created_by": "ops:alice",
    "message": {"type": "text", "content": "Hello {name}"},
    "content_version": 1,
    "targets": {"mode": "snapshot", "items": [{"guid": "g-001", "to_id": "room-123", "vars": {"name": "A"}}]},
    "expire_at": "2026-11-29T20:00:00Z",
    "budget": {"max_sends": 20000},
}

KIND_FIELDS: dict[str, dict[str, Any]] = {
    "takeover_prompt": {},
    "auto_reply": {"source_msg_uid": "msg-1"},
    "ticket_notify": {"business_id": "T-1", "status_version": 3},
    "campaign": {},
}


def request(**overrides: Any) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE)
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def of_kind(kind: str, **overrides: Any) -> dict[str, Any]:
    return request(kind=kind, **{**KIND_FIELDS[kind], **overrides})


def test_design_example_parses() -> None:
    req = JobRequest.model_validate(EXAMPLE)
    assert req.kind is JobKind.CAMPAIGN
    assert req.request_id == "campaign-2026-11-29-001"
    assert req.expire_at == datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    assert req.targets.items[0].vars == {"name": "A"}
    assert req.budget is not None and req.budget.max_sends == 20000


def test_design_example_parses_from_json_bytes() -> None:
    req = JobRequest.model_validate_json(json.dumps(EXAMPLE).encode())
    assert req == JobRequest.model_validate(EXAMPLE)


@pytest.mark.parametrize("kind", list(KIND_FIELDS))
def test_each_kind_parses_with_its_required_fields(kind: str) -> None:
    assert JobRequest.model_validate(of_kind(kind)).kind.value == kind


def test_unknown_top_level_field_is_refused() -> None:
    with pytest.raises(ValidationError, match="surprise"):
        JobRequest.model_validate(request(surprise=1))


def test_unknown_nested_field_is_refused() -> None:
    data = request()
    data["targets"]["items"][0]["nickname"] = "x"
    with pytest.raises(ValidationError, match="nickname"):
        JobRequest.model_validate(data)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValidationError):
        JobRequest.model_validate(request(kind="newsletter"))


def test_auto_reply_without_source_msg_uid_is_refused_with_a_readable_reason() -> None:
    with pytest.raises(ValidationError) as info:
        JobRequest.model_validate(request(kind="auto_reply"))
    assert "auto_reply" in str(info.value)
    assert "source_msg_uid" in str(info.value)


@pytest.mark.parametrize("missing", ["business_id", "status_version"])
def test_ticket_notify_needs_business_id_and_status_version(missing: str) -> None:
    data = of_kind("ticket_notify")
    del data[missing]
    with pytest.raises(ValidationError) as info:
        JobRequest.model_validate(data)
    assert missing in str(info.value)


def test_ticket_notify_accepts_status_version_zero() -> None:
    req = JobRequest.model_validate(of_kind("ticket_notify", status_version=0))
    assert req.status_version == 0


@pytest.mark.parametrize("field", ["expire_at", "not_before"])
def test_naive_datetimes_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        JobRequest.model_validate(request(**{field: "2026-11-29T10:00:00"}))


def test_offset_datetimes_are_accepted_and_compared_as_instants() -> None:
    req = JobRequest.model_validate(request(expire_at="2026-11-29T21:00:00+08:00"))
    assert req.expire_at == datetime(2026, 11, 29, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "not_before",
    [
        "2026-11-29T20:00:00Z",  # equal
        "2026-11-29T21:00:00+01:00",  # equal instant, other zone
        "2026-11-29T20:00:01Z",  # after
    ],
)
def test_not_before_at_or_after_expire_at_is_refused(not_before: str) -> None:
    with pytest.raises(ValidationError) as info:
        JobRequest.model_validate(request(not_before=not_before))
    assert "not_before" in str(info.value)


def test_not_before_earlier_than_expire_at_is_accepted() -> None:
    req = JobRequest.model_validate(request(not_before="2026-11-29T19:59:59Z"))
    assert req.not_before is not None and req.expire_at is not None
    assert req.not_before < req.expire_at


def test_not_before_without_expire_at_is_accepted() -> None:
    data = request(not_before="2026-11-29T19:00:00Z")
    del data["expire_at"]
    assert JobRequest.model_validate(data).expire_at is None


@pytest.mark.parametrize(
    "path_value",
    [
        (("request_id",), ""),
        (("created_by",), ""),
        (("message", "content"), ""),
        (("targets", "items"), []),
        (("content_version",), -1),
        (("budget", "max_sends"), 0),
        (("priority",), 10),
        (("priority",), -1),
    ],
)
def test_out_of_range_values_are_refused(path_value: tuple[tuple[str, ...], Any]) -> None:
    path, value = path_value
    data = request(priority=3)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValidationError):
        JobRequest.model_validate(data)


def test_default_priority_ranks_takeover_first_and_campaign_last() -> None:
    prio = {kind: JobRequest.model_validate(of_kind(kind)).effective_priority for kind in KIND_FIELDS}
    assert prio["takeover_prompt"] < prio["auto_reply"] < prio["ticket_notify"] < prio["campaign"]


@pytest.mark.parametrize("kind", list(KIND_FIELDS))
@pytest.mark.parametrize("override", [0, 5, 9])
def test_explicit_priority_overrides_the_kind_default(kind: str, override: int) -> None:
    req = JobRequest.model_validate(of_kind(kind, priority=override))
    assert req.effective_priority == override


def test_campaign_can_be_made_most_urgent_with_priority_zero() -> None:
    urgent_campaign = JobRequest.model_validate(of_kind("campaign", priority=0))
    takeover = JobRequest.model_validate(of_kind("takeover_prompt"))
    assert urgent_campaign.effective_priority <= takeover.effective_priority


def test_requests_are_immutable() -> None:
    req = JobRequest.model_validate(EXAMPLE)
    with pytest.raises(ValidationError):
        req.request_id = RequestId("other")


def test_expired_semantics() -> None:
    at = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    assert not expired(None, at)
    assert not expired(at, at - timedelta(microseconds=1))
    assert expired(at, at)
    assert expired(at, at + timedelta(seconds=1))


def test_published_json_schema_matches_the_model() -> None:
    schema_file = Path(__file__).resolve().parents[2] / "schemas" / "job-request.schema.json"
    generated = json.dumps(JobRequest.model_json_schema(), indent=2, sort_keys=True) + "\n"
    assert schema_file.read_text() == generated, "regenerate with `pacer schema`"


# -- target modes ----------------------------------------------------------------------------

REQUERY = {"mode": "requery", "url": "https://crm.example/audience?segment=vip"}


def test_a_snapshot_may_leave_out_its_mode_as_it_always_could() -> None:
    req = JobRequest.model_validate(request(targets={"items": EXAMPLE["targets"]["items"]}))
    assert isinstance(req.targets, SnapshotTargets) and req.targets.mode == "snapshot"


def test_requery_targets_parse_with_defaults() -> None:
    req = JobRequest.model_validate(request(targets=REQUERY))
    assert isinstance(req.targets, RequeryTargets)
    assert (str(req.targets.url), req.targets.page_size, req.targets.vars) == (REQUERY["url"], 500, {})


def test_requery_targets_survive_a_json_round_trip() -> None:
    req = JobRequest.model_validate(request(targets={**REQUERY, "page_size": 5000, "vars": {"shop": "Main"}}))
    again = JobRequest.model_validate_json(req.model_dump_json())
    assert again == req and isinstance(again.targets, RequeryTargets)


@pytest.mark.parametrize(("targets", "where", "message"), [
    ({**REQUERY, "url": "ftp://crm.example/a"}, ("targets", "requery", "url"), "URL scheme should be 'http' or 'https'"),
    ({**REQUERY, "url": "not a url"}, ("targets", "requery", "url"), "Input should be a valid URL"),
    ({**REQUERY, "page_size": 0}, ("targets", "requery", "page_size"), "greater than or equal to 1"),
    ({**REQUERY, "page_size": 5001}, ("targets", "requery", "page_size"), "less than or equal to 5000"),
    ({**REQUERY, "items": []}, ("targets", "requery", "items"), "Extra inputs are not permitted"),
    ({"mode": "live", "url": REQUERY["url"]}, ("targets",), "'mode' must be 'snapshot' or 'requery'"),
])
def test_bad_requery_targets_are_refused_with_the_reason(targets: dict[str, Any], where: tuple[str, ...],
                                                         message: str) -> None:
    with pytest.raises(ValidationError) as info:
        JobRequest.model_validate(request(targets=targets))
    err = info.value.errors()[0]
    assert err["loc"] == where and message in err["msg"]


def test_ticket_notifications_need_snapshot_targets() -> None:
    with pytest.raises(ValidationError, match="'ticket_notify' needs 'snapshot' targets"):
        JobRequest.model_validate(of_kind("ticket_notify", targets=REQUERY))
