"""Deciding an in-doubt send: delivered, provably not delivered, or a question for a human."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pacer_common.domain.status import ItemStatus, check_transition
from pacer_reconciler.domain.verification import verdict

SINCE = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DEADLINE = timedelta(minutes=10)
BEFORE = SINCE + timedelta(minutes=9, seconds=59)
AFTER = SINCE + timedelta(minutes=30)


@pytest.mark.parametrize("now", [SINCE, BEFORE, AFTER])
def test_found_means_confirmed_whenever_it_is_asked(now: datetime) -> None:
    v = verdict(True, SINCE, now, DEADLINE)
    assert v is not None
    assert v.to is ItemStatus.CONFIRMED
    assert v.event == "ItemVerifiedDelivered"


@pytest.mark.parametrize("now", [SINCE, BEFORE, AFTER])
def test_proved_not_found_means_send_again_whenever_it_is_asked(now: datetime) -> None:
    v = verdict(False, SINCE, now, DEADLINE)
    assert v is not None
    assert v.to is ItemStatus.PENDING
    assert v.event == "ItemVerifiedNotDelivered"


@pytest.mark.parametrize("now", [SINCE, BEFORE])
def test_unknown_before_the_deadline_means_ask_again_later(now: datetime) -> None:
    assert verdict(None, SINCE, now, DEADLINE) is None


@pytest.mark.parametrize("now", [SINCE + DEADLINE, AFTER])
def test_unknown_at_or_past_the_deadline_goes_to_a_human(now: datetime) -> None:
    v = verdict(None, SINCE, now, DEADLINE)
    assert v is not None
    assert v.to is ItemStatus.UNVERIFIED
    assert v.event == "ItemUnverified"
    assert "600" in v.reason


def test_unknown_never_resends() -> None:
    for minutes in range(60):
        v = verdict(None, SINCE, SINCE + timedelta(minutes=minutes), DEADLINE)
        assert v is None or v.to is not ItemStatus.PENDING


@pytest.mark.parametrize("found", [True, False, None])
def test_every_verdict_is_a_legal_move_from_recovery_pending(found: bool | None) -> None:
    v = verdict(found, SINCE, AFTER, DEADLINE)
    assert v is not None
    check_transition(ItemStatus.RECOVERY_PENDING, v.to)


def test_an_item_decided_without_a_lookup_for_its_guid_s_quiet_says_so() -> None:
    """Past the hour a quiet may hold lookups off: unverified, and the reason names the quiet,
    not a deadline the item was never asked within."""
    v = verdict(None, SINCE, SINCE + timedelta(hours=1, seconds=1), DEADLINE, hushed=True)
    assert v is not None and v.to is ItemStatus.UNVERIFIED
    assert "quiet (Retry-After)" in v.reason and "3601s" in v.reason and "600" not in v.reason
    plain = verdict(None, SINCE, SINCE + timedelta(hours=1, seconds=1), DEADLINE)
    assert plain is not None and "quiet" not in plain.reason
