"""Readable dead-letter reasons for requests that fail validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from pacer_common.domain.requests import JobRequest
from pacer_common.domain.validation import describe

VALID: dict[str, Any] = {
    "request_id": "r-1",
    "kind": "campaign",
    "created_by": "ops:alice",
    "message": {"type": "text", "content": "Hello {name}"},
    "targets": {"mode": "snapshot", "items": [{"guid": "g-001", "to_id": "room-123", "vars": {"name": "A"}}]},
}


def error_for(data: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        JobRequest.model_validate(data)
    return info.value


def with_targets(n: int, **target: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    data["targets"]["items"] = [dict(target) for _ in range(n)]
    return data


def test_valid_example_really_is_valid() -> None:
    JobRequest.model_validate(VALID)


def test_reason_names_the_field_path_and_the_problem() -> None:
    data = copy.deepcopy(VALID)
    data["targets"]["items"] = [dict(VALID["targets"]["items"][0]) for _ in range(4)]
    del data["targets"]["items"][3]["guid"]
    text = describe(error_for(data))
    assert text == "invalid job request: targets.items.3.guid: Field required"


def test_request_level_error_is_located_at_the_request() -> None:
    data = {**VALID, "kind": "auto_reply"}
    text = describe(error_for(data))
    assert text.startswith("invalid job request: (request): ")
    assert "source_msg_uid" in text


def test_several_errors_are_joined_in_order() -> None:
    data = copy.deepcopy(VALID)
    del data["request_id"]
    data["created_by"] = ""
    text = describe(error_for(data))
    assert text.startswith("invalid job request: ")
    body = text.removeprefix("invalid job request: ").split("; ")
    assert [part.split(":")[0] for part in body] == ["request_id", "created_by"]


def test_errors_beyond_the_limit_are_summarised_with_a_count() -> None:
    exc = error_for(with_targets(8, to_id="room"))  # every target lacks its guid: 8 errors
    assert exc.error_count() == 8
    text = describe(exc)
    parts = text.removeprefix("invalid job request: ").split("; ")
    assert len(parts) == 6
    assert parts[:5] == [f"targets.items.{i}.guid: Field required" for i in range(5)]
    assert parts[5] == "… and 3 more"


def test_no_summary_when_errors_fit_the_limit() -> None:
    text = describe(error_for(with_targets(5, to_id="room")))
    assert "more" not in text
    assert text.count("Field required") == 5


def test_custom_limit() -> None:
    text = describe(error_for(with_targets(4, to_id="room")), limit=1)
    assert text == "invalid job request: targets.items.0.guid: Field required; … and 3 more"


def test_unparseable_json_is_described_too() -> None:
    with pytest.raises(ValidationError) as info:
        JobRequest.model_validate_json(b"{not json")
    text = describe(info.value)
    assert text.startswith("invalid job request: ")
    assert "(request)" in text


def test_requery_reasons_name_the_field_as_the_request_spells_it() -> None:
    data = {**VALID, "targets": {"mode": "requery", "url": "ftp://crm.example/a", "page_size": 0}}
    text = describe(error_for(data))
    assert text == ("invalid job request: targets.url: URL scheme should be 'http' or 'https'; "
                    "targets.page_size: Input should be greater than or equal to 1")


def test_an_unknown_target_mode_is_named() -> None:
    text = describe(error_for({**VALID, "targets": {"mode": "live"}}))
    assert text == "invalid job request: targets: 'mode' must be 'snapshot' or 'requery'"
