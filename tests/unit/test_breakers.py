"""Circuit breakers: consecutive failures or a failure ratio over a window pause a job or guid."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

import pytest

from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import ItemStatus as S
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers

_seq = count(1)


def outcome(kind: str, job: str = "job-1", guid: str = "g-1") -> ItemEvent:
    to, type_, cls = {
        "ok": (S.CONFIRMED, "ItemConfirmed", None),
        "bad_params": (S.FAILED, "ItemFailed", "bad_params"),
        "retryable": (S.WAITING_RETRY, "ItemRetryScheduled", "retryable"),
        "rate_limited": (S.WAITING_RETRY, "ItemRetryScheduled", "rate_limited"),
        "not_sent": (S.WAITING_RETRY, "ItemRetryScheduled", "not_sent"),
        "in_doubt": (S.RECOVERY_PENDING, "ItemInDoubt", "in_doubt"),  # the sender's own in-doubt answer
    }[kind]
    n = next(_seq)
    return ItemEvent(seq=n, type=type_, item_id=f"it-{n}", job_id=job, shard_id=1, guid=guid, version=3,
                     from_status=S.SUBMITTED, to_status=to, occurred_at=datetime.now(UTC),
                     payload={"error_class": cls} if cls else {})


def swept_in_doubt(job: str = "job-1", guid: str = "g-1") -> ItemEvent:
    """The lease sweep's ItemInDoubt: its sender's lease ran out after submit."""
    n = next(_seq)
    return ItemEvent(seq=n, type="ItemInDoubt", item_id=f"it-{n}", job_id=job, shard_id=1, guid=guid, version=3,
                     from_status=S.SUBMITTED, to_status=S.RECOVERY_PENDING, occurred_at=datetime.now(UTC),
                     payload={"reason": "lease expired after submit", "source": "lease_expired",
                              "error_class": "in_doubt", "error": "lease expired after submit with no outcome"})


def put_in_doubt(payload: dict[str, object], job: str = "job-1", guid: str = "g-1") -> ItemEvent:
    """An ItemInDoubt written by a stored function, not by the sender after a gateway answer."""
    n = next(_seq)
    return ItemEvent(seq=n, type="ItemInDoubt", item_id=f"it-{n}", job_id=job, shard_id=1, guid=guid, version=3,
                     from_status=S.PENDING, to_status=S.RECOVERY_PENDING, occurred_at=datetime.now(UTC),
                     payload=payload)


# What pacer_after_restore, pacer_force_release_item, pacer_compensate and
# pacer_resolve_unverified write in their ItemInDoubt payloads.
_IN_DOUBT = {"error_class": "in_doubt", "error": "it may have been sent: verified before it is sent"}
NOT_THE_GATEWAYS = {
    "after_restore": {"restored": True, "actor": "ops", "reason": "restored", "source": "after_restore"} | _IN_DOUBT,
    "forced_release": {"reason": "lease force-released by admin", "forced": True, "actor": "admin",
                       "verify_from": "2026-12-01T00:00:00Z", "source": "forced_release"} | _IN_DOUBT,
    "compensated": {"restored": True, "actor": "ops", "compensates": "it-0", "source": "compensated"} | _IN_DOUBT,
    "resolved": {"restored": True, "actor": "ops", "reason": "not on the phone", "source": "resolved"} | _IN_DOUBT,
}
# The same events as written before they carried a source or an error class.
BEFORE_THEIR_SOURCE = {
    "after_restore": {"restored": True, "actor": "ops", "reason": "restored"},
    "forced_release": {"reason": "lease force-released by admin", "forced": True, "actor": "admin",
                       "verify_from": "2026-12-01T00:00:00Z"},
    "compensated": {"restored": True, "actor": "ops", "compensates": "it-0"},
    "resolved": {"restored": True, "actor": "ops", "reason": "not on the phone"},
}


POLICY = BreakerPolicy(consecutive=5, window=20, ratio=0.5, min_samples=10)


def test_consecutive_failures_trip_the_job_and_the_guid_once() -> None:
    b = Breakers(POLICY)
    assert b.observe([outcome("bad_params") for _ in range(4)]) == []
    trips = b.observe([outcome("bad_params")])
    assert {(t.scope, t.key) for t in trips} == {("job", "job-1"), ("guid", "g-1")}
    assert all("5 consecutive failures" in t.reason and "bad_params" in t.reason for t in trips)
    # reset after tripping: the next failure starts a new count
    assert b.observe([outcome("bad_params")]) == []


def test_a_success_breaks_the_run() -> None:
    b = Breakers(POLICY)
    events = [outcome("retryable") for _ in range(4)] + [outcome("ok")] + [outcome("retryable") for _ in range(4)]
    assert b.observe(events) == []


def test_failure_ratio_over_the_window_trips_without_a_long_run() -> None:
    b = Breakers(POLICY)
    events = [outcome("retryable" if i % 2 == 0 else "ok") for i in range(9)]
    assert b.observe(events) == []  # below min_samples
    trips = b.observe([outcome("ok"), outcome("retryable")])
    assert trips and all("of the last" in t.reason for t in trips)


def test_ratio_below_the_threshold_never_trips() -> None:
    b = Breakers(POLICY)
    events = [outcome("retryable" if i % 3 == 0 else "ok") for i in range(300)]
    assert b.observe(events) == []


@pytest.mark.parametrize("kind", ["rate_limited", "not_sent"])
def test_slow_downs_and_our_own_deadlines_do_not_count(kind: str) -> None:
    b = Breakers(POLICY)
    assert b.observe([outcome(kind) for _ in range(50)]) == []
    assert b.tracked == 0


def test_sends_the_lease_sweep_put_in_doubt_count_neither_way() -> None:
    """A sender killed with 25 sends of one job in flight: the sweep writes their ItemInDoubt
    events together. With the service's policy (20 in a row) the job's breaker does not trip,
    and they are no successes either: a run of failures before them goes on through them."""
    b = Breakers(BreakerPolicy())
    assert b.observe([swept_in_doubt(guid=f"g-{k}") for k in range(25)]) == []
    assert b.tracked == 0, "nothing recorded"
    events = ([outcome("in_doubt") for _ in range(19)] + [swept_in_doubt() for _ in range(25)]
              + [outcome("in_doubt")])
    trips = b.observe(events)
    assert {(t.scope, t.key) for t in trips} == {("job", "job-1"), ("guid", "g-1")}
    assert all("20 consecutive failures (last: in_doubt)" in t.reason for t in trips)


@pytest.mark.parametrize("payloads", [NOT_THE_GATEWAYS, BEFORE_THEIR_SOURCE], ids=["with_source", "before_it"])
@pytest.mark.parametrize("source", sorted(NOT_THE_GATEWAYS))
def test_sends_a_restore_or_an_operator_put_in_doubt_count_neither_way(
        source: str, payloads: dict[str, dict[str, object]]) -> None:
    """`pacer after-restore` puts every send of a job in flight in doubt at once, an admin
    force-releases a stuck sender's, a person retries or resolves many items from before a
    restore: none of it is an answer of the gateway. With the service's policy 25 such events
    of one job do not trip it, and are no successes either: a run of failures before them goes
    on through them. The same holds for such events written before they named their source."""
    b = Breakers(BreakerPolicy())
    assert b.observe([put_in_doubt(payloads[source], guid=f"g-{k}") for k in range(25)]) == []
    assert b.tracked == 0, "nothing recorded"
    events = ([outcome("retryable") for _ in range(19)] + [put_in_doubt(payloads[source]) for _ in range(25)]
              + [outcome("retryable")])
    trips = b.observe(events)
    assert {(t.scope, t.key) for t in trips} == {("job", "job-1"), ("guid", "g-1")}
    assert all("20 consecutive failures (last: retryable)" in t.reason for t in trips)


def test_twenty_in_doubt_answers_of_the_sender_trip_the_job() -> None:
    b = Breakers(BreakerPolicy())
    assert b.observe([outcome("in_doubt", guid=f"g-{k}") for k in range(19)]) == []
    trips = b.observe([outcome("in_doubt", guid="g-19")])
    assert [(t.scope, t.key) for t in trips] == [("job", "job-1")]
    assert "20 consecutive failures (last: in_doubt)" in trips[0].reason


def test_breakers_are_per_job_and_per_guid() -> None:
    b = Breakers(POLICY)
    # one failing guid shared by two jobs, each job's other guids succeed
    events = []
    for i in range(5):
        events.append(outcome("bad_params", job=f"job-{i % 2}", guid="g-bad"))
        events.append(outcome("ok", job=f"job-{i % 2}", guid=f"g-ok-{i}"))
    trips = b.observe(events)
    assert [(t.scope, t.key) for t in trips] == [("guid", "g-bad")]


def test_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        BreakerPolicy(ratio=0)
    with pytest.raises(ValueError):
        BreakerPolicy(consecutive=0)


def test_finished_jobs_leave_breakers_under_the_bound_and_a_job_still_failing_trips() -> None:
    """20,000 one-item jobs, each retried once and then delivered, keep a breaker each (and
    their guids') until the bound forgets the ones fed longest ago. A job that starts failing
    once the bound is reached, once every 500 of them, is fed more recently than that, so it
    keeps its count and trips on its 20th failure in a row, though 20,000 other breakers were
    made meanwhile."""
    b = Breakers(BreakerPolicy())  # the service's: 20 in a row, capacity 10,000
    trips = []
    for i in range(20_000):
        trips += b.observe([outcome("retryable", job=f"done-{i}", guid=f"g-{i}"),
                            outcome("ok", job=f"done-{i}", guid=f"g-{i}")])
        assert b.tracked <= b.capacity == 10_000
        if i >= 10_000 and i % 500 == 499:
            trips += b.observe([outcome("retryable", job="failing", guid=f"g-failing-{i}")])
    assert b.tracked == b.capacity, "each finished job and its guid left a breaker, up to the bound"
    assert [(t.scope, t.key) for t in trips] == [("job", "failing")]
    assert "20 consecutive failures" in trips[0].reason


def test_the_bound_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Breakers(POLICY, capacity=0)
