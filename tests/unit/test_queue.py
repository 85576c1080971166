"""One guid's in-memory window: priority order, FIFO within a priority, jobs taking turns,
bounded per lane, ringing for what it does not hold."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import JobId
from pacer_sender.domain.queue import HEAD_READ, GuidQueue, GuidWindow


def drain(q: GuidQueue[str]) -> list[str]:
    out = []
    while (v := q.pop()) is not None:
        out.append(v)
    return out


def test_empty_queue_pops_nothing() -> None:
    q: GuidQueue[str] = GuidQueue()
    assert q.pop() is None
    assert len(q) == 0


def test_lower_priority_number_pops_first() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("campaign", 3)
    q.push("takeover", 0)
    q.push("ticket", 2)
    q.push("reply", 1)
    assert drain(q) == ["takeover", "reply", "ticket", "campaign"]


def test_fifo_within_a_priority() -> None:
    q: GuidQueue[str] = GuidQueue()
    for name in ["a", "b", "c", "d"]:
        q.push(name, 2)
    q.push("urgent", 0)
    assert drain(q) == ["urgent", "a", "b", "c", "d"]


def test_remove_if_drops_matching_entries_and_returns_them() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("p0:keep", 0)
    q.push("p1:drop", 1)
    q.push("p2:keep", 2)
    q.push("p3:drop", 0)
    dropped = q.remove_if(lambda v: v.endswith("drop"))
    assert sorted(dropped) == ["p1:drop", "p3:drop"]
    assert len(q) == 2
    assert drain(q) == ["p0:keep", "p2:keep"]


def test_remove_if_with_no_match_changes_nothing() -> None:
    q: GuidQueue[str] = GuidQueue()
    q.push("a", 1)
    q.push("b", 0)
    assert q.remove_if(lambda v: False) == []
    assert drain(q) == ["b", "a"]


# A reference model: each entry is (priority, arrival, value); the lowest (priority,
# arrival) pops first. (One job: fairness between jobs is tested apart.)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 4)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("remove"), st.integers(0, 2)),
    ),
    max_size=60,
)


@settings(database=None, max_examples=300, deadline=None)
@given(ops)
def test_queue_behaves_like_the_reference_model(script: list[tuple]) -> None:
    q: GuidQueue[int] = GuidQueue()
    ready: list[tuple[int, int, int]] = []  # (priority, arrival, value)
    for n, op in enumerate(script):
        if op[0] == "push":
            q.push(n, op[1])
            ready.append((op[1], n, n))
        elif op[0] == "pop":
            expected = min(ready)[2] if ready else None
            assert q.pop() == expected
            ready = [r for r in ready if r[2] != expected]
        else:
            mod = op[1]
            expected_dropped = sorted(v for *_, v in ready if v % 3 == mod)
            assert sorted(q.remove_if(lambda v, m=mod: v % 3 == m)) == expected_dropped
            ready = [r for r in ready if r[2] % 3 != mod]
        assert len(q) == len(ready)


def test_jobs_of_one_priority_take_turns() -> None:
    q: GuidQueue[str] = GuidQueue()
    for i in range(100):
        q.push(f"big-{i}", 3, job=JobId("broadcast"))
    for i in range(3):
        q.push(f"small-{i}", 3, job=JobId("notice"))
    first_six = [q.pop() for _ in range(6)]
    assert first_six == ["big-0", "small-0", "big-1", "small-1", "big-2", "small-2"]


def test_a_late_job_does_not_starve_the_running_one() -> None:
    q: GuidQueue[str] = GuidQueue()
    for i in range(10):
        q.push(f"a-{i}", 3, job=JobId("a"))
    for _ in range(5):
        q.pop()
    for i in range(10):
        q.push(f"b-{i}", 3, job=JobId("b"))
    order = [q.pop() for _ in range(6)]
    assert order.count("a-5") == 1 and sum(v.startswith("a") for v in order) == 3


def test_online_lane_items_are_kept_apart_from_the_batch_backlog() -> None:
    from pacer_sender.domain.queue import GuidLanes

    lanes: GuidLanes[str] = GuidLanes()
    for i in range(1000):
        lanes.push(f"campaign-{i}", 3, job=JobId("c"))
    lanes.push("reply", 1, job=JobId("r"))
    assert lanes.lanes["online"].pop() == "reply"
    assert len(lanes) == 1000


def command(n: int, priority: int = 3, expire_at: datetime | None = None) -> ItemCommand:
    return ItemCommand(item_id=f"00000000-0000-0000-0000-{n:012d}", job_id="j", shard_id=1, guid="g",
                       to_id=f"r{n}", content="x", idem_key=f"k{n}", priority=priority, kind="campaign",
                       expire_at=expire_at)


def expiring(n: int, priority: int = 3) -> ItemCommand:
    """Every third item has an expire_at."""
    return command(n, priority, datetime(2030, 1, 1, tzinfo=UTC) if n % 3 == 0 else None)


def test_a_window_holds_up_to_its_cap_per_lane_and_rings_for_the_rest() -> None:
    w = GuidWindow(cap=3)
    held = [w.offer(command(n)) for n in range(5)]
    assert held == [True, True, True, False, False]
    assert len(w) == 3 and w.more and w.rung == {command(3).item_id, command(4).item_id}
    assert w.offer(command(99, priority=1)), "the online lane has its own room"
    assert len(w.lanes.lanes["online"]) == 1
    w.take("batch")
    assert not w.offer(command(5)), "Postgres holds older batch work: it chooses, not arrival"
    assert w.rung is not None and command(5).item_id in w.rung


def test_an_urgent_command_is_held_even_while_postgres_holds_more() -> None:
    w = GuidWindow(cap=3)
    w.ring()
    assert w.offer(command(1, priority=0)) and len(w.lanes.lanes["online"]) == 1


def test_a_window_never_holds_an_item_twice() -> None:
    w = GuidWindow(cap=5)
    assert w.offer(command(1))
    cmd = w.take("batch")
    assert cmd is not None and w.offer(command(1)), "in hand: a repeated doorbell is not held again"
    assert len(w) == 0
    w.finished(cmd)
    assert w.offer(command(1)) and len(w) == 1


def test_a_window_asks_for_a_refill_only_when_rung_and_down_to_half() -> None:
    w = GuidWindow(cap=4)
    for n in range(4):
        w.offer(command(n))
    assert w.refill_size() == 0, "not rung: Postgres holds nothing the window does not"
    w.offer(command(9))  # full: rings
    assert w.refill_size() == 0, "rung, but still more than half full"
    w.take("batch")
    w.take("batch")
    assert w.refill_size() == 2


def test_a_short_refill_means_postgres_has_no_more_unless_rung_meanwhile() -> None:
    w = GuidWindow(cap=4)
    w.ring()
    w.refilling()
    w.ring()  # a doorbell while the read was on its way
    assert w.refilled([command(1)], asked=4) == 1
    assert w.more, "the doorbell that rang during the read may be for an item the read missed"
    w.refilling()
    assert w.refilled([command(1), command(2)], asked=4) == 1, "item 1 already held"
    assert not w.more
    w.ring()
    w.refilling()
    w.refilled([command(n) for n in range(3, 5)], asked=2)
    assert w.more, "a full refill: Postgres may hold more"


def test_a_short_refill_that_read_every_item_rung_for_meanwhile_has_caught_up() -> None:
    w = GuidWindow(cap=4)
    w.ring()  # the sweep: Postgres has work, no item named
    w.refilling()
    assert not w.offer(command(1)) and not w.offer(command(2)), "their doorbells, while the read runs, ring"
    w.refilled([command(1), command(2)], asked=4)
    assert not w.more, "every item rung for during the read came with it: nothing more to read"

    w.ring()
    w.refilling()
    w.offer(command(3))
    w.refilled([command(4)], asked=4)
    assert w.more, "an item rung for during the read that it did not return: it may have committed after"

    w.refilling()
    w.offer(command(5))
    w.ring()  # unnamed (a sweep, a scheduled item, an unreadable command)
    w.refilled([command(5)], asked=4)
    assert w.more, "a doorbell that named no item may be for anything"

    w.refilling()
    many = [command(n) for n in range(6, 6 + w.cap + 1)]
    for c in many:
        w.note(3, JobId("j"), c.item_id)
    w.refilled(many, asked=2 * w.cap)  # it even returned every one of them
    assert w.more, "more rang than a window holds: not all remembered (memory stays bounded), so not caught up"


@settings(database=None, max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("offer"), st.integers(0, 30), st.sampled_from([1, 3])),
                          st.tuples(st.just("take"), st.sampled_from(["online", "batch"])),
                          st.tuples(st.just("refill"), st.lists(st.integers(0, 30), max_size=6)),
                          st.tuples(st.just("drop"), st.sampled_from(["online", "batch"]))), max_size=80))
def test_a_window_holds_each_item_once_and_at_most_its_cap_from_doorbells(script: list[tuple]) -> None:
    counted = [0]  # what the window reported of its changes: the sender's memory budget counts these
    w = GuidWindow(cap=4, counted=lambda n: counted.__setitem__(0, counted[0] + n))
    in_hand: set[str] = set()
    for op in script:
        if op[0] == "offer":
            before = {lane: len(q) for lane, q in w.lanes.lanes.items()}
            w.offer(expiring(op[1], op[2]))
            lane = "online" if op[2] == 1 else "batch"
            assert len(w.lanes.lanes[lane]) <= max(w.cap, before[lane]), "a doorbell never overfills a lane"
        elif op[0] == "take":
            cmd = w.take(op[1])
            if cmd is not None:
                in_hand.add(cmd.item_id)
        elif op[0] == "drop":
            w.drop(op[1])
        else:
            n = w.refill_size()
            if n:
                w.refilling()
                w.refilled([expiring(i) for i in op[1][:n]], n)
        held = [e.value.item_id for q in w.lanes.lanes.values() for e in q._ready]
        assert w.expiring == sum(c.expire_at is not None for c in w.lanes.lanes["batch"].values()), \
            "the count of expiring batch commands the shedding check relies on"
        assert len(held) == len(set(held)), "an item held twice"
        assert counted[0] == len(w), "a change to the window it did not report"
        assert set(held) | in_hand == w.ids
        assert not set(held) & in_hand


def test_a_busy_guid_remembers_about_as_many_jobs_as_its_window_holds_after_thousands() -> None:
    """A guid whose campaign keeps its batch lane busy gets 20,000 one-item ticket jobs, each
    a doorbell that drops the lane (a job it holds nothing of: reorder), a head read, the
    ticket sent and a campaign item sent. What the lane remembers of jobs it no longer holds
    (virtual times, held counts) was cleared only when the lane emptied: 20,001 entries, some
    4.5 MB for one guid."""
    w = GuidWindow(cap=50)
    campaign = [command(n) for n in range(30_000)]
    w.ring()
    w.refilling()
    w.refilled(campaign[:50], asked=50)
    sent = 0
    for t in range(20_000):
        ticket = ItemCommand(item_id=f"00000000-0000-0000-0001-{t:012d}", job_id=f"ticket-{t}", shard_id=1,
                             guid="g", to_id="r", content="x", idem_key=f"t{t}", priority=2, kind="ticket_notify")
        w.note(ticket.priority, JobId(ticket.job_id), ticket.item_id)
        assert w.urgent, "a ticket's job sorts ahead of the campaign"
        w.refilling()
        w.refilled([ticket, *campaign[sent:sent + HEAD_READ - 1]], asked=HEAD_READ)
        for _ in range(2):  # the ticket, then a campaign item, go out
            done = w.take("batch")
            assert done is not None
            w.finished(done)
        sent += 1
    batch = w.lanes.lanes["batch"]
    assert sent == 20_000 and len(batch) == HEAD_READ - 2
    assert len(batch._held) <= len(batch), f"{len(batch._held)} held counts for {len(batch)} entries"
    assert len(batch._job_v) <= 2 * len(batch) + 64 + 1, f"{len(batch._job_v)} jobs remembered for {len(batch)} entries"


def _refill(w: GuidWindow, backlog: list[ItemCommand]) -> int:
    """One refill of ``w`` from ``backlog`` (the guid's ready items in Postgres, in order,
    those the window holds included); how many it asked for."""
    asked = w.refill_size()
    w.refilling()
    w.refilled([c for c in backlog if c.item_id not in w.ids][:asked], asked=asked)
    return asked


def _reads(w: GuidWindow, backlog: list[ItemCommand]) -> list[int]:
    """Send the guid's whole backlog, one item at a time, its window refilled as the worker
    does (when it is down to half); what each refill asked for."""
    asked = []
    w.ring()
    while backlog:
        if w.refill_size():
            asked.append(_refill(w, backlog))
            continue
        done = w.take("batch")
        assert done is not None
        w.finished(done)
        backlog.remove(done)
    return asked


def test_a_deep_backlog_reads_more_at_a_time_and_a_short_read_brings_the_window_back() -> None:
    w = GuidWindow(cap=50, grows_to=400)
    # Each whole refill answered in full doubles the window, up to 400; the last read,
    # answered short (Postgres had nothing more), brings it back to 50.
    assert _reads(w, [command(n) for n in range(1_000)]) == [50, 50, 100, 200, 200, 200, 200, 200]
    assert w.cap == 50 and not w.more
    fixed = GuidWindow(cap=50)  # without growth, the same backlog takes five times the reads
    assert len(_reads(fixed, [command(n) for n in range(1_000)])) == 40


def test_a_window_grows_only_on_whole_refills_answered_in_full() -> None:
    w = GuidWindow(cap=50, grows_to=400)
    backlog = [command(n) for n in range(1_000)]
    w.ring()
    _refill(w, backlog)
    assert w.cap == 100
    w.note(2, JobId("a ticket's job"))  # sorts ahead: the batch lane dropped, the head read
    assert _refill(w, backlog) == HEAD_READ and w.cap == 100
    assert GuidWindow(cap=50).cap == GuidWindow(cap=50, grows_to=10).grows_to == 50  # never below its first


def test_a_window_grows_no_further_than_its_share_of_the_senders_memory() -> None:
    w = GuidWindow(cap=50, grows_to=400)
    backlog = [command(n) for n in range(1_000)]

    def refill(share: int) -> None:
        while len(w) > w.cap // 2:  # sent down to half: the next refill is a whole one
            done = w.take("batch")
            assert done is not None
            w.finished(done)
            backlog.remove(done)
        asked = w.refill_size()
        w.refilling()
        w.refilled([c for c in backlog if c.item_id not in w.ids][:asked], asked=asked, share=share)

    w.ring()
    for _ in range(4):  # 200 guids' windows under a budget of 24,000: 120 each
        refill(120)
    assert w.cap == 120
    refill(10)
    assert w.cap == 50, "a share below the first size: the first size"


def test_a_head_read_answered_in_full_does_not_grow_even_a_small_window() -> None:
    w = GuidWindow(cap=16, grows_to=400)  # half of it is no more than a head read
    backlog = [command(n) for n in range(1_000)]
    assert all(w.offer(c) for c in backlog[:3])  # held as their doorbells came, nothing read
    w.note(2, JobId("a ticket's job"))  # sorts ahead of the lane: dropped, the head read at once
    assert _refill(w, backlog) == HEAD_READ and w.cap == 16
    assert _refill(w, backlog) == 8 and w.cap == 32  # the whole refill after it, answered in full
