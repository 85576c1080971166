"""In-doubt verification runs apart from the tail, bounded, with a deadline per lookup."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.failures import Hushed
from pacer_reconciler.core import Reconciler, run_rounds
from pacer_reconciler.domain.verification import verdict
from pacer_reconciler.ports import InDoubt, Position
from pacer_reconciler.verifier import QUIET_GRACE_S, QUIET_HOLD, READ_PAST, Verifier
from tests.unit.dispatching import now, run_virtual, until

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE = timedelta(seconds=300)


class Lookup:
    """Answers per idem_key: True/False/None, "hang" (never answers) or "raise"."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.never = asyncio.Event()

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        self.asked.append(idem_key)
        answer = self.answers[idem_key]
        if answer == "hang":
            await self.never.wait()
        if answer == "raise":
            raise RuntimeError("gateway client bug")
        return answer  # type: ignore[return-value]  # the fake answers True/False/None; 'hang'/'raise' never return


class Sweeps:
    """In-doubt items and the domain's verdict, in memory."""

    def __init__(self, items: list[InDoubt]) -> None:
        self.items = {i.item_id: i for i in items}
        self.resolved: dict[str, tuple[bool | None, str | None]] = {}

    async def sweep(self, kind: str, limit: int) -> int:
        return 0

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        return list(self.items.values())[:limit]

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        v = verdict(found, item.since, now, DEADLINE)
        self.resolved[item.item_id] = (found, v.to.value if v else None)
        if v is not None:
            del self.items[item.item_id]
        return v.to.value if v else None


class EmptyLog:
    """An event log with nothing new: each tail round reads and returns at once."""

    def __init__(self) -> None:
        self.reads = 0

    async def position(self) -> Position:
        return Position("0", 0)

    async def read(self, after: Position, limit: int) -> list[object]:
        self.reads += 1
        return []

    async def quiet_position(self, after: Position) -> Position | None:
        return None


def _items(n: int, since: datetime = NOW) -> list[InDoubt]:
    return [InDoubt(f"i{k}", f"g{k}", f"k{k}", since) for k in range(n)]


def test_tail_rounds_keep_completing_while_every_lookup_hangs() -> None:
    async def scenario() -> None:
        sweeps = Sweeps(_items(40))
        lookup = Lookup({f"k{k}": "hang" for k in range(40)})
        verifier = Verifier(sweeps, lookup, concurrency=4, timeout_s=0.05, clock=lambda: NOW)
        log = EmptyLog()
        rec = Reconciler(log, sweeps, publisher=None)  # type: ignore[arg-type]  # this test drives only the verifier: no publisher is used
        stop = asyncio.Event()
        task = asyncio.create_task(verifier.run(stop, lambda: True, interval_s=0.01))
        rounds_while_hung = 0
        max_in_flight = 0

        async def tail_round() -> int:
            nonlocal rounds_while_hung, max_in_flight
            n = await asyncio.wait_for(rec.tail_once(), timeout=1.0)
            if verifier.in_flight:
                rounds_while_hung += 1
            max_in_flight = max(max_in_flight, verifier.in_flight)
            return n

        # Tail rounds as the service runs them (run_rounds, a millisecond apart), until stopped.
        errors: list[str] = []
        tailing = asyncio.create_task(run_rounds(tail_round, stop, 0.001, 1.0, lambda e, k: errors.extend([e] * k)))
        await until(lambda: verifier.lookups["timeout"] >= 12 or tailing.done(), 10)
        stop.set()
        await tailing
        await task
        assert errors == [], "no tail round failed"
        assert rounds_while_hung > 10
        assert max_in_flight == 4, "at most `concurrency` lookups at once, and all of them used"
        assert verifier.in_flight == 0, "stopping cancels the hung lookups"

    asyncio.run(scenario())


def test_a_round_starts_lookups_without_waiting_for_them() -> None:
    async def scenario() -> None:
        sweeps = Sweeps(_items(10))
        lookup = Lookup({f"k{k}": "hang" for k in range(10)})
        verifier = Verifier(sweeps, lookup, concurrency=3, timeout_s=60, clock=lambda: NOW)
        assert await asyncio.wait_for(verifier.start_round(), timeout=1.0) == 3
        assert await asyncio.wait_for(verifier.start_round(), timeout=1.0) == 0, "no free slot, nothing asked twice"
        await until(lambda: len(lookup.asked) == 3)
        assert sorted(lookup.asked) == ["k0", "k1", "k2"]
        await verifier.close()

    asyncio.run(scenario())


ANSWERS = st.sampled_from([True, False, None, "hang", "raise"])


@settings(max_examples=40, deadline=None)
@given(answers=st.lists(ANSWERS, min_size=1, max_size=12), past_deadline=st.booleans())
def test_only_a_real_answer_decides_and_a_timeout_never_requeues(answers: list[object], past_deadline: bool) -> None:
    since = NOW - DEADLINE - timedelta(seconds=1) if past_deadline else NOW
    items = _items(len(answers), since)

    async def scenario() -> Sweeps:
        sweeps = Sweeps(items)
        verifier = Verifier(sweeps, Lookup({f"k{k}": a for k, a in enumerate(answers)}),
                            concurrency=16, timeout_s=0.02, clock=lambda: NOW)
        await verifier.start_round()
        await until(lambda: len(sweeps.resolved) == len(items))
        assert verifier.lookups["timeout"] == answers.count("hang")
        assert verifier.lookups["error"] == answers.count("raise")
        return sweeps

    sweeps = asyncio.run(scenario())
    for k, answer in enumerate(answers):
        found, to = sweeps.resolved[f"i{k}"]
        if answer in (True, False):
            assert found is answer
            assert to == ("confirmed" if answer else "pending")
        else:  # no answer, a timeout or an error: never proof of non-delivery
            assert found is None
            assert to == ("unverified" if past_deadline else None)


class CountingLookup(Lookup):
    """Answers as :class:`Lookup` does, each answer after a turn of the loop; keeps how many
    lookups were in flight at once."""

    def __init__(self, answers: dict[str, object]) -> None:
        super().__init__(answers)
        self.in_flight = 0
        self.most_in_flight = 0

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)  # the other lookups of the round start meanwhile
            return await super().lookup(guid, idem_key, tenant)
        finally:
            self.in_flight -= 1


async def _running(verifier: Verifier, interval_s: float) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(verifier.run(stop, lambda: True, interval_s))


def test_a_finished_lookup_starts_the_next_round_without_waiting_the_interval() -> None:
    """With an interval of an hour, rounds that waited it between them would verify only the
    first ``concurrency`` items before the test's deadline; each finished lookup lets the next
    item's start, never more than ``concurrency`` at once."""
    async def scenario() -> None:
        n = 60
        sweeps = Sweeps(_items(n))
        lookup = CountingLookup({f"k{k}": k % 2 == 0 for k in range(n)})
        verifier = Verifier(sweeps, lookup, concurrency=4, timeout_s=60, clock=lambda: NOW)
        stop, task = await _running(verifier, interval_s=3600)
        try:
            await until(lambda: not sweeps.items, 30)
        finally:
            stop.set()
            await task
        assert sum(verifier.resolved.values()) == n
        assert verifier.resolved == {"confirmed": n // 2, "pending": n // 2}
        assert sorted(lookup.asked) == sorted(f"k{k}" for k in range(n)), "each item asked once"
        assert 1 < lookup.most_in_flight <= 4, "at most `concurrency` lookups at once"

    asyncio.run(scenario())


def test_an_item_left_in_doubt_waits_and_holds_no_newer_item_back() -> None:
    """The six oldest items get no answer. Such a lookup starts no round, so on virtual time,
    with an interval of an hour, they are asked two an interval: each once, before any is asked
    again. Then the rounds reach past them (past the round's read of ``limit``), and the twenty
    newer items behind them are all verified in the fourth round's run of rounds, not two an
    interval."""
    async def scenario() -> None:
        silent, answered = 6, 20
        sweeps = Sweeps(_items(silent + answered))
        answers: dict[str, object] = {f"k{k}": None if k < silent else True for k in range(silent + answered)}
        lookup = CountingLookup(answers)
        verifier = Verifier(sweeps, lookup, concurrency=2, timeout_s=60, limit=4, clock=lambda: NOW)
        start = now()
        stop, task = await _running(verifier, interval_s=3600)
        try:
            while len(sweeps.items) > silent and now() - start < 10 * 3600:
                await asyncio.sleep(60)  # virtual: a look a minute
            took = now() - start
        finally:
            stop.set()
            await task
        assert verifier.resolved == {"confirmed": answered}
        assert set(sweeps.items) == {f"i{k}" for k in range(silent)}, "no answer leaves them in doubt"
        assert sorted(lookup.asked[:silent]) == [f"k{k}" for k in range(silent)], "each asked once before any again"
        assert all(lookup.asked.count(f"k{k}") == 1 for k in range(silent, silent + answered))
        assert took <= 3 * 3600 + 60, "three intervals for the six, two each; the twenty newer at once after"
        assert lookup.most_in_flight <= 2

    run_virtual(scenario())


class ReadCountingSweeps(Sweeps):
    """:class:`Sweeps` that keeps the row count each read asked for."""

    def __init__(self, items: list[InDoubt]) -> None:
        super().__init__(items)
        self.reads: list[int] = []

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        self.reads.append(limit)
        return list(itertools.islice(self.items.values(), limit))


async def _until_quiet(lookup: Lookup, turns: int = 500, most: int = 100_000) -> None:
    """Turns of the loop until ``turns`` in a row start no lookup (at most ``most`` turns):
    far more than a round takes, so rounds that followed one another would show."""
    quiet, asked = 0, len(lookup.asked)
    for _ in range(most):
        await asyncio.sleep(0)
        quiet, asked = (quiet + 1, asked) if len(lookup.asked) == asked else (0, len(lookup.asked))
        if quiet >= turns:
            return
    raise AssertionError("lookups kept starting")


def test_a_gateway_that_fails_at_once_gets_at_most_concurrency_lookups_an_interval() -> None:
    """20,000 items in doubt and every lookup raises at once (a refused connection). The first
    round's lookups free their slots at once but settle nothing, so no round follows before
    the interval (an hour): while the loop turns thousands of times, which rounds started by
    each failed lookup would fill with hundreds of rounds, nothing more is asked or read."""
    async def scenario() -> None:
        n, concurrency, limit = 20_000, 4, 200
        sweeps = ReadCountingSweeps(_items(n))
        lookup = Lookup(dict.fromkeys((f"k{k}" for k in range(n)), "raise"))
        verifier = Verifier(sweeps, lookup, concurrency=concurrency, timeout_s=60, limit=limit, clock=lambda: NOW)
        stop, task = await _running(verifier, interval_s=3600)
        try:
            for _ in range(1_000):  # the first round's lookups all failed and were resolved
                if verifier.lookups["error"] >= concurrency and not verifier.in_flight:
                    break
                await asyncio.sleep(0)
            assert verifier.lookups["error"] == concurrency and not verifier.in_flight
            for _ in range(5_000):
                await asyncio.sleep(0)
            assert not task.done()
        finally:
            stop.set()
            await task
        assert len(lookup.asked) == concurrency, "the first round's lookups only"
        assert sweeps.reads == [limit], "one read, of the round's limit"
        assert set(sweeps.resolved.values()) == {(None, None)}, "a failed lookup leaves its item in doubt"

    asyncio.run(scenario())


def test_a_rounds_read_stays_bounded_however_many_items_get_no_answer() -> None:
    """Half the items are confirmed at once and half get "cannot say" at once: each
    confirmation starts the next round, so the items left in doubt pile up at the head of the
    oldest-first read within the interval (an hour), and rounds read past them, at most
    ``READ_PAST`` × ``concurrency`` rows beyond ``limit``."""
    async def scenario() -> None:
        n, concurrency, limit = 400, 4, 10
        sweeps = ReadCountingSweeps(_items(n))
        lookup = Lookup({f"k{k}": True if k % 2 == 0 else None for k in range(n)})
        verifier = Verifier(sweeps, lookup, concurrency=concurrency, timeout_s=60, limit=limit, clock=lambda: NOW)
        stop, task = await _running(verifier, interval_s=3600)
        try:
            await _until_quiet(lookup)
        finally:
            stop.set()
            await task
        assert max(sweeps.reads) == limit + READ_PAST * concurrency, "read past the items left in doubt, so far"
        assert verifier.resolved["confirmed"] > 2 * concurrency, "confirmations start rounds: not a round an hour"
        assert len(lookup.asked) == len(set(lookup.asked)), "none asked again within the interval"

    asyncio.run(scenario())


def test_an_item_left_in_doubt_is_asked_again_in_a_later_round() -> None:
    async def scenario() -> None:
        sweeps = Sweeps(_items(3))
        lookup = Lookup({"k0": None, "k1": None, "k2": None})
        verifier = Verifier(sweeps, lookup, concurrency=1, timeout_s=60, clock=lambda: NOW)
        stop, task = await _running(verifier, interval_s=0.01)
        try:
            await until(lambda: all(lookup.asked.count(k) >= 3 for k in ("k0", "k1", "k2")), 30)
        finally:
            stop.set()
            await task
        assert len(sweeps.items) == 3 and not verifier.resolved

    asyncio.run(scenario())


@pytest.mark.parametrize(("past_hold_s", "quiet_s"), [
    pytest.param(1.0, QUIET_GRACE_S + 1, id="a-quiet-longer-than-the-grace"),
    pytest.param(QUIET_GRACE_S + 1, 2.0, id="past-the-grace-however-short"),
])
def test_a_quiet_holds_an_item_s_decision_off_no_longer_than_the_longest_quiet_a_gateway_may_ask(
        past_hold_s: float, quiet_s: float) -> None:
    """A guid the gateway keeps limiting: its item, in doubt for longer than QUIET_HOLD, is read
    again with what is left of the quiet, and decided without a lookup, as one the gateway never
    answered (past its deadline: unverified): at once when more than QUIET_GRACE_S of the quiet
    is left, and, however short the quiet, once the grace past the hold is over too (a guid
    whose short quiets keep coming back cannot hold it in doubt longer)."""
    old = InDoubt("i0", "g0", "k0", NOW - QUIET_HOLD - timedelta(seconds=past_hold_s), quiet_s=quiet_s)

    async def scenario() -> tuple[Sweeps, Lookup]:
        sweeps, lookup = Sweeps([old]), Lookup({"k0": True})
        verifier = Verifier(sweeps, lookup, concurrency=2, timeout_s=1, clock=lambda: NOW)
        await verifier.start_round()
        await until(lambda: bool(sweeps.resolved))
        return sweeps, lookup

    sweeps, lookup = asyncio.run(scenario())
    assert lookup.asked == [], "still no call of the quiet guid"
    assert sweeps.resolved["i0"] == (None, "unverified")


def test_past_the_hold_a_quiet_about_to_end_is_waited_out_and_the_item_looked_up() -> None:
    """Past QUIET_HOLD, its guid's quiet has QUIET_GRACE_S left: the item is not made
    unverified without a lookup. It is asked once, after the quiet, and the gateway's answer
    decides it."""
    async def scenario() -> tuple[Sweeps, Lookup, float, float]:
        ends = now() + QUIET_GRACE_S

        class Quieting(Sweeps):  # what is left of the guid's quiet, as the read computes it
            async def in_doubt(self, limit: int) -> list[InDoubt]:
                return [replace(i, quiet_s=max(ends - now(), 0.0)) for i in await super().in_doubt(limit)]

        sweeps = Quieting([InDoubt("i0", "g0", "k0", NOW - QUIET_HOLD - timedelta(seconds=1))])
        lookup = Lookup({"k0": True})
        verifier = Verifier(sweeps, lookup, concurrency=2, timeout_s=1, clock=lambda: NOW)
        stop, task = await _running(verifier, interval_s=5)
        try:
            await until(lambda: bool(sweeps.resolved), timeout=QUIET_GRACE_S + 30)
            decided = now()
        finally:
            stop.set()
            await task
        return sweeps, lookup, decided, ends

    sweeps, lookup, decided, ends = run_virtual(scenario())
    assert lookup.asked == ["k0"] and sweeps.resolved == {"i0": (True, "confirmed")}
    assert decided >= ends, "looked up once the quiet was over"


class Kept:
    """The lease rows' quiets, as the verifier writes them."""

    def __init__(self) -> None:
        self.quiets: list[tuple[str, float]] = []

    async def keep_quiet(self, guid: str, seconds: float) -> None:
        self.quiets.append((guid, seconds))


def test_a_lookup_the_gateway_asks_for_quiet_keeps_it_for_the_guid_s_senders_and_decides_nothing() -> None:
    """``Retry-After: 30`` on a lookup: the quiet goes to the guid's lease row, so its senders
    hold it too; the item, past its verify deadline, is not made unverified for it."""
    past = NOW - DEADLINE - timedelta(seconds=1)

    async def scenario() -> tuple[Sweeps, Kept, Verifier]:
        sweeps, kept = Sweeps([InDoubt("i0", "g0", "k0", past)]), Kept()
        verifier = Verifier(sweeps, Lookup({"k0": Hushed(30.0)}), concurrency=2, timeout_s=1, clock=lambda: NOW,
                            quiets=kept)
        await verifier.start_round()
        await until(lambda: verifier.in_flight == 0)
        return sweeps, kept, verifier

    sweeps, kept, verifier = asyncio.run(scenario())
    assert kept.quiets == [("g0", 30.0)]
    assert verifier.lookups["quiet"] == 1 and not sweeps.resolved
