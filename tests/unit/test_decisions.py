"""What a failed send means for the item: verify, retry (bounded), or fail."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.guid_health import GuidState
from pacer_common.domain.status import ItemStatus, check_transition
from pacer_sender.domain.decisions import after_failure

F = FailureClass
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=30))
RETRYING = [F.RETRYABLE, F.NOT_SENT]  # within the item's attempts


def decide(cls: FailureClass, attempts: int = 1, retry_after: timedelta | None = None, seed: int = 0):
    err = SendError(cls, 1234, "boom", retry_after=retry_after)
    return after_failure(err, attempts, POLICY, NOW, random.Random(seed))


@pytest.mark.parametrize("attempts", [1, 2, 3, 50])
def test_in_doubt_goes_to_recovery_and_keeps_the_ledger_reserved(attempts: int) -> None:
    d = decide(F.IN_DOUBT, attempts)
    assert d.to is ItemStatus.RECOVERY_PENDING
    assert d.event == "ItemInDoubt"
    assert d.release_ledger is False
    assert d.next_attempt_at is None
    assert d.error_class == "in_doubt"


@pytest.mark.parametrize("cls", RETRYING)
def test_retryable_classes_wait_for_a_retry_in_the_future_and_free_the_key(cls: FailureClass) -> None:
    d = decide(cls, attempts=1)
    assert d.to is ItemStatus.WAITING_RETRY
    assert d.event == "ItemRetryScheduled"
    assert d.release_ledger is True
    assert d.next_attempt_at is not None and d.next_attempt_at > NOW
    assert d.error_class == cls.value
    assert "boom" in (d.error or "")


@pytest.mark.parametrize("cls", RETRYING)
def test_retry_is_scheduled_by_the_backoff_policy(cls: FailureClass) -> None:
    for attempts in (1, 2):
        for seed in range(20):
            d = decide(cls, attempts, seed=seed)
            expected = POLICY.next_delay(attempts, random.Random(seed))
            assert d.next_attempt_at == NOW + expected  # type: ignore[operator]  # a retry decision always has a delay here


@pytest.mark.parametrize("cls", RETRYING)
def test_retries_stop_once_attempts_are_exhausted(cls: FailureClass) -> None:
    assert decide(cls, attempts=POLICY.max_attempts - 1).to is ItemStatus.WAITING_RETRY
    for attempts in (POLICY.max_attempts, POLICY.max_attempts + 1):
        d = decide(cls, attempts)
        assert d.to is ItemStatus.FAILED
        assert d.event == "ItemFailed"
        assert d.next_attempt_at is None
        assert d.release_ledger is True  # nothing was delivered
        assert str(attempts) in (d.error or "")


def test_bad_params_fail_at_once_and_are_never_retried() -> None:
    for attempts in (1, POLICY.max_attempts - 1):
        d = decide(F.BAD_PARAMS, attempts=attempts)
        assert d.to is ItemStatus.FAILED
        assert d.event == "ItemFailed"
        assert d.next_attempt_at is None
        assert d.error_class == "bad_params"
        assert d.guid_state is None


def test_needs_human_holds_the_guid_in_the_state_its_code_means_and_keeps_the_item() -> None:
    """Offline / kicked / unauthorized is the account's state, not the item's fault: the
    item waits (nothing was sent, its key is freed) and the guid takes the state the code
    means (a needs-human code the table does not know means offline)."""
    table = {1001: GuidState.OFFLINE, 1002: GuidState.KICKED, 1003: GuidState.UNAUTHORIZED}
    for code, state in [*table.items(), (1234, GuidState.OFFLINE), (None, GuidState.OFFLINE)]:
        for attempts in (1, POLICY.max_attempts + 3):
            err = SendError(F.NEEDS_HUMAN, code, "account")
            d = after_failure(err, attempts, POLICY, NOW, random.Random(0), table)
            assert d.to is ItemStatus.WAITING_RETRY
            assert d.release_ledger is True
            assert d.guid_state is state
            assert str(code) in (d.error or "")  # the gateway's code is kept in the reason


def test_retry_after_is_a_floor_on_the_delay() -> None:
    for cls in (F.RATE_LIMITED, F.RETRYABLE):
        d = decide(cls, attempts=1, retry_after=timedelta(seconds=90))
        assert d.next_attempt_at is not None
        assert d.next_attempt_at >= NOW + timedelta(seconds=90)


def test_short_retry_after_does_not_shorten_the_backoff() -> None:
    for seed in range(20):
        d = decide(F.RETRYABLE, attempts=2, retry_after=timedelta(milliseconds=1), seed=seed)
        assert d.next_attempt_at == NOW + POLICY.next_delay(2, random.Random(seed))  # type: ignore[operator]  # a retry decision always has a delay here


def test_retry_after_does_not_extend_exhausted_attempts() -> None:
    d = decide(F.RETRYABLE, attempts=POLICY.max_attempts, retry_after=timedelta(seconds=5))
    assert d.to is ItemStatus.FAILED


@given(attempts=st.integers(min_value=1, max_value=10_000), seed=st.integers(min_value=0, max_value=2**32),
       retry_after_s=st.none() | st.floats(min_value=0, max_value=3600))
def test_a_rate_limited_answer_is_a_deferral_never_a_failure(attempts: int, seed: int,
                                                              retry_after_s: float | None) -> None:
    """However many attempts came before and however often the gateway says "too fast", the
    item waits (reason rate_limited) with its attempt and budget unit given back, and its
    key freed: nothing was sent."""
    retry_after = None if retry_after_s is None else timedelta(seconds=retry_after_s)
    d = decide(F.RATE_LIMITED, attempts, retry_after=retry_after, seed=seed)
    assert d.to is ItemStatus.WAITING_RETRY and d.event == "ItemRetryScheduled"
    assert d.refund and d.release_ledger and d.guid_state is None
    assert d.error_class == "rate_limited"
    assert d.next_attempt_at is not None and d.next_attempt_at > NOW
    assert d.next_attempt_at <= NOW + max(POLICY.cap, retry_after or timedelta(0)), "the wait is bounded"
    if retry_after is not None:
        assert d.next_attempt_at >= NOW + retry_after


@given(attempts=st.integers(min_value=1, max_value=10_000), seed=st.integers(min_value=0, max_value=2**32))
def test_a_send_pacer_was_too_late_to_make_is_a_deferral_never_an_attempt(attempts: int, seed: int) -> None:
    """The send deadline passed before a byte was written (an overloaded sender, a connection
    pool queueing past it): the gateway said nothing, so however often it happens, and past
    the item's attempts, the item waits again with its attempt and budget unit given back and
    its key freed; never "gave up after N attempts"."""
    late = SendError(F.NOT_SENT, None, "send deadline passed 0.250s before writing", deferred=True)
    d = after_failure(late, attempts, POLICY, NOW, random.Random(seed))
    assert d.to is ItemStatus.WAITING_RETRY and d.event == "ItemRetryScheduled"
    assert d.refund and d.release_ledger and d.guid_state is None
    assert d.error_class == "not_sent" and "gave up" not in (d.error or "")
    assert d.next_attempt_at is not None and NOW < d.next_attempt_at <= NOW + POLICY.cap, "it waits a bounded backoff"


@pytest.mark.parametrize("cls", [c for c in FailureClass if c is not F.RATE_LIMITED])
def test_only_a_rate_limited_answer_gives_the_attempt_back(cls: FailureClass) -> None:
    for attempts in (1, POLICY.max_attempts):
        assert decide(cls, attempts).refund is False


@pytest.mark.parametrize("cls", list(FailureClass))
@pytest.mark.parametrize("attempts", [1, 3, 10])
def test_every_decision_is_a_legal_move_from_submitted(cls: FailureClass, attempts: int) -> None:
    check_transition(ItemStatus.SUBMITTED, decide(cls, attempts).to)


@pytest.mark.parametrize("cls", list(FailureClass))
def test_only_classes_proving_non_delivery_are_retried(cls: FailureClass) -> None:
    d = decide(cls, attempts=1)
    if d.to is ItemStatus.WAITING_RETRY:
        # needs_human: the gateway refused (account offline/kicked), so nothing was sent
        assert cls in RETRYING or cls in (F.NEEDS_HUMAN, F.RATE_LIMITED)
        assert d.release_ledger
    if cls is F.IN_DOUBT:
        assert not d.release_ledger and d.to is not ItemStatus.WAITING_RETRY
