"""The order a guid's ready work is sent in (domain/order.py), the window that keeps to it,
and the worker's rules built on it: a ticket jumps a deep campaign within one send, a new job
gets its turn, batch yields to a late online lane, shedding."""

from __future__ import annotations

import asyncio
import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.commands import CommandHead
from pacer_common.domain.ids import ItemId, JobId
from pacer_sender.domain.order import Queued, fair_order, sheds
from pacer_sender.domain.pacing import Drain, GuidPacer, Limits
from pacer_sender.domain.queue import HEAD_READ, GuidQueue, GuidWindow
from tests.unit.dispatching import EPS, FAST, cmd, dispatcher, ring, run_virtual, stop, until


def q(item: str, job: str, priority: int = 3, ready_at: float = 0.0) -> Queued:
    return Queued(ItemId(item), JobId(job), priority, ready_at)


def test_priority_first_then_jobs_take_turns_then_age() -> None:
    items = [q("a1", "A", ready_at=1), q("a2", "A", ready_at=2), q("a3", "A", ready_at=3),
             q("b1", "B", ready_at=10), q("b2", "B", ready_at=11), q("t1", "T", priority=2, ready_at=50)]
    assert [x.item_id for x in fair_order(items)] == ["t1", "a1", "b1", "a2", "b2", "a3"]


def test_a_job_of_weight_two_sends_two_for_one() -> None:
    items = [q(f"a{i}", "A", ready_at=i) for i in range(6)] + [q(f"b{i}", "B", ready_at=100 + i) for i in range(6)]
    order = [x.item_id for x in fair_order(items, {"B": 2.0}.get)]
    assert order[:6] == ["a0", "b0", "b1", "a1", "b2", "b3"]


@settings(database=None, max_examples=200)
@given(st.dictionaries(st.sampled_from("ABCD"), st.tuples(st.integers(1, 40), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                       min_size=2))
def test_every_prefix_shares_the_guid_by_weight_among_jobs_with_work(jobs: dict[str, tuple[int, float]]) -> None:
    items = [q(f"{j}{i}", j, ready_at=float(i)) for j, (n, _) in jobs.items() for i in range(n)]
    order = fair_order(items, lambda j: jobs[j][1])
    sent = dict.fromkeys(jobs, 0)
    for x in order:
        sent[x.job_id] += 1
        backlogged = [j for j in jobs if sent[j] < jobs[j][0]]
        # no job's last item started (k / weight) later than the next item of a job still waiting
        for j in backlogged:
            for k in jobs:
                assert (sent[k] - 1) / jobs[k][1] <= sent[j] / jobs[j][1] + 1e-9


def test_a_weight_of_zero_or_less_never_starves_a_job_for_ever() -> None:
    items = [q("a0", "A", ready_at=0), q("a1", "A", ready_at=1), q("b0", "B", ready_at=2), q("b1", "B", ready_at=3)]
    assert [x.item_id for x in fair_order(items, {"A": 0.0}.get)] == ["a0", "b0", "b1", "a1"]


def test_shedding_is_for_items_that_would_go_out_after_their_expire_at() -> None:
    assert sheds(11, 1010.0, 1000.0, Drain(1.0)) and not sheds(10, 1010.0, 1000.0, Drain(1.0))
    assert not sheds(10_000, None, 1000.0, Drain(1.0)), "without an expire_at nothing is shed"


def test_the_memory_queue_shares_by_weight_too() -> None:
    queue: GuidQueue[str] = GuidQueue({JobId("B"): 2.0}.get)
    for i in range(4):
        queue.push(f"a{i}", 3, JobId("A"))
    for i in range(4):
        queue.push(f"b{i}", 3, JobId("B"))
    assert [queue.pop() for _ in range(6)] == ["a0", "b0", "b1", "a1", "b2", "b3"]


def test_a_better_priority_doorbell_behind_a_deep_queue_drops_the_batch_lane_and_refills_at_once() -> None:
    w = GuidWindow(cap=10)
    w.ring()  # Postgres holds more than the window
    w.refilling()
    w.refilled([cmd("g", n) for n in range(10)], asked=10)
    assert w.refill_size() == 0, "full: no refill for more of the same"
    assert not w.offer(cmd("g", 50)), "the same job: Postgres chooses; the window stays"
    assert len(w) == 10 and w.refill_size() == 0
    assert not w.offer(cmd("g", 51, priority=2))
    assert len(w) == 0 and w.urgent and w.refill_size() == HEAD_READ, "a ticket sorts ahead: read the head of the order now"


def test_a_doorbell_of_a_job_the_window_holds_nothing_of_asks_for_its_turn() -> None:
    w = GuidWindow(cap=10)
    w.ring()
    w.refilling()
    w.refilled([cmd("g", n) for n in range(10)], asked=10)
    w.offer(cmd("g", 60, job="new"))
    assert w.urgent and len(w) == 0
    w.refilling()
    assert not w.urgent


def test_after_a_refill_a_job_that_just_arrived_goes_before_one_that_just_sent() -> None:
    w = GuidWindow(cap=10)
    w.ring()
    w.refilling()
    w.refilled([cmd("g", n, job="big") for n in range(10)], asked=10)
    assert w.take("batch") == cmd("g", 0, job="big")
    w.offer(cmd("g", 100, job="small"))  # a job the window holds nothing of: refill
    # Postgres ranks both jobs' next items equal and puts the older (big) first; the window
    # remembers that big has just had its turn
    w.refilling()
    w.refilled([cmd("g", 1, job="big"), cmd("g", 100, job="small"), cmd("g", 2, job="big")], asked=10)
    assert [w.take("batch") for _ in range(3)] == [cmd("g", 100, job="small"), cmd("g", 1, job="big"),
                                                    cmd("g", 2, job="big")]


def test_dropping_the_window_costs_a_job_nothing_it_did_not_send() -> None:
    queue: GuidQueue[str] = GuidQueue()
    for i in range(5):
        queue.push(f"a{i}", 3, JobId("A"))
    queue.push("b0", 3, JobId("B"))
    assert queue.pop() == "a0"
    queue.remove_if(lambda v: True)
    for v, job in [("a1", "A"), ("b0", "B"), ("a2", "A"), ("b1", "B")]:
        queue.push(v, 3, JobId(job))
    assert [queue.pop() for _ in range(4)] == ["b0", "a1", "b1", "a2"]


def test_batch_waits_for_the_online_lane_only_once_it_is_late() -> None:
    w = GuidWindow(cap=10)
    w.offer(cmd("g", 1, priority=1), now=100.0)
    assert w.oldest("online") == 100.0 and w.oldest("batch") is None


@pytest.mark.parametrize("head_only", [False, True], ids=["command", "head of a full window's doorbell"])
def test_a_ticket_behind_a_deep_campaign_goes_out_with_the_next_send(head_only: bool) -> None:
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(Limits(min_interval_s=0.05, jitter_s=0.0, online_reserve=0.0), cap=50)
        for n in range(300):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) >= 3)
        ticket = cmd("g", 999, priority=2, job="tickets")
        if head_only:  # what the consumer hands over for a guid whose window is full
            rec.store.add(ticket)
            d.ring("g", CommandHead.model_validate_json(ticket.model_dump_json()))
        else:
            ring(d, rec.store, ticket)
        await until(lambda: any(i == "g-999" for _, i, _ in rec.sent))
        stop(d)
        return [i for _, i, _ in rec.sent]

    order = asyncio.run(scenario())
    assert order.index("g-999") - 3 <= 2, f"the ticket waited behind the campaign: {order}"


def test_a_ticket_is_spaced_at_the_whole_rate_while_the_campaign_keeps_the_reserve() -> None:
    async def scenario() -> list[tuple[str, float]]:
        d, rec, _ = dispatcher(Limits(min_interval_s=0.3, jitter_s=0.0, online_reserve=0.8), cap=50)  # batch: 1.5 s
        for n in range(20):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) >= 2)
        ring(d, rec.store, cmd("g", 999, priority=2, job="tickets"))
        await until(lambda: len(rec.sent) >= 4)
        stop(d)
        return [(i, at) for _, i, at in rec.sent]

    sent = run_virtual(scenario())
    names, gaps = [i for i, _ in sent], [b - a for (_, a), (_, b) in itertools.pairwise(sent)]
    assert names[2] == "g-999", names
    assert abs(gaps[0] - 1.5) <= EPS and abs(gaps[2] - 1.5) <= EPS, f"campaign sends keep the online reserve: {gaps}"
    # Paced as a campaign send, the ticket would go a batch interval (1.5 s) after the last send.
    assert abs(gaps[1] - 0.3) <= EPS, f"the ticket did not go one interval (0.3 s) after the last send: {gaps}"


def test_a_new_job_behind_a_deep_one_gets_its_turn_at_once() -> None:
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(Limits(min_interval_s=0.02, jitter_s=0.0, online_reserve=0.0), cap=50)
        for n in range(300):
            ring(d, rec.store, cmd("g", n, job="big"))
        await until(lambda: len(rec.sent) >= 3)
        for n in range(1000, 1004):
            ring(d, rec.store, cmd("g", n, job="small"))
        await until(lambda: sum(i.startswith("g-100") for _, i, _ in rec.sent) == 4)
        stop(d)
        return [i for _, i, _ in rec.sent]

    order = asyncio.run(scenario())
    small = [n for n, i in enumerate(order) if i.startswith("g-100")]
    assert small[0] <= 5, f"the new job waited behind the window: {order[:12]}"
    assert all(b - a == 2 for a, b in itertools.pairwise(small)), f"the jobs took turns: {order[:14]}"


def test_batch_yield_holds_batch_while_a_reply_is_waiting_past_the_threshold() -> None:
    async def scenario() -> list[str]:
        limits = Limits(min_interval_s=0.3, jitter_s=0.0, online_yield_s=0.0, online_reserve=0.9)
        d, rec, _ = dispatcher(limits)
        ring(d, rec.store, cmd("g", 0))  # a batch send first: the online limiter must now wait 0.3 s
        await until(lambda: len(rec.sent) == 1)
        ring(d, rec.store, cmd("g", 1, priority=1))
        for n in range(2, 5):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) >= 3, timeout=10)
        stop(d)
        return [i for _, i, _ in rec.sent]

    sent = asyncio.run(scenario())
    assert sent[1] == "g-1", f"batch went while the reply waited: {sent}"


def test_the_worker_sheds_its_guids_batch_items_that_cannot_make_their_expire_at() -> None:
    async def scenario() -> tuple[int, list[int]]:
        shed: list[int] = []
        d, rec, _ = dispatcher(Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0), on_shed=shed.append)
        soon = datetime.now(UTC) + timedelta(seconds=3.5)
        for n in range(10):
            c = cmd("g", n).model_copy(update={"expire_at": soon})
            ring(d, rec.store, c)
        await until(lambda: bool(shed))
        stop(d)
        return len(rec.store.shed_by), shed

    gone, counted = asyncio.run(scenario())
    assert 6 <= gone <= 7 and counted == [gone], "at one send a second, 3 or 4 of 10 can make it"


def test_the_batch_rate_estimate_counts_the_reserve_and_the_jitter() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=1.0, online_reserve=0.5)
    assert GuidPacer().drain(limits).at(10) == 10 * (2.0 + 0.5)
    assert FAST.shed


@settings(max_examples=200, deadline=None)
@given(penalty=st.floats(1.0, 64.0), decay=st.floats(0.05, 1.0), interval=st.floats(0.1, 30.0),
       jitter=st.floats(0.0, 5.0), position=st.integers(1, 400))
def test_the_queue_s_drain_is_the_pacer_s_own_gaps_as_clean_sends_wear_the_penalty_down(
        penalty: float, decay: float, interval: float, jitter: float, position: int) -> None:
    """Shedding estimates when each item goes out from the penalty as it will be worn down, not
    as if the guid stayed at its worst: the sum of the gaps the pacer itself would keep."""
    limits = Limits(min_interval_s=interval, jitter_s=jitter, online_reserve=0.2, penalty_decay=decay,
                    max_penalty=64.0)
    pacer = GuidPacer(multiplier=penalty)
    drain = pacer.drain(limits)
    gaps = 0.0
    for _ in range(position):  # what next_at spaces each batch send by, then the decay sent() applies
        gaps += limits.batch_interval_s * pacer.multiplier + limits.mean_jitter_s
        pacer.sent("batch", limits, 0.0, 0.0, random.Random(0))
    assert drain.at(position) == pytest.approx(gaps, rel=1e-9, abs=1e-6)


def test_a_guid_slowed_by_a_rate_limit_sheds_only_what_its_recovering_pace_cannot_send_in_time() -> None:
    """×32 held for the whole queue would shed all but the first 112 of an hour's items at one
    send a second; worn down by clean sends the pace is back to 1 s within about 33 sends."""
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, penalty_decay=0.9)
    drain = GuidPacer(multiplier=32.0).drain(limits)
    hour = 3600.0
    assert not sheds(3000, hour, 0.0, drain), f"the 3,000th item goes at {drain.at(3000):.0f} s"
    assert sheds(3600, hour, 0.0, drain)
    assert drain.at(1) == pytest.approx(32.0), "the next send is still at the full penalty"


def test_a_guid_whose_jobs_have_no_expire_at_is_never_read_for_shedding() -> None:
    async def scenario() -> int:
        checks: list[str] = []
        d, rec, _ = dispatcher(Limits(min_interval_s=0.01, jitter_s=0.0, online_reserve=0.0), cap=4)
        real = rec.store.shed

        async def counted(guid: str, drain: Drain) -> int:
            checks.append(guid)
            return await real(guid, drain)

        rec.store.shed = counted  # type: ignore[method-assign]  # a counting wrapper patched in to see how often it runs
        for n in range(40):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 40)
        stop(d)
        return len(checks)

    assert asyncio.run(scenario()) == 0


def test_a_new_job_behind_a_window_at_its_cap_refills_at_once_even_when_postgres_had_no_more() -> None:
    w = GuidWindow(cap=3)
    for n in range(3):
        assert w.offer(cmd("g", n, job="big"))
    assert not w.more
    assert not w.offer(cmd("g", 10, job="small")), "no room: Postgres has it"
    assert w.urgent and w.more and len(w) == 0, "a job the window holds nothing of sorts ahead: read it now"


def test_a_scheduled_doorbell_read_only_for_its_head_still_sets_when_its_guid_wakes() -> None:
    async def scenario() -> float | None:
        d, rec, _ = dispatcher(Limits(min_interval_s=30.0, jitter_s=0.0, online_reserve=0.0), cap=4)
        for n in range(10):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 1)
        later = cmd("g", 50, job="later", not_before=datetime.now(UTC) + timedelta(seconds=120))
        rec.store.add(later)
        d.ring("g", CommandHead.model_validate_json(later.model_dump_json()))
        due = d.guids["g"].due_at
        stop(d)
        return None if due is None else due - d.crew.clock()

    due_in = asyncio.run(scenario())
    assert due_in is not None and 110 < due_in <= 120, f"the guid wakes when it comes due: {due_in}"
