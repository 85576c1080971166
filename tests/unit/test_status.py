"""The item state machine: terminal statuses, illegal moves, and the no-blind-resend property."""

from __future__ import annotations

from collections import deque
from itertools import pairwise, product

import pytest

from pacer_common.domain.status import (
    BY_OPERATOR,
    TRANSITIONS,
    IllegalTransition,
    ItemStatus,
    check_transition,
    is_terminal,
    sources_of,
)

S = ItemStatus
ALL = list(ItemStatus)


def allowed(src: ItemStatus, dst: ItemStatus) -> bool:
    try:
        check_transition(src, dst)
    except IllegalTransition:
        return False
    return True


def reachable(start: ItemStatus, avoiding: frozenset[ItemStatus] = frozenset()) -> set[ItemStatus]:
    """Statuses reachable from ``start`` in one or more steps, never entering ``avoiding``."""
    seen: set[ItemStatus] = set()
    todo = deque([start])
    while todo:
        cur = todo.popleft()
        for nxt in ALL:
            if nxt in avoiding or nxt in seen or not allowed(cur, nxt):
                continue
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_table_has_an_entry_for_every_status() -> None:
    assert set(TRANSITIONS) == set(ItemStatus)


def test_every_status_can_be_checked_as_a_source_without_key_error() -> None:
    for src, dst in product(ALL, ALL):
        allowed(src, dst)  # must answer (raise IllegalTransition or not), never KeyError


@pytest.mark.parametrize("status", [S.CONFIRMED, S.FAILED, S.ABANDONED, S.EXPIRED, S.UNVERIFIED])
def test_outcome_statuses_are_terminal_and_refuse_every_move_but_a_person_s(status: ItemStatus) -> None:
    assert is_terminal(status)
    for dst in ALL:
        if (status, dst) in BY_OPERATOR:
            continue
        with pytest.raises(IllegalTransition):
            check_transition(status, dst)


def test_a_person_only_resolves_an_unverified_send_or_puts_sends_in_doubt_after_a_restore() -> None:
    resolve = {(S.UNVERIFIED, S.CONFIRMED), (S.UNVERIFIED, S.PENDING)}
    after_restore = {(S.PENDING, S.RECOVERY_PENDING), (S.CLAIMED, S.RECOVERY_PENDING),
                     (S.WAITING_RETRY, S.RECOVERY_PENDING)}
    assert resolve | after_restore == BY_OPERATOR
    for src, dst in BY_OPERATOR:
        check_transition(src, dst)


def test_a_send_put_in_doubt_after_a_restore_reaches_the_gateway_again_only_through_a_lookup() -> None:
    # From recovery_pending the only way back to a claim is the verifier's "not delivered"
    # (→ pending); confirmed and unverified are final.
    assert TRANSITIONS[S.RECOVERY_PENDING] == {S.CONFIRMED, S.PENDING, S.UNVERIFIED}
    assert S.CLAIMED not in reachable(S.RECOVERY_PENDING, avoiding=frozenset({S.PENDING}))


@pytest.mark.parametrize("status", [S.PENDING, S.CLAIMED, S.SUBMITTED, S.WAITING_RETRY, S.RECOVERY_PENDING])
def test_in_flight_statuses_are_not_terminal_and_can_reach_a_terminal_status(status: ItemStatus) -> None:
    assert not is_terminal(status)
    assert any(is_terminal(s) for s in reachable(status))


def test_is_terminal_means_no_exit_but_a_person_s() -> None:
    for status in ALL:
        has_exit = any(allowed(status, dst) and (status, dst) not in BY_OPERATOR for dst in ALL)
        assert is_terminal(status) is (not has_exit)


def test_only_pending_may_transition_to_itself() -> None:
    # pending → pending is a released hold (ItemReleased); nothing else stays in place.
    for status in ALL:
        assert allowed(status, status) is (status is ItemStatus.PENDING)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (S.CONFIRMED, S.PENDING),
        (S.SUBMITTED, S.PENDING),
        (S.SUBMITTED, S.CLAIMED),
        (S.PENDING, S.SUBMITTED),  # must be claimed first
        (S.PENDING, S.CONFIRMED),
        (S.WAITING_RETRY, S.SUBMITTED),  # a retry goes back through pending and a claim
        (S.WAITING_RETRY, S.CLAIMED),
        (S.RECOVERY_PENDING, S.SUBMITTED),  # in doubt: never straight back to the gateway
        (S.RECOVERY_PENDING, S.CLAIMED),
        (S.RECOVERY_PENDING, S.FAILED),
        (S.FAILED, S.PENDING),
        (S.UNVERIFIED, S.FAILED),
        (S.EXPIRED, S.PENDING),
        (S.ABANDONED, S.CLAIMED),
    ],
)
def test_illegal_move_is_refused_with_a_message_naming_both_statuses(src: ItemStatus, dst: ItemStatus) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(src, dst)
    assert isinstance(info.value, ValueError)
    assert repr(src.value) in str(info.value) and repr(dst.value) in str(info.value)


@pytest.mark.parametrize(
    "path",
    [
        [S.PENDING, S.CLAIMED, S.SUBMITTED, S.CONFIRMED],
        [S.PENDING, S.CLAIMED, S.SUBMITTED, S.WAITING_RETRY, S.PENDING],
        [S.PENDING, S.CLAIMED, S.SUBMITTED, S.RECOVERY_PENDING, S.PENDING],
        [S.PENDING, S.CLAIMED, S.SUBMITTED, S.RECOVERY_PENDING, S.CONFIRMED],
        [S.PENDING, S.CLAIMED, S.SUBMITTED, S.RECOVERY_PENDING, S.UNVERIFIED],
        [S.PENDING, S.CLAIMED, S.PENDING],  # lease lost before submit: nothing was sent
        [S.PENDING, S.CLAIMED, S.ABANDONED],  # duplicate intercepted by the ledger
        [S.PENDING, S.EXPIRED],
        [S.PENDING, S.ABANDONED],
        [S.PENDING, S.CLAIMED, S.SUBMITTED, S.FAILED],
    ],
)
def test_documented_lifecycles_are_allowed(path: list[ItemStatus]) -> None:
    for src, dst in pairwise(path):
        check_transition(src, dst)


def test_sources_of_agrees_with_check_transition_for_every_pair() -> None:
    for src, dst in product(ALL, ALL):
        assert (src in sources_of(dst)) is allowed(src, dst)


def test_sources_of_submitted_is_only_claimed() -> None:
    # The gateway call is only ever preceded by a claim.
    assert sources_of(S.SUBMITTED) == frozenset({S.CLAIMED})


def test_sources_of_claimed_is_only_pending() -> None:
    assert sources_of(S.CLAIMED) == frozenset({S.PENDING})


def test_sources_of_pending_are_the_requeue_routes() -> None:
    # … and a person deciding that an unverified send was not delivered.
    assert sources_of(S.PENDING) == frozenset({S.PENDING, S.CLAIMED, S.WAITING_RETRY, S.RECOVERY_PENDING,
                                               S.UNVERIFIED})


def test_reachability_helper_is_not_vacuous() -> None:
    # Without restrictions a submitted item can come back to pending (retry / verified not sent)
    # and to claimed: the safety tests below only pass because of the routes they forbid.
    assert {S.PENDING, S.CLAIMED} <= reachable(S.SUBMITTED)
    assert S.PENDING in reachable(S.SUBMITTED, avoiding=frozenset({S.WAITING_RETRY}))
    assert S.PENDING in reachable(S.SUBMITTED, avoiding=frozenset({S.RECOVERY_PENDING}))


def test_submitted_item_never_returns_to_pending_or_claimed_without_a_decision() -> None:
    """No blind resend: from SUBMITTED, the only ways back to the gateway are through
    RECOVERY_PENDING (in doubt, verified by the reconciler) or WAITING_RETRY (the gateway
    answered with a retryable refusal, so nothing was delivered)."""
    back = reachable(S.SUBMITTED, avoiding=frozenset({S.RECOVERY_PENDING, S.WAITING_RETRY}))
    assert S.PENDING not in back
    assert S.CLAIMED not in back
    assert S.SUBMITTED not in back


def test_submitted_has_no_direct_route_back_to_sending() -> None:
    for dst in (S.PENDING, S.CLAIMED, S.SUBMITTED):
        assert not allowed(S.SUBMITTED, dst)


def test_recovery_pending_reaches_sending_again_only_through_pending() -> None:
    back = reachable(S.RECOVERY_PENDING, avoiding=frozenset({S.PENDING}))
    assert S.CLAIMED not in back and S.SUBMITTED not in back


def test_waiting_retry_reaches_sending_again_only_through_pending() -> None:
    back = reachable(S.WAITING_RETRY, avoiding=frozenset({S.PENDING}))
    assert S.CLAIMED not in back and S.SUBMITTED not in back
