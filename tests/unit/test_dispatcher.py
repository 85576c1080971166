"""The per-guid dispatcher: Postgres holds each guid's queue, memory a bounded window of it;
priority lanes, no head-of-line blocking, scheduled work aside, hot limits, leases, and
failures that stay with their item."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import Executed
from pacer_sender.crew import QUIET_WAIT_S
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.domain.queue import HEAD_READ
from pacer_sender.leases import GuidLeases
from pacer_sender.ports import GuidLease, Ready, Slowdown, UnstorableItem
from pacer_sender.sweeper import Sweeper
from tests.unit.dispatching import (
    EPS,
    FAST,
    BeforeCall,
    Recorder,
    cmd,
    dispatcher,
    name,
    ring,
    run_virtual,
    stop,
    unchanged_counts,
    until,
)
from tests.unit.fakes import GrantAll, InMemoryGuidLeases, InMemoryGuidQueue


def test_an_auto_reply_does_not_wait_behind_a_campaign_backlog() -> None:
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.2))
        for n in range(50):
            ring(d, rec.store, cmd("g1", n))
        await until(lambda: len(rec.sent) >= 2)
        ring(d, rec.store, cmd("g1", 99, priority=1))
        await until(lambda: any(i == "g1-99" for _, i, _ in rec.sent))
        stop(d)
        return [i for _, i, _ in rec.sent]

    order = asyncio.run(scenario())
    assert order.index("g1-99") <= 3, f"the reply waited behind the backlog: {order}"


def test_a_slow_guid_does_not_hold_up_another_guid() -> None:
    async def scenario() -> list[tuple[str, str, float]]:
        d, rec, table = dispatcher(FAST)
        table["slow"] = Limits(min_interval_s=60.0, jitter_s=0.0)
        for n in range(3):
            ring(d, rec.store, cmd("slow", n))
        for n in range(20):
            ring(d, rec.store, cmd("fast", n))
        await until(lambda: sum(g == "fast" for g, _, _ in rec.sent) == 20)
        stop(d)
        return rec.sent

    sent = asyncio.run(scenario())
    assert sum(g == "slow" for g, _, _ in sent) == 1
    assert sum(g == "fast" for g, _, _ in sent) == 20


def test_a_hot_rate_change_applies_to_a_waiting_guid() -> None:
    async def scenario() -> int:
        d, rec, table = dispatcher(Limits(min_interval_s=3600.0, jitter_s=0.0))
        for n in range(5):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 1)
        table["g"] = FAST
        d.wake(["g"])  # what the limits book does when guid_limits changes
        await until(lambda: len(rec.sent) == 5, timeout=5.0)  # 5 s of virtual time: far short of the hour
        return len(rec.sent)

    assert run_virtual(scenario()) == 5


def test_a_guid_held_by_another_sender_waits_and_sends_nothing() -> None:
    async def scenario() -> tuple[int, int]:
        store = GrantAll(held_elsewhere={"g"})
        d, rec, _ = dispatcher(FAST, store)
        for n in range(3):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: store.asked >= 3)  # it keeps asking for the lease, sending nothing
        before = len(rec.sent)
        store.held_elsewhere.clear()
        await until(lambda: len(rec.sent) == 3)
        return before, len(rec.sent)

    assert asyncio.run(scenario()) == (0, 3)


def test_a_backlog_past_the_window_is_read_from_postgres_and_never_fills_memory() -> None:
    backlog = [cmd("g1", n) for n in range(40)]

    async def scenario() -> tuple[int, list[str], list[tuple[str, int]]]:
        d, rec, _ = dispatcher(FAST, cap=4)
        for c in backlog:
            ring(d, rec.store, c)
        ring(d, rec.store, cmd("g2", 0))
        in_memory = d.buffered
        peak = 0

        def done() -> bool:
            nonlocal peak
            peak = max(peak, d.buffered)
            return len(rec.sent) == 41 and not d.guids

        await until(done)
        return max(in_memory, peak), [i for _, i, _ in rec.sent], rec.store.reads

    most, sent, reads = asyncio.run(scenario())
    assert most <= 5, "at most a window of g1's commands and g2's in memory"
    assert sorted(sent) == sorted([f"g1-{n}" for n in range(40)] + ["g2-0"]), "each item once"
    assert sent.index("g2-0") < 4, "g2 did not wait for g1's backlog"
    assert reads and all(limit <= 4 for _, limit in reads), "read a window at a time"


def test_a_doorbell_without_a_command_starts_its_guid_from_postgres() -> None:
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(FAST)
        rec.store.add(*(cmd("g", n) for n in range(3)))
        d.ring("g")  # an unreadable command: only its key is known
        await until(lambda: len(rec.sent) == 3 and not d.guids)
        return [i for _, i, _ in rec.sent]

    assert sorted(asyncio.run(scenario())) == ["g-0", "g-1", "g-2"]


def test_an_item_finished_meanwhile_is_not_sent() -> None:
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(FAST, cap=2)
        backlog = [cmd("g1", n) for n in range(6)]
        rec.store.add(*backlog)
        for c in backlog:
            d.ring(c.guid, c)
        rec.store.pending.pop(backlog[4].item_id)  # cancelled meanwhile
        await until(lambda: not d.guids)
        return [i for _, i, _ in rec.sent]

    assert sorted(asyncio.run(scenario())) == ["g1-0", "g1-1", "g1-2", "g1-3", "g1-5"]


def test_scheduled_items_wait_in_postgres_and_never_hold_up_ready_ones() -> None:
    async def scenario() -> tuple[int, list[str], float, float]:
        d, rec, _ = dispatcher(FAST)
        due = datetime.now(UTC) + timedelta(seconds=0.4)
        for n in range(5):
            ring(d, rec.store, cmd("g", n, not_before=due))
        for n in range(5, 8):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 3)
        held_while_waiting = d.buffered
        await until(lambda: len(rec.sent) == 8)
        first_scheduled = min(t for _, i, t in rec.sent if int(i.split("-")[1]) < 5)
        return held_while_waiting, [i for _, i, _ in rec.sent], first_scheduled, due.timestamp()

    held, sent, _first_scheduled_at, _ = asyncio.run(scenario())
    assert sent[:3] == ["g-5", "g-6", "g-7"], "ready items go first"
    assert held == 0, "scheduled commands are not held in memory"
    assert sorted(sent[3:]) == [f"g-{n}" for n in range(5)]


def test_a_guid_with_nothing_due_soon_ends_its_worker_until_the_sweep_starts_it() -> None:
    async def scenario() -> tuple[bool, int, list[str]]:
        d, rec, _ = dispatcher(FAST, horizon_s=0.2)
        ring(d, rec.store, cmd("g", 0, not_before=datetime.now(UTC) + timedelta(seconds=0.5)))
        await until(lambda: not d.guids)  # due beyond the horizon: no worker waits for it
        ended = not rec.sent
        sweeper = Sweeper(d, rec.store, _owns_all, unchanged_counts, interval_s=0.1)
        found = 0
        deadline = time.monotonic() + 10
        while not rec.sent:
            assert time.monotonic() < deadline, "the sweep never restarted the guid's worker"
            found += await sweeper.sweep("periodic")
            await asyncio.sleep(0.05)
        return ended, found, [i for _, i, _ in rec.sent]

    ended, found, sent = asyncio.run(scenario())
    assert ended and sent == ["g-0"] and found >= 1


def _owns_all(guid: str) -> bool:
    return True


def test_the_sweep_starts_owned_guids_whose_doorbells_were_lost_and_counts_them() -> None:
    async def scenario() -> tuple[int, int, list[str], list[tuple[str, int]]]:
        d, rec, _ = dispatcher(FAST)
        rec.store.add(cmd("mine", 0), cmd("mine", 1), cmd("theirs", 0))
        ring(d, rec.store, cmd("busy", 0))  # has a worker already

        counted: list[tuple[str, int]] = []
        sweeper = Sweeper(d, rec.store, lambda g: g != "theirs", unchanged_counts, interval_s=1.0,
                          on_swept=lambda t, n: counted.append((t, n)))
        found = await sweeper.sweep("assign")
        await until(lambda: sum(g == "mine" for g, _, _ in rec.sent) == 2)
        second = await sweeper.sweep("periodic")
        stop(d)
        return found, second, sorted(i for _, i, _ in rec.sent), counted

    found, second, sent, counted = asyncio.run(scenario())
    assert found == 1, "one owned guid without a worker"
    assert "theirs-0" not in sent, "another sender's guid is left alone"
    assert {"mine-0", "mine-1"} <= set(sent)
    assert second == 0 and counted == [("assign", 1), ("periodic", 0)]


def test_a_new_owner_whose_doorbells_started_the_guid_still_sends_what_the_previous_owner_was_rung_for() -> None:
    """The previous owner consumed (and committed) the doorbells of the guid's first items,
    then lost the partition and dropped its window; the new owner's consumer hands it only the
    doorbells after those, which start the guid's worker before the assignment's sweep looks
    (so the sweep leaves it alone). The worker holds everything it was rung for; it must not
    end on that word alone but read the guid's queue in Postgres before it ends."""
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(FAST)
        rec.store.overdue = False  # planned a moment ago: not yet overdue for the periodic sweep
        rec.store.add(*(cmd("g", n) for n in range(3)))  # their doorbells went to the previous owner
        for n in range(3, 6):
            ring(d, rec.store, cmd("g", n))  # the doorbells this sender consumed
        await Sweeper(d, rec.store, _owns_all, unchanged_counts, interval_s=20.0).sweep("assign")
        await until(lambda: not d.guids)  # the worker ran out of work and ended
        return sorted(i for _, i, _ in rec.sent)

    assert asyncio.run(scenario()) == [f"g-{n}" for n in range(6)]


def test_the_sweep_re_reads_a_busy_guid_only_if_its_window_would_never_reach_the_overdue_item() -> None:
    """A worker holding the item the sweep names is left alone: it read the guid's queue in
    Postgres before its first send (test_head_reads.py), so its window is the head of the
    guid's order plus what rang since. That premise is what makes leaving it alone sound:
    before workers read first, a window built from doorbells alone passed this check while an
    auto-reply the previous owner was rung for waited behind it. An item the worker neither
    holds nor means to read makes it read the head of its order at once."""
    async def scenario() -> tuple[bool, bool, bool]:
        d, rec, table = dispatcher(FAST)
        table["g"] = Limits(min_interval_s=3600.0, jitter_s=0.0)  # sends one, then waits an hour
        for n in range(3):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 1)
        assert d.guids["g"].read, "the worker read Postgres before its first send"
        window = d.guids["g"].window
        sweeper = Sweeper(d, rec.store, _owns_all, unchanged_counts, interval_s=1.0)
        window.more = False
        reads = len(rec.store.reads)
        await sweeper.sweep("periodic")  # a poked worker reads while the sweep waits for its partition counts
        held = window.more or len(rec.store.reads) > reads  # its window holds the overdue items: left alone
        rec.store.add(cmd("g", 9))  # pending in Postgres, its doorbell lost
        for n in (1, 2):  # the window's items gone (taken by an operator, say): g-9 comes first
            window.lanes.remove_if(lambda c, n=n: c.item_id == cmd("g", n).item_id)
            window.ids.discard(cmd("g", n).item_id)
            rec.store.pending.pop(cmd("g", n).item_id, None)
        reads = len(rec.store.reads)
        await sweeper.sweep("periodic")
        try:  # a lost doorbell: the worker reads the head of its order, and its window then holds g-9
            await until(lambda: cmd("g", 9).item_id in window.ids, timeout=2.0)
            lost = all(limit <= HEAD_READ for _, limit in rec.store.reads[reads:])
        except AssertionError:
            lost = False
        stop(d)
        return held, lost, d.misses("g", None)

    held, lost, unknown = run_virtual(scenario())  # the 2 s allowed for the head read are virtual
    assert not held, "a worker holding the overdue item was made to re-read its queue"
    assert lost, "a worker that would never reach the overdue item was not told"
    assert unknown, "an item the sweep could not name is treated as missed"


class _GatedReads(InMemoryGuidQueue):
    """Reads answer once ``gate`` is set, as of then or (``as_of_start``: a statement's
    snapshot) as of when they began; ``asked`` counts the reads begun."""

    def __init__(self, as_of_start: bool = False) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.asked = 0
        self.as_of_start = as_of_start

    async def next_ready(self, guid: str, exclude: Sequence[str], limit: int) -> Ready:
        answer = await super().next_ready(guid, exclude, limit) if self.as_of_start else None
        self.asked += 1
        await self.gate.wait()
        return answer if answer is not None else await super().next_ready(guid, exclude, limit)


def test_doorbells_that_ring_while_a_guid_reads_its_queue_cost_no_second_read() -> None:
    """A sender starting, or taking a partition, reads every guid its sweep finds while those
    guids' commands are still being consumed. A doorbell for an item that read returned says
    nothing new: counted as a ring, it cost every guid a second read of its queue after its
    first send (10,000 extra reads in the first rounds at 10,000 guids)."""
    async def scenario() -> list[str]:
        store = _GatedReads()
        d, rec, _ = dispatcher(FAST, executor=Recorder(store))
        items = [cmd("g", n) for n in range(4)]
        store.add(*items)
        d.poke("g")  # the sweep found its work
        await until(lambda: store.asked == 1)
        for c in items:
            d.ring("g", c)  # its commands, consumed while the read runs
        store.gate.set()
        await until(lambda: len(rec.sent) == 4 and "g" not in d.guids)
        return [g for g, _ in store.reads]

    assert asyncio.run(scenario()) == ["g"], "the guid read its queue again though it held all of it"


def test_releasing_stops_the_guids_that_went_leaves_their_work_in_postgres_and_keeps_the_others() -> None:
    async def scenario() -> tuple[int, list[str], list[str], set[str]]:
        leases = GrantAll()
        d, rec, table = dispatcher(FAST, leases)
        table["slow"] = Limits(min_interval_s=3600.0, jitter_s=0.0)
        for n in range(3):
            ring(d, rec.store, cmd("slow", n))
        ring(d, rec.store, cmd("idle", 0))
        await until(lambda: len(rec.sent) == 2)  # slow sent one and waits; idle sent its item and ended
        await d.release(lambda g: g in {"slow", "idle"})
        await until(lambda: "slow" not in d.guids)
        left = sorted(name(i) for i, c in rec.store.pending.items())
        return d.buffered, left, sorted(leases.released), set(d.leases.held)

    buffered, left, released, held = asyncio.run(scenario())
    assert buffered == 0
    assert left == ["slow-1", "slow-2"], "the dropped items stay pending for the next owner"
    assert released == ["idle", "slow"], "idle guids give their leases back too"
    assert held == set()


def test_what_the_sender_kept_of_the_guids_that_went_goes_with_their_leases() -> None:
    """A guid's pacer and lease bookkeeping outlive its workers (spacing survives an idle
    spell), so they are dropped when the guid's partition goes: kept, they grew with every
    guid that ever hashed to the sender. Whoever takes the guid next, this sender included,
    resumes its pacing from the lease row."""
    async def scenario() -> tuple[set[str], set[str], set[str], set[str]]:
        d, rec, _ = dispatcher(FAST, GrantAll())
        for g in ("went", "stays"):
            ring(d, rec.store, cmd(g, 0))
        await until(lambda: len(rec.sent) == 2 and not d.guids)  # both sent, and their workers ended
        await d.release(lambda g: g == "went")
        return set(d.paces), set(d.crew.leases.idle_since), set(d.leases.released_at), set(d.leases.held)

    paces, idle, released_at, held = asyncio.run(scenario())
    assert paces == {"stays"}, "the pacer of a guid that went was kept"
    assert idle == {"stays"}, "a guid that went is still counted as idle here"
    assert released_at == set(), "the epoch a guid that went was given back at was kept"
    assert held == {"stays"}


def test_releasing_when_nothing_is_queued_is_harmless() -> None:
    async def scenario() -> int:
        d, _, _ = dispatcher(Limits())
        await d.release(lambda g: True)
        return d.buffered

    assert asyncio.run(scenario()) == 0


class Faulty(Recorder):
    """Raises the next of ``errors[item name]`` at each attempt, then executes."""

    def __init__(self, errors: dict[str, list[BaseException]], submit_first: bool = False) -> None:
        super().__init__()
        self.errors = errors
        self.submit_first = submit_first
        self.attempts: dict[str, int] = {}

    async def execute(self, c: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        n = name(c.item_id)
        self.attempts[n] = self.attempts.get(n, 0) + 1
        left = self.errors.get(n)
        if left:
            if self.submit_first:
                self.store.pending.pop(c.item_id, None)  # submitted, then the failure
            raise left.pop(0)
        return await super().execute(c, before_call)


def run_faulty(executor: Faulty, items: int, **kw: Any) -> tuple[Faulty, int]:
    errors = 0

    def count() -> None:
        nonlocal errors
        errors += 1

    async def scenario() -> None:
        d, rec, _ = dispatcher(FAST, executor=executor, on_internal_error=count, error_backoff_s=0.01, **kw)
        for n in range(items):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: not d.guids)

    asyncio.run(scenario())
    return executor, errors


def test_an_item_its_database_refuses_fails_alone_with_bad_params_and_its_guid_goes_on() -> None:
    ex, errors = run_faulty(Faulty({"g-1": [UnstorableItem("DataError: index row size 9000 exceeds maximum")]}), 3)
    assert [i for _, i, _ in ex.sent] == ["g-0", "g-2"]
    (failure,) = ex.store.failed.values()
    assert failure[0] == "bad_params" and "index row size" in failure[1]
    assert ex.attempts["g-1"] == 1 and errors == 0, "the item's own fault: not retried, not an internal error"


def test_a_command_that_cannot_be_sent_as_it_stands_is_only_a_doorbell() -> None:
    async def scenario() -> tuple[list[str], dict[str, tuple[str, str]]]:
        d, rec, _ = dispatcher(FAST)
        clean = cmd("g", 0)
        rec.store.add(clean)
        d.ring("g", clean.model_copy(update={"content": "poisoned\x00"}))  # a corrupted command on Kafka
        await until(lambda: not d.guids)
        return [i for _, i, _ in rec.sent], rec.store.failed

    sent, failed = asyncio.run(scenario())
    assert sent == ["g-0"] and failed == {}, "the row in Postgres was sent, not the command"


def test_an_item_that_cannot_be_sent_as_stored_fails_with_a_reason() -> None:
    async def scenario() -> tuple[list[str], dict[str, tuple[str, str]]]:
        d, rec, _ = dispatcher(FAST)
        rec.store.add(cmd("g", 0, content="lone \ud800 surrogate"), cmd("g", 1))
        d.ring("g")
        await until(lambda: not d.guids)
        return [i for _, i, _ in rec.sent], rec.store.failed

    sent, failed = asyncio.run(scenario())
    assert sent == ["g-1"]
    assert [f[0] for f in failed.values()] == ["bad_params"] and "content is not valid text" in next(iter(failed.values()))[1]


def test_a_programming_error_is_retried_then_fails_its_item_and_the_sender_goes_on() -> None:
    ex, errors = run_faulty(Faulty({"g-1": [RuntimeError("boom")] * 9}), 3, error_attempts=3)
    assert sorted(i for _, i, _ in ex.sent) == ["g-0", "g-2"]
    assert ex.attempts["g-1"] == 3 and errors == 3
    (failure,) = ex.store.failed.values()
    assert failure == ("bad_params", "internal error: RuntimeError: boom")


def test_a_programming_error_that_passes_goes_unnoticed_by_the_item() -> None:
    ex, errors = run_faulty(Faulty({"g-0": [KeyError("once"), KeyError("twice")]}), 1, error_attempts=3)
    assert [i for _, i, _ in ex.sent] == ["g-0"] and ex.store.failed == {} and errors == 2


def test_an_item_submitted_before_a_programming_error_is_left_to_the_reconciler() -> None:
    ex, errors = run_faulty(Faulty({"g-0": [RuntimeError("after submitted")] * 9}, submit_first=True), 2,
                            error_attempts=2)
    assert ex.store.failed == {}, "a submitted item is verified, never failed blindly"
    assert [i for _, i, _ in ex.sent] == ["g-1"] and errors == 2


def test_a_database_outage_is_retried_and_never_fails_the_item() -> None:
    ex, errors = run_faulty(Faulty({"g-0": [TransientError("down")] * 4}), 2, error_attempts=2)
    assert sorted(i for _, i, _ in ex.sent) == ["g-0", "g-1"] and ex.store.failed == {} and errors == 0


def test_guids_asking_for_their_lease_at_once_are_granted_in_one_round_trip() -> None:
    store = GrantAll(held_elsewhere={"g-7"})
    leases = GuidLeases(store, "me", 30.0)

    async def go() -> list[object]:
        return list(await asyncio.gather(*(leases.acquire(f"g-{i}") for i in range(50))))

    got = asyncio.run(go())
    assert store.asked == 1
    assert [g is None for g in got] == [i == 7 for i in range(50)]
    assert set(leases.held) == {f"g-{i}" for i in range(50)} - {"g-7"}


class SlowGrant(GrantAll):
    """Grants after a moment, and records releases."""

    def __init__(self) -> None:
        super().__init__()
        self.granted = asyncio.Event()
        self.released: list[str] = []

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        await asyncio.sleep(0.01)  # the statement is on its way when the worker is stopped
        got = await super().acquire(guids, owner)
        self.granted.set()
        return got

    async def release(self, guids: Sequence[str], owner: str) -> int:
        self.released.extend(guids)
        return len(guids)


def test_a_lease_taken_for_a_worker_stopped_meanwhile_is_given_back() -> None:
    store = SlowGrant()
    leases = GuidLeases(store, "me", 30.0)

    async def go() -> None:
        worker = asyncio.ensure_future(leases.acquire("g-1"))
        await asyncio.sleep(0)
        worker.cancel()  # the partition was revoked while the lease was being taken
        await asyncio.wait_for(store.granted.wait(), 5)
        await until(lambda: store.released)

    asyncio.run(go())
    assert store.released == ["g-1"]
    assert "g-1" not in leases.held


class GatedRecorder(Recorder):
    """Executes only when let through: a guid stays 'executing' as long as the test likes."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        await self.gate.wait()
        return await super().execute(cmd, before_call)


def test_a_guid_executing_when_its_partition_goes_gives_its_lease_back_after_the_item() -> None:
    store = SlowGrant()
    rec = GatedRecorder()
    db = rec.store
    owned = {"g"}
    d = Dispatcher(rec, lambda g: Limits(min_interval_s=0, jitter_s=0),  # type: ignore[arg-type]  # a recording executor: see dispatching.py
                   GuidLeases(store, "me", 30.0), db, owns=lambda g: g in owned)

    async def go() -> None:
        ring(d, db, cmd("g", 0))
        await until(lambda: "g" in d.guids and d.guids["g"].executing is not None)
        owned.clear()  # its partition was revoked
        await d.release(lambda g: g not in owned, timeout_s=0.05)  # gives up waiting for the item in hand
        assert store.released == []  # in hand: the lease stays while the item runs
        rec.gate.set()
        await until(lambda: store.released == ["g"])
        await until(lambda: not d.crew.leases._releasing)  # the hand-back, done

    asyncio.run(go())
    assert "g" not in d.leases.held
    # Forgotten as a release forgets it: whoever takes the guid next resumes from the lease row.
    assert "g" not in d.paces, "the pacer of a guid handed back was kept"
    assert "g" not in d.leases.released_at, "the epoch a guid handed back was given back at was kept"
    assert "g" not in d.crew.leases.idle_since




class _Timed(Recorder):
    """A recorder whose gateway answers ``answer_s`` after its call begins and whose
    confirmation takes ``confirm_s`` more, both on the recorder's stepped clock (give the
    dispatcher the same clock): ``sent`` has when each call began, ``answered`` when each
    answer came and ``confirmed`` when each confirmation ended."""

    def __init__(self, answer_s: float, confirm_s: float) -> None:
        super().__init__()
        self.answer_s, self.confirm_s = answer_s, confirm_s
        self.answered: list[float] = []
        self.confirmed: list[float] = []

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        self.store.pending.pop(cmd.item_id, None)
        if before_call is not None:
            await before_call()
        self.sent.append((cmd.guid, name(cmd.item_id), self.clock()))
        self.clock.advance(self.answer_s)
        answered = self.clock()
        self.answered.append(answered)
        self.clock.advance(self.confirm_s)
        self.confirmed.append(self.clock())
        await asyncio.sleep(0)
        return Executed("confirmed", True, answered_mono=answered)


def _timed_calls(timed: _Timed, interval_s: float, sends: int) -> list[float]:
    """When each of ``sends`` items of one guid was called, ``interval_s`` apart."""
    async def scenario() -> list[float]:
        d, _, _ = dispatcher(Limits(min_interval_s=interval_s, jitter_s=0.0, online_reserve=0.0), executor=timed,
                             clock=timed.clock)
        for n in range(sends):
            ring(d, timed.store, cmd("g", n))
        await until(lambda: len(timed.sent) == sends)
        stop(d)
        return [t for _, _, t in timed.sent]

    return run_virtual(scenario())


def test_a_guid_is_spaced_from_its_gateway_answers_not_from_the_calls_start() -> None:
    timed = _Timed(answer_s=0.15, confirm_s=0.0)
    calls = _timed_calls(timed, interval_s=0.3, sends=4)
    gaps = [call - answer for answer, call in zip(timed.answered, calls[1:], strict=False)]
    # Counted from the call's start, the next call would begin 0.3 - 0.15 s after the answer.
    assert len(gaps) == 3 and all(abs(gap - 0.3) <= EPS for gap in gaps), \
        f"the next call did not come one interval after the answer: {gaps}"


def test_a_slow_confirmation_does_not_stretch_a_guids_interval() -> None:
    """The confirmation takes ten intervals of the clock: the next call is due at once when it
    ends. Counted from its end, the next call would come a whole interval later."""
    timed = _Timed(answer_s=0.0, confirm_s=30.0)
    calls = _timed_calls(timed, interval_s=3.0, sends=2)
    assert abs(calls[1] - timed.confirmed[0]) <= EPS, \
        f"the confirmation stretched the interval: called {calls[1] - timed.confirmed[0]:.3f} s after it ended"


def _claims_and_calls(ahead_s: float) -> tuple[list[float], list[float], list[float]]:
    """Three items of one guid, 0.6 s apart; the first claim takes 0.3 s, the next ones 0.05:
    when each was claimed, when its gateway call started, and each send's delay as the sender
    measures it, on virtual time."""
    async def scenario() -> tuple[list[float], list[float], list[float]]:
        rec, delays = Recorder(claims=(0.3, 0.05)), []
        d, _, _ = dispatcher(Limits(min_interval_s=0.6, jitter_s=0.0, online_reserve=0.0), executor=rec,
                             claim_ahead_s=ahead_s, on_send_delay=lambda lane, s: delays.append(s), clock=rec.clock)
        for n in range(3):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 3)
        stop(d)
        return [t for _, t in rec.claimed], [t for _, _, t in rec.sent], delays

    return run_virtual(scenario())


def test_an_item_is_claimed_before_its_guids_gap_ends_and_called_no_sooner() -> None:
    claims, calls, delays = _claims_and_calls(ahead_s=0.4)
    # Claimed the claims' recent peak before the gap's end (0.3 s, learnt from the first; then
    # 0.27 as it decays): the faster claims then wait for it, and the gateway never sees the
    # guid sooner.
    leads = [call + 0.6 - claim for call, claim in zip(calls, claims[1:], strict=False)]
    assert all(abs(lead - want) <= EPS for lead, want in zip(leads, (0.3, 0.27), strict=True)), (calls, claims)
    gaps = [b - a for a, b in pairwise(calls)]
    assert all(abs(gap - 0.6) <= EPS for gap in gaps), f"the calls were not one interval apart: {gaps}"
    assert abs(delays[0] - 0.3) <= EPS and all(abs(d) <= EPS for d in delays[1:]), \
        f"claims ahead hide the claim's write: {delays}"


def test_without_a_claim_ahead_each_call_comes_a_claims_write_after_the_gap() -> None:
    claims, calls, delays = _claims_and_calls(ahead_s=0.0)
    assert all(abs(claim - (call + 0.6)) <= EPS for call, claim in zip(calls, claims[1:], strict=False)), (calls, claims)
    assert all(abs(b - a - 0.65) <= EPS for a, b in pairwise(calls)), calls
    assert len(delays) == 3 and abs(delays[0] - 0.3) <= EPS and all(abs(d - 0.05) <= EPS for d in delays[1:]), delays


def test_a_batch_item_claimed_ahead_gives_its_turn_to_an_online_item_that_comes_during_the_gap() -> None:
    """Without it the auto-reply would wait for the claimed campaign send and one more gap."""
    async def scenario() -> tuple[list[tuple[str, float]], list[str]]:
        rec = Recorder(claims=(0.3, 0.05))
        d, _, _ = dispatcher(Limits(min_interval_s=0.6, jitter_s=0.0, online_reserve=0.0), executor=rec,
                             claim_ahead_s=0.4, clock=rec.clock)
        for n in range(3):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.claimed) == 2)  # g-1 claimed ahead, waiting out the gap after g-0
        assert [i for _, i, _ in rec.sent] == ["g-0"]
        ring(d, rec.store, cmd("g", 99, priority=1))
        await until(lambda: len(rec.sent) == 2)
        for c in rec.yielded:
            d.ring(c.guid, c)  # the reconciler publishes a yielded item's command again
        await until(lambda: len(rec.sent) == 4)
        stop(d)
        return [(i, t) for _, i, t in rec.sent], [name(c.item_id) for c in rec.yielded]

    sent, yielded = run_virtual(scenario())
    assert yielded == ["g-1"]
    # The reply next; the item that gave its turn up goes round again, maybe after the next one.
    assert [i for i, _ in sent][:2] == ["g-0", "g-99"] and sorted(i for i, _ in sent[2:]) == ["g-1", "g-2"]
    # Each call one interval after the one before: the reply at the end of the gap it came in.
    gaps = [b - a for a, b in pairwise(t for _, t in sent)]
    assert all(abs(gap - 0.6) <= EPS for gap in gaps), f"the calls were not one interval apart: {gaps}"


def test_an_online_item_does_not_take_the_turn_of_an_online_item_claimed_ahead() -> None:
    async def scenario() -> tuple[list[str], list[ItemCommand]]:
        rec = Recorder(claims=(0.3, 0.05))
        d, _, _ = dispatcher(Limits(min_interval_s=0.6, jitter_s=0.0, online_reserve=0.0), executor=rec,
                             claim_ahead_s=0.4, clock=rec.clock)
        for n in range(2):
            ring(d, rec.store, cmd("g", n, priority=1))
        await until(lambda: len(rec.claimed) == 2)
        ring(d, rec.store, cmd("g", 99, priority=1))
        await until(lambda: len(rec.sent) == 3)
        stop(d)
        return [i for _, i, _ in rec.sent], rec.yielded

    sent, yielded = run_virtual(scenario())
    assert sent == ["g-0", "g-1", "g-99"] and yielded == []


@pytest.mark.parametrize(("interval_s", "ahead_s", "spare_s"), [(10.0, 0.05, 9.95), (0.0, 0.05, -0.05)])
def test_a_confirmation_may_take_what_its_guid_has_before_its_next_claim(
        interval_s: float, ahead_s: float, spare_s: float) -> None:
    """The guid's least interval less the claim's lead: at a human pace the confirmation may
    wait for other guids' steps; flat out it has nothing to spare."""
    async def scenario() -> list[float]:
        rec = Recorder(claims=(ahead_s,))
        d, _, _ = dispatcher(Limits(min_interval_s=interval_s, jitter_s=0.0, online_reserve=0.0), executor=rec,
                             claim_ahead_s=1.0, clock=rec.clock)
        ring(d, rec.store, cmd("g", 0))
        await until(lambda: len(rec.sent) == 1)
        rec.clock.advance(interval_s)  # the gap, without waiting for it
        ring(d, rec.store, cmd("g", 1))
        await until(lambda: len(rec.spares) == 2)
        stop(d)
        return rec.spares

    spares = asyncio.run(scenario())
    # The first claim has nothing to learn from yet (lead 0); the second knows the first's time.
    assert spares[0] == pytest.approx(interval_s) and spares[1] == pytest.approx(spare_s), spares


def _reads_at(rec: Recorder, d: Dispatcher, guid: str, limits: Limits) -> list[tuple[float, bool]]:
    """Record, for each read of ``guid``'s queue, when it was and whether the guid was still
    waiting out its pacing gap then."""
    reads: list[tuple[float, bool]] = []
    real = rec.store.next_ready

    async def next_ready(guid_read: str, exclude: Sequence[str], limit: int) -> Ready:
        work = d.guids.get(guid_read)
        now = d.crew.clock()
        waiting = work is not None and work.pacer.ready_at("batch", limits, now, time.time()) > now
        if guid_read == guid:
            reads.append((now, waiting))
        return await real(guid_read, exclude, limit)

    rec.store.next_ready = next_ready  # type: ignore[method-assign,assignment]
    return reads


def _scheduled_joins_during_the_gap(doorbell: bool) -> tuple[list[str], float, list[tuple[float, bool]], float]:
    """A guid sends a campaign 1.5 s apart; an item of another job is due 0.6 s after its
    first send — told by its doorbell, or (doorbell lost) only by the guid's read of Postgres.
    On a real loop: the item comes due by the wall clock, which virtual time does not move."""
    async def scenario() -> tuple[list[str], float, list[tuple[float, bool]], float]:
        limits = Limits(min_interval_s=1.5, jitter_s=0.0, online_reserve=0.0)
        d, rec, _ = dispatcher(limits, cap=4)
        reads = _reads_at(rec, d, "g", limits)
        for n in range(20):
            rec.store.add(cmd("g", n, job="campaign"))
        due_mono = d.crew.clock() + 0.6
        later = cmd("g", 100, job="scheduled", not_before=datetime.now(UTC) + timedelta(seconds=0.6))
        if doorbell:
            d.ring("g")
            await until(lambda: len(rec.sent) == 1)
            ring(d, rec.store, later)
        else:
            rec.store.add(later)
            d.ring("g")  # the campaign's doorbell only: the read says when the scheduled item is due
        await until(lambda: len(rec.sent) == 2, timeout=10)
        stop(d)
        return [i for _, i, _ in rec.sent], due_mono, reads, rec.sent[1][2]

    return asyncio.run(scenario())


def test_scheduled_work_coming_due_is_read_while_the_guid_waits_out_its_gap_and_goes_next() -> None:
    sent, due, reads, second_at = _scheduled_joins_during_the_gap(doorbell=True)
    assert sent[1] == "g-100", f"the scheduled item took the guid's next send: {sent}"
    at_due = [(t, waiting) for t, waiting in reads if t >= due]
    assert at_due and at_due[0][1], "re-read when it came due, while the guid still waited out its gap"
    assert at_due[0][0] < second_at


def test_a_scheduled_item_whose_doorbell_was_lost_wakes_its_guid_at_its_time_without_a_sweep() -> None:
    sent, due, reads, _ = _scheduled_joins_during_the_gap(doorbell=False)
    assert sent[1] == "g-100", f"the scheduled item took the guid's next send: {sent}"
    at_due = [(t, waiting) for t, waiting in reads if t >= due]
    assert at_due and at_due[0][1], "the read that gave due_in_s woke the guid when the item came due"


def test_a_scheduled_item_rung_while_its_guid_reads_its_queue_goes_with_the_guids_next_send_once_due() -> None:
    """A ticket's row commits while its guid's read of Postgres is under way, after that read's
    snapshot, and its doorbell (due in 0.4 s) arrives before the read answers. The read says
    nothing is scheduled; had that answer erased the doorbell's due time, the ticket would wait
    until the window ran down to half and topped up (10 sends here, 25 at the default window
    of 50: half a minute at one batch send per 1.25 s)."""
    async def scenario() -> tuple[list[str], int]:
        store = _GatedReads(as_of_start=True)
        d, rec, _ = dispatcher(Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.0), cap=20,
                               executor=Recorder(store))
        store.add(*[cmd("g", n, job="campaign") for n in range(40)])
        d.poke("g")
        await until(lambda: store.asked == 1)
        ticket = cmd("g", 100, priority=2, job="ticket", not_before=datetime.now(UTC) + timedelta(seconds=0.4))
        ring(d, store, ticket)
        store.gate.set()
        await until(lambda: "g-100" in [i for _, i, _ in rec.sent], timeout=15)
        due = ticket.not_before.timestamp() if ticket.not_before else 0.0
        sent_at = {i: t for _, i, t in rec.sent}
        stop(d)
        offset = time.time() - time.monotonic()
        after_due = [i for i, t in sent_at.items() if t + offset >= due and i != "g-100"]
        return [i for _, i, _ in rec.sent], len([i for i in after_due if sent_at[i] < sent_at["g-100"]])

    sent, campaign_sends_after_due = asyncio.run(scenario())
    assert campaign_sends_after_due <= 1, (
        f"{campaign_sends_after_due} campaign sends went out after the ticket came due and before it: {sent}")


def test_a_doorbell_wakes_a_guid_waiting_out_its_gap_to_re_read_before_its_next_send() -> None:
    async def scenario() -> tuple[list[str], list[tuple[float, bool]], float, float]:
        limits = Limits(min_interval_s=1.5, jitter_s=0.0, online_reserve=0.0)
        d, rec, _ = dispatcher(limits, cap=4)
        reads = _reads_at(rec, d, "g", limits)
        for n in range(20):
            rec.store.add(cmd("g", n, job="big"))
        d.ring("g")
        await until(lambda: len(rec.sent) == 1)
        await asyncio.sleep(0)
        rung_at = d.crew.clock()
        ring(d, rec.store, cmd("g", 100, job="small"))
        await until(lambda: len(rec.sent) == 2, timeout=10)
        stop(d)
        return [i for _, i, _ in rec.sent], [r for r in reads if r[0] >= rung_at], rung_at, rec.sent[1][2]

    sent, reads, rung_at, second_at = run_virtual(scenario())
    assert sent[1] == "g-100", f"the new job took the guid's next send: {sent}"
    # On virtual time the doorbell's read comes at the very moment it rang, 1.5 s before the send.
    assert reads and reads[0][1] and abs(reads[0][0] - rung_at) <= EPS and reads[0][0] < second_at, \
        f"re-read on the doorbell, during the gap: rung at {rung_at}, reads {reads}, sent at {second_at}"


def test_doorbells_that_change_nothing_a_waiting_guid_acts_on_do_not_wake_it() -> None:
    async def scenario() -> tuple[int, list[str]]:
        d, rec, _ = dispatcher(Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0), cap=10)
        for n in range(100):
            rec.store.add(cmd("g", n, job="deep"))
        d.ring("g")
        await until(lambda: len(rec.sent) == 1)
        passes = 0
        worker = d.guids["g"]
        real = worker._sleep

        async def counted(seconds: float) -> None:
            nonlocal passes
            passes += 1
            await real(seconds)

        worker._sleep = counted  # type: ignore[method-assign]
        for n in range(100, 300):  # a deep job's doorbells while its guid waits out its gap
            ring(d, rec.store, cmd("g", n, job="deep"))
            await asyncio.sleep(0)
        ring(d, rec.store, cmd("g", 999, job="new"))  # this one sorts ahead of the window
        await until(lambda: len(rec.sent) == 2)
        stop(d)
        return passes, [i for _, i, _ in rec.sent]

    passes, sent = run_virtual(scenario())
    assert passes <= 5, f"the guid's worker woke {passes} times for 200 doorbells it had nothing to do about"
    assert sent[1] == "g-999", f"the doorbell that mattered still woke it: {sent}"


def test_when_its_order_changes_a_guid_reads_the_head_at_once_and_tops_up_after_its_next_send() -> None:
    async def scenario() -> tuple[list[tuple[float, int]], list[tuple[str, str, float]], float]:
        d, rec, _ = dispatcher(Limits(min_interval_s=0.6, jitter_s=0.0, online_reserve=0.0), cap=20)
        for n in range(100):
            rec.store.add(cmd("g", n, job="big"))
        d.ring("g")
        await until(lambda: len(rec.sent) == 1)
        reads: list[tuple[float, int]] = []
        real = rec.store.next_ready

        async def timed(guid: str, exclude: Sequence[str], limit: int) -> Ready:
            reads.append((d.crew.clock(), limit))
            return await real(guid, exclude, limit)

        rec.store.next_ready = timed  # type: ignore[method-assign]
        rung_at = d.crew.clock()
        ring(d, rec.store, cmd("g", 999, job="new"))  # a new job: it sorts ahead of the window
        await until(lambda: len(rec.sent) == 3, timeout=10)
        stop(d)
        return reads, rec.sent, rung_at

    reads, sent, rung_at = run_virtual(scenario())
    assert sent[1][1] == "g-999", f"the new job went next: {sent}"
    assert reads[0][1] == HEAD_READ and abs(reads[0][0] - rung_at) <= EPS, \
        f"at once (rung at {rung_at}), only the head of the order: {reads}"
    assert len(reads) >= 2 and reads[1][0] >= sent[1][2], f"the top-up after the next send: {reads}"


class _Unanswered(_Timed):
    """The first send times out (in doubt: the gateway may act on it late); the rest are answered."""

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        done = await super().execute(cmd, before_call)
        return Executed("in_doubt", True, answered_mono=done.answered_mono) if len(self.sent) == 1 else done


def test_a_send_left_without_an_answer_slows_the_guid_before_its_next_send() -> None:
    async def scenario() -> float:
        timed = _Unanswered(answer_s=0.0, confirm_s=0.0)
        d, _, _ = dispatcher(Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=3.0),
                             executor=timed)
        for n in range(2):
            ring(d, timed.store, cmd("g", n))
        await until(lambda: len(timed.sent) == 2)
        stop(d)
        return timed.sent[1][2] - timed.answered[0]

    gap = run_virtual(scenario())
    # Slowed by the rate-limit penalty (×3); spaced as after an answered send, the next call
    # would come 0.2 s after the timeout.
    assert abs(gap - 0.6) <= EPS, f"the next send followed a send left in doubt after {gap:.3f} s, not 0.6 s"



class _RateLimited(_Timed):
    """The first send is rate-limited by the gateway; the rest are answered."""

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        done = await super().execute(cmd, before_call)
        return Executed("rate_limited", True, answered_mono=done.answered_mono) if len(self.sent) == 1 else done


def test_a_rate_limit_penalty_is_written_to_the_lease_row_at_once_and_cleared_once_clean_sends_bring_it_back() -> None:
    async def scenario() -> tuple[dict[str, Slowdown], dict[str, Slowdown], dict[str, Slowdown]]:
        timed, store = _RateLimited(answer_s=0.0, confirm_s=0.0), GrantAll()
        d, _, _ = dispatcher(Limits(min_interval_s=0.05, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=4.0,
                                    penalty_decay=0.5), store=store, executor=timed)
        leases = d.crew.leases.leases
        ring(d, timed.store, cmd("g", 0))
        # The rise is written by itself, without waiting for the next renewal.
        await until(lambda: len(timed.sent) == 1 and "g" in store.penalized)
        slowed = dict(store.penalized)
        for n in range(1, 4):  # 4 → 2 → 1
            ring(d, timed.store, cmd("g", n))
        await until(lambda: len(timed.sent) == 4 and leases.penalties.get("g", (0, 0.0))[1] == 1.0)
        decayed = dict(store.penalized)  # a fall waits for the renewal's write
        await leases.write_penalties()
        stop(d)
        return slowed, decayed, dict(store.penalized)

    slowed, decayed, recovered = asyncio.run(scenario())
    assert slowed == {"g": (1, 4.0, None)}, f"the rate limit's penalty, under the epoch held: {slowed}"
    assert decayed == slowed, f"clean sends' decay is left to the renewal, the row erring on the slow side: {decayed}"
    assert recovered == {"g": (1, 1.0, None)}, f"back to its own pace, the row's penalty is cleared: {recovered}"


@pytest.mark.parametrize(("claim_ahead_s", "quiet_s"), [(0.0, 0.5), (0.3, 0.5), (0.3, QUIET_WAIT_S + 0.5)],
                         ids=["picked-when-due", "claimed-ahead-short-quiet", "claimed-ahead-long-quiet"])
def test_a_quiet_a_renewal_finds_on_a_held_guid_holds_its_next_call(claim_ahead_s: float, quiet_s: float) -> None:
    """Another caller (a reconciler's lookup) left a quiet on a held guid's lease row: the
    renewal passes it on, and the guid's next call waits for its end, even one already claimed
    ahead of its gap: that one waits for a quiet ending less than QUIET_WAIT_S after its turn,
    and gives its turn up to a longer one (it is picked again after the quiet)."""
    async def scenario() -> tuple[float, list[float], bool]:
        store = InMemoryGuidLeases(ttl=30)
        d, rec, _ = dispatcher(Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.0), store=store,
                               claim_ahead_s=claim_ahead_s)
        d.crew.ahead.estimate_s = claim_ahead_s  # claims seen to take that long: the next is claimed that far ahead
        for n in range(3):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 1)
        store.rows["g"].quiet_until = store.now + quiet_s
        learned = rec.clock()  # at the latest: the renewal's hush counts from a moment after
        await d.crew.leases.leases.renew()
        await until(lambda: len(rec.sent) == 2 or bool(rec.yielded), 10)
        for given_up in rec.yielded:  # pending again; the reconciler's doorbell for it
            ring(d, rec.store, given_up)
        await until(lambda: len(rec.sent) == 2, 10)
        stop(d)
        return learned, [t for _, _, t in rec.sent], bool(rec.yielded)

    learned, sent, yielded = run_virtual(scenario())
    assert sent[1] >= learned + quiet_s - 1e-6, f"called {sent[1] - learned:.3f} s into a quiet of {quiet_s} s"
    assert yielded == (quiet_s > QUIET_WAIT_S), "only a long quiet takes a claimed item's turn"


def test_a_batch_item_waiting_for_a_short_quiet_gives_its_turn_to_an_online_item_that_comes_meanwhile() -> None:
    """Its claim found a quiet ending half a second after its turn; an auto-reply rung during
    that wait goes at the quiet's end, not behind the campaign send and one more gap."""
    async def scenario() -> tuple[float, list[tuple[str, float]], list[str]]:
        rec = Recorder()
        d, _, _ = dispatcher(Limits(min_interval_s=0.6, jitter_s=0.0, online_reserve=0.0), executor=rec)
        for n in range(2):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 1)
        quiet_end = rec.sent[0][2] + 0.6 + 0.5
        rec.quiets["g"] = quiet_end  # on the row before g-1's claim
        await until(lambda: len(rec.claimed) == 2)  # g-1 claimed, waiting for the quiet
        ring(d, rec.store, cmd("g", 99, priority=1))
        await until(lambda: len(rec.sent) == 2)
        for c in rec.yielded:
            d.ring(c.guid, c)  # the reconciler publishes a yielded item's command again
        await until(lambda: len(rec.sent) == 3)
        stop(d)
        return quiet_end, [(i, t) for _, i, t in rec.sent], [name(c.item_id) for c in rec.yielded]

    quiet_end, sent, yielded = run_virtual(scenario())
    assert yielded == ["g-1"]
    assert [i for i, _ in sent] == ["g-0", "g-99", "g-1"]
    assert abs(sent[1][1] - quiet_end) <= EPS, f"the reply went {sent[1][1] - quiet_end:.3f} s from the quiet's end"
    assert sent[2][1] >= sent[1][1] + 0.6 - EPS


@pytest.mark.parametrize("claim_ahead_s", [0.0, 0.3], ids=["picked-when-due", "claimed-ahead"])
@pytest.mark.parametrize("quiet_s", [0.5, QUIET_WAIT_S + 2.0], ids=["short-quiet", "long-quiet"])
def test_a_quiet_another_caller_left_on_the_guid_s_row_holds_the_call_its_claim_finds_it_at(
        claim_ahead_s: float, quiet_s: float) -> None:
    """No renewal comes: the claim itself finds the quiet another caller left on the guid's
    row (begin_send gives what is left of it). The claimed item's call waits for a short one;
    it gives its turn up to a long one and is sent after it; the guid's next item too."""
    async def scenario() -> tuple[float, list[float], int]:
        store = InMemoryGuidLeases(ttl=30)
        d, rec, _ = dispatcher(Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.0), store=store,
                               claim_ahead_s=claim_ahead_s)
        d.crew.ahead.estimate_s = claim_ahead_s
        ring(d, rec.store, cmd("g", 0))
        await until(lambda: len(rec.sent) == 1)
        learned = rec.clock()
        rec.quiets["g"] = learned + quiet_s  # after the renewal of the take: seen at the next claim only
        for n in range(1, 3):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 3 or bool(rec.yielded), 10)
        for given_up in rec.yielded:  # pending again; the reconciler's doorbell for it
            ring(d, rec.store, given_up)
        await until(lambda: len(rec.sent) == 3, 10)
        stop(d)
        return learned, [t for _, _, t in rec.sent], len(rec.yielded)

    learned, sent, yielded = run_virtual(scenario())
    assert sent[1] >= learned + quiet_s - 1e-6, f"called {sent[1] - learned:.3f} s into a quiet of {quiet_s} s"
    assert sent[2] >= sent[1] + 0.2 - 1e-6, "the guid's pace goes on from the call after the quiet"
    assert yielded == (1 if quiet_s > QUIET_WAIT_S else 0), f"{yielded} turns given up to a quiet of {quiet_s} s"
