"""One guid's queue: priority order, FIFO within a priority, deferred items held until due."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_sender.domain.queue import GuidQueue


def drain(q: GuidQueue[str], now: float) -> list[str]:
    out = []
    while (v := q.pop(now)) is not None:
        out.append(v)
    return out


def test_empty_queue_pops_nothing() -> None:
    q: GuidQueue[str] = GuidQueue()
    assert q.pop(0.0) is None
    assert len(q) == 0
    assert q.next_due() is None


def test_lower_priority_number_pops_first() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("campaign", 3)
    q.push("takeover", 0)
    q.push("ticket", 2)
    q.push("reply", 1)
    assert drain(q, 0.0) == ["takeover", "reply", "ticket", "campaign"]


def test_fifo_within_a_priority() -> None:
    q: GuidQueue[str] = GuidQueue()
    for name in ["a", "b", "c", "d"]:
        q.push(name, 2)
    q.push("urgent", 0)
    assert drain(q, 0.0) == ["urgent", "a", "b", "c", "d"]


def test_len_counts_ready_and_deferred() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("now", 1)
    q.push("later", 1, due_at=50.0)
    assert len(q) == 2
    q.pop(0.0)
    assert len(q) == 1


def test_deferred_item_is_not_popped_before_due() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("scheduled", 0, due_at=10.0)
    assert q.pop(9.999) is None
    assert len(q) == 1
    assert q.pop(10.0) == "scheduled"
    assert len(q) == 0


def test_urgent_deferred_item_does_not_jump_ahead_before_due() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("takeover-later", 0, due_at=10.0)
    q.push("campaign-now", 3)
    assert q.pop(5.0) == "campaign-now"


def test_due_items_compete_by_priority_with_ready_items() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("campaign", 3)
    q.push("reply", 1)
    q.push("takeover-due", 0, due_at=10.0)
    q.push("low-due", 5, due_at=10.0)
    assert drain(q, 10.0) == ["takeover-due", "reply", "campaign", "low-due"]


def test_next_due_is_the_earliest_deferred_time() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("ready", 0)
    assert q.next_due() is None
    q.push("b", 0, due_at=30.0)
    q.push("a", 9, due_at=20.0)
    assert q.next_due() == 20.0
    assert q.pop(25.0) == "ready"
    assert q.pop(25.0) == "a"
    assert q.next_due() == 30.0
    assert q.pop(25.0) is None
    assert q.pop(30.0) == "b"
    assert q.next_due() is None


def test_remove_if_drops_matching_entries_from_both_heaps_and_returns_them() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("p0:keep", 0)
    q.push("p1:drop", 1)
    q.push("p2:keep", 2)
    q.push("d5:drop", 0, due_at=5.0)
    q.push("d7:keep", 1, due_at=7.0)
    dropped = q.remove_if(lambda v: v.endswith("drop"))
    assert sorted(dropped) == ["d5:drop", "p1:drop"]
    assert len(q) == 3
    assert q.next_due() == 7.0
    assert drain(q, 100.0) == ["p0:keep", "d7:keep", "p2:keep"]


def test_remove_if_with_no_match_changes_nothing() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("a", 1)
    q.push("b", 0, due_at=3.0)
    assert q.remove_if(lambda v: False) == []
    assert len(q) == 2
    assert drain(q, 3.0) == ["b", "a"]


# A reference model: each entry is (priority, arrival, due or None, value). A pop at ``now``
# first makes every entry due by ``now`` ready — it joins the line then, in (due, push)
# order; among ready entries the lowest (priority, arrival) wins. ``next_due`` is the
# earliest due time not yet made ready. (One job: fairness between jobs is tested apart.)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 4), st.none() | st.integers(0, 20)),
        st.tuples(st.just("pop"), st.integers(0, 25)),
        st.tuples(st.just("remove"), st.integers(0, 2)),
    ),
    max_size=60,
)


@settings(database=None, max_examples=300, deadline=None)
@given(ops)
def test_queue_behaves_like_the_reference_model(script: list[tuple]) -> None:  # type: ignore[type-arg]
    q: GuidQueue[int] = GuidQueue()
    ready: list[tuple[int, int, int]] = []  # (priority, arrival, value)
    deferred: list[tuple[float, int, int]] = []  # (due, priority, value)
    now = 0.0
    arrival = 0
    for n, op in enumerate(script):
        if op[0] == "push":
            _, prio, due = op
            q.push(n, prio, None if due is None else float(due))
            if due is None:
                ready.append((prio, arrival, n))
                arrival += 1
            else:
                deferred.append((float(due), prio, n))
        elif op[0] == "pop":
            now = max(now, float(op[1]))  # a monotonic clock
            for due, prio, v in sorted(d for d in deferred if d[0] <= now):
                ready.append((prio, arrival, v))
                arrival += 1
            deferred = [d for d in deferred if d[0] > now]
            expected = min(ready)[2] if ready else None
            assert q.pop(now) == expected
            ready = [r for r in ready if r[2] != expected]
        else:
            mod = op[1]
            expected_dropped = sorted(v for *_, v in ready + deferred if v % 3 == mod)
            assert sorted(q.remove_if(lambda v, m=mod: v % 3 == m)) == expected_dropped
            ready = [r for r in ready if r[2] % 3 != mod]
            deferred = [d for d in deferred if d[2] % 3 != mod]
        assert len(q) == len(ready) + len(deferred)
        assert q.next_due() == (min(d[0] for d in deferred) if deferred else None)


def test_jobs_of_one_priority_take_turns() -> None:
    q: GuidQueue[str] = GuidQueue()
    for i in range(100):
        q.push(f"big-{i}", 3, job="broadcast")
    for i in range(3):
        q.push(f"small-{i}", 3, job="notice")
    first_six = [q.pop(0.0) for _ in range(6)]
    assert first_six == ["big-0", "small-0", "big-1", "small-1", "big-2", "small-2"]


def test_a_late_job_does_not_starve_the_running_one() -> None:
    q: GuidQueue[str] = GuidQueue()
    for i in range(10):
        q.push(f"a-{i}", 3, job="a")
    for _ in range(5):
        q.pop(0.0)
    for i in range(10):
        q.push(f"b-{i}", 3, job="b")
    order = [q.pop(0.0) for _ in range(6)]
    assert order.count("a-5") == 1 and sum(v.startswith("a") for v in order) == 3


def test_online_lane_items_are_kept_apart_from_the_batch_backlog() -> None:
    from pacer_sender.domain.queue import GuidLanes

    lanes: GuidLanes[str] = GuidLanes()
    for i in range(1000):
        lanes.push(f"campaign-{i}", 3, job="c")
    lanes.push("reply", 1, job="r")
    assert lanes.lanes["online"].pop(0.0) == "reply"
    assert len(lanes) == 1000
