"""Rebuilding an item's status from its event log."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pacer_common.domain.events import (
    EventType,
    ItemEvent,
    ItemFailed,
    ItemInDoubt,
    Payload,
    error_class_of,
    fold,
    occurred,
)
from pacer_common.domain.status import IllegalTransition, ItemStatus

S = ItemStatus
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def ev(version: int, src: ItemStatus, dst: ItemStatus, type_: str = "ItemClaimed", item_id: str = "it-1") -> ItemEvent:
    return ItemEvent(
        seq=version, type=type_, item_id=item_id, job_id="job-1", shard_id=1, guid="g-1",
        version=version, from_status=src, to_status=dst, occurred_at=T0 + timedelta(seconds=version), payload={},
    )


HAPPY = [
    ev(1, S.PENDING, S.CLAIMED, "ItemClaimed"),
    ev(2, S.CLAIMED, S.SUBMITTED, "ItemSubmitted"),
    ev(3, S.SUBMITTED, S.CONFIRMED, "ItemConfirmed"),
]


def test_no_events_leaves_the_initial_status() -> None:
    assert fold(S.PENDING, []) is S.PENDING


def test_happy_path_folds_to_confirmed() -> None:
    assert fold(S.PENDING, HAPPY) is S.CONFIRMED


def test_each_prefix_folds_to_the_last_events_target() -> None:
    for n in range(1, len(HAPPY) + 1):
        assert fold(S.PENDING, HAPPY[:n]) is HAPPY[n - 1].to_status


def test_events_are_applied_in_version_order_whatever_the_input_order() -> None:
    assert fold(S.PENDING, list(reversed(HAPPY))) is S.CONFIRMED


def test_in_doubt_then_verified_not_delivered_goes_back_to_pending() -> None:
    events = [
        ev(1, S.PENDING, S.CLAIMED),
        ev(2, S.CLAIMED, S.SUBMITTED, "ItemSubmitted"),
        ev(3, S.SUBMITTED, S.RECOVERY_PENDING, "ItemInDoubt"),
        ev(4, S.RECOVERY_PENDING, S.PENDING, "ItemVerifiedNotDelivered"),
    ]
    assert fold(S.PENDING, events) is S.PENDING


def test_event_starting_from_the_wrong_status_is_rejected() -> None:
    events = [ev(1, S.PENDING, S.CLAIMED), ev(2, S.PENDING, S.CLAIMED)]
    with pytest.raises(ValueError, match="v2"):
        fold(S.PENDING, events)


def test_first_event_must_start_from_the_initial_status() -> None:
    with pytest.raises(ValueError):
        fold(S.CLAIMED, [ev(1, S.PENDING, S.CLAIMED)])


def test_version_gap_is_rejected() -> None:
    events = [ev(1, S.PENDING, S.CLAIMED), ev(3, S.CLAIMED, S.SUBMITTED, "ItemSubmitted")]
    with pytest.raises(ValueError, match="gap"):
        fold(S.PENDING, events)


def test_replayed_version_is_rejected() -> None:
    events = [ev(1, S.PENDING, S.CLAIMED), ev(1, S.CLAIMED, S.SUBMITTED, "ItemSubmitted")]
    with pytest.raises(ValueError):
        fold(S.PENDING, events)


def test_illegal_transition_is_rejected_even_when_versions_and_statuses_chain() -> None:
    events = [ev(1, S.PENDING, S.SUBMITTED, "ItemSubmitted")]
    with pytest.raises(IllegalTransition):
        fold(S.PENDING, events)


def test_leaving_a_terminal_status_is_rejected() -> None:
    events = [*HAPPY, ev(4, S.CONFIRMED, S.PENDING, "ItemRequeued")]
    with pytest.raises(IllegalTransition):
        fold(S.PENDING, events)


def test_event_requires_a_timezone_aware_timestamp() -> None:
    with pytest.raises(ValidationError):
        ItemEvent(
            seq=1, type="ItemClaimed", item_id="i", job_id="j", shard_id=1, guid="g", version=1,
            from_status=S.PENDING, to_status=S.CLAIMED, occurred_at=datetime(2026, 11, 29, 12, 0), payload={},
        )


def test_event_type_must_be_a_known_fact() -> None:
    with pytest.raises(ValidationError):
        ev(1, S.PENDING, S.CLAIMED, "ItemTeleported")


def test_events_are_immutable() -> None:
    e = ev(1, S.PENDING, S.CLAIMED)
    with pytest.raises(ValidationError):
        e.to_status = S.CONFIRMED


def test_statuses_parsed_from_json_fold_like_enum_members() -> None:
    raw = HAPPY[0].model_dump_json()
    parsed = ItemEvent.model_validate_json(raw)
    assert fold(S.PENDING, [parsed]) is S.CLAIMED


def test_occurred_refuses_naive_and_accepts_aware_timestamps() -> None:
    with pytest.raises(ValueError):
        occurred(datetime(2026, 1, 1))
    assert occurred(T0) == T0


def test_a_compensation_item_folds_from_its_creation_event() -> None:
    created = ev(0, S.PENDING, S.PENDING, "ItemCompensationCreated")
    history = [created, ev(1, S.PENDING, S.CLAIMED), ev(2, S.CLAIMED, S.SUBMITTED, "ItemSubmitted")]
    assert fold(S.PENDING, history) is S.SUBMITTED


def test_pending_to_pending_is_not_allowed_for_an_ordinary_event() -> None:
    with pytest.raises(IllegalTransition):
        fold(S.PENDING, [ev(1, S.PENDING, S.PENDING, "ItemRequeued")])


def test_a_released_hold_keeps_the_item_pending() -> None:
    history = [ev(1, S.PENDING, S.PENDING, "ItemReleased"), ev(2, S.PENDING, S.CLAIMED)]
    assert fold(S.PENDING, history) is S.CLAIMED


# -- typed payloads -------------------------------------------------------------------------
PAYLOAD_MODELS = get_args(get_args(Payload)[0])
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)


def test_every_event_type_has_exactly_one_payload_model() -> None:
    declared = [get_args(m.model_fields["type"].annotation)[0] for m in PAYLOAD_MODELS]
    assert sorted(declared) == sorted(get_args(EventType))


def _stored(type_: str, payload: dict[str, object]) -> dict[str, object]:
    return {"seq": 7, "type": type_, "item_id": "i", "job_id": "j", "shard_id": 1, "guid": "g", "version": 3,
            "from_status": "submitted", "to_status": "failed", "occurred_at": "2026-11-29T12:00:00Z",
            "payload": payload}


@given(type_=st.sampled_from(get_args(EventType)),
       extra=st.dictionaries(st.from_regex(r"x_[a-z]{1,8}", fullmatch=True), JSON_SCALARS, max_size=3),
       error_class=st.none() | st.sampled_from(["bad_params", "retryable", "in_doubt"]))
def test_a_stored_payload_is_published_exactly_as_it_was_stored(
        type_: str, extra: dict[str, object], error_class: str | None) -> None:
    stored = {**extra, **({"error_class": error_class} if error_class else {})}
    e = ItemEvent.model_validate(_stored(type_, stored))
    assert type(e.payload).__name__ == type_, "the event's type picks its payload model"
    assert json.loads(e.model_dump_json())["payload"] == stored, "no key added, none lost, no type inside"
    records_failures = "error_class" in type(e.payload).model_fields
    assert error_class_of(e.payload) == (error_class if records_failures else None)


def test_a_failure_event_records_its_class_and_reason_as_fields() -> None:
    e = ItemEvent.model_validate(_stored("ItemFailed", {"error_class": "bad_params", "error": "no content"}))
    assert isinstance(e.payload, ItemFailed)
    assert (e.payload.error_class, e.payload.error) == ("bad_params", "no content")


def test_an_in_doubt_send_names_its_source_and_one_stored_without_it_still_reads() -> None:
    """What put a send in doubt, when no answer of the gateway did, is a field of ItemInDoubt;
    an ItemInDoubt stored before it was written (a restore's, a forced release's) reads with
    none, and is published as it was stored."""
    new = ItemEvent.model_validate(_stored("ItemInDoubt", {"restored": True, "source": "after_restore",
                                                           "error_class": "in_doubt"}))
    assert isinstance(new.payload, ItemInDoubt) and new.payload.source == "after_restore"
    assert new.payload.model_extra == {"restored": True}
    old = {"reason": "lease force-released by admin", "forced": True, "actor": "admin"}
    before = ItemEvent.model_validate(_stored("ItemInDoubt", old))
    assert isinstance(before.payload, ItemInDoubt)
    assert (before.payload.source, error_class_of(before.payload)) == (None, None)
    assert json.loads(before.model_dump_json())["payload"] == old


def test_a_payload_field_of_the_wrong_type_makes_the_event_unreadable() -> None:
    with pytest.raises(ValidationError, match="attempt"):
        ItemEvent.model_validate(_stored("ItemSubmitted", {"attempt": "first"}))


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        ItemEvent.model_validate(_stored("ItemTeleported", {}))


def test_a_payload_is_frozen() -> None:
    e = ItemEvent.model_validate(_stored("ItemFailed", {"error_class": "bad_params"}))
    with pytest.raises(ValidationError):
        e.payload.error_class = "retryable"
